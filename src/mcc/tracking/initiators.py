"""Initiators: tentative tracks from the detections no track took, one-point or two-point."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from mcc.tracking.base import Births, Measurements
from mcc.tracking.config import TrackerConfig
from mcc.tracking.gaters import candidate_pairs, lambda_max_bound

__all__ = ["OnePointInitiator", "TwoPointInitiator", "make_initiator"]

F64 = npt.NDArray[np.float64]
_MAX_SENSORS = 256  # sensors whose last left-over detections are kept (two-point initiation)


def make_initiator(config: TrackerConfig) -> OnePointInitiator | TwoPointInitiator:
    """The initiator ``config.initiation`` names."""
    if config.initiation == "two_point":
        return TwoPointInitiator(config)
    return OnePointInitiator(config)


class OnePointInitiator:
    """A tentative track per detection: position from the detection, velocity 0 ±
    ``init_velocity_std_mps`` per axis; with a range rate, the radial velocity is measured:
    ``v = ṙ u`` along the line of sight ``u``, ``P_v = σ_v² (I − u uᵀ) + σ_ṙ² u uᵀ``."""

    def __init__(self, config: TrackerConfig) -> None:
        self.d = config.ndim
        self.sigma_v = config.init_velocity_std_mps

    def initiate(self, meas: Measurements, room: int) -> tuple[Births | None, int]:
        refused = max(meas.count - room, 0)
        if meas.count == 0 or room == 0:
            return None, refused
        take = np.arange(min(meas.count, room))
        z, R = meas.z[take], meas.R_rows(take)
        # `kalman.cv_initiate` without its checks (the tracker checked the scan): every
        # scan, for every left-over detection.
        d = self.d
        x = np.zeros((take.size, 2 * d))
        x[:, :d] = z
        P = np.zeros((take.size, 2 * d, 2 * d))
        P[:, :d, :d] = R
        vel = np.arange(d, 2 * d)
        P[:, vel, vel] = self.sigma_v**2
        polar = meas.polar
        if polar is not None and polar.range_rate_mps is not None:
            d = self.d
            los = z - polar.sensor_position_m[:d]
            u = los / np.maximum(np.linalg.norm(los, axis=1, keepdims=True), 1e-9)
            rr = polar.range_rate_mps[take]
            x[:, d:] = rr[:, None] * u
            uu = u[:, :, None] * u[:, None, :]
            P[:, d:, d:] = self.sigma_v**2 * (np.eye(d) - uu) + polar.sigma_range_rate_mps**2 * uu
        return Births(x, P, history=1, age=1, hits=1, cols=take), refused


@dataclass
class _Leftovers:
    """Unassigned detections of one sensor's last scan (two-point initiation)."""

    time_s: float
    z: F64
    R: F64  # (M, d, d)


class TwoPointInitiator:
    """A tentative track per pair of left-over detections of one sensor in consecutive scans,
    no faster than ``max_speed_mps``; velocity from their difference, both count as hits."""

    def __init__(self, config: TrackerConfig) -> None:
        self.d = config.ndim
        self.max_speed = config.max_speed_mps
        self.gate = config.gate
        self._leftovers: dict[str, _Leftovers] = {}

    def initiate(self, meas: Measurements, room: int) -> tuple[Births | None, int]:
        d = self.d
        z, t = meas.z, meas.time_s
        R_all = meas.R_rows(np.arange(meas.count))
        prev = self._leftovers.get(meas.sensor_id)
        used = np.zeros(z.shape[0], bool)
        births, refused = None, 0
        if prev is not None and prev.z.shape[0] and z.shape[0] and t > prev.time_s:
            dt = t - prev.time_s
            # Bound on the distance: top speed plus the gate on both positions' noise.
            noise = lambda_max_bound(R_all).max() + lambda_max_bound(prev.R).max()
            radius = self.max_speed * dt + math.sqrt(self.gate * noise)
            cur, old = candidate_pairs(z, np.full(z.shape[0], radius), prev.z)
            refused = max(cur.size - room, 0)
            cur, old = cur[:room], old[:room]
            if cur.size:
                v = (z[cur] - prev.z[old]) / dt
                P = np.zeros((cur.size, 2 * d, 2 * d))
                Rc, Ro = R_all[cur], prev.R[old]
                P[:, :d, :d] = Rc
                P[:, :d, d:] = P[:, d:, :d] = Rc / dt
                P[:, d:, d:] = (Rc + Ro) / dt**2
                births = Births(
                    np.concatenate([z[cur], v], axis=1), P, history=3, age=2, hits=2, cols=cur
                )
                used[cur] = True
        if meas.sensor_id not in self._leftovers and len(self._leftovers) >= _MAX_SENSORS:
            del self._leftovers[next(iter(self._leftovers))]  # the sensor heard of longest ago
        self._leftovers.pop(meas.sensor_id, None)
        self._leftovers[meas.sensor_id] = _Leftovers(t, z[~used], np.array(R_all[~used]))
        return births, refused
