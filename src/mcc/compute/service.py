"""The compute service: registered kernels on one device, served to clients over the bus.

Requests are decoded without copying their arrays (`mcc.compute.wire`) and checked against
the kernel registry and the service's bounds (`ServiceLimits`) at once: an unknown kernel,
a wrong dtype, shape or parameter, a parameter out of its range, too many bytes, or an
estimated compute time over the budget (``budget_s``, shortened by the request's deadline)
is refused with a message naming it. Accepted requests wait in one FIFO per client (the
writer's DDS participant, not a field of the request), served round-robin (`FairQueue`),
with a bounded share per client, so one busy client cannot starve another. A kernel runs
under its budget (`mcc.compute.limits.compute_budget`): the iterative ones stop once it
is spent. Queued requests of a kernel with ``batch_args`` whose other arguments and
parameters are identical run as one call (up to ``max_batch``), e.g. the Kalman predictions
of several trackers; if that call fails, each request runs alone so only the bad one fails.
A request whose deadline passed while it waited is answered with an error, not run. The
reply (``ComputeReply``) carries ``compute_ms``: the kernel on the device, host↔device
copies included. Intake, queueing, deadlines and reply hygiene (written disposed and
unregistered, once the client's reply reader matched) are the bus's request/reply core
(`mcc.bus.rpc.RpcServer`).

Arrays of `BULK_MIN_BYTES` or more travel as bulk transfers (`mcc.bus.bulk`): a client sends
them on ``Bulk`` before its request, which names them by transfer id; the service's inbox
(`BulkInbox`) takes each whole into a buffer of its own, and the request claims them once it
passed its checks (waiting up to `BULK_WAIT_S`). Large results go back the same way on
``BulkReturn``, each under an id derived from the call (`result_transfer`), before the reply
that names them. A transfer named by no request, refused, cut short or of another size than its
request says is counted (`ServiceStatistics`) and dropped; a request whose transfer did not come
is refused with a message saying so, and its client's next waits are short (`BULK_LATE_WAIT_S`)
for `BULK_LATE_S`, so that a client that names transfers it never sends holds the intake up
only once.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from mcc.bus import Writer, rpc
from mcc.bus.bulk import BulkWriter
from mcc.bus.rpc import Pending, RpcServer, deadline_passed, ids_too_long
from mcc.compute.backend import device_kind, get_xp
from mcc.compute.channel import (
    BULK_MIN_BYTES,
    BULK_WAIT_S,
    BulkInbox,
    WireReader,
    open_service_bus,
    result_transfer,
    service_partition,
)
from mcc.compute.dispatch import run_kernel
from mcc.compute.kernels import kernel_spec
from mcc.compute.limits import (
    ComputeBudgetError,
    QueueFullError,
    ServiceLimits,
    compute_budget,
)
from mcc.compute.registry import KernelSpec, canonical_dtype
from mcc.compute.wire import (
    WireRequest,
    decode_request,
    encode_reply,
    wire_buffer,
    with_buffers,
)
from mcc.errors import ComputeError, MccError, PeerLostError, WriteTimeoutError
from mcc.lifecycle import Service
from mcc.types import ComputeReply

if TYPE_CHECKING:
    from mcc.bus import HeartbeatPublisher

log = logging.getLogger("mcc.compute.remote")
T = TypeVar("T")

#: After a client named a transfer that did not come, its requests wait this long for theirs…
BULK_LATE_WAIT_S = 0.25
#: …for this long.
BULK_LATE_S = 30.0
#: How long the service waits for a client to take the blocks of a result transfer.
BULK_SEND_PATIENCE_S = 10.0


class FairQueue(rpc.FairQueue[T]):
    """The core's `mcc.bus.rpc.FairQueue`, full with the compute service's `QueueFullError`."""

    full_error = QueueFullError


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
    bulk_in: int = 0  # argument transfers received whole
    bulk_out: int = 0  # result transfers sent
    bulk_lost: int = 0  # argument transfers refused, cut short, of the wrong size, not claimed
    # in time, or named by a request and never come


@dataclasses.dataclass(eq=False)
class _Job:
    spec: KernelSpec
    params: dict[str, Any]


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


class ComputeService(Service):
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
        self._bus = open_service_bus(domain_id, name, discovery_tag, "service")
        try:
            self._reader = WireReader(self._bus, "ComputeRequest", decode_request)
            self._writer: Writer[Any] = self._bus.writer("ComputeReply")
            self._bulk_in = BulkInbox(
                self._bus,
                "ComputeBulk",
                name=f"mcc-compute-{name}-bulk",
                max_bytes=limits.max_request_bytes,
                pool_bytes=limits.max_queued_bytes,
            )
            self._bulk_out = BulkWriter(self._bus, "ComputeBulkReturn")
        except BaseException:
            self._bus.close()
            raise
        self._late: dict[str, float] = {}  # client → until when its transfers are not waited for
        self._queue: FairQueue[Pending[_Job]] = FairQueue(
            max_items=limits.max_queued,
            max_bytes=limits.max_queued_bytes,
            max_items_per_client=limits.max_queued_per_client,
            max_bytes_per_client=limits.max_queued_bytes_per_client,
        )
        self._xp: Any = None
        self._server: RpcServer[_Job] = RpcServer(
            self._bus,
            self._reader,
            self._writer,
            admit=self._accept,
            run=self._run,
            expire=self._expired,
            name=f"mcc-compute-{name}",
            queue=self._queue,
            max_batch=max_batch,
            wait_reply_path=True,
            worker_init=self._open_device,
            refuse=lambda pending, exc: self._refuse(pending.request, exc),
            queued=self._queued,
        )
        self._server.on_error = lambda req, exc: self._drop(
            req, f"{type(exc).__name__}: {exc}", trace=True
        )
        self._server.on_no_reply_path = lambda req: self._log_once(
            f"no reply path {req.client_id[:80]}",
            "client %.80s has no matched reply reader; reply sent anyway",
            req.client_id,
        )
        self._lock = threading.Lock()
        self._counts: collections.Counter[str] = collections.Counter()
        self._busy_s = 0.0
        self._max_queue = 0
        self._clients: set[str] = set()
        self._logged: set[str] = set()  # what was logged once
        self._closed = False

    @property
    def domain_id(self) -> int:
        return self._bus.domain_id

    def _open_device(self) -> None:
        self._xp = get_xp(self.device)

    def start(self, *, ready_timeout_s: float = 120.0) -> ComputeService:
        """Open the device in the worker thread (CuPy start-up can take seconds), then accept
        requests. Raises what opening the device raised."""
        try:
            self._server.start(ready_timeout_s=ready_timeout_s)
        except TimeoutError:
            self.close()
            raise ComputeError(
                f"device {self.device!r} did not open within {ready_timeout_s} s"
            ) from None
        except BaseException:
            self.close()
            raise
        log.info("compute service %r serving on %s (%s)", self.name, self.device, self.partition)
        return self

    def statistics(self) -> ServiceStatistics:
        """A snapshot of the counters."""
        inbox = self._bulk_in.statistics()
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
                bulk_in=inbox.get("received", 0),
                bulk_out=c["bulk_out"],
                bulk_lost=sum(
                    inbox.get(k, 0)
                    for k in ("refused", "broken", "unclaimed", "missing", "wrong size")
                ),
            )

    def stop(self) -> None:
        """Stop accepting, finish the kernel call in progress, close the bus."""
        if self._closed:
            return
        self._closed = True
        self._bulk_in.cancel()  # a request waiting for its transfer is refused now
        self._server.stop()
        self._bulk_in.close()
        self._bulk_out.close()
        self._bus.close()

    close = stop

    # -- intake (reader loop thread) ---------------------------------------------------------
    def _drop(self, req: WireRequest, reason: str, *, trace: bool = False) -> None:
        """Count a request left unanswered; log the first one of each kind."""
        with self._lock:
            self._counts["dropped"] += 1
        self._log_once(
            reason.split(":")[0],
            "request %.80s from %s dropped (%s); further ones are counted, not logged",
            req.request_id,
            self._server.client_of(req),
            reason[:300],
            trace=trace,
        )

    def _log_once(self, what: str, message: str, *args: Any, trace: bool = False) -> None:
        if what in self._logged or len(self._logged) >= 1000:
            return
        self._logged.add(what)
        (log.exception if trace else log.warning)(message, *args)

    def _budget_s(self, req: WireRequest, now_ns: int) -> tuple[float, str]:
        """The compute budget of ``req`` and what set it (a deadline only shortens it)."""
        budget = float(self.limits.budget_s)
        if req.deadline_ns and (req.deadline_ns - now_ns) / 1e9 < budget:
            return (req.deadline_ns - now_ns) / 1e9, "the request's deadline"
        return budget, "ServiceLimits.budget_s"

    def _accept(self, req: WireRequest, client: str) -> Pending[_Job] | None:
        """Check ``req`` against the bounds and the registry: what to queue, or None when it
        was answered (refused) or dropped. An expired one is returned for the core to answer."""
        if self._heartbeat is not None:
            self._heartbeat.count_in()
        limits = self.limits
        if ids_too_long(req, limits.max_id_chars):
            # A reply would echo the identifiers: not answered at all.
            self._drop(req, f"identifiers longer than max_id_chars = {limits.max_id_chars}")
            return None
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
            if deadline_passed(req, now_ns):
                # The core answers it as expired, not run: its transfers are not waited for.
                self._bulk_in.drop(transfer for _, transfer in req.bulk)
                return Pending(req, client, _Job(spec, params), None, req.nbytes)
            budget_s, by = self._budget_s(req, now_ns)
            estimate_s = spec.estimate_s(dims, params)
            if estimate_s > budget_s:
                raise ComputeBudgetError(
                    f"kernel {spec.name!r}: estimated {estimate_s:.3g} s of compute, more than "
                    f"the budget of {budget_s:.3g} s ({by}): ask for less per call (fewer "
                    "trials, iterations or rows)"
                )
            if req.bulk:  # checked: now its arrays
                req.args = self._claim(req, client)
            pending = Pending(
                req,
                client,
                _Job(spec, params),
                _batch_key(spec, req.args, params),
                req.nbytes,
            )
        except MccError as exc:
            self._bulk_in.drop(transfer for _, transfer in req.bulk)
            self._refuse(req, exc)
            return None
        return pending

    def _claim(self, req: WireRequest, client: str) -> tuple[np.ndarray, ...]:
        """``req``'s arguments with its bulk transfers in place of their placeholders."""
        now = time.monotonic()
        late = self._late.get(client, 0.0) > now
        wait_s = BULK_LATE_WAIT_S if late else BULK_WAIT_S
        if req.deadline_ns:
            wait_s = max(min(wait_s, (req.deadline_ns - time.time_ns()) / 1e9), 0.0)
        buffers = {}
        for i, transfer in req.bulk:
            try:
                buffers[i] = self._bulk_in.claim(transfer, req.args[i].nbytes, timeout_s=wait_s)
            except ComputeError as exc:
                if len(self._late) >= 10_000:
                    self._late.clear()
                self._late[client] = time.monotonic() + BULK_LATE_S
                raise ComputeError(f"argument {i}: {exc}") from None
        if not late:
            self._late.pop(client, None)
        return with_buffers(req.args, buffers)

    def _refuse(self, req: WireRequest, exc: MccError) -> None:
        with self._lock:
            self._counts["refused"] += 1
            if isinstance(exc, QueueFullError):
                self._counts["throttled"] += 1
            elif isinstance(exc, ComputeBudgetError):
                self._counts["over_budget"] += 1
        self._reply(req, error=f"refused: {exc}")

    def _queued(self, pending: Pending[_Job], depth: int) -> None:
        with self._lock:
            self._counts["requests"] += 1
            self._max_queue = max(self._max_queue, depth)
            if len(self._clients) < 10_000:
                self._clients.add(pending.client)

    def _expired(self, pending: Pending[_Job], waited_ms: float) -> None:
        with self._lock:
            self._counts["expired"] += 1
        self._reply(
            pending.request,
            error=f"{pending.work.spec.name}: deadline passed after {waited_ms:.0f} ms in the "
            "queue, not run (the client gave up: raise its timeout_s or add capacity)",
        )

    # -- worker (owns the device) ------------------------------------------------------------
    def _run(self, jobs: list[Pending[_Job]]) -> None:
        for job, outcome, compute_ms in self._execute(self._xp, jobs):
            spec = job.work.spec
            if isinstance(outcome, BaseException):
                with self._lock:
                    self._counts["failed"] += 1
                    if isinstance(outcome, ComputeBudgetError):
                        self._counts["over_budget"] += 1
                text = str(outcome) if isinstance(outcome, MccError) else repr(outcome)
                self._reply(
                    job.request,
                    error=f"kernel {spec.name!r} failed on {self.device}: {text}",
                    compute_ms=compute_ms,
                )
            elif (size := sum(a.nbytes for a in outcome)) > self.limits.max_reply_bytes:
                with self._lock:
                    self._counts["failed"] += 1
                self._reply(
                    job.request,
                    error=f"kernel {spec.name!r}: results of {size} bytes, more than "
                    f"max_reply_bytes = {self.limits.max_reply_bytes}: ask for less per call",
                    compute_ms=compute_ms,
                )
            else:
                self._reply(job.request, results=outcome, compute_ms=compute_ms)

    def _execute(
        self, xp: Any, jobs: list[Pending[_Job]]
    ) -> list[tuple[Pending[_Job], tuple[np.ndarray, ...] | BaseException, float]]:
        spec = jobs[0].work.spec
        now_ns = time.time_ns()
        budget_s = min(self._budget_s(job.request, now_ns)[0] for job in jobs)
        t0 = time.perf_counter()
        try:
            with compute_budget(budget_s):
                if len(jobs) == 1:
                    job = jobs[0]
                    outcomes: list[tuple[np.ndarray, ...]] = [
                        run_kernel(spec, xp, job.request.args, job.work.params)
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
    def _execute_batch(
        xp: Any, spec: KernelSpec, jobs: list[Pending[_Job]]
    ) -> list[tuple[Any, ...]]:
        batched = [arg.name in spec.batch_args for arg in spec.args]
        first = batched.index(True)
        counts = [job.request.args[first].shape[0] for job in jobs]
        merged = tuple(
            np.concatenate([job.request.args[i] for job in jobs]) if b else jobs[0].request.args[i]
            for i, b in enumerate(batched)
        )
        results = run_kernel(spec, xp, merged, jobs[0].work.params)
        cuts = np.cumsum(counts)[:-1]
        split = [np.split(r, cuts) for r in results]
        return [tuple(parts[k] for parts in split) for k in range(len(jobs))]

    # -- replies -----------------------------------------------------------------------------
    def _reply(
        self,
        req: WireRequest,
        *,
        results: tuple[np.ndarray, ...] = (),
        error: str = "",
        compute_ms: float = 0.0,
    ) -> None:
        bulk = self._send_results(req, results) if results else {}
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
            bulk=bulk,
        )
        if not self._server.reply(req, ComputeReply(request_id=req.request_id), data=data):
            return
        with self._lock:
            self._counts["replies"] += 1
        if self._heartbeat is not None:
            self._heartbeat.count_out()
            if req.issue_ns > 0:
                self._heartbeat.record_latency_ns(max(time.time_ns() - req.issue_ns, 0))

    def _send_results(self, req: WireRequest, results: tuple[np.ndarray, ...]) -> dict[int, int]:
        """Send the large ``results`` as bulk transfers (when a client's inbox is there); the
        transfer of each, by index. One not sent whole goes in the reply."""
        large = [i for i, r in enumerate(results) if r.nbytes >= BULK_MIN_BYTES]
        if not large or not self._bulk_out.wait_matched(1, timeout_s=0):
            return {}
        bulk = {}
        for i in large:
            transfer = result_transfer(req.client_id, req.request_id, i)
            try:
                self._bulk_out.send(
                    transfer, wire_buffer(results[i]), patience_s=BULK_SEND_PATIENCE_S
                )
            except (WriteTimeoutError, PeerLostError) as exc:
                self._log_once("bulk send", "result transfer not sent (%s); in the reply", exc)
                continue
            bulk[i] = transfer
        with self._lock:
            self._counts["bulk_out"] += len(bulk)
        return bulk
