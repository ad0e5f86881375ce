"""The bus's dispatcher: one thread per bus that serves ``on_data`` handlers and QoS statuses.

Cyclone's listeners run on Cyclone's own threads; a Python listener there needs the GIL while
the thread holds Cyclone locks, which deadlocks against a Python thread inside a write and
crashes when the listener's trampoline is freed before its entity. So the bus installs no
listener at all. This thread sleeps in a waitset (the GIL released) over: the read conditions
of readers with an ``on_data`` handler, the status conditions of every reader and writer
(incompatible QoS, deadline missed, sample lost/rejected, liveliness lost), and a guard
condition that wakes it when the set changes or the bus closes.

A reader made with ``inline=True`` is served without this thread: its handler runs on the
thread that delivered the data (Cyclone's receive thread for a remote writer), through the
native core's listener, which releases the GIL around every Cyclone call and takes it only to
call the handler. That saves one thread wake-up per sample (the lowest latency, as Cyclone's
own ddsperf echoes), for handlers that are short and never wait for other samples.
"""

from __future__ import annotations

import functools
import logging
import operator
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cyclonedds.core import DDSException, DDSStatus, Entity, GuardCondition, WaitSet

from mcc.bus import _native
from mcc.bus.qos import policy_name
from mcc.bus.statistics import QosEvent, StatsBook
from mcc.errors import MccError

if TYPE_CHECKING:
    from cyclonedds.domain import DomainParticipant

    from mcc.bus.endpoints import Reader

log = logging.getLogger("mcc.bus")

# The statuses recorded, per side: (status bit, cyclonedds getter, QosEvent kind, the
# BusStatistics counter). An incompatible-QoS event also names the remote profiles.
_READER_EVENTS = (
    (
        DDSStatus.RequestedIncompatibleQos,
        "get_requested_incompatible_qos_status",
        "requested_incompatible_qos",
        "incompatible_qos",
    ),
    (
        DDSStatus.RequestedDeadlineMissed,
        "get_requested_deadline_missed_status",
        "requested_deadline_missed",
        "deadline_missed",
    ),
    (DDSStatus.SampleLost, "get_sample_lost_status", "sample_lost", "samples_lost"),
    (DDSStatus.SampleRejected, "get_sample_rejected_status", "sample_rejected", "samples_rejected"),
)
_WRITER_EVENTS = (
    (
        DDSStatus.OfferedIncompatibleQos,
        "get_offered_incompatible_qos_status",
        "offered_incompatible_qos",
        "incompatible_qos",
    ),
    (
        DDSStatus.OfferedDeadlineMissed,
        "get_offered_deadline_missed_status",
        "offered_deadline_missed",
        "deadline_missed",
    ),
    (DDSStatus.LivelinessLost, "get_liveliness_lost_status", "liveliness_lost", "liveliness_lost"),
)
_READER_STATUSES = functools.reduce(operator.or_, (e[0] for e in _READER_EVENTS))
_WRITER_STATUSES = functools.reduce(operator.or_, (e[0] for e in _WRITER_EVENTS))
#: A handler that takes and reads nothing this many wake-ups in a row has its samples marked read.
_UNREAD_LIMIT = 3


class _Watched:
    __slots__ = ("entity", "topic", "profile", "writer")

    def __init__(self, entity: Any, topic: str, profile: str, writer: bool) -> None:
        self.entity, self.topic, self.profile, self.writer = entity, topic, profile, writer


class Dispatcher:
    """Serve ``on_data`` handlers and QoS statuses of one bus on one thread (started lazily)."""

    def __init__(
        self,
        participant: DomainParticipant,
        name: str,
        book: StatsBook,
        *,
        remote_profiles: Callable[..., tuple[str, ...]],
    ) -> None:
        self._participant = participant
        self._name = name  # the bus's, in its thread's name
        self._book = book
        self._remote_profiles = remote_profiles  # `Bus.remote_profiles`
        self._lock = threading.Lock()
        self._waitset: WaitSet | None = None
        self._guard: GuardCondition | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._watched: dict[int, _Watched] = {}  # entity handle → what it is
        self._served: dict[int, tuple[Reader[Any], tuple[Any, ...]]] = {}  # reader handle
        self._conditions: dict[int, int] = {}  # condition handle → reader handle
        self._unread: dict[int, int] = {}
        self._failed: set[tuple[int, str]] = set()
        self._inline: dict[int, Reader[Any]] = {}  # reader handle → reader served inline
        self._inline_lock = threading.Lock()
        self._inside = threading.local()  # .depth: inline handler calls on this thread
        self.wakeups = 0

    # -- membership --------------------------------------------------------------------------
    def watch(self, entity: Entity, topic: str, profile: str, *, writer: bool) -> None:
        """Record the QoS status changes of ``entity`` (a DDS reader or writer)."""
        entity.set_status_mask(_WRITER_STATUSES if writer else _READER_STATUSES)
        with self._lock:
            self._watched[int(entity._ref)] = _Watched(entity, topic, profile, writer)
            self._attach(entity)

    def serve(self, reader: Reader[Any], conditions: tuple[Any, ...]) -> None:
        """Call ``reader.deliver()`` (its ``on_data``) whenever one of ``conditions`` triggers."""
        with self._lock:
            ref = int(reader.dds._ref)
            self._served[ref] = (reader, conditions)
            for condition in conditions:
                self._conditions[int(condition._ref)] = ref
                self._attach(condition)

    def serve_inline(self, reader: Reader[Any]) -> None:
        """Call ``reader.deliver()`` on the thread that delivers its data (Cyclone's
        receive thread), no hop to this dispatcher; the bus keeps the reader until it closes."""
        ref = int(reader.dds._ref)

        def call() -> None:
            if reader.closed:
                return
            inside = self._inside
            inside.depth = getattr(inside, "depth", 0) + 1
            try:
                reader.deliver()
            except Exception as exc:
                self.handler_failed(reader, exc)
            finally:
                inside.depth -= 1

        with self._inline_lock:
            if self._closed:
                return
            ret = _native.set_on_data(ref, call)
            if ret < 0:
                raise DDSException(ret, f"installing the inline handler of {reader.topic_name!r}")
            self._inline[ref] = reader

    def refuse_inside(self, what: str) -> None:
        """`MccError` when called from inside an inline handler: removing a listener (or
        deleting its reader) waits for its calls in progress, from inside one forever."""
        if getattr(self._inside, "depth", 0):
            raise MccError(
                f"{what} from inside an inline on_data handler: do it from another thread"
            )

    def _stop_inline(self, ref: int) -> None:
        """Remove the inline handler of the reader ``ref`` (waits for a call in progress)."""
        if ref in self._inline:
            self.refuse_inside("closing a reader with an inline handler")
        with self._inline_lock:
            if self._inline.pop(ref, None) is not None:
                _native.set_on_data(ref, None)

    def forget(self, entity: Entity, *, reader: Reader[Any] | None = None) -> None:
        """Stop watching ``entity`` (and serving ``reader``) before it is deleted."""
        if reader is not None:
            self._stop_inline(int(entity._ref))
        with self._lock:
            ref = int(entity._ref)
            served = self._served.pop(ref, None)
            items = [c for c in (served[1] if served else ())]
            for condition in items:
                self._conditions.pop(int(condition._ref), None)
            if self._watched.pop(ref, None) is not None:
                items.append(entity)
            if self._waitset is not None:
                for item in items:
                    _native.detach(int(self._waitset._ref), int(item._ref))
            if self._guard is not None:
                self._guard.set(True)

    def _attach(self, item: Entity) -> None:
        """Attach ``item`` to the waitset, creating it and the thread on first use (locked)."""
        if self._closed:
            return
        if self._waitset is None:
            participant = self._participant
            self._waitset = WaitSet(participant)
            self._guard = GuardCondition(participant)
            _native.attach(int(self._waitset._ref), int(self._guard._ref))
            self._thread = threading.Thread(
                target=self._run, name=f"mcc-bus-dispatch-{self._name}", daemon=True
            )
            self._thread.start()
        ret = _native.attach(int(self._waitset._ref), int(item._ref))
        if ret < 0:
            raise DDSException(ret, f"attaching {item!r} to the bus dispatcher")
        assert self._guard is not None
        self._guard.set(True)

    def close(self) -> None:
        """Stop the thread and the inline handlers (called by ``Bus.close`` before the
        participant is deleted)."""
        if self._inline:
            self.refuse_inside("closing a bus with inline handlers")
        with self._inline_lock:
            self._closed = True
            for ref in list(self._inline):
                self._inline.pop(ref)
                _native.set_on_data(ref, None)
        with self._lock:
            self._closed = True
            if self._guard is not None:
                self._guard.set(True)
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(10.0)
            if thread.is_alive():
                log.error("bus dispatcher thread still busy in a handler after 10 s")

    # -- the thread -------------------------------------------------------------------------
    def _run(self) -> None:
        assert self._waitset is not None and self._guard is not None
        waitset, guard = int(self._waitset._ref), int(self._guard._ref)
        while True:
            triggered = _native.wait(waitset, 1_000_000_000)
            if isinstance(triggered, int):
                if self._closed:
                    return
                raise DDSException(triggered, "waiting in the bus dispatcher")
            self.wakeups += 1
            with self._lock:
                if self._closed:
                    return
                watched, served = [], {}
                for handle in triggered:
                    if handle == guard:
                        self._guard.set(False)
                    elif (item := self._watched.get(handle)) is not None:
                        watched.append(item)
                    elif (ref := self._conditions.get(handle)) in self._served:
                        served[ref] = self._served[ref]
            for item in watched:
                self._statuses(item)
            for reader, conditions in served.values():
                self._serve(reader, conditions)

    def _serve(self, reader: Reader[Any], conditions: tuple[Any, ...]) -> None:
        consumed = reader.consumed
        try:
            reader.deliver()
        except Exception as exc:
            self.handler_failed(reader, exc)
        ref = int(reader.dds._ref)
        if reader.consumed != consumed:
            self._unread.pop(ref, None)
            return
        # A handler that neither takes nor reads would wake this thread forever: after a few
        # such rounds, mark what it left as read (it stays in the cache for a later take).
        try:
            if not conditions[0].triggered:
                return
        except DDSException:
            return
        count = self._unread.get(ref, 0) + 1
        self._unread[ref] = count
        if count >= _UNREAD_LIMIT:
            from mcc.bus import _native

            _native.read(ref, conditions[0].get_mask(), 4096)
            self._unread.pop(ref, None)

    def handler_failed(self, reader: Reader[Any], exc: Exception) -> None:
        """Count a handler's exception in ``bus.stats.handler_errors``; log it once per
        handler and exception type."""
        self._book.count("handler_errors")
        key = (id(reader), type(exc).__name__)
        if key in self._failed:
            return
        self._failed.add(key)
        log.error(
            "on_data handler of topic %r raised %s (the bus goes on; further %s from this "
            "handler are counted in bus.stats.handler_errors, not logged)",
            reader.topic_name,
            type(exc).__name__,
            type(exc).__name__,
            exc_info=exc,
        )

    def _statuses(self, item: _Watched) -> None:
        try:
            changes = item.entity.get_status_changes()
        except DDSException:  # deleted meanwhile
            return
        topic, profile = item.topic, item.profile
        for bit, getter, kind, counter in _WRITER_EVENTS if item.writer else _READER_EVENTS:
            if not changes & bit:
                continue
            status = getattr(item.entity, getter)()  # reading it resets the change
            remote: tuple[str, ...] = ()
            policy = ""
            if counter == "incompatible_qos":
                remote = self._remote_profiles(topic, profile, readers=item.writer)
                policy = policy_name(status.last_policy_id)
            event = QosEvent(
                kind, topic, profile, remote, policy, status.total_count, time.time_ns()
            )
            self._book.record(event, counter)
