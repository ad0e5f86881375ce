"""A radar's ASTERIX stream decoded: datagrams in, CAT048 plots and CAT034 markers out, in the
order they came, with every block or record that could not be used counted in `InputStats`.

The gateway and ``mcc track replay`` read through the same `RadarStream`, so a recording
replays exactly as the live stream was taken.
"""

from __future__ import annotations

from mcc.asterix.blocks import InputStats, category_key, split_blocks
from mcc.asterix.cat034 import Cat034Reader, Marker
from mcc.asterix.cat048 import Cat048Reader, Plot
from mcc.asterix.layout import FormatProblem

__all__ = ["Event", "RadarStream"]

#: Causes a reader reports that are no fault of the sender (counted apart, not logged).
NOT_ERRORS = frozenset({"no_detection"})
#: (category, plot or marker)
Event = tuple[int, Plot | Marker]


class RadarStream:
    """Decodes datagrams of CAT048 and CAT034 (any other category is counted and dropped)."""

    def __init__(self, stats: InputStats | None = None) -> None:
        self.stats = stats or InputStats()
        self.plots = Cat048Reader()
        self.markers = Cat034Reader()

    def decode(self, data: bytes, source: str) -> list[Event]:
        """The plots and markers of datagram ``data`` from ``source`` (an address, a file
        offset: what the log names). A block that is not whole and well formed gives none."""
        stats = self.stats
        stats.datagrams += 1
        stats.octets += len(data)
        framing = split_blocks(data)
        events: list[Event] = []
        for cat, start, end in framing.blocks:
            reader: Cat048Reader | Cat034Reader
            if cat == 48:
                reader = self.plots
            elif cat == 34:
                reader = self.markers
            else:
                stats.drop(cat, "category", f"CAT{cat:03d} is not read here", source)
                continue
            try:
                items, problems = reader.read_block(data, start, end)
            except FormatProblem as problem:
                stats.drop(cat, problem.cause, problem.detail, source)
                continue
            key = category_key(cat)
            stats.blocks[key] += 1
            stats.records[key] += len(items)
            for cause, detail in problems:
                if cause in NOT_ERRORS:
                    stats.skipped[(key, cause)] += 1
                else:
                    stats.drop(cat, cause, detail, source)
            events.extend((cat, item) for item in items)
        if framing.fault is not None:
            fault_cat, cause, detail = framing.fault
            if cause == "short" and not framing.blocks:
                fault_cat = None  # a datagram too short to name a category
            stats.drop(fault_cat, cause, detail, source)
        return events
