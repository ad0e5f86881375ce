"""CAT034 monoradar service messages: north markers and sector crossings, read (the compiled
layout) and written (libasterix).

A north marker (I034/000 = 1) says the antenna crossed north at its time of day (I034/030); a
sector crossing (I034/000 = 2) that it crossed the start of sector I034/020. Both close what
came before them: the gateway publishes a radar's plots per scan (north to north) or per
sector. I034/041 (antenna rotation period) is read when sent. The other messages (filters,
jamming strobes) are taken and counted, not used.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from mcc.asterix.editions import layout, spec
from mcc.asterix.layout import RecordLayout

__all__ = ["NORTH", "SECTOR", "Cat034Reader", "Marker", "encode_marker"]

NORTH, SECTOR = 1, 2


class Marker(NamedTuple):
    """One CAT034 message as MCC reads it (−1 / NaN: absent)."""

    kind: int  # I034/000: 1 north marker, 2 sector crossing, 3…: others
    sac: int
    sic: int
    tod_s: float  # NaN: no I034/030
    sector_rad: float  # NaN: no I034/020
    rotation_s: float  # NaN: no I034/041


class Cat034Reader:
    """Reads the messages of CAT034 blocks (`read_block`)."""

    def __init__(self, record_layout: RecordLayout | None = None) -> None:
        lay = record_layout or layout(34)
        self.layout = lay
        self.kind = lay.field("000")
        self.sac, self.sic = lay.field("010/SAC"), lay.field("010/SIC")
        self.tod = lay.field("030", "s")
        self.sector = lay.field("020", "°")
        self.rotation = lay.field("041", "s")
        i = lay.index
        self._i000, self._i010, self._i030 = i["000"], i["010"], i["030"]
        self._i020, self._i041 = i["020"], i["041"]

    def read_block(
        self, data: bytes, start: int, end: int
    ) -> tuple[list[Marker], list[tuple[str, str]]]:
        """The messages of the block body ``data[start:end]``, and ``(cause, detail)`` of each
        dropped for its content (no message type or data source, a time past 24 h).
        `FormatProblem` when a record is not whole and well formed (the block is dropped)."""
        lay = self.layout
        n = lay.size
        out: list[Marker] = []
        problems: list[tuple[str, str]] = []
        pos = start
        while pos < end:
            starts = [-1] * n
            ends = [-1] * n
            pos = lay.walk(data, pos, end, starts, ends)
            s000, s010 = starts[self._i000], starts[self._i010]
            if s000 < 0 or s010 < 0:
                problems.append(("missing", "no I034/000 or I034/010"))
                continue
            s = starts[self._i030]
            tod = self.tod.value(data, s) if s >= 0 else math.nan
            if tod >= 86_400.0:
                problems.append(("range", f"time of day {tod:.3f} s"))
                continue
            s = starts[self._i020]
            sector = math.radians(self.sector.value(data, s)) if s >= 0 else math.nan
            s = starts[self._i041]
            rotation = self.rotation.value(data, s) if s >= 0 else math.nan
            out.append(
                Marker(
                    self.kind.raw(data, s000),
                    self.sac.raw(data, s010),
                    self.sic.raw(data, s010),
                    tod,
                    sector,
                    rotation,
                )
            )
        return out, problems


def encode_marker(
    *,
    sac: int,
    sic: int,
    tod_units: int,
    kind: int = NORTH,
    sector_rad: float | None = None,
    rotation_s: float | None = None,
) -> bytes:
    """One CAT034 block holding one north marker (or sector crossing, ``sector_rad``), with
    the antenna rotation period (I034/041) when given."""
    cat = spec(34)
    lay = layout(34)
    items: dict[str, object] = {
        "010": (("SAC", sac), ("SIC", sic)),
        "000": kind,
        "030": tod_units,
    }
    if sector_rad is not None:
        f = lay.field("020", "°")
        items["020"] = round(math.degrees(sector_rad) % 360.0 / f.lsb) & f.mask
    if rotation_s is not None:
        f = lay.field("041", "s")
        items["041"] = min(round(rotation_s / f.lsb), f.mask)
    return bytes(cat.create([cat.cv_record.create(items)]).unparse().to_bytes())
