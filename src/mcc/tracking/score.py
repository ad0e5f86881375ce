"""The log-likelihood-ratio track score (Sittler; Blackman & Popoli §6.2) and the clutter
density it needs, measured per radar."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from mcc.tracking.base import Measurements

__all__ = ["ClutterDensity", "DetectionProbability", "LLRScore"]

F64 = npt.NDArray[np.float64]
_LOG_2PI = math.log(2.0 * math.pi)
_MAX_SENSORS = 256


@dataclass
class _Extent:
    lo: F64
    hi: F64
    false_per_scan: float
    volume: float  # of lo..hi (`_volume`)


class ClutterDensity:
    """λ per radar: detections no confirmed track took per scan (a running mean) over the
    measurement volume the radar has shown so far (range × 2π [× elevation span] for polar
    detections, the bounding box of its detections for Cartesian ones, at least 1 km per
    axis). Units follow the update: per m·rad for polar, per m^d for Cartesian."""

    def __init__(self, *, smoothing: float = 0.1) -> None:
        self.smoothing = smoothing
        self._by_sensor: dict[str, _Extent] = {}
        self._last: tuple[Measurements, bool, str, F64, F64] | None = None

    def observe(
        self,
        meas: Measurements,
        polar: bool,
        left_over: int | None,
        given_per_scan: float | None = None,
    ) -> float:
        """Record one scan with ``left_over`` detections not taken by confirmed tracks; the
        radar's density λ (> 0). ``left_over=None``: the density before this scan's count
        (JPDA needs λ before it associates), the scan's extent recorded.
        ``given_per_scan``: the radar's false alarms per scan as its owner says
        (SENSORS.yaml ``clutter_per_scan``), used instead of the measured mean."""
        key, lo, hi, fresh = self._extent(meas, polar)
        ext = self._by_sensor.get(key)
        if ext is None:
            if len(self._by_sensor) >= _MAX_SENSORS:
                del self._by_sensor[next(iter(self._by_sensor))]
            first = float(meas.count if left_over is None else left_over)
            ext = self._by_sensor[key] = _Extent(lo, hi, first, _volume(lo, hi, polar))
        else:
            if fresh:  # a scan seen before is inside the extent already
                ext.lo, ext.hi = np.minimum(ext.lo, lo), np.maximum(ext.hi, hi)
                ext.volume = _volume(ext.lo, ext.hi, polar)
            if left_over is not None:
                a = self.smoothing
                ext.false_per_scan = (1 - a) * ext.false_per_scan + a * left_over
        per_scan = ext.false_per_scan if given_per_scan is None else given_per_scan
        return max(per_scan, 0.5) / ext.volume

    def _extent(self, meas: Measurements, polar: bool) -> tuple[str, F64, F64, bool]:
        """The radar's key, the scan's extent in the measurement space, and whether the scan
        is new (the tracker asks up to three times per scan: kept for the last scan)."""
        last = self._last
        if last is not None and last[0] is meas and last[1] == polar:
            return last[2], last[3], last[4], False
        if polar and meas.polar is not None:
            p = meas.polar
            cols = [p.range_m] + ([p.elevation_rad] if p.elevation_rad is not None else [])
            if p.range_rate_mps is not None:
                cols.append(p.range_rate_mps)
            z = np.stack(cols, axis=1) if meas.count else np.zeros((0, len(cols)))
        else:
            z = meas.z
        key = f"{meas.sensor_id}/{'p' if polar else 'c'}{z.shape[1]}"
        if z.shape[0]:
            lo, hi = z.min(axis=0), z.max(axis=0)
            if polar:
                lo[0] = 0.0  # range from the radar out
        else:
            lo = hi = np.zeros(z.shape[1])
        self._last = (meas, polar, key, lo, hi)
        return key, lo, hi, True


def _volume(lo: F64, hi: F64, polar: bool) -> float:
    """The measurement volume of the extent lo..hi: at least 1 km per axis (0.01 rad, or
    m/s, past a polar scan's range), range × 2π for polar detections. In Python floats: a
    tenth of NumPy's time on two or three values (the same products, in the same order)."""
    width = [h - low for low, h in zip(lo.tolist(), hi.tolist(), strict=True)]
    span = [max(w, 0.01 if polar and axis else 1000.0) for axis, w in enumerate(width)]
    return math.prod(span) * 2.0 * math.pi if polar else math.prod(span)


class DetectionProbability:
    """p_d per radar: the one its owner gives (SENSORS.yaml ``pd``), else measured online,
    the share of the confirmed tracks it covered that it detected, with forgetting (``memory``
    scans) and the config's ``pd`` as a prior worth ``prior_weight`` track-scans. Kept in
    [0.3, 0.99]: the score needs ln(1 − p_d)."""

    def __init__(self, prior: float, *, memory: float = 50.0, prior_weight: float = 20.0) -> None:
        self.prior = prior
        self.keep = 1.0 - 1.0 / memory
        self.prior_weight = prior_weight
        self._seen: dict[str, list[float]] = {}  # sensor -> [hits, covered] (decayed sums)

    def of(self, sensor_id: str, given: float | None) -> float:
        if given is not None:
            return float(min(max(given, 0.3), 0.99))
        hits, covered = self._seen.get(sensor_id, (0.0, 0.0))
        w = self.prior_weight
        return float(min(max((w * self.prior + hits) / (w + covered), 0.3), 0.99))

    def observe(self, sensor_id: str, covered: int, hits: int) -> None:
        """One scan: ``covered`` confirmed tracks in the radar's coverage, ``hits`` detected."""
        if sensor_id not in self._seen and len(self._seen) >= _MAX_SENSORS:
            del self._seen[next(iter(self._seen))]
        acc = self._seen.setdefault(sensor_id, [0.0, 0.0])
        acc[0] = self.keep * acc[0] + hits
        acc[1] = self.keep * acc[1] + covered


class LLRScore:
    """Score increments: a hit adds ``ln p_d − ½(d² + ln|S| + m ln 2π) − ln λ``, a covered
    miss ``ln(1 − p_d)``."""

    def __init__(self, pd: float) -> None:
        self.set_pd(pd)

    def set_pd(self, pd: float) -> None:
        """The p_d of the radar whose scan is scored next."""
        self.log_pd = math.log(pd)
        self.log_miss = math.log(1.0 - pd)

    def hit(self, nll: F64, dim: int, density: float) -> F64:
        """Gains of hits whose −2 ln likelihood is ``nll + dim ln 2π`` (``nll`` = d² + ln|S|
        for one Gaussian)."""
        return self.log_pd - 0.5 * (nll + dim * _LOG_2PI) - math.log(density)
