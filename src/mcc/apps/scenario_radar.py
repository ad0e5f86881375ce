"""Scenario radars: `RadarModel` (Pd, polar noise, coverage, Poisson clutter, an optional IFF
interrogator) and `Detections`, one scan's output as arrays and as a ``DetectionBatch``.

Frame and units (as idl/mcc.idl): ENU metres, azimuth from north clockwise, radians.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from mcc.apps.scenario_spec import RadarSpec
from mcc.apps.scenario_truth import TruthState
from mcc.types import PACKED_ARRAYS, DetectionBatch, IffAnswer, TargetClass
from mcc.types.arrays import float_field, optional_field, pack

F64 = npt.NDArray[np.float64]

RCS_DBSM: dict[TargetClass, float] = {
    TargetClass.CLASS_UNKNOWN: 0.0,
    TargetClass.CLASS_AIRCRAFT: 10.0,
    TargetClass.CLASS_CRUISE_MISSILE: -10.0,
    TargetClass.CLASS_HELICOPTER: 10.0,
    TargetClass.CLASS_BALLISTIC: -10.0,
    TargetClass.CLASS_UAV: -15.0,
    TargetClass.CLASS_DECOY: 0.0,
}

# RCS_DBSM indexed by TargetClass value (unknown values clip to the last, decoy: 0 dBsm).
_RCS_TABLE = np.array([RCS_DBSM[c] for c in sorted(RCS_DBSM, key=lambda c: int(c.value))])

#: The per-detection float64 columns of a DetectionBatch, in the order of `Detections`' fields.
_COLUMNS = tuple(PACKED_ARRAYS["DetectionBatch"])
_NO_REPLY = int(IffAnswer.IFF_NO_REPLY.value)
_FRIEND = int(IffAnswer.IFF_FRIEND.value)
_INVALID = int(IffAnswer.IFF_INVALID.value)

# Clutter radial velocities are uniform in +-_CLUTTER_VR_MPS (about Mach 1).
_CLUTTER_VR_MPS = 340.0


@dataclass(frozen=True)
class Detections:
    """One scan's detections as parallel arrays of M items (time ``time_s``)."""

    time_s: float
    range_m: F64
    azimuth_rad: F64  # from north, clockwise, in [0, 2 pi)
    elevation_rad: F64
    radial_velocity_mps: F64  # positive = receding
    snr_db: F64
    x_m: F64  # ENU, absolute (sensor position added)
    y_m: F64
    z_m: F64
    target_id: npt.NDArray[np.int64] = field(
        default_factory=lambda: np.zeros(0, np.int64)
    )  # the target seen, -1 for clutter (simulation only, not on the wire)
    iff: npt.NDArray[np.uint8] | None = None  # (M,) IffAnswer values; None: not interrogated

    @property
    def count(self) -> int:
        return int(self.range_m.shape[0])

    @property
    def positions_m(self) -> F64:
        """(M, 3) ENU positions."""
        return np.stack([self.x_m, self.y_m, self.z_m], axis=1).reshape(-1, 3)

    def to_msg(
        self,
        *,
        sensor_id: str,
        scan_id: int,
        origin_ns: int,
        publish_ns: int,
        sensor_position_m: Sequence[float],
    ) -> DetectionBatch:
        """A ``DetectionBatch`` for the wire."""
        return DetectionBatch(
            sensor_id=sensor_id,
            scan_id=scan_id,
            origin_ns=origin_ns,
            publish_ns=publish_ns,
            sensor_x_m=float(sensor_position_m[0]),
            sensor_y_m=float(sensor_position_m[1]),
            sensor_z_m=float(sensor_position_m[2]),
            count=self.count,
            **{name: pack(getattr(self, name), "<f8") for name in _COLUMNS},
            iff=pack(self.iff, "u1") if self.iff is not None else b"",
        )

    @classmethod
    def from_msg(cls, msg: DetectionBatch) -> Detections:
        """The detections of a ``DetectionBatch`` (``time_s`` = origin, Unix seconds); an
        ``iff`` of another length than ``count`` raises ``ValueError``."""
        iff = optional_field(msg, "iff")
        make: Callable[..., Detections] = cls  # the columns in field order, then by name
        return make(
            msg.origin_ns * 1e-9,
            *(float_field(msg, name) for name in _COLUMNS),
            target_id=np.full(msg.count, -1, np.int64),
            iff=None if iff is None else np.array(iff, dtype=np.uint8),
        )


@dataclass(frozen=True)
class RadarModel:
    """A radar: a snapshot scan with Pd, Gaussian polar noise, coverage and Poisson clutter.

    Angles in radians, azimuth from north clockwise; ``sector_width_rad`` = 2 pi is all round.
    """

    id: str
    position_m: tuple[float, float, float]
    scan_period_s: float
    sigma_range_m: float
    sigma_azimuth_rad: float
    sigma_elevation_rad: float
    sigma_radial_velocity_mps: float
    pd: float
    clutter_rate: float
    max_range_m: float
    min_range_m: float = 0.0
    min_elevation_rad: float = 0.0
    max_elevation_rad: float = math.radians(60.0)
    sector_start_rad: float = 0.0
    sector_width_rad: float = 2 * math.pi
    snr_ref_db: float = 13.0
    iff_p_reply: float | None = None  # None: no IFF interrogator
    iff_p_false_reply: float = 0.0

    @classmethod
    def from_spec(cls, spec: RadarSpec) -> RadarModel:
        cov = spec.coverage
        start, end = cov.sector_deg
        width = (end - start) % 360.0 or 360.0
        return cls(
            id=spec.id,
            position_m=spec.position_m,
            scan_period_s=spec.scan_period_s,
            sigma_range_m=spec.sigma_range_m,
            sigma_azimuth_rad=spec.sigma_azimuth_rad,
            sigma_elevation_rad=spec.sigma_elevation_rad,
            sigma_radial_velocity_mps=spec.sigma_radial_velocity_mps,
            pd=spec.pd,
            clutter_rate=spec.clutter_rate,
            max_range_m=cov.max_range_m,
            min_range_m=cov.min_range_m,
            min_elevation_rad=math.radians(cov.min_elevation_deg),
            max_elevation_rad=math.radians(cov.max_elevation_deg),
            sector_start_rad=math.radians(start),
            sector_width_rad=math.radians(width),
            snr_ref_db=spec.snr_ref_db,
            iff_p_reply=spec.iff.p_reply if spec.iff is not None else None,
            iff_p_false_reply=spec.iff.p_false_reply if spec.iff is not None else 0.0,
        )

    def polar(self, positions_m: npt.ArrayLike) -> tuple[F64, F64, F64]:
        """Range (m), azimuth (rad, [0, 2 pi)) and elevation (rad) of ENU ``positions_m`` (N, 3)."""
        rel = np.asarray(positions_m, dtype=np.float64).reshape(-1, 3) - np.asarray(self.position_m)
        ground = np.hypot(rel[:, 0], rel[:, 1])
        rng = np.hypot(ground, rel[:, 2])
        az = np.mod(np.arctan2(rel[:, 0], rel[:, 1]), 2 * np.pi)
        el = np.arctan2(rel[:, 2], ground)
        return rng, az, el

    def _in_sector(self, az: F64) -> npt.NDArray[np.bool_]:
        if self.sector_width_rad >= 2 * math.pi:
            return np.ones(az.shape, bool)
        return np.mod(az - self.sector_start_rad, 2 * np.pi) <= self.sector_width_rad

    def in_coverage(self, positions_m: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Which ENU ``positions_m`` (N, 3) the radar covers (range, elevation, sector)."""
        rng, az, el = self.polar(positions_m)
        return (
            (rng >= self.min_range_m)
            & (rng <= self.max_range_m)
            & (el >= self.min_elevation_rad)
            & (el <= self.max_elevation_rad)
            & self._in_sector(az)
        )

    def scan(self, truth: TruthState, t_s: float, rng: np.random.Generator) -> Detections:
        """Detections of one scan at ``t_s`` (same time base as ``truth.time_s``).

        The live targets of ``truth`` are moved to ``t_s`` with their velocities, detected
        with probability ``pd`` when in coverage, measured with Gaussian noise in range,
        azimuth, elevation and radial velocity; ``Poisson(clutter_rate)`` false alarms are
        uniform in the coverage volume. Detections come shuffled. With an interrogator
        (``iff_p_reply`` set), each detection gets an IFF answer (`interrogate`), drawn after
        everything else so that the rest of the scan is the same with or without one.
        """
        live = truth.live()
        dt = t_s - truth.time_s
        pos = live.positions_m + live.velocities_mps * dt
        r, az, el = self.polar(pos)
        seen = self.in_coverage(pos) & (rng.random(live.count) < self.pd)
        idx = np.flatnonzero(seen)
        n = idx.size
        rel = pos[idx] - np.asarray(self.position_m)
        r_true = r[idx]
        vr = np.einsum("ij,ij->i", rel, live.velocities_mps[idx]) / np.maximum(r_true, 1e-9)
        rcs = _RCS_TABLE[np.minimum(live.classes[idx], len(_RCS_TABLE) - 1)]
        snr = self.snr_ref_db + rcs + 40.0 * np.log10(self.max_range_m / np.maximum(r_true, 1.0))
        m_r = r_true + self.sigma_range_m * rng.standard_normal(n)
        m_az = az[idx] + self.sigma_azimuth_rad * rng.standard_normal(n)
        m_el = el[idx] + self.sigma_elevation_rad * rng.standard_normal(n)
        m_vr = vr + self.sigma_radial_velocity_mps * rng.standard_normal(n)

        k = int(rng.poisson(self.clutter_rate)) if self.clutter_rate > 0 else 0
        c_r, c_az, c_el = self._clutter(k, rng)
        c_vr = rng.uniform(-_CLUTTER_VR_MPS, _CLUTTER_VR_MPS, k)
        c_snr = self.snr_ref_db - 3.0 + rng.exponential(2.0, k)

        out_r = np.concatenate([m_r, c_r])
        out_az = np.mod(np.concatenate([m_az, c_az]), 2 * np.pi)
        out_el = np.concatenate([m_el, c_el])
        ids = np.concatenate([live.ids[idx].astype(np.int64), np.full(k, -1, np.int64)])
        order = rng.permutation(n + k)
        out_r, out_az, out_el, ids = out_r[order], out_az[order], out_el[order], ids[order]
        ground = out_r * np.cos(out_el)
        sx, sy, sz = self.position_m
        return Detections(
            time_s=float(t_s),
            range_m=out_r,
            azimuth_rad=out_az,
            elevation_rad=out_el,
            radial_velocity_mps=np.concatenate([m_vr, c_vr])[order],
            snr_db=np.concatenate([snr, c_snr])[order],
            x_m=sx + ground * np.sin(out_az),
            y_m=sy + ground * np.cos(out_az),
            z_m=sz + out_r * np.sin(out_el),
            target_id=ids,
            iff=self.interrogate(truth.answers_mode5(ids), rng),
        )

    def interrogate(
        self, mode5: npt.NDArray[np.bool_], rng: np.random.Generator
    ) -> npt.NDArray[np.uint8] | None:
        """IFF answers of detections of which ``mode5`` marks the friends' (None without an
        interrogator): a friend answers ``IFF_FRIEND`` with ``iff_p_reply``, else
        ``IFF_NO_REPLY``; any other detection (clutter included) ``IFF_INVALID`` with
        ``iff_p_false_reply``, else ``IFF_NO_REPLY``."""
        if self.iff_p_reply is None:
            return None
        u = rng.random(mode5.shape[0])
        friend = np.where(u < self.iff_p_reply, _FRIEND, _NO_REPLY)
        other = np.where(u < self.iff_p_false_reply, _INVALID, _NO_REPLY)
        return np.where(mode5, friend, other).astype(np.uint8)

    def _clutter(self, k: int, rng: np.random.Generator) -> tuple[F64, F64, F64]:
        """``k`` points uniform in the coverage volume (a spherical sector shell)."""
        r0, r1 = self.min_range_m, self.max_range_m
        # Volume element r^2 cos(el) dr daz del: r^3 and sin(el) are uniform.
        r = np.cbrt(r0**3 + rng.random(k) * (r1**3 - r0**3))
        az = np.mod(self.sector_start_rad + rng.random(k) * self.sector_width_rad, 2 * np.pi)
        s0, s1 = math.sin(self.min_elevation_rad), math.sin(self.max_elevation_rad)
        el = np.arcsin(s0 + rng.random(k) * (s1 - s0))
        return r, az, el
