"""The client of a remote compute service: the `Kernels` executor for ``remote:NAME``.

A call waits up to ``connect_timeout_s`` for a service, then up to ``timeout_s`` for its
reply: `RequestTimeoutError` after that, never a hang. When the service goes away (its reader
unmatched) or restarts (a new reader matched) while calls are in flight they are sent again,
up to ``retries`` times (the kernels are pure functions of their inputs, the Monte Carlo one
seeded, hence idempotent); with no retries left the call fails with `PeerLostError`. A reply
that comes twice is taken once. Correlation, deadlines and resends are the bus's
request/reply core (`mcc.bus.rpc.RpcClient`); requests carry their deadline (``deadline_ns``)
so the service does not run one its client gave up on, and are written disposed and
unregistered (the writer keeps nothing per request).

Arguments of ``bulk_min_bytes`` or more (default `BULK_MIN_BYTES`) travel as bulk transfers
(`mcc.bus.bulk`, one native call each) on ``Bulk`` before the request, which names them by a
random 64-bit transfer id; large results come back the same way on ``BulkReturn`` before their
reply, taken by the client's inbox (`BulkInbox`, which drops the other clients' results). With
a service that has no bulk reader (an older one), every argument goes in the request.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import secrets
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
from cyclonedds.core import DDSException

from mcc.bus import Writer
from mcc.bus.bulk import BulkWriter
from mcc.bus.rpc import Call, RpcClient, default_client_id
from mcc.bus.transport import Transport
from mcc.compute.channel import (
    BULK_MIN_BYTES,
    BULK_WAIT_S,
    BulkInbox,
    WireReader,
    open_service_bus,
    result_transfer,
    service_partition,
)
from mcc.compute.registry import CallTiming, KernelSpec
from mcc.compute.wire import WireReply, decode_reply, encode_request, wire_buffer, with_buffers
from mcc.errors import ComputeError, MccError, PeerLostError, RequestTimeoutError
from mcc.lifecycle import Closeable
from mcc.types import ComputeRequest

#: The largest result transfer a client takes (its own results only).
_MAX_RESULT_BYTES = 1 << 34
#: How long the client waits for the bulk reader of a service it just found (an older service
#: has none: its arguments then go in the request).
_BULK_MATCH_S = 2.0

Results = tuple[tuple[np.ndarray, ...], CallTiming]


@dataclasses.dataclass(frozen=True)
class _Context:
    spec: KernelSpec
    request_bytes: int
    bulk: tuple[tuple[int, Any], ...] = ()  # (transfer, buffer) sent before the request
    results: tuple[int, ...] = ()  # the transfer ids its results would have


@dataclasses.dataclass(frozen=True)
class _Unclaimed:
    """A reply whose large results are still to be taken from the inbox."""

    reply: WireReply
    timing: CallTiming


class ComputeClient(Closeable):
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
        transport: Transport | None = None,
        timeout_s: float = 60.0,
        connect_timeout_s: float = 15.0,
        retries: int = 2,
        client_id: str | None = None,
        bulk_min_bytes: int = BULK_MIN_BYTES,
    ) -> None:
        for label, value in (("timeout_s", timeout_s), ("connect_timeout_s", connect_timeout_s)):
            if not (isinstance(value, int | float) and value > 0):
                raise ComputeError(f"{label}={value!r} must be a number of seconds > 0")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ComputeError(f"retries={retries!r} must be an integer >= 0")
        if isinstance(bulk_min_bytes, bool) or not isinstance(bulk_min_bytes, int):
            raise ComputeError(f"bulk_min_bytes={bulk_min_bytes!r} must be an integer >= 1")
        if bulk_min_bytes < 1:
            raise ComputeError(f"bulk_min_bytes={bulk_min_bytes!r} must be an integer >= 1")
        self.bulk_min_bytes = bulk_min_bytes
        self.service = service
        self.partition = service_partition(service)
        self.device = f"remote:{service}"
        self.timeout_s = float(timeout_s)
        self.connect_timeout_s = float(connect_timeout_s)
        self.retries = retries
        self.client_id = client_id or default_client_id()
        self._bus = open_service_bus(domain_id, service, discovery_tag, "client", transport)
        self._expected: set[int] = set()  # the result transfers of the calls in flight
        self._send_lock = threading.Lock()  # one bulk transfer at a time from this client
        self._pool_lock = threading.Lock()
        self._bulk_checked = False
        self._claimer: ThreadPoolExecutor | None = None
        try:
            self._writer: Writer[Any] = self._bus.writer("ComputeRequest")
            self._reader = WireReader(self._bus, "ComputeReply", decode_reply)
            self._bulk_writer = BulkWriter(self._bus, "ComputeBulk")
            self._inbox = BulkInbox(
                self._bus,
                "ComputeBulkReturn",
                name=f"mcc-compute-client-{service}-bulk",
                max_bytes=_MAX_RESULT_BYTES,
                pool_bytes=_MAX_RESULT_BYTES,
                wanted=self._expected.__contains__,
            )
            self._rpc = RpcClient(
                self._bus,
                self._writer,
                self._reader,
                client_id=self.client_id,
                send=self._send,
                resolve=self._resolve,
                timed_out=self._timed_out,
                lost=self._lost,
                name=f"mcc-compute-client-{service}",
            )
        except BaseException:
            self._bus.close()
            raise
        self._closed = False

    def submit(
        self, spec: KernelSpec, arrays: tuple[np.ndarray, ...], params: dict[str, Any]
    ) -> Future[tuple[tuple[np.ndarray, ...], CallTiming]]:
        """Send one checked call; the future resolves to ``(results, timing)`` or fails with
        `RequestTimeoutError`, `PeerLostError` or the service's `ComputeError`."""
        call = self._call(spec, arrays, params)
        try:
            inner = self._rpc.submit(call)
        except BaseException:
            self._forget(call)
            raise
        outer: Future[Results] = Future()

        def settle(got: Any) -> None:
            try:
                outer.set_result(self._claim(call, got))
            except BaseException as exc:
                outer.set_exception(exc)

        def done(f: Future[Any]) -> None:
            # Runs where the reply was taken (the core's lock held): claiming may wait, so a
            # reply with bulk results is settled in a thread of its own.
            if f.cancelled() or f.exception() is not None:
                self._forget(call)
                outer.set_exception(
                    f.exception()
                    if not f.cancelled()
                    else ComputeError(f"compute client {self.client_id} closed")
                )
            elif isinstance(f.result(), _Unclaimed):
                self._claim_pool().submit(settle, f.result())
            else:
                settle(f.result())

        inner.add_done_callback(done)
        return outer

    def call(
        self, spec: KernelSpec, arrays: tuple[np.ndarray, ...], params: dict[str, Any]
    ) -> tuple[tuple[np.ndarray, ...], CallTiming]:
        """`submit` and wait, the reply taken in this thread (`RpcClient.call`: no hand-off
        to another thread on the way back)."""
        call = self._call(spec, arrays, params)
        try:
            got = self._rpc.call(call)
        except BaseException:
            self._forget(call)
            raise
        return self._claim(call, got)

    def _claim(self, call: Call, got: Any) -> Results:
        """``(results, timing)`` of a resolved call, its bulk results taken from the inbox."""
        try:
            if not isinstance(got, _Unclaimed):
                result: Results = got
                return result
            rep, ctx = got.reply, call.context
            buffers = {}
            for i, transfer in rep.bulk:
                if i >= len(ctx.results) or transfer != ctx.results[i]:
                    raise ComputeError(
                        f"compute service {self.service!r}: the reply to {call.request_id} names "
                        f"bulk transfer {transfer:#x} for result {i}, not this call's"
                    )
                buffers[i] = self._inbox.claim(
                    transfer, rep.results[i].nbytes, timeout_s=BULK_WAIT_S
                )
            results = with_buffers(rep.results, buffers)
            total_ms = (time.perf_counter() - call.t0) * 1e3
            return results, dataclasses.replace(got.timing, total_ms=total_ms)
        except MccError as exc:
            raise ComputeError(
                f"compute service {self.service!r}: results of {call.context.spec.name} "
                f"request {call.request_id}: {exc}"
            ) from None
        finally:
            self._forget(call)

    def _forget(self, call: Call) -> None:
        """Stop taking the result transfers of ``call`` (done, failed or given up)."""
        self._expected.difference_update(call.context.results)
        self._inbox.drop(call.context.results)

    def _claim_pool(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._claimer is None:
                self._claimer = ThreadPoolExecutor(1, f"mcc-compute-client-{self.service}-claim")
            return self._claimer

    def _bulk_ready(self) -> bool:
        """Whether the service takes bulk transfers (its reader matched ours)."""
        ready = self._bulk_writer.wait_matched(
            1, timeout_s=0 if self._bulk_checked else _BULK_MATCH_S
        )
        self._bulk_checked = True
        return ready

    def _call(
        self, spec: KernelSpec, arrays: tuple[np.ndarray, ...], params: dict[str, Any]
    ) -> Call:
        if self._closed:
            raise ComputeError(f"the client of compute service {self.service!r} is closed")
        t0 = time.perf_counter()
        if not self._rpc.wait_matched(self.connect_timeout_s):  # instant once matched
            raise RequestTimeoutError(
                f"no compute service {self.service!r} answered within "
                f"{self.connect_timeout_s:g} s (domain {self._bus.domain_id}, partition "
                f"{self.partition!r}): start one with `mcc compute serve --name "
                f"{self.service}`, or run the kernels locally (MCC_DEVICE=cpu)"
            )
        request_id = self._rpc.new_request_id()
        large = [i for i, a in enumerate(arrays) if a.nbytes >= self.bulk_min_bytes]
        bulk = {i: secrets.randbits(64) | 1 for i in large} if large and self._bulk_ready() else {}
        results = tuple(
            result_transfer(self.client_id, request_id, i) for i in range(len(spec.results))
        )
        now_ns = time.time_ns()
        data = encode_request(
            request_id=request_id,
            client_id=self.client_id,
            kernel=spec.name,
            args=arrays,
            params_json=json.dumps(params, sort_keys=True),
            deadline_ns=now_ns + int(self.timeout_s * 1e9),
            issue_ns=now_ns,
            bulk=bulk,
        )
        call = Call(
            request_id,
            data,
            Future(),
            deadline=time.monotonic() + self.timeout_s,
            retries_left=self.retries if spec.idempotent else 0,
            context=_Context(
                spec,
                sum(a.nbytes for a in arrays),
                tuple((t, wire_buffer(arrays[i])) for i, t in bulk.items()),
                results,
            ),
            t0=t0,
        )
        self._expected.update(results)  # before the request goes: its results may come first
        return call

    def _send(self, call: Call) -> None:
        if call.context.bulk:
            self._send_bulk(call)
        try:
            self._writer.write_cdr(call.payload, dispose=True)
        except DDSException as exc:
            if exc.code == DDSException.DDS_RETCODE_TIMEOUT:
                raise  # throttled by a reader that died: the core sends it again
            raise ComputeError(f"request {call.request_id} not sent: {exc.code}") from exc
        with contextlib.suppress(DDSException):  # only bookkeeping; the request went out
            self._writer.dds.unregister_instance(ComputeRequest(request_id=call.request_id))

    def _send_bulk(self, call: Call) -> None:
        """Send the large arguments of ``call``, before its request (again when resent)."""
        patience_s = max((call.deadline or 0.0) - time.monotonic(), 0.1)
        with self._send_lock:
            for transfer, buffer in call.context.bulk:
                try:
                    self._bulk_writer.send(transfer, buffer, patience_s=patience_s)
                except MccError as exc:
                    raise ComputeError(
                        f"request {call.request_id}: an argument of "
                        f"{memoryview(buffer).nbytes} bytes not sent: {exc}"
                    ) from exc

    def _resolve(self, call: Call, rep: WireReply) -> Any:
        spec = call.context.spec
        if not rep.ok:
            return ComputeError(
                f"compute service {self.service!r} ({rep.server_id}, {rep.device}): {rep.error}"
            )
        if len(rep.results) != len(spec.results):
            return ComputeError(
                f"compute service {self.service!r} returned {len(rep.results)} arrays "
                f"for {spec.name}, expected {len(spec.results)}: client and "
                "service run different MCC versions?"
            )
        timing = CallTiming(
            kernel=spec.name,
            device=f"{self.device} ({rep.device})",
            total_ms=(time.perf_counter() - call.t0) * 1e3,
            compute_ms=rep.compute_ms,
            request_bytes=call.context.request_bytes,
            reply_bytes=rep.nbytes,
            attempts=call.attempts,
        )
        if rep.bulk:
            return _Unclaimed(rep, timing)  # taken from the inbox outside the core's lock
        return rep.results, timing

    def _timed_out(self, call: Call) -> BaseException:
        return RequestTimeoutError(
            f"compute service {self.service!r}: no reply to {call.context.spec.name} request "
            f"{call.request_id} within {self.timeout_s:g} s ({call.attempts} attempt(s));"
            " the service is busy or stuck: raise timeout_s or check `mcc status`"
        )

    def _lost(self, call: Call, what: str) -> BaseException:
        spec = call.context.spec
        reason = "retries exhausted" if spec.idempotent else "not idempotent"
        return PeerLostError(
            f"compute service {self.service!r} {what} while running {spec.name} "
            f"request {call.request_id} ({call.attempts} attempt(s), {reason}); "
            "call again, or open the kernels with more retries"
        )

    def statistics(self) -> dict[str, int]:
        """Counts: calls, retries, failures by exception name, and the inbox's result
        transfers (``bulk received``, ``bulk broken``, …)."""
        counts = self._rpc.statistics()
        counts.update({f"bulk {k}": v for k, v in self._inbox.statistics().items()})
        return counts

    def close(self) -> None:
        """Fail calls still waiting, leave the bus."""
        if self._closed:
            return
        self._closed = True
        self._rpc.close(lambda call: ComputeError(f"compute client {self.client_id} closed"))
        self._inbox.cancel()  # a claim still waiting fails now
        if self._claimer is not None:
            self._claimer.shutdown(wait=True)
        self._inbox.close()
        self._bulk_writer.close()
        self._bus.close()
