"""The calling half of the request/reply core: correlation, deadlines and resends.

An `RpcClient` stamps each call with a request id (``client_id/n``), keeps it pending until a
reply with that id and this ``client_id`` arrives (a reply that comes twice is taken once), and,
when a call has a deadline or retries, watches it: a call past its deadline fails with the
caller's timeout error; when the replier goes away (its reader unmatched) or restarts (a new
reader matched) while calls are in flight they are sent again, up to their ``retries`` (only
for idempotent calls: the caller decides), then fail with the caller's lost-peer error. A
send that the writer's reliability throttled (a reader killed without leaving keeps
unacknowledged data until its lease expires) is retried from the watcher.

Taking replies: `call` sends a request and waits for its reply in the calling thread, on a
waitset over the reply reader (`mcc.bus._native.wait` and ``take`` release the GIL): the thread
that waits is the thread that takes, so a reply reaches its caller without a hand-off to
another thread. One thread at a time takes (the *taker*); a caller that finds another taking
waits for it to hand over its reply (or the role). A thread of its own takes the replies of
calls made with `submit` (futures), started with the first one and taking only while such
calls are pending.
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

from cyclonedds.core import DDSException, GuardCondition, WaitSet

from mcc.bus import _native
from mcc.bus.endpoints import poll_until
from mcc.lifecycle import Closeable

log = logging.getLogger("mcc.bus.rpc")
WATCH_PERIOD_S = 0.02
#: The longest a taker sleeps in the waitset before it looks at its calls again (a call
#: failed by the watcher or by `RpcClient.close` is seen within this).
TAKE_SLICE_S = 0.05
#: Replies taken from the reader at once.
TAKE_BATCH = 64
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
    waited: bool = False  # its caller waits in `RpcClient.call` (takes replies itself)


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
        self._turn = threading.Condition(self._lock)  # a call finished, or the taker left
        self._taking = False  # a thread takes replies (see the module docstring)
        self._unwaited = 0  # pending calls nobody waits for in `call`: the reply thread's
        self.counts: Counter[str] = Counter()
        self._closed = threading.Event()
        self._watcher: threading.Thread | None = None
        self._replies: threading.Thread | None = None
        self._waitset = WaitSet(bus.participant)
        self._wake = GuardCondition(bus.participant)  # set by close: the taker stops waiting
        self._waitset_ref = int(self._waitset._ref)
        for condition in (*reader.conditions, self._wake):
            ret = _native.attach(self._waitset_ref, int(condition._ref))
            if ret < 0:
                raise DDSException(ret, f"{name}: attaching to a waitset")

    def statistics(self) -> dict[str, int]:
        """Counts: calls, retries, failures by exception name, ``replies refused`` (from a
        replier not trusted) and ``replies dropped`` (to no pending call)."""
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
        """Register ``call`` and send it; its future resolves to ``resolve``'s result (the
        reply thread takes the reply)."""
        self._register(call, waited=False)
        self._send(call)
        return call.future

    def call(self, call: Call, *, timeout_s: float | None = None) -> Any:
        """Send ``call`` and wait for it in this thread, which takes the reply itself: the
        result of ``resolve``, raised when it is an exception (as are the watcher's timeout
        and lost-peer errors). `TimeoutError` when nothing came within ``timeout_s`` (None:
        the call's deadline bounds the wait); the call then stays pending (`forget` it)."""
        self._register(call, waited=True)
        self._send(call)
        end = None if timeout_s is None else time.monotonic() + timeout_s
        while not call.future.done():
            left = TAKE_SLICE_S if end is None else min(end - time.monotonic(), TAKE_SLICE_S)
            if left <= 0:
                raise TimeoutError(f"no reply to {call.request_id} within {timeout_s:g} s")
            self._take_or_wait(call, left)
        return call.future.result()

    def _register(self, call: Call, *, waited: bool) -> None:
        call.waited = waited
        with self._lock:
            if self._closed.is_set():
                raise RuntimeError(f"{self.name} is closed")
            self._pending[call.request_id] = call
            self.counts["calls"] += 1
            if not waited:
                self._unwaited += 1
                if self._replies is None:
                    self._replies = threading.Thread(
                        target=self._serve_replies, name=f"{self.name}-replies", daemon=True
                    )
                    self._replies.start()
                self._turn.notify_all()
            if self._watcher is None and (call.deadline is not None or call.retries_left):
                self._watcher = threading.Thread(
                    target=self._watch, name=f"{self.name}-watch", daemon=True
                )
                self._watcher.start()

    def forget(self, request_id: str) -> None:
        """Stop waiting for ``request_id`` (its caller gave up)."""
        with self._lock:
            call = self._pending.pop(request_id, None)
            if call is not None and not call.waited:
                self._unwaited -= 1

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
        if not call.waited:
            self._unwaited -= 1
        else:
            self._turn.notify_all()  # its caller may wait for the taker to hand it over
        if isinstance(outcome, BaseException):
            self.counts[type(outcome).__name__] += 1
            call.future.set_exception(outcome)
        else:
            call.future.set_result(outcome)

    # -- taking replies ----------------------------------------------------------------------
    def _take_or_wait(self, call: Call, wait_s: float) -> None:
        """Take replies for up to ``wait_s`` when no other thread takes, else wait until
        ``call`` is finished or the taker leaves."""
        with self._turn:
            if call.future.done():
                return
            if self._taking:
                self._turn.wait(wait_s)
                return
            self._taking = True
        try:
            self._take(wait_s)
        finally:
            with self._turn:
                self._taking = False
                self._turn.notify_all()

    def _take(self, wait_s: float) -> None:
        """Take the replies there are; none there: wait for some up to ``wait_s`` (GIL
        released), then take. Called by the taker only."""
        replies = self.reader.take(TAKE_BATCH)
        if not replies:
            _native.wait(self._waitset_ref, int(wait_s * 1e9))
            if self._closed.is_set():
                return
            replies = self.reader.take(TAKE_BATCH)
        while replies:
            self._on_replies(replies)
            if len(replies) < TAKE_BATCH:
                break
            replies = self.reader.take(TAKE_BATCH)

    def _serve_replies(self) -> None:
        """The reply thread: takes replies while calls made with `submit` are pending and no
        caller of `call` takes them."""
        while not self._closed.is_set():
            with self._turn:
                if self._taking or self._unwaited == 0:
                    self._turn.wait(TAKE_SLICE_S)
                    continue
                self._taking = True
            try:
                self._take(TAKE_SLICE_S)
            except Exception:  # the reply thread must outlive any one batch
                if self._closed.is_set():
                    return
                log.exception("%s: taking replies", self.name)
                time.sleep(TAKE_SLICE_S)
            finally:
                with self._turn:
                    self._taking = False
                    self._turn.notify_all()

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
                    if call is None:  # answered already (an earlier attempt), or never asked
                        self._drop_unknown(reply)
                    else:
                        self._finish(call, self._resolve(call, reply))
            except Exception:  # the reply loop must outlive any one reply
                log.exception("reply %s dropped", getattr(reply, self._reply_id, "?"))

    def _drop_unknown(self, reply: Any) -> None:
        """Count (``counts["replies dropped"]``) a reply to no pending call: late, a second
        answer, or an id this client never sent; log the first. Called with self._lock held."""
        self.counts["replies dropped"] += 1
        if self.counts["replies dropped"] == 1:
            log.info(
                "%s: reply to %.80r dropped: no such call pending (late, answered already, or "
                "never sent); further ones are counted, not logged",
                self.name,
                getattr(reply, self._reply_id, "?"),
            )

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
        self._wake.set(True)
        for thread in (self._watcher, self._replies):
            if thread is not None:
                thread.join(5.0)
        with self._lock:
            for call in list(self._pending.values()):
                if error is None:
                    del self._pending[call.request_id]
                    call.future.cancel()
                else:
                    self._finish(call, error(call))
            self._turn.notify_all()
