"""The serving half of the request/reply core: intake, queueing, deadlines, replies.

An `RpcServer` reads requests in a `ReaderLoop` and, for each one, learns who sent it (the
writer's participant, `PeerCache`), answers an expired one with an error instead of running it
(``deadline_ns``, when the request type carries one), and lets ``admit`` check it and turn it
into work. Work runs in the reader loop in arrival order (no queue), or goes into a queue
(`mcc.bus.rpc.queues.FairQueue`) that a worker thread drains in batches; a deadline that passed
while the work was queued is answered with an error, not run. With a queue, the worker takes
the requests itself while it is idle (it waits on a waitset over the request reader, takes
them in batches, queues them, runs the next batch and replies, all in one thread), and an
intake thread takes them only while the worker runs a long batch (over `INTAKE_POLL_S`), so a
request that finds the worker idle is never handed from one thread to another. Replies go out
through `reply`: optionally only once the requesting participant's reply reader is matched (a
volatile reply written earlier would be lost), and optionally written as disposed and
unregistered (no instance is left behind in any reader or writer; with a worker, the
unregisters go out once it is idle, off the path of the replies).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from cyclonedds.core import DDSException, GuardCondition, WaitSet

from mcc.bus import _native
from mcc.bus.loop import ReaderLoop
from mcc.bus.rpc.common import (
    MAX_PEERS,
    PeerCache,
    deadline_passed,
    matched_participants,
    write_dispose,
)
from mcc.bus.rpc.queues import FairQueue
from mcc.errors import MccError
from mcc.lifecycle import Service

W = TypeVar("W")
log = logging.getLogger("mcc.bus.rpc")

#: How long a reply waits for the requester's reply reader to match (discovery of the two
#: directions is not simultaneous).
REPLY_PATH_WAIT_S = 2.0
#: A requester that had no reply reader then is not waited for again for this long.
NO_REPLY_PATH_S = 30.0
#: Requests taken from the reader at once.
TAKE_BATCH = 256
#: Replies whose unregister may wait for the worker to be idle; more are unregistered at once.
MAX_UNREGISTERED = 32
#: How often the intake thread looks whether the worker has been running a batch that long.
INTAKE_POLL_S = 0.02
#: The longest the intake thread sleeps in its waitset before it looks whether the worker is
#: still busy.
INTAKE_SLICE_S = 0.01


@dataclasses.dataclass(eq=False)
class Pending(Generic[W]):
    """An accepted request and the work ``admit`` made of it."""

    request: Any
    client: str  # who sent it (its writer's participant, else its client_id)
    work: W
    key: Hashable | None = None  # equal keys may run as one batch (None: alone)
    nbytes: int = 0
    received_s: float = dataclasses.field(default_factory=time.perf_counter)


class RpcServer(Service, Generic[W]):
    """Serve the requests of ``reader``; see the module docstring.

    Args:
        reader, writer: the request reader and reply writer (the caller's bus owns them).
        admit: ``admit(request, client)`` checks a request and returns a `Pending` to run, or
            None when it answered (a refusal) or dropped it itself; it runs in the reader loop.
        run: ``run(batch)`` runs a list of `Pending` and answers each (through `reply`).
        expire: ``expire(pending, waited_ms)`` answers a request whose deadline passed.
        queue: None to run in the reader loop, or a `FairQueue` drained by a worker thread.
        max_batch: the most queued requests with equal keys that run as one ``run`` call.
        wait_reply_path: wait for the requester's reply reader before writing a reply.
        worker_init: called first in the worker thread (a device that thread owns); what it
            raises, `start` raises.
        refuse: ``refuse(pending, error)`` answers a request the full queue did not take.
        queued: ``queued(pending, depth)`` is told of each request queued (for counters).
    """

    def __init__(
        self,
        bus: Any,
        reader: Any,
        writer: Any,
        *,
        admit: Callable[[Any, str], Pending[W] | None],
        run: Callable[[list[Pending[W]]], None],
        expire: Callable[[Pending[W], float], None],
        name: str,
        queue: FairQueue[Pending[W]] | None = None,
        max_batch: int = 1,
        wait_reply_path: bool = False,
        worker_init: Callable[[], None] | None = None,
        refuse: Callable[[Pending[W], MccError], None] | None = None,
        queued: Callable[[Pending[W], int], None] | None = None,
    ) -> None:
        self.reader, self.writer, self.name = reader, writer, name
        self.peers = PeerCache(reader)
        self.queue = queue
        self.max_batch = max_batch
        self._admit, self._run, self._expire = admit, run, expire
        self._wait_reply_path = wait_reply_path
        self._worker_init = worker_init
        self._refuse, self._queued = refuse, queued
        self._loop = ReaderLoop(bus).add(reader, self._on_requests)
        self._stop = threading.Event()
        self._busy_since: float | None = None  # when the batch running began (monotonic)
        self._intake_thread: threading.Thread | None = None
        self._waitsets: list[tuple[WaitSet, int]] = []
        self._kick = GuardCondition(bus.participant)  # wakes the worker from its waitset
        self._lock = threading.Lock()
        self._unregistered: list[Any] = []  # replies written, to unregister when idle
        self._ready = threading.Event()
        self._worker: threading.Thread | None = None
        self._worker_error: BaseException | None = None
        self._reply_peers: set[str] = set()
        self._no_reply_path: dict[str, float] = {}  # peer → until when not to wait for it
        self.on_error: Callable[[Any, BaseException], None] = self._log_error
        self.on_no_reply_path: Callable[[Any], None] = lambda request: None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, *, ready_timeout_s: float = 120.0) -> RpcServer[W]:
        """Start the worker (when queued; it runs ``worker_init`` first), then the intake."""
        if self.queue is not None:
            self._worker = threading.Thread(target=self._work, name=self.name, daemon=True)
            self._worker.start()
            if not self._ready.wait(ready_timeout_s):
                self.stop()
                raise TimeoutError(f"{self.name}: worker not ready within {ready_timeout_s} s")
            if self._worker_error is not None:
                self.stop()
                raise self._worker_error
            self._intake_thread = threading.Thread(
                target=self._intake_while_busy, name=f"{self.name}-intake", daemon=True
            )
            self._intake_thread.start()
            return self
        if self._worker_init is not None:
            self._worker_init()
        self._loop.start(f"{self.name}-intake")
        return self

    def run_here(self) -> None:
        """Serve in the calling thread until `stop` (no queue only)."""
        self._loop.run()

    def stop(self, *, join_s: float = 30.0) -> None:
        """Stop taking requests; the batch running finishes, queued ones are not run."""
        self._loop.stop()
        self._stop.set()
        self._kick.set(True)
        if self.queue is not None:
            self.queue.close()
        for thread in (self._intake_thread, self._worker):
            if thread is not None and thread is not threading.current_thread():
                thread.join(join_s)

    # -- intake (reader loop thread) ---------------------------------------------------------
    def client_of(self, request: Any) -> str:
        """Who sent ``request``: its writer's participant, else ``client <client_id>``."""
        info = getattr(request, "sample_info", None)
        if info is None:
            return f"client {getattr(request, 'client_id', '')[:80]}"
        peer = self.peers.of_handle(info.publication_handle)
        return f"writer {info.publication_handle:x}" if peer is None else peer

    def _on_requests(self, requests: list[Any]) -> None:
        for request in requests:
            try:
                self._intake(request)
            except Exception as exc:  # the intake loop must outlive any one request
                self.on_error(request, exc)

    def _intake(self, request: Any) -> None:
        pending = self._admit(request, self.client_of(request))
        if pending is None:
            return
        if deadline_passed(request):
            self._expire(pending, 0.0)
        elif self.queue is None:
            self._run([pending])
        else:
            try:
                depth = self.queue.put(pending.client, pending, nbytes=pending.nbytes)
            except MccError as exc:
                if self._refuse is None:
                    raise
                self._refuse(pending, exc)
                return
            if self._queued is not None:
                self._queued(pending, depth)

    @staticmethod
    def _log_error(request: Any, exc: BaseException) -> None:
        log.error("request %.80r dropped: %s", getattr(request, "client_id", "?"), exc)

    def _waitset(self, *extra: Any) -> int:
        """A waitset over the request reader (and ``extra`` conditions): its handle."""
        waitset = WaitSet(self.reader.bus.participant)
        ref = int(waitset._ref)
        for condition in (*self.reader.conditions, *extra):
            ret = _native.attach(ref, int(condition._ref))
            if ret < 0:
                raise DDSException(ret, f"{self.name}: attaching to a waitset")
        self._waitsets.append((waitset, ref))
        return ref

    def _take_requests(
        self, waitset: int, wait_s: float, idle: Callable[[], None] | None = None
    ) -> tuple[int, list[int]]:
        """Take the requests there are, in batches, and admit each; none there: call
        ``idle`` and wait up to ``wait_s`` on ``waitset`` (GIL released) first. How many were
        taken, and the conditions that woke the wait (their handles)."""
        requests = self.reader.take(TAKE_BATCH)
        woken: list[int] | int = []
        if not requests:
            if idle is not None:
                idle()
            woken = _native.wait(waitset, int(wait_s * 1e9))
            if self._stop.is_set():
                return 0, []
            requests = self.reader.take(TAKE_BATCH)
        taken = 0
        while requests:
            taken += len(requests)
            self._on_requests(requests)
            if len(requests) < TAKE_BATCH:
                break
            requests = self.reader.take(TAKE_BATCH)
        return taken, woken if isinstance(woken, list) else []

    def _intake_while_busy(self) -> None:
        """The intake thread: takes requests while the worker runs a long batch (refusals and
        expiries answered at once, the queue's bounds enforced). It looks every
        `INTAKE_POLL_S`, and takes only from a batch that has run that long: a short batch
        never wakes it, and it never competes with an idle worker for a request."""
        waitset = self._waitset()
        while not self._stop.wait(INTAKE_POLL_S):
            started = self._busy_since
            if started is None or time.monotonic() - started < INTAKE_POLL_S:
                continue
            try:
                while self._busy_since == started and not self._stop.is_set():
                    if self._take_requests(waitset, INTAKE_SLICE_S)[0]:
                        self._kick.set(True)  # the worker may have gone idle meanwhile
            except Exception:
                if self._stop.is_set() or self.reader.bus.closed:
                    return
                log.exception("%s: intake", self.name)

    # -- worker ------------------------------------------------------------------------------
    def _work(self) -> None:
        try:
            if self._worker_init is not None:
                self._worker_init()
            waitset = self._waitset(self._kick)
        except BaseException as exc:
            self._worker_error = exc
            self._ready.set()
            return
        self._ready.set()
        assert self.queue is not None
        kick, kicked = int(self._kick._ref), False
        while not self._stop.is_set():
            if kicked:  # reset before looking at the queue: a later kick is not lost
                self._kick.set(False)
            batch = self.queue.get_batch(max_items=self.max_batch, key=lambda p: p.key, timeout_s=0)
            if not batch:
                try:
                    kicked = kick in self._take_requests(waitset, 0.5, self._unregister)[1]
                except Exception:
                    if self._stop.is_set() or self.reader.bus.closed:
                        return
                    log.exception("%s: taking requests", self.name)
                    time.sleep(INTAKE_SLICE_S)
                continue
            self._busy_since = time.monotonic()
            try:
                self._run_batch(batch)
            finally:
                self._busy_since = None
        self._unregister()

    def _run_batch(self, batch: list[Pending[W]]) -> None:
        """Answer the expired requests of ``batch``, run the others."""
        now_ns = time.time_ns()
        live = []
        for pending in batch:
            if deadline_passed(pending.request, now_ns):
                self._expire(pending, (time.perf_counter() - pending.received_s) * 1e3)
            else:
                live.append(pending)
        if live:
            self._run(live)

    # -- replies -----------------------------------------------------------------------------
    def reply_path_ready(self, request: Any) -> bool:
        """True once the reply writer matches a reader of the participant that sent
        ``request`` (waits up to `REPLY_PATH_WAIT_S`, once per such participant a while)."""
        info = getattr(request, "sample_info", None)
        if info is None:
            return True
        peer = self.peers.of_handle(info.publication_handle)
        if peer is None:
            return True  # its writer is already gone; the reply goes wherever it can
        now = time.monotonic()
        # A participant that sends requests without ever reading replies must not hold the
        # server REPLY_PATH_WAIT_S per request.
        wait_s = 0.0 if self._no_reply_path.get(peer, 0.0) > now else REPLY_PATH_WAIT_S
        deadline = now + wait_s
        while peer not in self._reply_peers:
            self._reply_peers = matched_participants(self.writer)
            if peer in self._reply_peers:
                break
            if time.monotonic() >= deadline:
                if len(self._no_reply_path) >= MAX_PEERS:
                    self._no_reply_path.clear()
                self._no_reply_path[peer] = time.monotonic() + NO_REPLY_PATH_S
                return False
            time.sleep(0.005)
        self._no_reply_path.pop(peer, None)
        return True

    def _write_reply(self, data: bytes, key: Any) -> None:
        """Write ``data`` disposed; with a worker, its unregister (a message of its own, which
        wakes the requester again) waits until the worker is idle: off the path of the reply
        and of the next request. The requester's reader frees the instance then."""
        if self._worker is None:
            write_dispose(self.writer, data, key)
            return
        self.writer.write_cdr(data, dispose=True)
        with self._lock:
            self._unregistered.append(key)
            flush = len(self._unregistered) >= MAX_UNREGISTERED
        if flush:
            self._unregister()

    def _unregister(self) -> None:
        """Unregister the instances of the replies written since the last time (the worker
        does it when idle, and before it ends)."""
        with self._lock:
            keys, self._unregistered = self._unregistered, []
        for key in keys:
            with contextlib.suppress(DDSException):  # bookkeeping: the reply went out
                self.writer.dds.unregister_instance(key)

    def reply(self, request: Any, reply: Any, *, data: bytes | None = None) -> bool:
        """Write ``reply`` to ``request``: typed, or when ``data`` (its serialised form) is
        given, written disposed and unregistered (``reply`` is then only its key). False when
        the write failed (logged). A requester with no reply path gets it anyway, after
        ``on_no_reply_path(request)``."""
        if self._wait_reply_path and not self.reply_path_ready(request):
            self.on_no_reply_path(request)
        try:
            if data is None:
                self.writer.write(reply)
            else:
                self._write_reply(data, reply)
        except DDSException as exc:
            log.warning("%s: reply not sent: %s", self.name, exc)
            return False
        return True
