"""Datagrams into ASTERIX data blocks, and the count of everything dropped on the way.

A datagram (or a stretch of a recording) holds data blocks ``CAT (1 octet) | LEN (2 octets,
the whole block) | records``. `split_blocks` frames them; a framing fault (a header cut short,
``LEN`` < 3, ``LEN`` past the end) loses the rest of the datagram, since no later block can be
found, and is reported with the blocks framed before it.

`InputStats` is what a reader of ASTERIX keeps: datagrams, blocks and records taken per
category, and everything dropped per category and cause, each cause logged once per source
(the sender's address) so a hostile or broken sender cannot flood the log.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CAUSES", "Framing", "InputStats", "category_key", "pack_records", "split_blocks"]

#: Every cause of a drop, with what it means (docs/asterix.md lists them).
CAUSES = {
    "short": "a block header cut short (fewer than 3 octets left in the datagram)",
    "length": "a block whose LEN is below 3: the rest of the datagram cannot be framed",
    "past_datagram": "a block whose LEN runs past the end of the datagram",
    "category": "a category this reader does not take",
    "truncated": "a record whose FSPEC or an item runs past the end of its block",
    "fspec": "an FSPEC longer than the edition's (an FX chain that does not end)",
    "item": "an FSPEC bit for an item (or compound subitem) the edition lacks",
    "malformed": "an item breaking its variation's rules (explicit length 0, extra extent)",
    "missing": "a record without a mandatory item (data source, time, position, type)",
    "range": "a value outside its valid range (time past 24 h, flight level, range)",
    "time": "a time of day too far from this clock (max_time_offset_s)",
    "sender": "a datagram from an address not in allow_from",
    "flood": "a datagram past max_datagrams_per_s or max_bytes_per_s",
    "scan_size": "a scan of more plots than max_plots_per_scan",
}


def category_key(category: int | None) -> str:
    """``"048"`` for a category, ``"?"`` when none could be read."""
    return "?" if category is None else f"{category:03d}"


@dataclass(frozen=True)
class Framing:
    """The blocks of one datagram as ``(category, start, end)``, and the framing fault that
    stopped the split, if any: ``(category or None, cause, detail)``."""

    blocks: list[tuple[int, int, int]]
    fault: tuple[int | None, str, str] | None = None


def split_blocks(data: bytes, start: int = 0, end: int | None = None) -> Framing:
    """Frame the data blocks of ``data[start:end]``."""
    end = len(data) if end is None else end
    blocks: list[tuple[int, int, int]] = []
    pos = start
    while pos < end:
        if end - pos < 3:
            cat = data[pos]
            return Framing(blocks, (cat, "short", f"{end - pos} octets after the last block"))
        cat = data[pos]
        length = (data[pos + 1] << 8) | data[pos + 2]
        if length < 3:
            return Framing(blocks, (cat, "length", f"LEN {length} at octet {pos - start}"))
        if pos + length > end:
            return Framing(
                blocks,
                (cat, "past_datagram", f"LEN {length} at octet {pos - start}, {end - pos} left"),
            )
        blocks.append((cat, pos + 3, pos + length))
        pos += length
    return Framing(blocks)


@dataclass
class InputStats:
    """Counts of ASTERIX input: taken per category, dropped per category and cause.

    `drop` counts and logs the first drop of each cause from each source (at most
    ``max_logged`` pairs; the counts go on). `as_dict` is the status a gateway publishes.
    """

    log: logging.Logger = field(default_factory=lambda: logging.getLogger("mcc.asterix"))
    max_logged: int = 4096
    datagrams: int = 0
    octets: int = 0
    blocks: Counter[str] = field(default_factory=Counter)
    records: Counter[str] = field(default_factory=Counter)
    dropped: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: Records read and left aside as no error: (category, what), e.g. ("048", "no_detection")
    skipped: Counter[tuple[str, str]] = field(default_factory=Counter)
    logged: set[tuple[str, str]] = field(default_factory=set)

    def drop(self, category: int | None, cause: str, detail: str, source: str, n: int = 1) -> None:
        """Count ``n`` drops of ``cause`` in ``category``, log the first from ``source``."""
        self.dropped[(category_key(category), cause)] += n
        key = (source, cause)
        if key in self.logged or len(self.logged) >= self.max_logged:
            return
        self.logged.add(key)
        self.log.warning(
            "ASTERIX from %s dropped: CAT%s %s (%s); further ones from it are counted, not logged",
            source[:80],
            category_key(category),
            cause,
            detail[:200],
        )

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    def as_dict(self) -> dict[str, Any]:
        by_category: dict[str, dict[str, int]] = {}
        for (cat, cause), n in sorted(self.dropped.items()):
            by_category.setdefault(cat, {})[cause] = n
        return {
            "datagrams": self.datagrams,
            "octets": self.octets,
            "blocks": dict(sorted(self.blocks.items())),
            "records": dict(sorted(self.records.items())),
            "dropped": by_category,
            "dropped_total": self.dropped_total,
            "skipped": {f"{cat} {what}": n for (cat, what), n in sorted(self.skipped.items())},
        }

    def summary_text(self) -> str:
        """``12 dropped: CAT048 truncated 3, CAT? short 9`` (empty when none)."""
        if not self.dropped:
            return ""
        parts = [f"CAT{cat} {cause} {n}" for (cat, cause), n in sorted(self.dropped.items())]
        return f"{self.dropped_total} dropped: " + ", ".join(parts)


def pack_records(cat: Any, records: list[Any], sizes: list[int], max_octets: int) -> list[bytes]:
    """libasterix ``records`` (of sizes ``sizes`` octets) of category edition ``cat`` packed
    into data blocks of at most ``max_octets`` (at least one record per block)."""
    out: list[bytes] = []
    group: list[Any] = []
    used = 3
    for rec, size in zip(records, sizes, strict=True):
        if group and used + size > max_octets:
            out.append(cat.create(group).unparse().to_bytes())
            group, used = [], 3
        group.append(rec)
        used += size
    if group:
        out.append(cat.create(group).unparse().to_bytes())
    return out
