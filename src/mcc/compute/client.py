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
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from concurrent.futures import Future
from typing import Any

import numpy as np
from cyclonedds.core import DDSException

from mcc.bus import Writer
from mcc.bus.rpc import Call, RpcClient, default_client_id
from mcc.bus.transport import Transport
from mcc.compute.channel import WireReader, open_service_bus, service_partition
from mcc.compute.dispatch import CallTiming
from mcc.compute.registry import KernelSpec
from mcc.compute.wire import WireReply, decode_reply, encode_request
from mcc.errors import ComputeError, PeerLostError, RequestTimeoutError
from mcc.lifecycle import Closeable
from mcc.types import ComputeRequest


@dataclasses.dataclass(frozen=True)
class _Context:
    spec: KernelSpec
    request_bytes: int


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
        self._bus = open_service_bus(domain_id, service, discovery_tag, "client", transport)
        try:
            self._writer: Writer[Any] = self._bus.writer("ComputeRequest")
            self._reader = WireReader(self._bus, "ComputeReply", decode_reply)
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
        return self._rpc.submit(self._call(spec, arrays, params))

    def call(
        self, spec: KernelSpec, arrays: tuple[np.ndarray, ...], params: dict[str, Any]
    ) -> tuple[tuple[np.ndarray, ...], CallTiming]:
        """`submit` and wait, the reply taken in this thread (`RpcClient.call`: no hand-off
        to another thread on the way back)."""
        result: tuple[tuple[np.ndarray, ...], CallTiming] = self._rpc.call(
            self._call(spec, arrays, params)
        )
        return result

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
        call = Call(
            request_id,
            data,
            Future(),
            deadline=time.monotonic() + self.timeout_s,
            retries_left=self.retries if spec.idempotent else 0,
            context=_Context(spec, sum(a.nbytes for a in arrays)),
            t0=t0,
        )
        return call

    def _send(self, call: Call) -> None:
        try:
            self._writer.write_cdr(call.payload, dispose=True)
        except DDSException as exc:
            if exc.code == DDSException.DDS_RETCODE_TIMEOUT:
                raise  # throttled by a reader that died: the core sends it again
            raise ComputeError(f"request {call.request_id} not sent: {exc.code}") from exc
        with contextlib.suppress(DDSException):  # only bookkeeping; the request went out
            self._writer.dds.unregister_instance(ComputeRequest(request_id=call.request_id))

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
        """Counts: calls, retries, and failures by exception name."""
        return self._rpc.statistics()

    def close(self) -> None:
        """Fail calls still waiting, leave the bus."""
        if self._closed:
            return
        self._closed = True
        self._rpc.close(lambda call: ComputeError(f"compute client {self.client_id} closed"))
        self._bus.close()
