"""The remote compute service and its client: registered kernels on a shared device, over the bus.

``mcc compute serve --name compute --device cuda:0`` (or the app ``mcc.compute.remote:serve``,
which the supervisor starts for missions with ``gpu: shared`` systems) owns one device and runs
the kernels that arrive as ``ComputeRequest``s; ``open_compute("remote:compute")`` returns the
same `Kernels` object as a local device, backed by a `ComputeClient`. Both sides use the
partition ``mcc.compute.<name>`` on the mission's domain, so a service is found by its name
whatever virtual cluster its clients belong to.

Service
    Requests are decoded without copying their arrays (`mcc.compute.wire`) and checked against
    the kernel registry and the service's bounds (`ServiceLimits`) at once: an unknown kernel,
    a wrong dtype, shape or parameter, a parameter out of its range, too many bytes, or an
    estimated compute time over the budget (``budget_s``, shortened by the request's deadline)
    is refused with a message naming it. Accepted requests wait in one FIFO per client (the
    writer's DDS participant, not a field of the request), served round-robin (`FairQueue`),
    with a bounded share per client, so one busy client cannot starve another. A kernel runs
    under its budget (`mcc.compute.limits.compute_budget`): the iterative ones stop once it
    is spent. Queued requests
    of a kernel with ``batch_args`` whose other arguments and parameters are identical run as
    one call (up to ``max_batch``), e.g. the Kalman predictions of several trackers; if that
    call fails, each request runs alone so only the bad one fails. A request whose deadline
    passed while it waited is answered with an error, not run. The reply (``ComputeReply``)
    carries ``compute_ms``: the kernel on the device, host↔device copies included.

Client
    A call waits up to ``connect_timeout_s`` for a service, then up to ``timeout_s`` for its
    reply: `RequestTimeoutError` after that, never a hang. A watcher notices when the service
    goes away (its reader unmatched) or restarts (a new reader matched) while calls are in
    flight and sends them again, up to ``retries`` times (the kernels are pure functions of
    their inputs, the Monte Carlo one seeded, hence idempotent); with no retries left the call
    fails with `PeerLostError`. A reply that comes twice is taken once.

Why not `mcc.bus.Requester`/`Replier`: the replier answers inside its reader loop, one request
at a time, which leaves no room for a fair queue or batching across clients; the requester
cannot resend on a restart. The service and client follow their conventions (first key field
= request id, ``client_id`` filters replies, ``ok``/``error`` on failure, disposed samples) and
add: write-dispose plus unregister of every request and reply (no instance is left behind in
any reader or writer), and a check that the requesting client's reply reader is matched before
a reply is written (a volatile reply written earlier would be lost).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import itertools
import json
import logging
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np
from cyclonedds.core import DDSException

from mcc.bus import Bus, Reader, ReaderLoop, Writer
from mcc.bus.rpc import default_client_id
from mcc.bus.topics import topic_spec
from mcc.compute.backend import device_kind, get_xp
from mcc.compute.dispatch import CallTiming, run_kernel
from mcc.compute.kernels import KERNELS, kernel_spec
from mcc.compute.limits import (
    ComputeBudgetError,
    QueueFullError,
    ServiceLimits,
    compute_budget,
)
from mcc.compute.registry import KernelSpec, canonical_dtype
from mcc.compute.wire import (
    WireReply,
    WireRequest,
    decode_reply,
    decode_request,
    encode_reply,
    encode_request,
)
from mcc.errors import ComputeError, MccError, PeerLostError, RequestTimeoutError
from mcc.security.mission import Topics
from mcc.types import ComputeReply, ComputeRequest

BUS_TOPICS = {"serve": Topics(publish=("ComputeReply",), subscribe=("ComputeRequest",))}

if TYPE_CHECKING:
    from mcc.bus import HeartbeatPublisher
    from mcc.orchestrate.runtime import AppContext

__all__ = [
    "PARTITION_PREFIX",
    "ComputeClient",
    "ComputeService",
    "FairQueue",
    "ServiceLimits",
    "ServiceStatistics",
    "add_parsers",
    "serve",
    "service_partition",
]

log = logging.getLogger("mcc.compute.remote")
T = TypeVar("T")

#: Service ``NAME`` talks on DDS partition ``PARTITION_PREFIX + NAME``.
PARTITION_PREFIX = "mcc.compute."
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_REPLY_PATH_WAIT_S = 2.0
_WATCH_PERIOD_S = 0.02


def service_partition(name: str) -> str:
    """The DDS partition of compute service ``name``; `ComputeError` for a bad name."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ComputeError(
            f"compute service name {name!r}: use 1-64 letters, digits and _.- (e.g. 'compute')"
        )
    return PARTITION_PREFIX + name


def _domain(domain_id: int | None) -> int:
    return int(os.environ.get("MCC_DOMAIN", "0")) if domain_id is None else int(domain_id)


class _WireReader(Reader[Any]):
    """A `Reader` whose samples are decoded by a `mcc.compute.wire` codec (array views)."""

    def __init__(self, bus: Bus, topic: str, decode: Callable[[bytes], Any]) -> None:
        profile = topic_spec(topic).profile
        super().__init__(bus, bus.topic(topic, profile=profile), profile, validate=False)
        self._decode = decode  # the wire codec checks what it decodes


def _write_dispose(writer: Writer[Any], data: bytes, key_sample: Any) -> None:
    """Write serialised ``data`` as a disposed instance, then unregister it: readers free the
    instance once they took the sample, the writer keeps nothing per request."""
    writer.write_cdr(data, dispose=True)
    writer.dds.unregister_instance(key_sample)


# -- fair queue ---------------------------------------------------------------------------------


class FairQueue(Generic[T]):
    """One FIFO per client, served round-robin; thread-safe.

    `get_batch` takes the head of the next client in turn and, when ``key`` gives the item a
    batch key (not None), further heads with the same key, still client by client in turn.
    ``max_items``/``max_bytes`` bound the whole queue and ``max_items_per_client``/
    ``max_bytes_per_client`` each client's share of it (None: unbounded): `put` raises
    `QueueFullError` naming the bound rather than queue past one.
    """

    def __init__(
        self,
        *,
        max_items: int | None = None,
        max_bytes: int | None = None,
        max_items_per_client: int | None = None,
        max_bytes_per_client: int | None = None,
    ) -> None:
        self._queues: collections.OrderedDict[str, collections.deque[tuple[T, int]]] = (
            collections.OrderedDict()
        )
        self._bytes: dict[str, int] = {}
        self._cond = threading.Condition()
        self._size = 0
        self._size_bytes = 0
        self._closed = False
        self._limits = (max_items, max_bytes, max_items_per_client, max_bytes_per_client)

    def put(self, client: str, item: T, *, nbytes: int = 0) -> int:
        """Queue ``item`` (of ``nbytes``) behind ``client``'s earlier items; the queue's new
        length. `QueueFullError` when a bound would be passed."""
        max_items, max_bytes, per_client, bytes_per_client = self._limits
        with self._cond:
            queue = self._queues.get(client)
            mine, mine_bytes = (len(queue), self._bytes[client]) if queue else (0, 0)
            for bound, name, now, add in (
                (max_items, "max_queued", self._size, 1),
                (max_bytes, "max_queued_bytes", self._size_bytes, nbytes),
                (per_client, "max_queued_per_client", mine, 1),
                (bytes_per_client, "max_queued_bytes_per_client", mine_bytes, nbytes),
            ):
                if bound is not None and now + add > bound:
                    whose = "the queue" if "client" not in name else f"client {client}"
                    raise QueueFullError(
                        f"{whose} is full ({name} = {bound}, {now} queued): wait for replies "
                        "before sending more"
                    )
            if queue is None:
                queue = self._queues[client] = collections.deque()
                self._bytes[client] = 0
            queue.append((item, nbytes))
            self._bytes[client] += nbytes
            self._size += 1
            self._size_bytes += nbytes
            self._cond.notify()
            return self._size

    def __len__(self) -> int:
        with self._cond:
            return self._size

    @property
    def nbytes(self) -> int:
        """Bytes queued, all clients together."""
        with self._cond:
            return self._size_bytes

    def _pop(self, client: str) -> T:
        # The client served goes to the back of the round; an empty one leaves it.
        queue = self._queues.pop(client)
        item, nbytes = queue.popleft()
        self._bytes[client] -= nbytes
        self._size_bytes -= nbytes
        if queue:
            self._queues[client] = queue
        else:
            del self._bytes[client]
        return item

    def get_batch(
        self,
        *,
        max_items: int = 1,
        key: Callable[[T], Hashable | None] = lambda _item: None,
        timeout_s: float | None = None,
    ) -> list[T]:
        """Up to ``max_items`` items (see the class docstring); [] after ``timeout_s`` or once
        closed and empty."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._size > 0 or self._closed, timeout_s):
                return []
            if self._size == 0:
                return []
            first = self._pop(next(iter(self._queues)))
            batch = [first]
            batch_key = key(first)
            while batch_key is not None and len(batch) < max_items:
                took = False
                for other in list(self._queues):
                    if key(self._queues[other][0][0]) == batch_key:
                        batch.append(self._pop(other))
                        took = True
                        if len(batch) >= max_items:
                            break
                if not took:
                    break
            self._size -= len(batch)
            return batch

    def close(self) -> None:
        """Wake every waiter; `get_batch` returns [] once the queue is empty."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()


# -- service ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ServiceStatistics:
    """Counters of a `ComputeService` since it started."""

    requests: int  # accepted into the queue
    refused: int  # refused on arrival: unknown kernel, bad dtype, shape or parameter, a bound
    expired: int  # deadline passed while queued
    failed: int  # the kernel raised (over_budget included)
    replies: int  # replies written (results and errors)
    kernel_calls: int  # kernel invocations (a batch is one)
    batched_requests: int  # requests that shared a kernel call with others
    queued: int  # waiting now
    max_queue: int  # the longest the queue has been
    busy_s: float  # time spent in kernels
    clients: int  # distinct clients (DDS participants) seen, counted up to 10 000
    throttled: int = 0  # refused because the queue or the client's share of it was full
    over_budget: int = 0  # refused (estimate) or stopped (running) past the compute budget
    dropped: int = 0  # not answered: undecodable, or identifiers over max_id_chars


@dataclasses.dataclass(eq=False)
class _Job:
    request: WireRequest
    spec: KernelSpec
    params: dict[str, Any]
    key: Hashable | None
    received_s: float


def _batch_key(
    spec: KernelSpec, args: tuple[np.ndarray, ...], params: dict[str, Any]
) -> Hashable | None:
    """Requests with equal keys may run as one call: same kernel and parameters, identical
    shared arguments, batch arguments equal but for their first axis."""
    if not spec.batch_args:
        return None
    parts: list[Hashable] = [spec.name, json.dumps(params, sort_keys=True)]
    for arg, a in zip(spec.args, args, strict=True):
        if arg.name in spec.batch_args:
            parts.append((a.dtype.str, a.shape[1:]))
        else:
            parts.append((a.dtype.str, a.shape, a.tobytes()))
    return tuple(parts)


class ComputeService:
    """Serve the registered kernels on ``device`` (``"cpu"`` or ``"cuda:N"``) as service
    ``name``; see the module docstring. Use as a context manager, or `start` and `close`.

    Args:
        name: the service name clients use (``remote:NAME``).
        device: where kernels run; the service's worker thread owns it.
        domain_id: DDS domain (default ``MCC_DOMAIN``, else 0).
        discovery_tag: see `mcc.bus.Bus` (default ``MCC_DISCOVERY_TAG``).
        max_batch: the most queued requests run as one kernel call (1 = no batching).
        heartbeat: counts requests in and replies out, and their latency (an app's heartbeat).
        limits: what one request may ask (`ServiceLimits`: sizes, compute budget, queue
            shares); the defaults are in docs/compute.md.
    """

    def __init__(
        self,
        *,
        name: str = "compute",
        device: str = "cpu",
        domain_id: int | None = None,
        discovery_tag: str | None = None,
        max_batch: int = 16,
        heartbeat: HeartbeatPublisher | None = None,
        limits: ServiceLimits | None = None,
    ) -> None:
        if device.startswith("remote:"):
            raise ComputeError(
                f"device={device!r}: the compute service runs kernels on a local device "
                "('cpu' or 'cuda:N'); give its system `gpu: exclusive` or `gpu: none`"
            )
        device_kind(device)
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ComputeError(f"max_batch={max_batch!r} must be an integer >= 1")
        self.name = name
        self.device = device
        self.max_batch = max_batch
        self.limits = limits = limits or ServiceLimits()
        self.partition = service_partition(name)
        self.server_id = f"{socket.gethostname()}/{os.getpid()}/{name}"
        self._heartbeat = heartbeat
        self._bus = Bus(
            _domain(domain_id),
            partitions=[self.partition],
            discovery_tag=discovery_tag,
            name=f"mcc compute service {name}",
        )
        try:
            self._reader = _WireReader(self._bus, "ComputeRequest", decode_request)
            self._writer: Writer[Any] = self._bus.writer("ComputeReply")
        except BaseException:
            self._bus.close()
            raise
        self._queue: FairQueue[_Job] = FairQueue(
            max_items=limits.max_queued,
            max_bytes=limits.max_queued_bytes,
            max_items_per_client=limits.max_queued_per_client,
            max_bytes_per_client=limits.max_queued_bytes_per_client,
        )
        self._intake = ReaderLoop(self._bus).add(self._reader, self._on_requests)
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._worker: threading.Thread | None = None
        self._worker_error: BaseException | None = None
        self._lock = threading.Lock()
        self._counts: collections.Counter[str] = collections.Counter()
        self._busy_s = 0.0
        self._max_queue = 0
        self._clients: set[str] = set()
        self._peer_of_writer: dict[int, Any] = {}
        self._reply_peers: set[Any] = set()
        self._no_reply_path: dict[Any, float] = {}  # peer → until when not to wait for it
        self._logged: set[str] = set()  # what was logged once
        self._closed = False

    @property
    def domain_id(self) -> int:
        return self._bus.domain_id

    def start(self, *, ready_timeout_s: float = 120.0) -> ComputeService:
        """Open the device in the worker thread (CuPy start-up can take seconds), then accept
        requests. Raises what opening the device raised."""
        self._worker = threading.Thread(
            target=self._work, name=f"mcc-compute-{self.name}", daemon=True
        )
        self._worker.start()
        if not self._ready.wait(ready_timeout_s):
            self.close()
            raise ComputeError(f"device {self.device!r} did not open within {ready_timeout_s} s")
        if self._worker_error is not None:
            self.close()
            raise self._worker_error
        self._intake.start(f"mcc-compute-intake-{self.name}")
        log.info("compute service %r serving on %s (%s)", self.name, self.device, self.partition)
        return self

    def statistics(self) -> ServiceStatistics:
        """A snapshot of the counters."""
        with self._lock:
            c = self._counts
            return ServiceStatistics(
                requests=c["requests"],
                refused=c["refused"],
                expired=c["expired"],
                failed=c["failed"],
                replies=c["replies"],
                kernel_calls=c["kernel_calls"],
                batched_requests=c["batched_requests"],
                queued=len(self._queue),
                max_queue=self._max_queue,
                busy_s=self._busy_s,
                clients=len(self._clients),
                throttled=c["throttled"],
                over_budget=c["over_budget"],
                dropped=c["dropped"],
            )

    def close(self) -> None:
        """Stop accepting, finish the kernel call in progress, close the bus."""
        if self._closed:
            return
        self._closed = True
        self._intake.stop()
        self._stop.set()
        self._queue.close()
        if self._worker is not None:
            self._worker.join(30.0)
        self._bus.close()

    def __enter__(self) -> ComputeService:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- intake (reader loop thread) ---------------------------------------------------------
    def _on_requests(self, requests: list[WireRequest]) -> None:
        for req in requests:
            try:
                self._accept(req)
            except Exception as exc:  # the intake loop must outlive any one request
                self._drop(req, f"{type(exc).__name__}: {exc}", trace=True)

    def _drop(self, req: WireRequest, reason: str, *, trace: bool = False) -> None:
        """Count a request left unanswered; log the first one of each kind."""
        with self._lock:
            self._counts["dropped"] += 1
        self._log_once(
            reason.split(":")[0],
            "request %.80s from %s dropped (%s); further ones are counted, not logged",
            req.request_id,
            self._client_of(req),
            reason[:300],
            trace=trace,
        )

    def _log_once(self, what: str, message: str, *args: Any, trace: bool = False) -> None:
        if what in self._logged or len(self._logged) >= 1000:
            return
        self._logged.add(what)
        (log.exception if trace else log.warning)(message, *args)

    def _client_of(self, req: WireRequest) -> str:
        """Who sent ``req``: its writer's DDS participant (not a field the sender fills in;
        in a secured mission an authenticated one), else its ``client_id``."""
        info = getattr(req, "sample_info", None)
        if info is None:
            return f"client {req.client_id[:80]}"
        handle = info.publication_handle
        peer = self._peer_of_writer.get(handle)
        if peer is None:
            try:
                data = self._reader.dds.get_matched_publication_data(handle)
            except DDSException:
                data = None
            if data is None:
                return f"writer {handle:x}"
            if len(self._peer_of_writer) >= 4096:  # writers come and go: forget old ones
                self._peer_of_writer.clear()
            peer = self._peer_of_writer[handle] = data.participant_key
        return str(peer)

    def _budget_s(self, req: WireRequest, now_ns: int) -> tuple[float, str]:
        """The compute budget of ``req`` and what set it (a deadline only shortens it)."""
        budget = float(self.limits.budget_s)
        if req.deadline_ns and (req.deadline_ns - now_ns) / 1e9 < budget:
            return (req.deadline_ns - now_ns) / 1e9, "the request's deadline"
        return budget, "ServiceLimits.budget_s"

    def _accept(self, req: WireRequest) -> None:
        """Check ``req`` against the bounds and the registry: queue it, or answer why not."""
        if self._heartbeat is not None:
            self._heartbeat.count_in()
        limits = self.limits
        if max(len(req.request_id), len(req.client_id)) > limits.max_id_chars:
            # A reply would echo the identifiers: not answered at all.
            self._drop(req, f"identifiers longer than max_id_chars = {limits.max_id_chars}")
            return
        client = self._client_of(req)
        try:
            if req.nbytes > limits.max_request_bytes:
                raise ComputeError(
                    f"{req.nbytes} bytes of arrays, more than max_request_bytes = "
                    f"{limits.max_request_bytes}: split the call"
                )
            if len(req.params_json) > limits.max_params_chars:
                raise ComputeError(
                    f"params_json of {len(req.params_json)} characters, more than "
                    f"max_params_chars = {limits.max_params_chars}"
                )
            spec = kernel_spec(req.kernel)
            dims = spec.check_arrays([(canonical_dtype(a.dtype), a.shape) for a in req.args])
            params = spec.params_from_json(req.params_json)
            now_ns = time.time_ns()
            if req.deadline_ns and now_ns > req.deadline_ns:
                self._expired(req, spec, 0.0)
                return
            budget_s, by = self._budget_s(req, now_ns)
            estimate_s = spec.estimate_s(dims, params)
            if estimate_s > budget_s:
                raise ComputeBudgetError(
                    f"kernel {spec.name!r}: estimated {estimate_s:.3g} s of compute, more than "
                    f"the budget of {budget_s:.3g} s ({by}): ask for less per call (fewer "
                    "trials, iterations or rows)"
                )
            job = _Job(req, spec, params, _batch_key(spec, req.args, params), time.perf_counter())
            depth = self._queue.put(client, job, nbytes=req.nbytes)
        except MccError as exc:
            with self._lock:
                self._counts["refused"] += 1
                if isinstance(exc, QueueFullError):
                    self._counts["throttled"] += 1
                elif isinstance(exc, ComputeBudgetError):
                    self._counts["over_budget"] += 1
            self._reply(req, error=f"refused: {exc}")
            return
        with self._lock:
            self._counts["requests"] += 1
            self._max_queue = max(self._max_queue, depth)
            if len(self._clients) < 10_000:
                self._clients.add(client)

    def _expired(self, req: WireRequest, spec: KernelSpec, waited_ms: float) -> None:
        with self._lock:
            self._counts["expired"] += 1
        self._reply(
            req,
            error=f"{spec.name}: deadline passed after {waited_ms:.0f} ms in the queue, not "
            "run (the client gave up: raise its timeout_s or add capacity)",
        )

    # -- worker (owns the device) ------------------------------------------------------------
    def _work(self) -> None:
        try:
            xp = get_xp(self.device)
        except BaseException as exc:
            self._worker_error = exc
            self._ready.set()
            return
        self._ready.set()
        while not self._stop.is_set():
            jobs = self._queue.get_batch(
                max_items=self.max_batch, key=lambda job: job.key, timeout_s=0.5
            )
            if jobs:
                self._run(xp, jobs)

    def _run(self, xp: Any, jobs: list[_Job]) -> None:
        now_ns = time.time_ns()
        live = []
        for job in jobs:
            deadline_ns = job.request.deadline_ns
            if deadline_ns and now_ns > deadline_ns:
                self._expired(job.request, job.spec, (time.perf_counter() - job.received_s) * 1e3)
            else:
                live.append(job)
        if not live:
            return
        for job, outcome, compute_ms in self._execute(xp, live):
            if isinstance(outcome, BaseException):
                with self._lock:
                    self._counts["failed"] += 1
                    if isinstance(outcome, ComputeBudgetError):
                        self._counts["over_budget"] += 1
                text = str(outcome) if isinstance(outcome, MccError) else repr(outcome)
                self._reply(
                    job.request,
                    error=f"kernel {job.spec.name!r} failed on {self.device}: {text}",
                    compute_ms=compute_ms,
                )
            elif (size := sum(a.nbytes for a in outcome)) > self.limits.max_reply_bytes:
                with self._lock:
                    self._counts["failed"] += 1
                self._reply(
                    job.request,
                    error=f"kernel {job.spec.name!r}: results of {size} bytes, more than "
                    f"max_reply_bytes = {self.limits.max_reply_bytes}: ask for less per call",
                    compute_ms=compute_ms,
                )
            else:
                self._reply(job.request, results=outcome, compute_ms=compute_ms)

    def _execute(
        self, xp: Any, jobs: list[_Job]
    ) -> list[tuple[_Job, tuple[np.ndarray, ...] | BaseException, float]]:
        spec = jobs[0].spec
        now_ns = time.time_ns()
        budget_s = min(self._budget_s(job.request, now_ns)[0] for job in jobs)
        t0 = time.perf_counter()
        try:
            with compute_budget(budget_s):
                if len(jobs) == 1:
                    job = jobs[0]
                    outcomes: list[tuple[np.ndarray, ...]] = [
                        run_kernel(spec, xp, job.request.args, job.params)
                    ]
                else:
                    outcomes = self._execute_batch(xp, spec, jobs)
        except Exception as exc:
            elapsed_ms = (time.perf_counter() - t0) * 1e3
            with self._lock:
                self._busy_s += elapsed_ms / 1e3
            if len(jobs) > 1 and not isinstance(exc, ComputeBudgetError):
                # One bad request must not fail the others: run each alone (not after a
                # spent budget, which would spend it again per request).
                return [item for job in jobs for item in self._execute(xp, [job])]
            if not isinstance(exc, MccError):
                log.exception("kernel %s failed", spec.name)
            return [(job, exc, elapsed_ms) for job in jobs]
        elapsed_s = time.perf_counter() - t0
        with self._lock:
            self._busy_s += elapsed_s
            self._counts["kernel_calls"] += 1
            if len(jobs) > 1:
                self._counts["batched_requests"] += len(jobs)
        return [(job, out, elapsed_s * 1e3) for job, out in zip(jobs, outcomes, strict=True)]

    @staticmethod
    def _execute_batch(xp: Any, spec: KernelSpec, jobs: list[_Job]) -> list[tuple[Any, ...]]:
        batched = [arg.name in spec.batch_args for arg in spec.args]
        first = batched.index(True)
        counts = [job.request.args[first].shape[0] for job in jobs]
        merged = tuple(
            np.concatenate([job.request.args[i] for job in jobs]) if b else jobs[0].request.args[i]
            for i, b in enumerate(batched)
        )
        results = run_kernel(spec, xp, merged, jobs[0].params)
        cuts = np.cumsum(counts)[:-1]
        split = [np.split(r, cuts) for r in results]
        return [tuple(parts[k] for parts in split) for k in range(len(jobs))]

    # -- replies -----------------------------------------------------------------------------
    def _reply_path_ready(self, req: WireRequest) -> bool:
        """True once our reply writer matches a reader of the participant that sent ``req``
        (waits up to 2 s: discovery of the two directions is not simultaneous)."""
        info = getattr(req, "sample_info", None)
        if info is None:
            return True
        self._client_of(req)  # learns the writer's participant
        peer = self._peer_of_writer.get(info.publication_handle)
        if peer is None:
            return True  # its writer is already gone; the reply goes wherever it can
        now = time.monotonic()
        # A client that had no reply reader 2 s ago is not waited for again for a while: a
        # participant that sends requests without ever reading replies must not hold the
        # worker 2 s per request.
        wait_s = 0.0 if self._no_reply_path.get(peer, 0.0) > now else _REPLY_PATH_WAIT_S
        deadline = now + wait_s
        while peer not in self._reply_peers:
            dds = self._writer.dds
            peers = set()
            for h in dds.get_matched_subscriptions():
                sub = dds.get_matched_subscription_data(h)
                if sub is not None:
                    peers.add(sub.participant_key)
            self._reply_peers = peers
            if peer in peers:
                break
            if time.monotonic() >= deadline:
                if len(self._no_reply_path) >= 4096:
                    self._no_reply_path.clear()
                self._no_reply_path[peer] = time.monotonic() + 30.0
                return False
            time.sleep(0.005)
        self._no_reply_path.pop(peer, None)
        return True

    def _reply(
        self,
        req: WireRequest,
        *,
        results: tuple[np.ndarray, ...] = (),
        error: str = "",
        compute_ms: float = 0.0,
    ) -> None:
        data = encode_reply(
            request_id=req.request_id,
            client_id=req.client_id,
            server_id=self.server_id,
            ok=not error,
            error=error,
            results=results,
            device=self.device,
            compute_ms=compute_ms,
            reply_ns=time.time_ns(),
        )
        if not self._reply_path_ready(req):
            self._log_once(
                f"no reply path {req.client_id[:80]}",
                "client %.80s has no matched reply reader; reply sent anyway",
                req.client_id,
            )
        try:
            _write_dispose(self._writer, data, ComputeReply(request_id=req.request_id))
        except DDSException as exc:
            log.warning("reply to %s not sent: %s", req.request_id, exc)
            return
        with self._lock:
            self._counts["replies"] += 1
        if self._heartbeat is not None:
            self._heartbeat.count_out()
            if req.issue_ns > 0:
                self._heartbeat.record_latency_ns(max(time.time_ns() - req.issue_ns, 0))


# -- client -------------------------------------------------------------------------------------


@dataclasses.dataclass(eq=False)
class _Call:
    spec: KernelSpec
    request_id: str
    data: bytes
    request_bytes: int
    deadline: float  # time.monotonic()
    retries_left: int
    future: Future[tuple[tuple[np.ndarray, ...], CallTiming]]
    t0: float  # time.perf_counter()
    attempts: int = 0
    # request readers ever matched when last sent; -1 = to be sent again, -2 = being sent
    sent_total: int = -2


class ComputeClient:
    """The `Kernels` executor for ``remote:NAME``: sends each call to compute service ``service``.

    See the module docstring for timeouts and retries. Thread-safe; `close` it (or the
    `Kernels` that owns it) to leave the bus.
    """

    def __init__(
        self,
        service: str = "compute",
        *,
        domain_id: int | None = None,
        discovery_tag: str | None = None,
        timeout_s: float = 60.0,
        connect_timeout_s: float = 15.0,
        retries: int = 2,
        client_id: str | None = None,
    ) -> None:
        for label, value in (("timeout_s", timeout_s), ("connect_timeout_s", connect_timeout_s)):
            if not (isinstance(value, int | float) and value > 0):
                raise ComputeError(f"{label}={value!r} must be a number of seconds > 0")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ComputeError(f"retries={retries!r} must be an integer >= 0")
        self.service = service
        self.partition = service_partition(service)
        self.device = f"remote:{service}"
        self.timeout_s = float(timeout_s)
        self.connect_timeout_s = float(connect_timeout_s)
        self.retries = retries
        self.client_id = client_id or default_client_id()
        self._bus = Bus(
            _domain(domain_id),
            partitions=[self.partition],
            discovery_tag=discovery_tag,
            name=f"mcc compute client {service}",
        )
        try:
            self._writer: Writer[Any] = self._bus.writer("ComputeRequest")
            self._reader = _WireReader(self._bus, "ComputeReply", decode_reply)
        except BaseException:
            self._bus.close()
            raise
        self._seq = itertools.count(1)
        self._pending: dict[str, _Call] = {}
        self._lock = threading.RLock()  # futures' callbacks may call back in
        self._counts: collections.Counter[str] = collections.Counter()
        self._closed = threading.Event()
        self._loop = ReaderLoop(self._bus).add(self._reader, self._on_replies)
        self._loop.start(f"mcc-compute-client-{service}")
        self._watcher = threading.Thread(
            target=self._watch, name=f"mcc-compute-watch-{service}", daemon=True
        )
        self._watcher.start()

    # -- calls -------------------------------------------------------------------------------
    def _service_matched(self) -> bool:
        return self._writer.matched() >= 1 and self._reader.matched() >= 1

    def _connect(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self._service_matched():
            if time.monotonic() >= deadline:
                raise RequestTimeoutError(
                    f"no compute service {self.service!r} answered within {timeout_s:g} s "
                    f"(domain {self._bus.domain_id}, partition {self.partition!r}): start one "
                    f"with `mcc compute serve --name {self.service}`, or run the kernels "
                    "locally (MCC_DEVICE=cpu)"
                )
            time.sleep(0.01)

    def submit(
        self, spec: KernelSpec, arrays: tuple[np.ndarray, ...], params: dict[str, Any]
    ) -> Future[tuple[tuple[np.ndarray, ...], CallTiming]]:
        """Send one checked call; the future resolves to ``(results, timing)`` or fails with
        `RequestTimeoutError`, `PeerLostError` or the service's `ComputeError`."""
        if self._closed.is_set():
            raise ComputeError(f"the client of compute service {self.service!r} is closed")
        t0 = time.perf_counter()
        self._connect(self.connect_timeout_s)  # instant once a service is matched
        request_id = f"{self.client_id}/{next(self._seq)}"
        now_ns = time.time_ns()
        data = encode_request(
            request_id=request_id,
            client_id=self.client_id,
            kernel=spec.name,
            args=arrays,
            params_json=json.dumps(params, sort_keys=True),
            deadline_ns=now_ns + int(self.timeout_s * 1e9),
            issue_ns=now_ns,
        )
        call = _Call(
            spec=spec,
            request_id=request_id,
            data=data,
            request_bytes=sum(a.nbytes for a in arrays),
            deadline=time.monotonic() + self.timeout_s,
            retries_left=self.retries if spec.idempotent else 0,
            future=Future(),
            t0=t0,
        )
        with self._lock:
            self._pending[request_id] = call
            self._counts["calls"] += 1
        self._send(call)
        return call.future

    def _send(self, call: _Call) -> None:
        """Write the request (without holding the lock: a write may block up to 1 s)."""
        with self._lock:
            if call.request_id not in self._pending:
                return
            call.sent_total = self._writer.dds.get_publication_matched_status().total_count
            call.attempts += 1
        try:
            self._writer.write_cdr(call.data, dispose=True)
            ret = 0
        except DDSException as exc:
            ret = exc.code
        if ret == DDSException.DDS_RETCODE_TIMEOUT:
            # The writer is throttled: a reader that died without leaving (a killed service)
            # keeps unacknowledged data until its lease expires. Send again from the watcher.
            log.info("request %s blocked by an unresponsive reader; resending", call.request_id)
            with self._lock:
                call.sent_total = -1
            return
        if ret < 0:
            with self._lock:
                self._finish(call, ComputeError(f"request {call.request_id} not sent: {ret}"))
            return
        with contextlib.suppress(DDSException):  # only bookkeeping; the request went out
            self._writer.dds.unregister_instance(ComputeRequest(request_id=call.request_id))

    def _finish(self, call: _Call, outcome: Any) -> None:
        # Called with self._lock held: the pending entry decides who completes the future.
        if self._pending.pop(call.request_id, None) is None:
            return
        if isinstance(outcome, BaseException):
            self._counts[type(outcome).__name__] += 1
            call.future.set_exception(outcome)
        else:
            call.future.set_result(outcome)

    def _on_replies(self, replies: list[WireReply]) -> None:
        for rep in replies:
            if rep.client_id != self.client_id:
                continue
            try:
                self._resolve(rep)
            except Exception:  # the reply loop must outlive any one reply
                log.exception("reply %s dropped", rep.request_id)

    def _resolve(self, rep: WireReply) -> None:
        with self._lock:
            call = self._pending.get(rep.request_id)
            if call is None:
                return  # answered already (a reply to an earlier attempt)
            outcome: Any
            if not rep.ok:
                outcome = ComputeError(
                    f"compute service {self.service!r} ({rep.server_id}, {rep.device}): {rep.error}"
                )
            elif len(rep.results) != len(call.spec.results):
                outcome = ComputeError(
                    f"compute service {self.service!r} returned {len(rep.results)} arrays "
                    f"for {call.spec.name}, expected {len(call.spec.results)}: client and "
                    "service run different MCC versions?"
                )
            else:
                timing = CallTiming(
                    kernel=call.spec.name,
                    device=f"{self.device} ({rep.device})",
                    total_ms=(time.perf_counter() - call.t0) * 1e3,
                    compute_ms=rep.compute_ms,
                    request_bytes=call.request_bytes,
                    reply_bytes=rep.nbytes,
                    attempts=call.attempts,
                )
                outcome = (rep.results, timing)
            self._finish(call, outcome)

    def _watch(self) -> None:
        """Time calls out; resend them when the service went away or restarted."""
        while not self._closed.wait(_WATCH_PERIOD_S):
            try:
                with self._lock:
                    if not self._pending:
                        continue
                    status = self._writer.dds.get_publication_matched_status()
                    sent = [c.sent_total for c in self._pending.values()]
                if status.current_count == 0 or any(0 <= t < status.total_count for t in sent):
                    # Take replies that arrived before the service left: they are answers.
                    self._on_replies(self._reader.take())
                with self._lock:
                    now = time.monotonic()
                    calls = list(self._pending.values())
                    resend = [c for c in calls if self._check(c, status, now)]
                for call in resend:
                    self._send(call)
            except Exception:  # the watcher is what bounds every call: it must not die
                log.exception("compute client watcher")

    def _check(self, call: _Call, status: Any, now: float) -> bool:
        """Whether to send ``call`` again; fails it when it timed out or cannot be resent.
        Called with self._lock held."""
        if now >= call.deadline:
            self._finish(
                call,
                RequestTimeoutError(
                    f"compute service {self.service!r}: no reply to {call.spec.name} request "
                    f"{call.request_id} within {self.timeout_s:g} s ({call.attempts} attempt(s));"
                    " the service is busy or stuck: raise timeout_s or check `mcc status`"
                ),
            )
            return False
        if call.sent_total == -2:  # submit is sending it
            return False
        if call.sent_total == -1:  # waiting for a service to send it to again
            return self._service_matched()
        lost = status.current_count == 0
        if not lost and status.total_count <= call.sent_total:
            return False
        what = "went away" if lost else "restarted"
        if call.retries_left > 0:
            call.retries_left -= 1
            self._counts["retries"] += 1
            log.info("compute service %r %s: resending %s", self.service, what, call.request_id)
            call.sent_total = -1
            return not lost
        reason = "retries exhausted" if call.spec.idempotent else "not idempotent"
        self._finish(
            call,
            PeerLostError(
                f"compute service {self.service!r} {what} while running {call.spec.name} "
                f"request {call.request_id} ({call.attempts} attempt(s), {reason}); "
                "call again, or open the kernels with more retries"
            ),
        )
        return False

    def statistics(self) -> dict[str, int]:
        """Counts: calls, retries, and failures by exception name."""
        with self._lock:
            return dict(self._counts)

    def close(self) -> None:
        """Fail calls still waiting, leave the bus."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._watcher.join(5.0)
        with self._lock:
            for call in list(self._pending.values()):
                self._finish(call, ComputeError(f"compute client {self.client_id} closed"))
        self._loop.stop()
        self._bus.close()


# -- app entry and command line ---------------------------------------------------------------


def _serve_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", help="service name clients use as remote:NAME")
    parser.add_argument("--device", help="cpu or cuda:N (default: MCC_DEVICE when local, else cpu)")
    parser.add_argument(
        "--max-batch",
        type=int,
        default=16,
        help="most queued requests run as one kernel call (default %(default)s; 1 = none)",
    )
    defaults = ServiceLimits()
    parser.add_argument(
        "--budget-s",
        type=float,
        default=defaults.budget_s,
        help="compute time of one call, s (default %(default)s; a request's deadline only "
        "shortens it)",
    )
    parser.add_argument(
        "--max-request-mb",
        type=float,
        default=defaults.max_request_bytes / 2**20,
        help="array MiB of one request (default %(default)s)",
    )
    parser.add_argument(
        "--max-queued-per-client",
        type=int,
        default=defaults.max_queued_per_client,
        help="requests one client may have waiting (default %(default)s)",
    )


def _limits(args: argparse.Namespace) -> ServiceLimits:
    return ServiceLimits(
        budget_s=args.budget_s,
        max_request_bytes=max(1, int(args.max_request_mb * 2**20)),
        max_queued_per_client=args.max_queued_per_client,
    )


def _local_device(device: str | None) -> str:
    if device:
        return device
    env = os.environ.get("MCC_DEVICE", "")
    return env if env and not env.startswith("remote:") else "cpu"


def serve(ctx: AppContext) -> int:
    """App entry ``mcc.compute.remote:serve``: run the service until the instance is stopped.

    Arguments: ``--name`` (default: the system's name), ``--device`` (default: the instance's
    device, ``cuda:0`` with ``gpu: exclusive``), ``--max-batch``, ``--budget-s``,
    ``--max-request-mb``, ``--max-queued-per-client`` (`ServiceLimits`).
    """
    parser = argparse.ArgumentParser(prog="mcc.compute.remote:serve")
    _serve_options(parser)
    args = parser.parse_args(ctx.args)
    device = args.device or ctx.device
    with ComputeService(
        name=args.name or ctx.identity.system,
        device=device,
        domain_id=ctx.bus.domain_id,
        max_batch=args.max_batch,
        heartbeat=ctx.heartbeat,
        limits=_limits(args),
    ) as service:
        ctx.log.info("serving kernels as %r on %s", service.name, service.device)
        while not ctx.wait(1.0):
            stats = service.statistics()
            ctx.heartbeat.message = (
                f"{stats.replies} replies, {stats.refused} refused, queue max {stats.max_queue}"
            )
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with ComputeService(
        name=args.name or "compute",
        device=_local_device(args.device),
        domain_id=args.domain,
        discovery_tag=args.tag,
        max_batch=args.max_batch,
        limits=_limits(args),
    ) as service:
        print(
            f"mcc compute: serving {service.name!r} on {service.device} "
            f"(domain {service.domain_id}, partition {service.partition}); Ctrl-C stops",
            flush=True,
        )
        while not stop.wait(1.0):
            pass
        stats = service.statistics()
    print(
        f"mcc compute: stopped after {stats.replies} replies ({stats.refused} refused, "
        f"{stats.expired} expired, {stats.failed} failed)",
        file=sys.stderr,
    )
    return 0


def _cmd_kernels(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="compute kernels (open_compute / remote:NAME)")
    for col in ("kernel", "arguments", "parameters", "results", "bound"):
        table.add_column(col)
    for spec in KERNELS.values():
        table.add_row(
            spec.name,
            "\n".join(a.describe() for a in spec.args),
            "\n".join(p.describe() for p in spec.params) or "-",
            ", ".join(spec.results),
            spec.bound,
        )
    Console().print(table)
    return 0


def _add_actions(actions: Any) -> None:
    srv = actions.add_parser(
        "serve",
        help="run a compute service in the foreground",
        description="Own one device and run the kernels that clients (open_compute("
        "'remote:NAME')) send, until SIGINT/SIGTERM.",
    )
    _serve_options(srv)
    srv.add_argument(
        "--domain",
        type=int,
        default=int(os.environ.get("MCC_DOMAIN", "0")),
        help="DDS domain id (env MCC_DOMAIN; default %(default)s)",
    )
    srv.add_argument(
        "--tag",
        default=os.environ.get("MCC_DISCOVERY_TAG"),
        help="discovery tag (env MCC_DISCOVERY_TAG)",
    )
    srv.set_defaults(func=_cmd_serve)
    kernels = actions.add_parser("kernels", help="list the registered kernels and their schemas")
    kernels.set_defaults(func=_cmd_kernels)


def add_parsers(subparsers: Any) -> None:
    """``mcc compute serve`` and ``mcc compute kernels``."""
    compute = subparsers.add_parser(
        "compute",
        help="the remote compute service (serve kernels, list them)",
        description="Serve the registered kernels to remote:NAME clients, or list them.",
    )
    _add_actions(compute.add_subparsers(dest="compute_command", metavar="ACTION", required=True))


def main(argv: list[str] | None = None) -> int:
    """``python -m mcc.compute.remote serve|kernels …``: ``mcc compute`` without loading the
    whole command line (a start in half the time, for benches and supervisors)."""
    from mcc._entry import main_for

    return main_for("compute", add_parsers, argv)


if __name__ == "__main__":
    sys.exit(main())
