"""A lean reader loop: one waitset over many readers, ``take(N)`` in batches, stop by event.

The loop sleeps in the waitset (never a busy loop) and wakes on data or on ``stop()``,
which triggers a guard condition attached to the same waitset. A handler that raises is logged
(once per handler and exception type) and counted in ``bus.stats.handler_errors``; the loop
goes on with the next batch, so one bad sample never ends a service.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from cyclonedds.core import DDSException, GuardCondition, WaitSet
from cyclonedds.util import duration

from mcc.bus.core import Bus, Reader
from mcc.errors import MccError
from mcc.lifecycle import Service

Handler = Callable[[list[Any]], None]
log = logging.getLogger("mcc.bus")


class ReaderLoop(Service):
    """Dispatch samples from several readers to their handlers until stopped.

    Args:
        bus: the bus the readers belong to.
        batch: the most samples taken from one reader per wake-up.
        idle_timeout_s: the longest the waitset sleeps before re-checking the stop flag
            (only a safety net: ``stop()`` wakes the loop at once).
        on_idle: called after each wake-up without data (e.g. to publish a heartbeat).
    """

    def __init__(
        self,
        bus: Bus,
        *,
        batch: int = 256,
        idle_timeout_s: float = 1.0,
        on_idle: Callable[[], None] | None = None,
    ) -> None:
        self.bus = bus
        self.batch = batch
        self.idle_timeout_s = idle_timeout_s
        self.on_idle = on_idle
        self._handlers: list[tuple[Reader[Any], Handler]] = []
        self._waitset = WaitSet(bus.participant)
        self._guard = GuardCondition(bus.participant)
        self._waitset.attach(self._guard)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.wakeups = 0
        self.samples = 0
        self._failed: set[tuple[int, str]] = set()

    def add(self, reader: Reader[Any], handler: Handler) -> ReaderLoop:
        """Call ``handler(samples)`` with each batch taken from ``reader``."""
        for condition in reader.conditions:
            self._waitset.attach(condition)
        self._handlers.append((reader, handler))
        return self

    def run(self) -> None:
        """Run in the calling thread until ``stop()``."""
        timeout = duration(seconds=self.idle_timeout_s)
        while not self._stop.is_set():
            try:
                triggered = self._waitset.wait(timeout)
            except DDSException:
                if self._closed_under_us():
                    return
                raise
            self.wakeups += 1
            got = 0
            for reader, handler in self._handlers:
                try:
                    samples = reader.take(self.batch)
                except (DDSException, MccError):
                    if self._closed_under_us():
                        return
                    raise
                while samples:
                    got += len(samples)
                    self._call(reader, handler, samples)
                    if len(samples) < self.batch:
                        break
                    samples = reader.take(self.batch)
            self.samples += got
            if not got and not triggered and self.on_idle is not None:
                self.on_idle()

    def _closed_under_us(self) -> bool:
        """The bus was closed (or the loop stopped) while the loop ran: nothing left to serve."""
        return self.bus.closed or self._stop.is_set()

    def _call(self, reader: Reader[Any], handler: Handler, samples: list[Any]) -> None:
        try:
            handler(samples)
        except Exception as exc:
            self.bus.book.count("handler_errors")
            key = (id(handler), type(exc).__name__)
            if key not in self._failed:
                self._failed.add(key)
                log.error(
                    "handler of topic %r raised %s on a batch of %d (the loop goes on; "
                    "further ones are counted in bus.stats.handler_errors, not logged)",
                    reader.topic_name,
                    type(exc).__name__,
                    len(samples),
                    exc_info=exc,
                )

    def start(self, name: str = "mcc-reader-loop") -> ReaderLoop:
        """Run in a daemon thread."""
        self._thread = threading.Thread(target=self.run, name=name, daemon=True)
        self._thread.start()
        return self

    def stop(self, *, timeout_s: float = 5.0) -> None:
        """Stop the loop and wait for its thread."""
        self._stop.set()
        self._guard.set(True)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
