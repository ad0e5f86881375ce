"""The steps of the tracking pipeline as interfaces over arrays.

One scan goes through: a `Predictor` (a bank of filters, one row per track) predicts every
track to the scan time; a `Gater` finds the (track, detection) pairs inside the chi-square gate,
with the innovations of an `Updater`; an `Associator` picks the pairs to update; the `Updater`
updates them; a `Deleter` ends tracks; an `Initiator` starts tentative tracks from the detections
left over. `mcc.tracking.MultiTargetTracker` composes one of each. Tracks are rows (index ``i``),
detections columns (index ``j``); positions in metres, times in seconds, no DDS anywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from mcc.tracking.scan import PolarDetections

__all__ = [
    "Associator",
    "Births",
    "Deleter",
    "Gated",
    "Gater",
    "Initiator",
    "Measurements",
    "Predictor",
    "TrackLife",
    "Updater",
    "grown",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]
_A = TypeVar("_A", bound=npt.NDArray[Any])


def grown(a: _A, k: int, value: object) -> _A:
    """``a`` with ``k`` rows of ``value`` (broadcast to a row's shape) appended, in its dtype:
    one allocation, where `np.concatenate` of a `np.full` or a repeat makes two (half the time
    or less for the tracker's per-track arrays, which every scan's births grow)."""
    n = a.shape[0]
    out = np.empty((n + k, *a.shape[1:]), a.dtype)
    out[:n] = a
    out[n:] = value
    return out  # type: ignore[return-value]  # np.empty of a's shape and dtype


@dataclass(frozen=True, eq=False)
class Measurements:
    """One scan's detections as arrays: Cartesian ``z (M, d)`` with covariance ``R`` (``(d, d)``
    shared or ``(M, d, d)`` per detection), and the raw polar ones when the radar gave them."""

    sensor_id: str
    time_s: float
    z: F64
    R: F64
    polar: PolarDetections | None = None
    iff: npt.NDArray[np.uint8] | None = None  # (M,) IffAnswer values; None: none asked

    @property
    def count(self) -> int:
        return int(self.z.shape[0])

    def R_rows(self, cols: I64) -> F64:
        """The covariance of detections ``cols``, ``(K, d, d)``."""
        if self.R.ndim == 3:
            return self.R[cols]
        return np.broadcast_to(self.R, (cols.size, *self.R.shape))

    def subset(self, cols: I64) -> Measurements:
        """The detections ``cols`` only."""
        R = self.R[cols] if self.R.ndim == 3 else self.R
        polar = None
        if self.polar is not None:
            p = self.polar
            polar = PolarDetections(
                p.range_m[cols],
                p.azimuth_rad[cols],
                None if p.elevation_rad is None else p.elevation_rad[cols],
                None if p.range_rate_mps is None else p.range_rate_mps[cols],
                p.sigma_range_m,
                p.sigma_azimuth_rad,
                p.sigma_elevation_rad,
                p.sigma_range_rate_mps,
                p.sensor_position_m,
            )
        iff = None if self.iff is None else self.iff[cols]
        return Measurements(self.sensor_id, self.time_s, self.z[cols], R, polar, iff)


class Gated(NamedTuple):
    """Pairs inside the gate: track ``ti``, detection ``mj``, squared Mahalanobis distance
    ``d2`` and ``logdet`` = ln|S| of each pair's innovation covariance."""

    ti: I64
    mj: I64
    d2: F64
    logdet: F64


class Births(NamedTuple):
    """Tentative tracks to start: states, covariances and their M-of-N bookkeeping."""

    x: F64  # (K, n)
    P: F64  # (K, n, n)
    history: int  # hit history bits (bit 0 = this scan)
    age: int  # scans since birth, this one included
    hits: int  # detections used
    cols: I64 | None = None  # (K,) the detection at each birth's position (its IFF answer)


class TrackLife(NamedTuple):
    """The per-track counters a `Deleter` decides on (views of the tracker's arrays)."""

    tentative: B  # not yet confirmed (before this step's promotions)
    promoted: B  # confirmed in this step
    history: npt.NDArray[np.uint32]  # M-of-N hit bits
    age: I64  # covered scans since birth
    misses: I64  # consecutive misses
    update_s: F64  # time of the last update
    period_s: F64  # scan period of the radar that last updated it (0: unknown)
    score: F64  # log-likelihood-ratio track score


class Updater(Protocol):
    """Measurement update of a batch of predicted states. ``x`` is ``(K, n)``, or ``(K, M, n)``
    for an IMM's M models (the detections broadcast over the model axis)."""

    def dim(self, meas: Measurements) -> int:
        """The measurement dimension the update uses for ``meas``."""
        ...

    def innovation(self, x: F64, P: F64, meas: Measurements, cols: I64) -> tuple[F64, F64]:
        """Innovations ``y (K, [M,] m)`` of detections ``cols`` and their covariances ``S``."""
        ...

    def pair_innovation(
        self, x: F64, P: F64, meas: Measurements, rows: I64, cols: I64
    ) -> tuple[F64, F64]:
        """`innovation` of ``x[rows]``, ``P[rows]`` with detections ``cols`` (``x`` ``(N, n)``
        or ``(N, M, n)``); an updater may linearise once per row rather than per pair."""
        ...

    def update(self, x: F64, P: F64, meas: Measurements, cols: I64) -> tuple[F64, F64, F64]:
        """Posterior ``x``, ``P`` and the log-likelihood of each detection ``(K, [M])``."""
        ...

    def pair_update(
        self, x: F64, P: F64, meas: Measurements, rows: I64, cols: I64
    ) -> tuple[F64, F64, F64]:
        """`update` of ``x[rows]``, ``P[rows]`` with detections ``cols`` (JPDA: a row with
        several detections; an updater may compute its gain once)."""
        ...


class Predictor(Protocol):
    """A bank of N filters, one row per track, predicted and updated in place."""

    def __len__(self) -> int: ...

    def predict(self, dt_s: F64) -> None:
        """Every track ``dt_s (N,)`` seconds ahead."""
        ...

    def estimate(self) -> tuple[F64, F64]:
        """The (combined) estimates ``x (N, n)``, ``P (N, n, n)``."""
        ...

    def update(self, rows: I64, updater: Updater, meas: Measurements, cols: I64) -> None:
        """Tracks ``rows`` with detections ``cols`` (same length)."""
        ...

    def pda_update(
        self,
        ti: I64,
        updater: Updater,
        meas: Measurements,
        mj: I64,
        weigh: Callable[[F64, F64 | None], tuple[F64, I64, F64]],
    ) -> tuple[F64, I64, F64]:
        """JPDA: every pair ``(ti, mj)`` updates its track, weighted by the marginals that
        ``weigh`` gives from the pairs' log-likelihoods ``(K,)`` and those JPDA* ranks its
        events by (None: the same): ``β (K,)``, the tracks ``(T,)`` (sorted) and ``β_t0 (T,)``,
        which it returns."""
        ...

    def append(self, x: F64, P: F64) -> None: ...

    def keep(self, mask: B) -> None: ...


class Gater(Protocol):
    """The (track, detection) pairs inside the gate."""

    def gate(self, x: F64, P: F64, meas: Measurements, updater: Updater) -> Gated: ...


class Associator(Protocol):
    """Which gated pairs update their track. ``first`` marks the pairs of tracks that choose
    before the others (confirmed tracks before tentative ones)."""

    def associate(self, gated: Gated, first: B, n_meas: int) -> tuple[I64, I64]: ...


class Initiator(Protocol):
    """Tentative tracks from the detections no track took."""

    def initiate(self, meas: Measurements, room: int) -> tuple[Births | None, int]:
        """Births from ``meas`` (the left-over detections), at most ``room`` of them, and how
        many were refused for want of room."""
        ...


class Deleter(Protocol):
    """Which tracks end after this scan."""

    def delete(self, life: TrackLife, P: F64, time_s: float) -> B: ...
