"""The calling half of the request/reply core: correlation, deadlines and resends.

An `RpcClient` stamps each call with a request id (``client_id/n``), keeps it pending until a
reply with that id and this ``client_id`` arrives (a reply that comes twice is taken once), and,
when a call has a deadline or retries, watches it: a call past its deadline fails with the
caller's timeout error; when the replier goes away (its reader unmatched) or restarts (a new
reader matched) while calls are in flight they are sent again, up to their ``retries`` (only
for idempotent calls: the caller decides), then fail with the caller's lost-peer error. A
send that the writer's reliability throttled (a reader killed without leaving keeps
unacknowledged data until its lease expires) is retried from the watcher.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from cyclonedds.core import DDSException

from mcc.bus.endpoints import poll_until
from mcc.bus.loop import ReaderLoop
from mcc.lifecycle import Closeable

log = logging.getLogger("mcc.bus.rpc")
WATCH_PERIOD_S = 0.02
_SENDING = -2  # Call.sent_total while being sent
_RESEND = -1  # Call.sent_total while waiting for a replier to send it to again


@dataclasses.dataclass(eq=False)
class Call:
    """One request in flight."""

    request_id: str
    payload: Any  # what ``send`` writes
    future: Future[Any]
    deadline: float | None = None  # time.monotonic(); None: the caller waits itself
    retries_left: int = 0
    context: Any = None  # the caller's, for ``resolve`` and its errors
    t0: float = dataclasses.field(default_factory=time.perf_counter)
    attempts: int = 0
    # request readers ever matched when last sent; _RESEND or _SENDING
    sent_total: int = _SENDING


class RpcClient(Closeable):
    """Pending calls of one requester; see the module docstring.

    Args:
        writer, reader: the request writer and reply reader (the caller's bus owns them).
        send: ``send(call)`` writes ``call.payload``; a `DDSException` with a timeout code
            means "throttled, send again later", any other fails the call.
        resolve: ``resolve(call, reply)`` → the call's result, or an exception to fail it with.
        timed_out: ``timed_out(call)`` → the exception of a call past its deadline.
        lost: ``lost(call, what)`` → the exception of a call whose replier ``what`` ("went
            away" / "restarted") with no retries left.
        reply_id: the reply's correlation field.
        accept: ``accept(reply)`` → whether the reply comes from a replier this client
            trusts (e.g. `Reader.source_of` is the supervisor); others are counted
            (``counts["replies refused"]``) and dropped. None: any replier.
    """

    def __init__(
        self,
        bus: Any,
        writer: Any,
        reader: Any,
        *,
        client_id: str,
        send: Callable[[Call], None],
        resolve: Callable[[Call, Any], Any],
        timed_out: Callable[[Call], BaseException],
        lost: Callable[[Call, str], BaseException],
        name: str,
        reply_id: str = "request_id",
        accept: Callable[[Any], bool] | None = None,
    ) -> None:
        self.writer, self.reader, self.client_id, self.name = writer, reader, client_id, name
        self._accept = accept
        self._send_payload, self._resolve = send, resolve
        self._timed_out, self._lost = timed_out, lost
        self._reply_id = reply_id
        self._seq = itertools.count(1)
        self._pending: dict[str, Call] = {}
        self._lock = threading.RLock()  # futures' callbacks may call back in
        self.counts: Counter[str] = Counter()
        self._closed = threading.Event()
        self._watcher: threading.Thread | None = None
        self._loop = ReaderLoop(bus).add(reader, self._on_replies).start(f"{name}-replies")

    def statistics(self) -> dict[str, int]:
        """Counts: calls, retries, and failures by exception name."""
        with self._lock:
            return dict(self.counts)

    def new_request_id(self) -> str:
        return f"{self.client_id}/{next(self._seq)}"

    def replier_matched(self) -> bool:
        """True when a replier reads our requests and writes replies we read."""
        return self.writer.matched() >= 1 and self.reader.matched() >= 1

    def wait_matched(self, timeout_s: float) -> bool:
        return poll_until(self.replier_matched, timeout_s)

    # -- calls -------------------------------------------------------------------------------
    def submit(self, call: Call) -> Future[Any]:
        """Register ``call`` and send it; its future resolves to ``resolve``'s result."""
        with self._lock:
            self._pending[call.request_id] = call
            self.counts["calls"] += 1
            if self._watcher is None and (call.deadline is not None or call.retries_left):
                self._watcher = threading.Thread(
                    target=self._watch, name=f"{self.name}-watch", daemon=True
                )
                self._watcher.start()
        self._send(call)
        return call.future

    def forget(self, request_id: str) -> None:
        """Stop waiting for ``request_id`` (its caller gave up)."""
        with self._lock:
            self._pending.pop(request_id, None)

    def _send(self, call: Call) -> None:
        """Write the request (without holding the lock: a write may block up to 1 s)."""
        with self._lock:
            if call.request_id not in self._pending:
                return
            call.sent_total = self.writer.dds.get_publication_matched_status().total_count
            call.attempts += 1
        try:
            self._send_payload(call)
        except Exception as exc:  # the call fails, not the caller's thread
            timeout = isinstance(exc, DDSException) and exc.code == DDSException.DDS_RETCODE_TIMEOUT
            if timeout and self._watcher is not None:
                log.info("request %s blocked by an unresponsive reader; resending", call.request_id)
                with self._lock:
                    call.sent_total = _RESEND
                return
            with self._lock:
                self._finish(call, exc)

    def _finish(self, call: Call, outcome: Any) -> None:
        # Called with self._lock held: the pending entry decides who completes the future.
        if self._pending.pop(call.request_id, None) is None:
            return
        if isinstance(outcome, BaseException):
            self.counts[type(outcome).__name__] += 1
            call.future.set_exception(outcome)
        else:
            call.future.set_result(outcome)

    def _on_replies(self, replies: list[Any]) -> None:
        for reply in replies:
            if getattr(reply, "client_id", self.client_id) != self.client_id:
                continue
            if self._accept is not None and not self._accept(reply):
                with self._lock:
                    self.counts["replies refused"] += 1
                continue
            try:
                with self._lock:
                    call = self._pending.get(getattr(reply, self._reply_id))
                    if call is not None:  # None: answered already (an earlier attempt)
                        self._finish(call, self._resolve(call, reply))
            except Exception:  # the reply loop must outlive any one reply
                log.exception("reply %s dropped", getattr(reply, self._reply_id, "?"))

    # -- watcher -----------------------------------------------------------------------------
    def _watch(self) -> None:
        """Time calls out; resend them when the replier went away or restarted."""
        while not self._closed.wait(WATCH_PERIOD_S):
            try:
                with self._lock:
                    if not self._pending:
                        continue
                    status = self.writer.dds.get_publication_matched_status()
                    sent = [c.sent_total for c in self._pending.values()]
                if status.current_count == 0 or any(0 <= t < status.total_count for t in sent):
                    # Take replies that arrived before the replier left: they are answers.
                    self._on_replies(self.reader.take())
                with self._lock:
                    now = time.monotonic()
                    calls = list(self._pending.values())
                    resend = [c for c in calls if self._check(c, status, now)]
                for call in resend:
                    self._send(call)
            except Exception:  # the watcher is what bounds every call: it must not die
                log.exception("%s watcher", self.name)

    def _check(self, call: Call, status: Any, now: float) -> bool:
        """Whether to send ``call`` again; fails it when it timed out or cannot be resent.
        Called with self._lock held."""
        if call.deadline is not None and now >= call.deadline:
            self._finish(call, self._timed_out(call))
            return False
        if call.sent_total == _SENDING:
            return False
        if call.sent_total == _RESEND:
            return self.replier_matched()
        lost = status.current_count == 0
        if not lost and status.total_count <= call.sent_total:
            return False
        what = "went away" if lost else "restarted"
        if call.retries_left > 0:
            call.retries_left -= 1
            self.counts["retries"] += 1
            log.info("%s: replier %s: resending %s", self.name, what, call.request_id)
            call.sent_total = _RESEND
            return not lost
        self._finish(call, self._lost(call, what))
        return False

    def close(self, error: Callable[[Call], BaseException] | None = None) -> None:
        """Stop taking replies; fail the calls still waiting with ``error(call)``, or cancel
        them (None)."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self._watcher is not None:
            self._watcher.join(5.0)
        with self._lock:
            for call in list(self._pending.values()):
                if error is None:
                    del self._pending[call.request_id]
                    call.future.cancel()
                else:
                    self._finish(call, error(call))
        self._loop.stop()
