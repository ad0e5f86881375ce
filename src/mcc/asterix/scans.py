"""A radar's plots into scans: `ScanAssembler` (north and sector markers, the scan period) and
`detection_batch` (a scan as a ``DetectionBatch`` at the radar's site).

A batch is closed by a north marker (``per="scan"``) or by any marker (``per="sector"``), and
also by a plot more than ``max_scan_s`` after the batch's first one (a marker lost on the
way), or by the caller (`flush`: a quiet stream, the end of a recording). A radar scanning as
it turns sends a scan's plots between two north markers; a snapshot radar (MCC's simulator)
sends them before the marker that closes them: both come out as one batch per scan.

The scan period is measured from the north markers' own times (the median of the last
`PERIODS_KEPT` intervals between consecutive ones).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from mcc.asterix.cat034 import NORTH, Marker
from mcc.asterix.cat048 import Plot
from mcc.types import DetectionBatch
from mcc.types.arrays import pack

__all__ = ["PERIODS_KEPT", "ScanAssembler", "ScanBatch", "detection_batch", "polar_to_enu"]

PERIODS_KEPT = 16


@dataclass(frozen=True)
class ScanBatch:
    """The plots of one scan (or sector), each with its Unix time, and what closed it."""

    plots: list[Plot]
    times_ns: list[int]
    closed_by: str  # "north", "sector", "time", "flush"
    marker_ns: int | None  # the closing marker's time (None: not closed by a marker)

    @property
    def count(self) -> int:
        return len(self.plots)

    def origin_ns(self) -> int | None:
        """The scan's time: the mean time of its plots, else its closing marker's."""
        if self.times_ns:
            return sum(self.times_ns) // len(self.times_ns)
        return self.marker_ns


@dataclass
class ScanAssembler:
    """Plots and markers of one radar in, closed `ScanBatch`es out."""

    per: Literal["scan", "sector"] = "scan"
    max_scan_s: float = 15.0
    plots: list[Plot] = field(default_factory=list)
    times_ns: list[int] = field(default_factory=list)
    periods_s: deque[float] = field(default_factory=lambda: deque(maxlen=PERIODS_KEPT))
    last_north_ns: int | None = None
    rotation_s: float | None = None  # I034/041, as the radar sends it
    markers: int = 0

    def add_plot(self, plot: Plot, t_ns: int) -> ScanBatch | None:
        """Hold ``plot`` (seen at ``t_ns``); the batch it closed, if it came too late for the
        open one."""
        closed = None
        if self.times_ns and t_ns - self.times_ns[0] > self.max_scan_s * 1e9:
            closed = self._close("time", None)
        self.plots.append(plot)
        self.times_ns.append(t_ns)
        return closed

    def add_marker(self, marker: Marker, t_ns: int | None) -> ScanBatch | None:
        """Take a CAT034 message (``t_ns``: its time, None when it has none); the batch it
        closed, if any."""
        self.markers += 1
        if not math.isnan(marker.rotation_s) and marker.rotation_s > 0:
            self.rotation_s = marker.rotation_s
        if marker.kind == NORTH:
            if t_ns is not None:
                if self.last_north_ns is not None and t_ns > self.last_north_ns:
                    self.periods_s.append((t_ns - self.last_north_ns) / 1e9)
                self.last_north_ns = t_ns
            return self._close("north", t_ns)
        if self.per == "sector" and marker.kind == 2:
            return self._close("sector", t_ns)
        return None

    def flush(self) -> ScanBatch | None:
        """Close the open batch now (None when it holds no plot)."""
        return self._close("flush", None) if self.plots else None

    @property
    def open_since_ns(self) -> int | None:
        return self.times_ns[0] if self.times_ns else None

    @property
    def scan_period_s(self) -> float | None:
        """The measured scan period (None before two north markers)."""
        return statistics.median(self.periods_s) if self.periods_s else None

    def _close(self, why: str, marker_ns: int | None) -> ScanBatch | None:
        if not self.plots and marker_ns is None:
            return None
        batch = ScanBatch(self.plots, self.times_ns, why, marker_ns)
        self.plots, self.times_ns = [], []
        return batch


def polar_to_enu(
    range_m: np.ndarray, azimuth_rad: np.ndarray, height_m: np.ndarray, site_m: Sequence[float]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Elevation and ENU x, y, z of plots at ``range_m``, ``azimuth_rad`` (from north,
    clockwise) and absolute ``height_m`` (NaN: none, elevation 0) seen from ``site_m``, in the
    mission's flat local frame (the frame the simulator and the tracker use)."""
    sx, sy, sz = (float(v) for v in site_m)
    r = np.maximum(range_m, 1e-9)
    with np.errstate(invalid="ignore"):
        sin_el = np.clip((height_m - sz) / r, -1.0, 1.0)
    elevation = np.where(np.isfinite(height_m), np.arcsin(np.nan_to_num(sin_el)), 0.0)
    ground = range_m * np.cos(elevation)
    return (
        elevation,
        sx + ground * np.sin(azimuth_rad),
        sy + ground * np.cos(azimuth_rad),
        sz + range_m * np.sin(elevation),
    )


def detection_batch(
    batch: ScanBatch,
    *,
    sensor_id: str,
    scan_id: int,
    site_m: Sequence[float],
    publish_ns: int,
) -> DetectionBatch:
    """``batch`` as a ``DetectionBatch`` of radar ``sensor_id`` at ``site_m`` (the mission's
    site, never the datagram's): Doppler speeds and amplitudes 0 where a plot has none, IFF
    answers only when a plot of the batch was interrogated."""
    n = batch.count
    origin = batch.origin_ns()
    assert origin is not None
    if n:
        cols = np.array([(p.range_m, p.azimuth_rad, p.height_m) for p in batch.plots], np.float64)
        rng, az, height = cols[:, 0], cols[:, 1], cols[:, 2]
        extra = np.array([(p.doppler_mps, p.amplitude_db) for p in batch.plots], np.float64)
        doppler, amplitude = np.nan_to_num(extra[:, 0]), np.nan_to_num(extra[:, 1])
        iff = np.array([p.iff for p in batch.plots], np.uint8)
    else:
        rng = az = height = doppler = amplitude = np.zeros(0)
        iff = np.zeros(0, np.uint8)
    el, x, y, z = polar_to_enu(rng, az, height, site_m)
    return DetectionBatch(
        sensor_id=sensor_id,
        scan_id=scan_id,
        origin_ns=origin,
        publish_ns=publish_ns,
        sensor_x_m=float(site_m[0]),
        sensor_y_m=float(site_m[1]),
        sensor_z_m=float(site_m[2]),
        count=n,
        range_m=pack(rng, "<f8"),
        azimuth_rad=pack(az, "<f8"),
        elevation_rad=pack(el, "<f8"),
        radial_velocity_mps=pack(doppler, "<f8"),
        snr_db=pack(amplitude, "<f8"),
        x_m=pack(x, "<f8"),
        y_m=pack(y, "<f8"),
        z_m=pack(z, "<f8"),
        iff=pack(iff, "u1") if iff.any() else b"",
    )
