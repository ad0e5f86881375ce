"""Bounds of what the console keeps and ships: a hostile or broken sender cannot make every
browser's update large, nor hold the picture with a timestamp far in the future.

Every bound is counted against what this console received, on its own clock. What is over a
bound is left out (the most relevant items are kept) and the page and ``/metrics`` say how
much; a sample with a non-finite number or stamped further in the future than
``max_future_skew_s`` is dropped, counted and logged once per topic and reason.
docs/console.md lists the defaults.
"""

from __future__ import annotations

import dataclasses
import math

from mcc.errors import MccError

__all__ = ["StateLimits"]


@dataclasses.dataclass(frozen=True)
class StateLimits:
    """Bounds of a `mcc.console.state.LiveState` (counts of items unless said)."""

    max_tracks: int = 1000
    """Tracks kept and shown: those with a threat first, then confirmed, then the newest."""
    max_threats: int = 100
    """Threats kept and shown, by rank."""
    max_orders: int = 300
    """Engagement orders kept (the oldest finished ones go first)."""
    max_orders_shown: int = 60
    """Orders in each update: those awaiting a decision or in progress first, then the newest."""
    max_weapons: int = 64
    """Weapons kept (the least recently heard go first)."""
    max_radars: int = 32
    """Radars kept (the least recently heard go first)."""
    max_systems: int = 512
    """Instances in the health table (heartbeats and the supervisor's list)."""
    max_truth: int = 1000
    """Truth targets shown (``--truth``)."""
    max_text_chars: int = 200
    """Characters kept of a text field (names, hosts, messages, reasons)."""
    max_clusters_json_bytes: int = 65_536
    """Size of a ``MissionStatus.clusters_json``; a larger sample is dropped."""
    max_future_skew_s: float = 5.0
    """How far ahead of this host's clock a sender's timestamp may be, s."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise MccError(f"StateLimits.{f.name} = {value!r}: expected a number")
            if not math.isfinite(value) or value <= 0:
                raise MccError(f"StateLimits.{f.name} = {value!r}: use a positive number")
