"""CAT048 monoradar target reports: read from blocks (the compiled layout, the hot path) and
written (libasterix).

A plot (`Plot`) is what MCC takes from a report: data source (I048/010), time of day
(I048/140), position (I048/040 RHO, THETA), height (I048/110 measured by a 3-D radar, else a
validated Mode C flight level, I048/090), Mode 3/A (I048/070, validated codes only), Mode S
address (I048/220), the IFF answer (I048/020 FOE/FRI), radial Doppler speed (I048/120 CAL) and
the plot's amplitude (I048/130 PAM). Heights are metres above the mission's frame (a flight
level is a pressure altitude, taken with no QNH correction).

A report of no detection (I048/020 TYP 0, no position: a radar tracker's track end) is
skipped and counted apart. A record without its data source, time, position or report
descriptor, or with a time past
24 h or a validated flight level outside −12…1270 FL, is dropped (cause ``missing`` or
``range``); a block with a record that is not whole and well formed is dropped whole.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy.typing as npt

from mcc.asterix.blocks import pack_records
from mcc.asterix.editions import layout, spec
from mcc.asterix.layout import FormatProblem, RecordLayout
from mcc.types import IffAnswer

#: A column of values, one per plot: a sequence or a NumPy array.
Column = Sequence[float] | npt.NDArray[Any]

__all__ = ["FT_M", "NM_M", "Cat048Reader", "FormatProblem", "Plot", "encode_plots", "iff_of_foefri"]

NM_M = 1852.0
FT_M = 0.3048
FL_M = 100 * FT_M
MIN_FL, MAX_FL = -12.0, 1270.0  # I048/090's valid range
HEIGHT_3D, HEIGHT_MODE_C = 1, 2

# I048/020 FOE/FRI ↔ IffAnswer: 0 no interrogation, 1 friendly, 2 unknown target, 3 no reply.
_IFF_OF_FOEFRI = (
    int(IffAnswer.IFF_NOT_INTERROGATED.value),
    int(IffAnswer.IFF_FRIEND.value),
    int(IffAnswer.IFF_INVALID.value),
    int(IffAnswer.IFF_NO_REPLY.value),
)
_FOEFRI_OF_IFF = {iff: code for code, iff in enumerate(_IFF_OF_FOEFRI)}


def iff_of_foefri(code: int) -> int:
    """The `IffAnswer` value of an I048/020 FOE/FRI code (0..3)."""
    return _IFF_OF_FOEFRI[code]


class Plot(NamedTuple):
    """One CAT048 target report as MCC reads it (SI units; −1 / NaN: absent)."""

    sac: int
    sic: int
    tod_s: float  # time of day, s
    range_m: float
    azimuth_rad: float  # from north, clockwise
    height_m: float  # NaN: no height
    height_kind: int  # 0 none, 1 3-D radar (I048/110), 2 Mode C (I048/090)
    mode3a: int  # the 12-bit code (print as %04o), −1: none or not validated
    mode_s: int  # 24-bit aircraft address, −1: none
    iff: int  # IffAnswer value (0: not interrogated)
    doppler_mps: float  # NaN: none (positive: receding)
    amplitude_db: float  # NaN: none
    typ: int  # I048/020 TYP (1 PSR, 2 SSR, 3 SSR+PSR, 4-7 Mode S …)


@dataclass(frozen=True)
class _Fields:
    sac: Any
    sic: Any
    tod: Any
    typ: Any
    foefri: Any
    rho: Any
    theta: Any
    m3_v: Any
    m3_g: Any
    mode3a: Any
    fl_v: Any
    fl_g: Any
    fl: Any
    height: Any
    address: Any
    pam: Any
    cal_d: Any
    cal: Any


class Cat048Reader:
    """Reads the target reports of CAT048 blocks (`read_block`)."""

    def __init__(self, record_layout: RecordLayout | None = None) -> None:
        lay = record_layout or layout(48)
        self.layout = lay
        f = lay.field
        self.f = _Fields(
            sac=f("010/SAC"),
            sic=f("010/SIC"),
            tod=f("140", "s"),
            typ=f("020/TYP"),
            foefri=f("020/FOEFRI"),
            rho=f("040/RHO", "NM"),
            theta=f("040/THETA", "°"),
            m3_v=f("070/V"),
            m3_g=f("070/G"),
            mode3a=f("070/MODE3A"),
            fl_v=f("090/V"),
            fl_g=f("090/G"),
            fl=f("090/FL", "FL"),
            height=f("110/3DH", "ft"),
            address=f("220"),
            pam=f("130/PAM", "dBm"),
            cal_d=f("120/CAL/D"),
            cal=f("120/CAL/CAL", "m/s"),
        )
        i = lay.index
        self._i010, self._i140, self._i020, self._i040 = i["010"], i["140"], i["020"], i["040"]
        self._i070, self._i090, self._i110, self._i220 = i["070"], i["090"], i["110"], i["220"]
        self._i130, self._i120 = i["130"], i["120"]

    def read_block(
        self, data: bytes, start: int, end: int
    ) -> tuple[list[Plot], list[tuple[str, str]]]:
        """The plots of the block body ``data[start:end]``, and ``(cause, detail)`` of each
        record dropped for its content (cause ``no_detection``: a report of no plot, I048/020
        TYP 0 without a position, which is not an error). `FormatProblem` when a record is not
        whole and well formed: the block is then dropped whole (none of its plots is used)."""
        lay, f = self.layout, self.f
        n = lay.size
        walk = lay.walk
        plots: list[Plot] = []
        problems: list[tuple[str, str]] = []
        pos = start
        i010, i140, i020, i040 = self._i010, self._i140, self._i020, self._i040
        i070, i090, i110, i220 = self._i070, self._i090, self._i110, self._i220
        i130, i120 = self._i130, self._i120
        foefri_end = f.foefri.offset + f.foefri.size
        while pos < end:
            starts = [-1] * n
            ends = [-1] * n
            pos = walk(data, pos, end, starts, ends)
            s010, s140, s020, s040 = starts[i010], starts[i140], starts[i020], starts[i040]
            if s040 < 0 and s020 >= 0 and f.typ.raw(data, s020) == 0:
                problems.append(("no_detection", "a report of no detection (a track's end)"))
                continue
            if s010 < 0 or s140 < 0 or s020 < 0 or s040 < 0:
                named = zip(("010", "140", "020", "040"), (s010, s140, s020, s040), strict=True)
                missing = ", ".join(f"I048/{k}" for k, s in named if s < 0)
                problems.append(("missing", f"no {missing}"))
                continue
            tod_s = f.tod.value(data, s140)
            if tod_s >= 86_400.0:
                problems.append(("range", f"time of day {tod_s:.3f} s"))
                continue
            height_m, height_kind = math.nan, 0
            s = starts[i110]
            if s >= 0:
                height_m, height_kind = f.height.value(data, s) * FT_M, HEIGHT_3D
            s = starts[i090]
            if s >= 0 and not f.fl_v.raw(data, s) and not f.fl_g.raw(data, s):
                fl = f.fl.value(data, s)
                if not MIN_FL <= fl <= MAX_FL:
                    problems.append(("range", f"flight level {fl:g}"))
                    continue
                if not height_kind:
                    height_m, height_kind = fl * FL_M, HEIGHT_MODE_C
            mode3a = -1
            s = starts[i070]
            if s >= 0 and not f.m3_v.raw(data, s) and not f.m3_g.raw(data, s):
                mode3a = f.mode3a.raw(data, s)
            s = starts[i220]
            mode_s = f.address.raw(data, s) if s >= 0 else -1
            iff = 0
            if ends[i020] - s020 >= foefri_end:
                iff = _IFF_OF_FOEFRI[f.foefri.raw(data, s020)]
            amplitude = math.nan
            s = starts[i130]
            if s >= 0:
                sub = lay.sub_start(i130, f.pam.sub, data, s, ends[i130])
                if sub >= 0:
                    amplitude = f.pam.value(data, sub)
            doppler = math.nan
            s = starts[i120]
            if s >= 0:
                sub = lay.sub_start(i120, f.cal.sub, data, s, ends[i120])
                if sub >= 0 and not f.cal_d.raw(data, sub):
                    doppler = f.cal.value(data, sub)
            plots.append(
                Plot(
                    f.sac.raw(data, s010),
                    f.sic.raw(data, s010),
                    tod_s,
                    f.rho.value(data, s040) * NM_M,
                    math.radians(f.theta.value(data, s040)),
                    height_m,
                    height_kind,
                    mode3a,
                    mode_s,
                    iff,
                    doppler,
                    amplitude,
                    f.typ.raw(data, s020),
                )
            )
        return plots, problems


def encode_plots(
    *,
    sac: int,
    sic: int,
    tod_units: int,
    range_m: Column,
    azimuth_rad: Column,
    height_m: Column | None = None,
    iff: Sequence[int] | npt.NDArray[Any] | None = None,
    doppler_mps: Column | None = None,
    amplitude_db: Column | None = None,
    max_block_octets: int = 1400,
) -> tuple[list[bytes], int]:
    """CAT048 blocks (each at most ``max_block_octets``) of target reports of one data source
    at time of day ``tod_units`` (1/128 s); and how many plots could not be written (a range
    past 256 NM, the format's limit). Heights go in I048/110 (3-D radar), IFF answers in the
    FOE/FRI of I048/020, Doppler speeds in I048/120 (left out beyond ±511 m/s), amplitudes in
    I048/130 PAM (dB, clipped to ±127)."""
    cat = spec(48)
    lay = layout(48)
    rho_f, theta_f = lay.field("040/RHO", "NM"), lay.field("040/THETA", "°")
    h_f = lay.field("110/3DH", "ft")
    record = cat.cv_record
    records: list[Any] = []
    sizes: list[int] = []
    skipped = 0
    for k in range(len(range_m)):
        rho = round(range_m[k] / NM_M / rho_f.lsb)
        if not 0 <= rho <= rho_f.mask:
            skipped += 1
            continue
        theta = round(math.degrees(azimuth_rad[k]) / theta_f.lsb) & theta_f.mask
        typ = (("TYP", 1), 0, 0, 0, 0, 0)  # a single PSR plot, actual, RDP chain 1
        items: dict[str, Any] = {
            "010": (("SAC", sac), ("SIC", sic)),
            "140": tod_units,
            "020": (typ,),
            "040": (("RHO", rho), ("THETA", theta)),
        }
        if iff is not None:
            code = _FOEFRI_OF_IFF.get(int(iff[k]), 0)
            items["020"] = (typ, (0, 0, 0, 0, 0, ("FOEFRI", code), 0))
        if height_m is not None and math.isfinite(height_m[k]):
            h = round(height_m[k] / FT_M / h_f.lsb)
            h = min(max(h, -(1 << 13)), (1 << 13) - 1)
            items["110"] = (0, ("3DH", h & h_f.mask))
        if amplitude_db is not None and math.isfinite(amplitude_db[k]):
            items["130"] = {"PAM": min(max(round(amplitude_db[k]), -128), 127) & 0xFF}
        if doppler_mps is not None and math.isfinite(doppler_mps[k]):
            v = round(doppler_mps[k])
            if -512 <= v <= 511:
                items["120"] = {"CAL": (("D", 0), 0, ("CAL", v & 0x3FF))}
        rec = record.create(items)
        records.append(rec)
        sizes.append(len(rec.unparse()) // 8)
    return pack_records(cat, records, sizes, max_block_octets), skipped
