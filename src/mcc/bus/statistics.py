"""What a bus counts: `BusStatistics` (QoS events, refused and dropped samples), the
`QosEvent` records, and the `StatsBook` that keeps them for one bus.

The book is thread-safe (the bus's dispatcher, its readers and its owner all count) and logs
each kind of trouble once, or each time its total passes a power of ten, never at the data
rate.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["BusStatistics", "QosEvent", "StatsBook"]

log = logging.getLogger("mcc.bus")

#: Deadline misses, lost and rejected samples can fire at the data rate: logged at the first,
#: then each time their total passes the next power of ten.
_FLOODING = ("deadline_missed", "samples_lost", "samples_rejected")


@dataclass(frozen=True)
class QosEvent:
    """One QoS status change seen on this bus (incompatible QoS, deadline missed …)."""

    kind: str  # requested_incompatible_qos | offered_incompatible_qos | *_deadline_missed …
    topic: str
    local_profile: str
    remote_profiles: tuple[str, ...]
    policy: str
    total_count: int
    time_ns: int

    def __str__(self) -> str:
        if self.kind.endswith("incompatible_qos"):
            side, other = (
                ("reader", "writer") if self.kind.startswith("requested") else ("writer", "reader")
            )
            remote = ", ".join(map(repr, self.remote_profiles)) or "unknown"
            return (
                f"incompatible QoS on topic {self.topic!r}: {side} with profile "
                f"{self.local_profile!r} vs {other} with profile {remote} (policy {self.policy}); "
                "use the same profile on both sides, see docs/qos.md"
            )
        what = self.kind.replace("_", " ")
        return (
            f"{what} on topic {self.topic!r} (profile {self.local_profile!r}), "
            f"total {self.total_count}"
        )


@dataclass
class BusStatistics:
    """Counters of QoS events, refused and dropped samples since the bus opened.

    ``samples_dropped`` counts received samples that did not decode or failed the topic's
    checks (``dropped_by_topic`` per topic); ``handler_errors`` counts exceptions raised by
    ``on_data`` handlers and reader-loop handlers, which the bus logs and survives.
    """

    incompatible_qos: int = 0
    deadline_missed: int = 0
    samples_lost: int = 0
    samples_rejected: int = 0
    liveliness_lost: int = 0
    invalid_samples_refused: int = 0
    samples_dropped: int = 0
    handler_errors: int = 0
    security_denials: int = 0  # writers/readers this process's permissions refused
    dropped_by_topic: dict[str, int] = field(default_factory=dict)
    events: list[QosEvent] = field(default_factory=list)


class StatsBook:
    """The counters of one bus (`stats`) and what has been logged of them."""

    def __init__(self) -> None:
        self.stats = BusStatistics()
        self._lock = threading.Lock()
        self._drop_logged: set[tuple[str, int]] = set()
        self._next_log: dict[tuple[str, str], int] = {}  # (counter, topic) → total to log at

    def count(self, counter: str) -> None:
        """One more of ``counter`` (a field of `BusStatistics`)."""
        with self._lock:
            setattr(self.stats, counter, getattr(self.stats, counter) + 1)

    def record(self, event: QosEvent, counter: str) -> None:
        """Count ``event`` under ``counter``, keep it (the first 1000) and log it."""
        with self._lock:
            setattr(self.stats, counter, getattr(self.stats, counter) + 1)
            if len(self.stats.events) < 1000:
                self.stats.events.append(event)
            if counter in _FLOODING:
                key = (counter, event.topic)
                if event.total_count < self._next_log.get(key, 1):
                    return
                self._next_log[key] = 10 ** len(str(event.total_count))
        log.warning("%s", event)

    def dropped(
        self, topic: str, writer: int, exc: BaseException, writer_name: Callable[[int], str]
    ) -> None:
        """Count a received sample of ``topic`` from ``writer`` (its instance handle) that
        failed to decode or check; log once per writer."""
        with self._lock:
            self.stats.samples_dropped += 1
            self.stats.dropped_by_topic[topic] = self.stats.dropped_by_topic.get(topic, 0) + 1
            first = (topic, writer) not in self._drop_logged
            if first and len(self._drop_logged) < 10_000:
                self._drop_logged.add((topic, writer))
        if first:
            log.warning(
                "dropped a bad sample on topic %r from writer %s: %s: %s (further bad samples "
                "from this writer are counted in bus.stats, not logged)",
                topic,
                writer_name(writer),
                type(exc).__name__,
                str(exc)[:200],
            )

    def events(self, kind: str | None = None) -> list[QosEvent]:
        """The QoS events kept so far, optionally of one kind."""
        with self._lock:
            return [e for e in self.stats.events if kind is None or e.kind == kind]
