"""CAT062 system tracks (edition 1.18) written with libasterix, and read back.

One record per track (`SystemTrack`): data source (I062/010), service (I062/015), time of
track information (I062/070), track number (I062/040), position in the system's Cartesian
frame (I062/100: the mission's ENU frame, origin its reference point) and in WGS-84 when the
origin is known (I062/105), velocity (I062/185), geometric altitude (I062/130), rate of climb
(I062/220), track status (I062/080: tentative, coasting, track begin and end, the IFF answer in
MD5), estimated accuracies (I062/500: APC, ATV, AGA) and, in the Special Purpose field, MCC's
STANAG 1241 identity and target class (CAT062 has no item for them; docs/asterix.md gives the
layout). A value the edition cannot hold leaves its item out (counted by the caller); a
position it cannot hold leaves the track out.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, NamedTuple

from mcc.asterix.blocks import pack_records
from mcc.asterix.cat048 import FT_M
from mcc.asterix.editions import spec
from mcc.types import IffAnswer, TrackStatus

__all__ = ["SP_FORMAT", "SystemTrack", "decode_tracks", "encode_tracks"]

#: First octet of MCC's Special Purpose field: format 1 = (identity, target class).
SP_FORMAT = 1

# IffAnswer → I062/080 MD5: 0 no Mode 5 interrogation, 1 friendly, 2 unknown target, 3 no reply.
MD5_OF_IFF = {
    int(IffAnswer.IFF_NOT_INTERROGATED.value): 0,
    int(IffAnswer.IFF_FRIEND.value): 1,
    int(IffAnswer.IFF_INVALID.value): 2,
    int(IffAnswer.IFF_NO_REPLY.value): 3,
}
IFF_OF_MD5 = {code: iff for iff, code in MD5_OF_IFF.items()}
_TENTATIVE = int(TrackStatus.TRACK_TENTATIVE.value)
_COASTING = int(TrackStatus.TRACK_COASTING.value)


class SystemTrack(NamedTuple):
    """One track as it leaves in CAT062 (SI units, the mission's ENU frame)."""

    number: int  # I062/040, 0..65535
    x_m: float
    y_m: float
    z_m: float
    vx_mps: float
    vy_mps: float
    vz_mps: float
    sigma_xy_m: tuple[float, float]  # standard deviations of x and y
    sigma_v_mps: tuple[float, float]  # of vx and vy
    sigma_z_m: float
    status: int  # TrackStatus value
    iff: int  # IffAnswer value
    identity: int  # Identity value
    classification: int  # TargetClass value
    begin: bool = False  # TSB: the track's first report
    end: bool = False  # TSE: its last
    lat_deg: float | None = None
    lon_deg: float | None = None


def _signed(value: float, lsb: float, bits: int) -> int | None:
    """``value`` in units of ``lsb`` as ``bits``-bit two's complement; None when it does not
    fit (or is not finite)."""
    if not math.isfinite(value):
        return None
    units = round(value / lsb)
    if not -(1 << (bits - 1)) <= units < (1 << (bits - 1)):
        return None
    return units & ((1 << bits) - 1)


def _unsigned(value: float, lsb: float, bits: int) -> int:
    """``value`` in units of ``lsb``, clipped to ``0 … 2**bits − 1``."""
    if not math.isfinite(value):
        return (1 << bits) - 1
    return min(max(round(value / lsb), 0), (1 << bits) - 1)


def encode_tracks(
    tracks: list[SystemTrack],
    *,
    sac: int,
    sic: int,
    service_id: int,
    tod_units: int,
    max_block_octets: int = 1400,
    left_out: Counter[str] | None = None,
) -> list[bytes]:
    """CAT062 blocks (each at most ``max_block_octets``) of ``tracks`` at time of day
    ``tod_units`` (1/128 s). What the edition cannot hold is counted in ``left_out``:
    ``position`` (the track is left out), ``velocity``, ``altitude``, ``climb`` (the item)."""
    cat = spec(62)
    record = cat.cv_record
    counts = left_out if left_out is not None else Counter()
    records: list[Any] = []
    sizes: list[int] = []
    for t in tracks:
        x, y = _signed(t.x_m, 0.5, 24), _signed(t.y_m, 0.5, 24)
        if x is None or y is None:
            counts["position"] += 1
            continue
        status = t.status
        items: dict[str, Any] = {
            "010": (("SAC", sac), ("SIC", sic)),
            "015": service_id,
            "070": tod_units,
            "040": t.number & 0xFFFF,
            "100": (("X", x), ("Y", y)),
            "080": (
                (0, 0, 1, 2, 1 if status == _TENTATIVE else 0, 0),  # MON SPI MRH SRC CNF FX
                (0, int(t.end), int(t.begin), 0, 0, 0, 0, 0),  # SIM TSE TSB FPC AFF STP KOS
                (0, 0, 0, 0, MD5_OF_IFF.get(t.iff, 0), 0),  # AMA MD4 ME MI MD5
                (1 if status == _COASTING else 0, 0, 0, 0, 0, 0, 0, 0),  # CST PSR SSR …
            ),
            "500": {
                "APC": (
                    ("X", _unsigned(t.sigma_xy_m[0], 0.5, 16)),
                    ("Y", _unsigned(t.sigma_xy_m[1], 0.5, 16)),
                ),
                "ATV": (
                    ("X", _unsigned(t.sigma_v_mps[0], 0.25, 8)),
                    ("Y", _unsigned(t.sigma_v_mps[1], 0.25, 8)),
                ),
                "AGA": _unsigned(t.sigma_z_m / FT_M, 6.25, 8),
            },
            "SP": bytes((SP_FORMAT, t.identity & 0xFF, t.classification & 0xFF)),
        }
        vx, vy = _signed(t.vx_mps, 0.25, 16), _signed(t.vy_mps, 0.25, 16)
        if vx is None or vy is None:
            counts["velocity"] += 1
        else:
            items["185"] = (("VX", vx), ("VY", vy))
        altitude = _signed(t.z_m / FT_M, 6.25, 16)
        if altitude is None:
            counts["altitude"] += 1
        else:
            items["130"] = altitude
        climb = _signed(t.vz_mps / FT_M * 60.0, 6.25, 16)
        if climb is None:
            counts["climb"] += 1
        else:
            items["220"] = climb
        if t.lat_deg is not None and t.lon_deg is not None:
            lsb = 180.0 / (1 << 25)
            lat, lon = _signed(t.lat_deg, lsb, 32), _signed(t.lon_deg, lsb, 32)
            if lat is not None and lon is not None:
                items["105"] = (("LAT", lat), ("LON", lon))
        rec = record.create(items)
        records.append(rec)
        sizes.append(len(rec.unparse()) // 8)
    return pack_records(cat, records, sizes, max_block_octets)


def decode_tracks(data: bytes) -> list[dict[str, Any]]:
    """The CAT062 records of a datagram as plain values (libasterix's own parser: what a
    neighbouring centre reads). ``ValueError`` when a block does not parse."""
    from asterix.base import Bits, RawDatablock

    cat = spec(62)
    blocks = RawDatablock.parse(Bits.from_bytes(data))
    if isinstance(blocks, ValueError):
        raise blocks
    out: list[dict[str, Any]] = []
    for block in blocks:
        if block.get_category() != 62:
            continue
        records = cat.cv_uap.parse(block.get_raw_records())
        if isinstance(records, ValueError):
            raise records
        for rec in records:
            out.append(_track_values(rec))
    return out


def _track_values(rec: Any) -> dict[str, Any]:
    def item(name: str) -> Any:
        found = rec.get_item(name)
        return None if found is None else found.variation

    def sub(var: Any, name: str) -> Any:
        found = var.get_item(name)
        return None if found is None else found.variation

    def q(var: Any, unit: str) -> float:
        return float(var.content.as_quantity(unit))

    out: dict[str, Any] = {}
    v = item("010")
    out["sac"], out["sic"] = sub(v, "SAC").as_uint(), sub(v, "SIC").as_uint()
    v = item("015")
    out["service_id"] = None if v is None else v.as_uint()
    out["tod_s"] = q(item("070"), "s")
    out["number"] = item("040").as_uint()
    v = item("100")
    out["x_m"], out["y_m"] = q(sub(v, "X"), "m"), q(sub(v, "Y"), "m")
    v = item("185")
    out["vx_mps"] = None if v is None else q(sub(v, "VX"), "m/s")
    out["vy_mps"] = None if v is None else q(sub(v, "VY"), "m/s")
    v = item("130")
    out["altitude_m"] = None if v is None else q(v, "ft") * FT_M
    v = item("220")
    out["climb_mps"] = None if v is None else q(v, "ft/min") * FT_M / 60.0
    v = item("105")
    out["lat_deg"] = None if v is None else q(sub(v, "LAT"), "°")
    out["lon_deg"] = None if v is None else q(sub(v, "LON"), "°")
    v = item("080")
    status = {name: sub(v, name) for name in ("CNF", "TSE", "TSB", "MD5", "CST")}
    out.update({k.lower(): None if s is None else s.as_uint() for k, s in status.items()})
    v = item("SP")
    if v is not None:
        body = v.get_bytes()
        if len(body) >= 3 and body[0] == SP_FORMAT:
            out["identity"], out["classification"] = body[1], body[2]
    return out
