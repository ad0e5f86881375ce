"""Radars speak for themselves: who wrote a ``DetectionBatch``, and whether it may speak.

Every reader of detections that decides something (the tracker's picture, TEWA's witnesses)
holds each radar identity to the same rules (`SourceGuard`): one sensor per identity and one
identity per sensor, one writer at a time per identity, its scan rate, newer scans only. The
identity is the writer's source partition (`mcc.bus.Reader.source_of`), authenticated on a
secured bus.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mcc.types import DetectionBatch


@dataclass(frozen=True)
class Speaker:
    """The writer of a batch: its authenticated source principal (`Reader.source_of`), its
    publication handle, and whether it is still matched."""

    source: str
    handle: int
    matched: Callable[[], bool]
    generation: int = 0  # of its identity (`mcc.bus.topics.split_source`)


def speaker_of(reader: Any, batch: DetectionBatch) -> Speaker | None:
    """Who wrote ``batch`` (taken from ``reader``); None when its writer speaks for no one."""
    source = reader.source_of(batch)
    if source is None:
        return None
    handle = batch.sample_info.publication_handle  # type: ignore[attr-defined]
    matched = lambda: reader.matched_writer(handle) is not None  # noqa: E731
    return Speaker(source, handle, matched, reader.source_generation(batch))


@dataclass
class SourceGuard:
    """Each radar speaks through one identity, at its own rate, for its own sensor.

    A source principal (``radar.0``) is bound to the first sensor id it speaks for, and a
    sensor id to the first source that speaks for it (``known_only``: only the sensors of
    ``periods_s``, the scenario's radars, are accepted); one participant at a time speaks for
    a source (a second writer with the same identity is refused while the first is matched: a
    stolen radar identity cannot outshout the radar it was stolen from); a source's batches
    closer than ``min_fraction`` of its scan period (``periods_s``, else
    ``default_period_s``), or not newer than its last, are refused.

    The rate is also held per writer, and a writer becomes the one that speaks for its source
    only once it has kept that rate (its second scan, a scan period after its first): when a
    stolen identity floods while the genuine radar scans, a reader that starts with both on the
    bus (TEWA, at the engagement phase) takes the radar, never the flood, whichever it heard
    first. A stolen identity that keeps the radar's rate, and is heard before it, still wins
    until the radar restarts: its new identity's newer generation takes over (and the reader
    no longer hears the old one at all, `mcc.bus.Reader.source_of`).
    """

    periods_s: dict[str, float]
    min_fraction: float = 0.5
    default_period_s: float = 0.1
    max_sources: int = 64
    known_only: bool = False
    sensor_of: dict[str, str] = field(default_factory=dict)  # source → sensor id
    source_of: dict[str, str] = field(default_factory=dict)  # sensor id → source
    speaking: dict[str, Speaker] = field(default_factory=dict)  # source → its writer
    last: dict[str, tuple[int, int]] = field(default_factory=dict)  # source → receive, origin
    #: (source, writer handle) → when that writer's last scan came (every one, refused too)
    heard: dict[tuple[str, int], int] = field(default_factory=dict)

    def refusal(self, batch: DetectionBatch, receive_ns: int, who: Speaker) -> tuple[str, str]:
        """Why ``who`` may not speak ``batch`` now, as (kind, message); ("", "") when it may."""
        sensor, source = batch.sensor_id, who.source
        bound = self.sensor_of.get(source)
        if bound is None:
            if self.known_only and sensor not in self.periods_s:
                return "unknown", f"{source} speaks for {sensor[:80]!r}, no radar of the scenario"
            owner = self.source_of.get(sensor)
            if owner is not None:
                return "impersonation", f"{source} speaks for {sensor[:80]!r}, radar of {owner}"
            if len(self.sensor_of) >= self.max_sources:
                return "sensors", f"one source too many (max_sensors {self.max_sources})"
        elif bound != sensor:
            return "impersonation", f"{source} speaks for {sensor[:80]!r}, its radar is {bound!r}"
        min_gap_ns = self.min_fraction * (self.periods_s.get(sensor) or self.default_period_s) * 1e9
        key = (source, who.handle)
        before = self.heard.get(key)
        if key not in self.heard and len(self.heard) >= 4 * self.max_sources:
            self.heard.clear()  # writers come and go: forget the old ones
        self.heard[key] = receive_ns
        if before is not None and receive_ns - before < min_gap_ns:
            return "rate", f"{source}: a writer scanning faster than its radar's period"
        current = self.speaking.get(source)
        if (
            current is not None
            and current.handle != who.handle
            and current.generation >= who.generation  # a restarted instance takes over
            and current.matched()
        ):
            return "second writer", f"a second writer of {source} while the first is matched"
        if (current is None or current.handle != who.handle) and before is None:
            return "unproven", f"{source}: a new writer's first scan (it speaks from its second)"
        last = self.last.get(source)
        if last is not None:
            if batch.origin_ns <= last[1]:
                return "replay", f"{source}: a scan not newer than its last"
            if receive_ns - last[0] < min_gap_ns:
                return "rate", f"{source}: scans faster than its radar's period"
        return "", ""

    def accept(self, batch: DetectionBatch, receive_ns: int, who: Speaker) -> None:
        """Record that ``who`` spoke ``batch`` (after `refusal` said it may)."""
        self.sensor_of.setdefault(who.source, batch.sensor_id)
        self.source_of.setdefault(batch.sensor_id, who.source)
        self.speaking[who.source] = who
        self.last[who.source] = (receive_ns, batch.origin_ns)
