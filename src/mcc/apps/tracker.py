"""The multi-target tracker: a vectorised multi-radar tracker and the ``tracker`` app.

`MultiTargetTracker` (no DDS, plain arrays) keeps every track as rows of arrays and processes
one `Scan` (the detections of one radar at one time) per `MultiTargetTracker.step`:

1. **predict** every track to the scan time (per-track ``dt``), a bank of CV Kalman filters or
   an IMM (CV + two coordinated turns), `mcc.compute.kalman`;
2. **gate**: squared Mahalanobis distance against the chi-square gate of
   ``gate_probability``, computed only for the pairs that a spatial grid finds within the
   gate's bounding radius (``sqrt(gate · λmax(S))``), so the cost grows with the number of
   close pairs, not with tracks × detections;
3. **associate**: global nearest neighbour over the gated pairs with the cost model of
   `mcc.compute.associate.gnn_assign` (a pair costs d², leaving a track or a detection out
   costs gate/2), confirmed tracks first, then tentative tracks on the detections left;
   split into independent clusters: 1×k and k×1 clusters in one vectorised step, the others
   together in one assignment problem (`linear_sum_assignment`, or the sparse
   Jonker-Volgenant solver `min_weight_full_bipartite_matching` when large);
4. **update** the assigned tracks (Kalman update with the detection's covariance);
5. **track life**: M-of-N confirmation of tentative tracks (`MofNInitiator`), consecutive
   misses counted only where the sensor covers the track (``Scan.coverage``), coasting after
   ``coast_after_misses``, deletion after ``max_misses``, when the position covariance
   grows past ``max_position_std_m`` (`deletion_mask`) or after ``max_coast_s`` without an
   update;
6. **initiate** tentative tracks from the detections left over: one-point (position from the
   detection, zero velocity with ``init_velocity_std_mps``) or two-point (pairs of left-over
   detections of the same sensor in consecutive scans, no faster than ``max_speed_mps``).

Tracks get their id (a counter from 1, never reused) when confirmed; tentative tracks are
internal and have id 0. Works in 2-D (``ndim=2``, state ``[x y vx vy]``, the classic benchmark)
and 3-D (``ndim=3``, state ``[x y z vx vy vz]``, the bus order of ``Track``/``AirPicture``).
Metres, seconds, m/s; detections from range/azimuth/elevation (`Scan.from_polar`, covariance by
`kalman.rae_covariance`) or Cartesian positions with a given covariance.

The ``tracker`` app runs it on the bus: ``DetectionBatch`` (all radars) in, one ``AirPicture``
per cycle and keyed ``Track`` samples out (see `tracker`).

>>> trk = MultiTargetTracker(TrackerConfig(ndim=2, sigma_a_mps2=5.0))
>>> for k in range(3):                # one target at 10 m/s, a radar with 10 m noise
...     report = trk.step(Scan(float(k), np.array([[10.0 * k, 0.0]]), np.diag([100.0, 100.0])))
>>> trk.tracks().ids                  # confirmed and coasting tracks, as arrays
array([1], dtype=uint32)
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import heapq
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import scipy.sparse
import yaml
from scipy.optimize import linear_sum_assignment
from scipy.sparse.csgraph import min_weight_full_bipartite_matching

from mcc.compute import kalman
from mcc.compute.associate import (
    MofNInitiator,
    chi2_gate_threshold,
    count_misses,
    deletion_mask,
)
from mcc.errors import ComputeError, MccError
from mcc.orchestrate.runtime import ENV_EPOCH, AppContext
from mcc.security.mission import Topics
from mcc.types import AirPicture, DetectionBatch, TargetClass, Track, TrackStatus
from mcc.types.arrays import pack, packed_field


def _scenario(path: str) -> object:
    from mcc.apps.scenario import load_scenario

    return load_scenario(path)


#: Files its arguments name, with their loaders: `mcc validate` checks they exist and parse.
FILE_ARGS = {"--scenario": _scenario}
BUS_TOPICS = {"tracker": Topics(publish=("AirPicture", "Track"), subscribe=("DetectionBatch",))}

__all__ = [
    "MultiTargetTracker",
    "Scan",
    "StepReport",
    "TrackTable",
    "TrackerConfig",
    "TrackerConfigError",
    "tracker",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Coverage = Callable[[F64], npt.NDArray[np.bool_]]

_TENTATIVE = int(TrackStatus.TRACK_TENTATIVE.value)
_CONFIRMED = int(TrackStatus.TRACK_CONFIRMED.value)
_COASTING = int(TrackStatus.TRACK_COASTING.value)
_DELETED = int(TrackStatus.TRACK_DELETED.value)
_EMPTY_I64 = np.zeros(0, np.int64)
_MAX_SENSORS = 256  # sensors whose last left-over detections are kept (two-point initiation)


class TrackerConfigError(MccError, ValueError):
    """A tracker parameter is unknown, of the wrong type or out of range (the message names it)."""


# ---------------------------------------------------------------------------------------------
# Configuration


@dataclass(frozen=True)
class TrackerConfig:
    """Every parameter of `MultiTargetTracker`, declared once with its type, default and unit.

    Round-trips through `to_dict`/`from_dict` and `to_yaml`/`from_yaml`; a bad value raises
    `TrackerConfigError` naming the field.
    """

    ndim: int = 3
    """Position dimensions: 2 (state ``[x y vx vy]``) or 3 (``[x y z vx vy vz]``)."""
    model: Literal["cv", "imm"] = "cv"
    """Motion model: ``cv`` (constant velocity) or ``imm`` (CV + coordinated turns ±rate)."""
    sigma_a_mps2: float = 10.0
    """Process noise: standard deviation of the white acceleration, m/s²."""
    noise_model: Literal["discrete", "continuous"] = "discrete"
    """``discrete``: Q = σ² G Gᵀ, G = [dt²/2, dt] (piecewise-constant acceleration per step);
    ``continuous``: σ² is the power spectral density (`kalman.cv_process_noise`)."""
    imm_turn_rate_dps: float = 6.0
    """IMM: turn rate of the two coordinated-turn models (left and right), degrees/s."""
    imm_switch_prob: float = 0.05
    """IMM: probability of changing model between two scans, split evenly over the others."""
    gate_probability: float = 0.999
    """Chi-square gate: a true detection falls inside with this probability."""
    initiation: Literal["one_point", "two_point"] = "one_point"
    """``one_point``: a tentative track per left-over detection; ``two_point``: per pair of
    left-over detections of one sensor in consecutive scans (velocity from their difference;
    both count as hits)."""
    init_velocity_std_mps: float = 300.0
    """One-point initiation: prior velocity standard deviation per axis, m/s."""
    max_speed_mps: float = 1000.0
    """Two-point initiation: fastest target; farther pairs are not started, m/s."""
    confirm_m: int = 2
    """M of M-of-N: a tentative track is confirmed after ``confirm_m`` hits in ..."""
    confirm_n: int = 3
    """... its last ``confirm_n`` scans that covered it (deleted once out of reach)."""
    max_misses: int = 3
    """A confirmed track is deleted after more consecutive misses than this (scans)."""
    coast_after_misses: int = 1
    """A confirmed track is shown coasting after this many consecutive misses (scans)."""
    max_position_std_m: float = 2000.0
    """A track is deleted when ``sqrt(trace(P_position))`` exceeds this, metres."""
    max_coast_s: float = 3.0
    """A track is deleted when no detection updated it for longer than this, seconds (a track
    that left every sensor's coverage counts no misses)."""
    max_tracks: int = 20_000
    """No track is started while the tracker holds this many (tentative ones included): a
    flood of detections costs a bounded amount of memory and time per scan."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check_type(f.name, getattr(self, f.name), f.type)
        _choice("ndim", self.ndim, (2, 3))
        _choice("model", self.model, ("cv", "imm"))
        _choice("noise_model", self.noise_model, ("discrete", "continuous"))
        _choice("initiation", self.initiation, ("one_point", "two_point"))
        _positive("sigma_a_mps2", self.sigma_a_mps2, strict=False)
        _positive("imm_turn_rate_dps", self.imm_turn_rate_dps)
        _positive("init_velocity_std_mps", self.init_velocity_std_mps)
        _positive("max_speed_mps", self.max_speed_mps)
        _positive("max_position_std_m", self.max_position_std_m)
        _positive("max_coast_s", self.max_coast_s)
        if not 0.0 <= self.imm_switch_prob < 1.0:
            _bad("imm_switch_prob", self.imm_switch_prob, "allowed [0, 1)")
        if not 0.0 < self.gate_probability < 1.0:
            _bad("gate_probability", self.gate_probability, "allowed (0, 1), e.g. 0.999")
        if not 1 <= self.confirm_n <= 32:
            _bad("confirm_n", self.confirm_n, "allowed 1..32 scans")
        if not 1 <= self.confirm_m <= self.confirm_n:
            _bad("confirm_m", self.confirm_m, f"allowed 1..confirm_n ({self.confirm_n})")
        if self.max_misses < 0:
            _bad("max_misses", self.max_misses, "allowed >= 0 scans")
        if self.coast_after_misses < 1:
            _bad("coast_after_misses", self.coast_after_misses, "allowed >= 1 scan")
        if self.max_tracks < 1:
            _bad("max_tracks", self.max_tracks, "allowed >= 1 track")

    @property
    def gate(self) -> float:
        """The squared-Mahalanobis gate, ``chi2.ppf(gate_probability, ndim)``."""
        return chi2_gate_threshold(self.gate_probability, self.ndim)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "TrackerConfig") -> TrackerConfig:
        """A config from a mapping (e.g. YAML); unknown keys are errors, missing ones default."""
        if not isinstance(data, Mapping):
            raise TrackerConfigError(f"{source}: a tracker config is a mapping of field: value")
        names = [f.name for f in dataclasses.fields(cls)]
        for key in data:
            if key not in names:
                close = [n for n in names if str(key) in n] or difflib.get_close_matches(
                    str(key), names, n=1
                )
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise TrackerConfigError(
                    f"{source}: unknown field {key!r}{hint}; fields: {', '.join(names)}"
                )
        try:
            return cls(**data)
        except TrackerConfigError as exc:
            raise TrackerConfigError(f"{source}: {exc}") from None

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    @classmethod
    def from_yaml(cls, text: str, *, source: str = "<yaml>") -> TrackerConfig:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise TrackerConfigError(f"{source}: not valid YAML ({exc})") from None
        return cls.from_dict(data or {}, source=source)

    @classmethod
    def load(cls, path: str | Path) -> TrackerConfig:
        """Read a YAML file of tracker parameters."""
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise TrackerConfigError(
                f"{path}: cannot read the tracker config ({exc.strerror})"
            ) from None
        return cls.from_yaml(text, source=str(path))


def _bad(name: str, value: Any, allowed: str) -> None:
    raise TrackerConfigError(f"TrackerConfig.{name}={value!r} is out of range; {allowed}")


def _choice(name: str, value: Any, choices: tuple[Any, ...]) -> None:
    if value not in choices:
        _bad(name, value, "allowed " + " | ".join(repr(c) for c in choices))


def _positive(name: str, value: float, *, strict: bool = True) -> None:
    if not (math.isfinite(value) and (value > 0 if strict else value >= 0)):
        _bad(name, value, f"allowed a finite number {'>' if strict else '>='} 0")


def _check_type(name: str, value: Any, annotation: Any) -> None:
    text = str(annotation)
    if text == "int":
        ok = isinstance(value, int | np.integer) and not isinstance(value, bool)
        kind = "an integer"
    elif text == "float":
        ok = isinstance(value, int | float | np.number) and not isinstance(value, bool)
        kind = "a number"
    else:  # Literal[...] of strings
        ok = isinstance(value, str)
        kind = "a string"
    if not ok:
        raise TrackerConfigError(
            f"TrackerConfig.{name}={value!r} has the wrong type; expected {kind}"
        )


# ---------------------------------------------------------------------------------------------
# Inputs and outputs


@dataclass(frozen=True, eq=False)
class Scan:
    """One radar scan: ``M`` position measurements at ``time_s`` and their covariance.

    ``positions_m`` is ``(M, ndim)``; ``covariance_m2`` is ``(ndim, ndim)`` for all detections
    or ``(M, ndim, ndim)`` per detection. ``coverage(positions (N, ndim)) -> bool (N,)`` says
    which tracks the sensor could have seen; only those count a miss (None: all of them).
    """

    time_s: float
    positions_m: F64
    covariance_m2: F64
    sensor_id: str = ""
    coverage: Coverage | None = None

    @property
    def count(self) -> int:
        return int(np.shape(self.positions_m)[0])

    @classmethod
    def from_polar(
        cls,
        time_s: float,
        range_m: npt.ArrayLike,
        azimuth_rad: npt.ArrayLike,
        elevation_rad: npt.ArrayLike,
        *,
        sigma_range_m: float,
        sigma_azimuth_rad: float,
        sigma_elevation_rad: float,
        sensor_position_m: npt.ArrayLike = (0.0, 0.0, 0.0),
        sensor_id: str = "",
        coverage: Coverage | None = None,
    ) -> Scan:
        """A 3-D scan from range/azimuth (from north, clockwise)/elevation detections, with
        the linearised covariance of each (`kalman.rae_to_enu`, `kalman.rae_covariance`)."""
        r = np.asarray(range_m, dtype=np.float64).reshape(-1)
        az = np.asarray(azimuth_rad, dtype=np.float64).reshape(-1)
        el = np.asarray(elevation_rad, dtype=np.float64).reshape(-1)
        pos = kalman.rae_to_enu(r, az, el, sensor_pos=sensor_position_m, xp=np).reshape(-1, 3)
        cov = kalman.rae_covariance(
            r,
            az,
            el,
            sigma_range_m=sigma_range_m,
            sigma_azimuth_rad=sigma_azimuth_rad,
            sigma_elevation_rad=sigma_elevation_rad,
            xp=np,
        ).reshape(-1, 3, 3)
        return cls(float(time_s), pos, cov, sensor_id=sensor_id, coverage=coverage)


@dataclass(frozen=True, eq=False)
class TrackTable:
    """Tracks as parallel arrays of ``N`` rows (a snapshot, not a view of the tracker)."""

    ids: npt.NDArray[np.uint32]  # 0 for tentative tracks
    status: npt.NDArray[np.uint8]  # TrackStatus values
    x: F64  # (N, 2*ndim) state: positions then velocities
    P: F64  # (N, 2*ndim, 2*ndim)
    quality: F64  # (N,) hits in the last confirm_n covered scans / confirm_n
    hits: I64  # (N,) detections assigned since birth
    misses: I64  # (N,) consecutive misses
    update_s: F64  # (N,) time of the last detection assigned
    birth_s: F64  # (N,) time of the first detection

    @property
    def count(self) -> int:
        return int(self.ids.shape[0])

    @property
    def ndim(self) -> int:
        return int(self.x.shape[1] // 2)

    @property
    def positions_m(self) -> F64:
        return self.x[:, : self.ndim]

    @property
    def velocities_mps(self) -> F64:
        return self.x[:, self.ndim :]


@dataclass(frozen=True, eq=False)
class StepReport:
    """What one `MultiTargetTracker.step` did."""

    time_s: float
    detections: int
    assigned: int  # detections assigned to tracks
    initiated: int  # tentative tracks started
    confirmed: npt.NDArray[np.uint32]  # ids of the tracks confirmed in this step
    deleted: npt.NDArray[np.uint32]  # ids of the confirmed tracks deleted in this step
    status_changed: npt.NDArray[np.uint32]  # ids that went confirmed <-> coasting
    tracks: int  # confirmed + coasting after the step
    tentative: int  # tentative tracks after the step
    not_initiated: int = 0  # detections left over that started no track: max_tracks reached


# ---------------------------------------------------------------------------------------------
# Filter banks: CV Kalman filters or IMMs, one row per track


class _CVBank:
    """N constant-velocity Kalman filters: ``x (N, n)``, ``P (N, n, n)``."""

    def __init__(self, config: TrackerConfig) -> None:
        self.d = config.ndim
        self.n = 2 * config.ndim
        self.sigma_a = config.sigma_a_mps2
        self.noise_model = config.noise_model
        self.x: F64 = np.zeros((0, self.n))
        self.P: F64 = np.zeros((0, self.n, self.n))

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def predict(self, dt: F64) -> None:
        self.x, self.P = _cv_predict(self.x, self.P, dt, self.sigma_a, self.d, self.noise_model)

    def estimate(self) -> tuple[F64, F64]:
        return self.x, self.P

    def update(self, rows: I64, z: F64, R: F64) -> None:
        self.x[rows], self.P[rows] = _position_update(self.x[rows], self.P[rows], z, R, self.d)

    def append(self, x: F64, P: F64) -> None:
        self.x = np.concatenate([self.x, x])
        self.P = np.concatenate([self.P, P])

    def keep(self, mask: npt.NDArray[np.bool_]) -> None:
        self.x, self.P = self.x[mask], self.P[mask]


class _IMMBank:
    """N IMMs (`kalman.imm_predict`/`imm_update`) of a CV and two coordinated-turn models."""

    def __init__(self, config: TrackerConfig) -> None:
        self.d = config.ndim
        self.n = 2 * config.ndim
        self.sigma_a = config.sigma_a_mps2
        self.noise_model = config.noise_model
        w = math.radians(config.imm_turn_rate_dps)
        self.turn_rates = np.array([0.0, w, -w])
        m = self.turn_rates.size
        p = config.imm_switch_prob
        self.trans_prob = np.full((m, m), p / (m - 1))
        np.fill_diagonal(self.trans_prob, 1.0 - p)
        self.mu0 = np.array([0.8, 0.1, 0.1])
        self.H = kalman.cv_measurement_matrix(ndim=self.d)
        self.state = kalman.IMMState(
            np.zeros((0, m, self.n)), np.zeros((0, m, self.n, self.n)), np.zeros((0, m))
        )
        self._combined: tuple[F64, F64] | None = None

    def __len__(self) -> int:
        return int(self.state.x.shape[0])

    def predict(self, dt: F64) -> None:
        if len(self) == 0 or not dt.max() > 0:
            return
        F, Q = kalman.imm_models(
            dt,
            turn_rates_rps=self.turn_rates,
            sigma_a=self.sigma_a,
            ndim=self.d,
            noise_model=self.noise_model,
            xp=np,
        )
        self.state = kalman.imm_predict(self.state, F=F, Q=Q, trans_prob=self.trans_prob, xp=np)
        self._combined = None

    def estimate(self) -> tuple[F64, F64]:
        if self._combined is None:
            self._combined = kalman.imm_combine(self.state, xp=np)
        return self._combined

    def update(self, rows: I64, z: F64, R: F64) -> None:
        sub = kalman.IMMState(self.state.x[rows], self.state.P[rows], self.state.mu[rows])
        if R.ndim == 2:
            R = np.broadcast_to(R, (rows.size, *R.shape))
        new, _ = kalman.imm_update(sub, z, self.H, R, xp=np)
        self.state.x[rows], self.state.P[rows], self.state.mu[rows] = new
        self._combined = None

    def append(self, x: F64, P: F64) -> None:
        new = kalman.imm_initiate(x, P, self.mu0, xp=np)
        self.state = kalman.IMMState(
            *(np.concatenate([a, b]) for a, b in zip(self.state, new, strict=True))
        )
        self._combined = None

    def keep(self, mask: npt.NDArray[np.bool_]) -> None:
        self.state = kalman.IMMState(*(a[mask] for a in self.state))
        self._combined = None


def _cv_predict(
    x: F64, P: F64, dt: F64, sigma_a: float, d: int, noise_model: str
) -> tuple[F64, F64]:
    """`kalman.predict` with `cv_transition` and `cv_process_noise`, arranged for speed.

    When every track has the same ``dt`` (the usual case: all tracks are at the last scan's
    time), ``F P Fᵀ`` is one matrix product over all tracks, ``vec(P) (F ⊗ F)ᵀ``. Otherwise
    `kalman.predict` runs with F in Fortran order, so its product with the transposed view of
    F stays on NumPy's fast path. Same results as `kalman.predict` (the tests check it).
    """
    n_tracks = x.shape[0]
    if n_tracks == 0:
        return x, P
    lo, hi = float(dt.min()), float(dt.max())
    if hi <= 0.0:
        return x, P
    if lo == hi:
        FT, FFT, Q = _cv_model(lo, sigma_a, d, noise_model)
        P_new = _tall_matmul(P.reshape(n_tracks, -1), FFT).reshape(P.shape)
        P_new += Q
        return _tall_matmul(x, FT), P_new
    model: Any = noise_model
    F = kalman.cv_transition(dt, ndim=d, xp=np)
    Q = kalman.cv_process_noise(dt, sigma_a, ndim=d, model=model, xp=np)
    F_fortran = F.swapaxes(-1, -2).copy().swapaxes(-1, -2)
    return kalman.predict(x, P, F_fortran, Q, xp=np)


@functools.lru_cache(maxsize=64)
def _cv_model(dt_s: float, sigma_a: float, d: int, noise_model: str) -> tuple[F64, F64, F64]:
    """``Fᵀ``, ``(F ⊗ F)ᵀ`` and ``Q`` of one step (radars repeat their few periods)."""
    model: Any = noise_model
    F = kalman.cv_transition(dt_s, ndim=d, xp=np)
    Q = kalman.cv_process_noise(dt_s, sigma_a, ndim=d, model=model, xp=np)
    return np.ascontiguousarray(F.T), np.ascontiguousarray(np.kron(F, F).T), Q


def _tall_matmul(a: F64, b: F64, *, rows: int = 512) -> F64:
    """``a @ b`` for a tall ``a`` (N × k, small k), in blocks of ``rows`` rows.

    OpenBLAS spreads one tall, narrow product over all its threads; on a busy machine waiting
    for them costs 10-50× the product itself (measured: 2.5-8 ms instead of 0.16 ms for
    4000 × 16 @ 16 × 16). Blocks of 512 rows stay on the calling thread.
    """
    out = np.empty((a.shape[0], b.shape[1]))
    for i in range(0, a.shape[0], rows):
        np.matmul(a[i : i + rows], b, out=out[i : i + rows])
    return out


def _position_update(x: F64, P: F64, z: F64, R: F64, d: int) -> tuple[F64, F64]:
    """Kalman update with ``H = [I 0]`` (the measurement is the position), batched over rows.

    The same estimate as `kalman.update` (checked by the tests) written for this H: ``P Hᵀ`` and
    ``H P`` are slices, ``S⁻¹`` is closed form, ``P⁺ = P − K H P`` (symmetrised).
    """
    if x.shape[0] == 0:
        return x, P
    PHt = P[:, :, :d]  # (K, n, d)
    S = P[:, :d, :d] + R
    S_inv = _inv_small(S)
    K = PHt @ S_inv  # (K, n, d)
    y = z - x[:, :d]
    x_post = x + np.einsum("kij,kj->ki", K, y)
    P_post = P - K @ np.ascontiguousarray(P[:, :d, :])
    P_post = 0.5 * (P_post + P_post.transpose(0, 2, 1))
    return x_post, P_post


def _inv_small(S: F64) -> F64:
    """Inverses of a stack of symmetric positive-definite 1×1, 2×2 or 3×3 matrices, closed form
    (LAPACK's batched inverse costs ~0.6 µs per 2×2 matrix, this ~0.03 µs)."""
    d = S.shape[-1]
    if d == 1:
        det = S[..., 0, 0]
        out = 1.0 / S
    elif d == 2:
        a, b, c = S[..., 0, 0], S[..., 0, 1], S[..., 1, 1]
        det = a * c - b * b
        out = np.empty_like(S)
        out[..., 0, 0] = c
        out[..., 1, 1] = a
        out[..., 0, 1] = out[..., 1, 0] = -b
        out /= det[..., None, None]
    elif d == 3:
        # The adjugate's columns are cross products of the columns.
        c0, c1, c2 = S[..., :, 0], S[..., :, 1], S[..., :, 2]
        adj = np.stack([np.cross(c1, c2), np.cross(c2, c0), np.cross(c0, c1)], axis=-2)
        det = np.einsum("...i,...i->...", c0, adj[..., 0, :])
        out = adj / det[..., None, None]
    else:
        return np.asarray(np.linalg.inv(S), dtype=np.float64)
    if not bool((det > 0).all()):
        raise ComputeError("an innovation covariance is not positive definite; check R and P")
    return out


# ---------------------------------------------------------------------------------------------
# Gating and assignment over sparse pairs


def _candidate_pairs(track_pos: F64, radius: F64, meas_pos: F64) -> tuple[I64, I64]:
    """All (track, measurement) pairs closer than the track's ``radius``, via a hashed grid.

    Tracks are grouped by radius (within a factor 4); each group hashes the measurements into
    square cells (x-y only) as wide as its largest radius and looks in the 3×3 cells around
    each track. Cell ``(i, j)`` goes to slot ``(i·W + j) mod 2^k``, ``W`` the grid's height in
    cells and ``2^k > 2W + 2``, so the 9 cells around a track fall in 9 different slots; other
    collisions only add candidates, which the distance test removes. Cost: O(N + M +
    candidates) per group, no N × M array.
    """
    n, m = track_pos.shape[0], meas_pos.shape[0]
    if n == 0 or m == 0:
        return _EMPTY_I64, _EMPTY_I64
    tx, ty = np.ascontiguousarray(track_pos[:, 0]), np.ascontiguousarray(track_pos[:, 1])
    mx, my = np.ascontiguousarray(meas_pos[:, 0]), np.ascontiguousarray(meas_pos[:, 1])
    y_lo = min(float(ty.min()), float(my.min()))
    y_span = max(float(ty.max()), float(my.max())) - y_lo
    group = np.ceil(np.log2(np.maximum(radius, 1e-6)) * 0.5).astype(np.int64)
    g_lo, g_hi = int(group.min()), int(group.max())
    out_i, out_j = [], []
    for g in range(g_lo, g_hi + 1):
        sel = None if g_lo == g_hi else np.flatnonzero(group == g)
        if sel is not None and sel.size == 0:
            continue
        scale = 1.0 / float(radius.max() if sel is None else radius[sel].max())
        width = min(int(y_span * scale) + 3, 1 << 20)
        slots = 1 << max(int(4 * m).bit_length(), int(2 * width + 2).bit_length())
        mask = slots - 1
        # Truncation, not floor: cell 0 is twice as wide, and points closer than a cell
        # still fall in the same or adjacent cells.
        mkey = (mx * scale).astype(np.int64) * width + ((my - y_lo) * scale).astype(np.int64)
        mkey &= mask
        sx, sy = (tx, ty) if sel is None else (tx[sel], ty[sel])
        tkey = (sx * scale).astype(np.int64) * width + ((sy - y_lo) * scale).astype(np.int64)
        order = np.argsort(mkey)
        count = np.bincount(mkey, minlength=slots)
        start = np.cumsum(count) - count
        offsets = np.array([a * width + b for a in (-1, 0, 1) for b in (-1, 0, 1)])
        nkey = (tkey[:, None] + offsets).ravel() & mask
        counts = count[nkey]
        total = int(counts.sum())
        if total == 0:
            continue
        rows = np.arange(tkey.size) if sel is None else sel
        ti = np.repeat(np.repeat(rows, offsets.size), counts)
        first = np.cumsum(counts) - counts
        mj = order[np.repeat(start[nkey] - first, counts) + np.arange(total)]
        d2 = (tx[ti] - mx[mj]) ** 2 + (ty[ti] - my[mj]) ** 2
        if track_pos.shape[1] > 2:
            d2 += ((track_pos[:, 2:][ti] - meas_pos[:, 2:][mj]) ** 2).sum(axis=1)
        near = d2 <= radius[ti] ** 2
        out_i.append(ti[near])
        out_j.append(mj[near])
    if not out_i:
        return _EMPTY_I64, _EMPTY_I64
    return np.concatenate(out_i), np.concatenate(out_j)


def _lambda_max_bound(S: F64) -> F64:
    """An upper bound of the largest eigenvalue of symmetric PSD matrices ``(..., d, d)``:
    exact for 2×2, else the smaller of the trace and the Gershgorin bound."""
    d = S.shape[-1]
    if d == 2:
        a, b, c = S[..., 0, 0], S[..., 0, 1], S[..., 1, 1]
        return 0.5 * (a + c) + np.sqrt(0.25 * (a - c) ** 2 + b * b)
    trace = np.trace(S, axis1=-2, axis2=-1)
    gershgorin = np.abs(S).sum(axis=-1).max(axis=-1)
    return np.minimum(trace, gershgorin)


def _quad(A: F64, v: F64) -> F64:
    """``vᵀ A v`` over a batch: ``A (K, d, d)``, ``v (K, d)``."""
    return np.einsum("ki,kij,kj->k", v, A, v, optimize=False)


def _gnn_sparse(ti: I64, mj: I64, cost: F64, *, max_cost: float) -> tuple[I64, I64]:
    """Global nearest neighbour on gated pairs (``cost <= max_cost``): the assignment of
    minimum total cost where leaving a track or a measurement out costs ``max_cost / 2``.

    The same optimum as `mcc.compute.associate.gnn_assign` on the dense matrix. Clusters with one
    track or one measurement take their cheapest pair (vectorised); the others are solved
    together as one assignment problem on an augmented graph (each track may pair with its
    own "missed" node, each measurement with its own "unused" node, and the two dummy nodes of
    a gated pair with each other at no cost): dense `linear_sum_assignment` while small, else
    the sparse Jonker-Volgenant solver.
    """
    if ti.size == 0:
        return _EMPTY_I64, _EMPTY_I64
    tracks, t_local = np.unique(ti, return_inverse=True)
    meas, m_local = np.unique(mj, return_inverse=True)
    label = _bipartite_components(t_local, m_local, tracks.size, meas.size)
    comp = label[t_local]  # component of each pair, labelled by its smallest track
    t_per = np.bincount(label, minlength=tracks.size)
    m_first = np.full(meas.size, tracks.size, np.int64)
    np.minimum.at(m_first, m_local, comp)
    m_per = np.bincount(m_first, minlength=tracks.size)
    simple = ((t_per == 1) | (m_per == 1))[comp]

    out_t, out_m = [], []
    if simple.any():
        sc, cs = comp[simple], cost[simple]
        order = np.lexsort((cs, sc))
        first = order[np.unique(sc[order], return_index=True)[1]]
        out_t.append(t_local[simple][first])
        out_m.append(m_local[simple][first])
    hard = ~simple
    if hard.any():
        rt, ht = np.unique(t_local[hard], return_inverse=True)
        rm, hm = np.unique(m_local[hard], return_inverse=True)
        r, c = _augmented_assignment(ht, hm, cost[hard], rt.size, rm.size, 0.5 * max_cost)
        out_t.append(rt[r])
        out_m.append(rm[c])
    t_idx = tracks[np.concatenate(out_t)]
    m_idx = meas[np.concatenate(out_m)]
    order = np.argsort(t_idx)
    return t_idx[order].astype(np.int64), m_idx[order].astype(np.int64)


def _bipartite_components(t: I64, m: I64, n_t: int, n_m: int) -> I64:
    """Connected components of the bipartite graph of edges ``(t[k], m[k])``: for each track,
    the smallest track index of its component (label propagation; gate clusters are small, so
    it converges in a few sweeps, without scipy.sparse's per-call overhead)."""
    label = np.arange(n_t, dtype=np.int64)
    while True:
        m_label = np.full(n_m, n_t, np.int64)
        np.minimum.at(m_label, m, label[t])
        new = label.copy()
        np.minimum.at(new, t, m_label[m])
        new = new[new]  # pointer jumping: follow labels to their roots
        if np.array_equal(new, label):
            return label
        label = new


def _augmented_assignment(
    ti: I64, mj: I64, cost: F64, a: int, b: int, half: float
) -> tuple[I64, I64]:
    """Optimal pairs of ``a`` tracks and ``b`` measurements given gated ``(ti, mj, cost)``,
    where leaving either out costs ``half``; returns the assigned (track, measurement) pairs."""
    k = ti.size
    if (a + b) ** 2 <= 250_000:
        big = np.full((a + b, b + a), np.inf)
        big[ti, mj] = cost
        big[np.arange(a), b + np.arange(a)] = half
        big[a + np.arange(b), np.arange(b)] = half
        big[a + mj, b + ti] = 0.0
        rows, cols = linear_sum_assignment(big)
    else:
        # Rows: tracks then measurement dummies; columns: measurements then track dummies.
        # +1 on every weight: the solver needs non-zero weights, and every full matching has
        # a + b edges, so the optimum does not move.
        r = np.concatenate([ti, np.arange(a), a + np.arange(b), a + mj])
        c = np.concatenate([mj, b + np.arange(a), np.arange(b), b + ti])
        w = np.concatenate([cost, np.full(a + b, half), np.zeros(k)]) + 1.0
        graph = scipy.sparse.csr_array((w, (r, c)), shape=(a + b, a + b))
        rows, cols = min_weight_full_bipartite_matching(graph)
    real = (rows < a) & (cols < b)
    return rows[real].astype(np.int64), cols[real].astype(np.int64)


# ---------------------------------------------------------------------------------------------
# The tracker


@dataclass
class _Leftovers:
    """Unassigned detections of one sensor's last scan (two-point initiation)."""

    time_s: float
    z: F64
    R: F64  # (M, d, d)


class MultiTargetTracker:
    """A multi-radar, multi-target tracker vectorised over tracks (module docstring).

    Feed scans in time order with `step`; read tracks with `tracks`. Not thread-safe.
    """

    def __init__(self, config: TrackerConfig | None = None) -> None:
        self.config = config = config or TrackerConfig()
        self.d = config.ndim
        self.gate = config.gate
        self.mofn = MofNInitiator(m=config.confirm_m, n=config.confirm_n)
        self._bank: _CVBank | _IMMBank = (
            _IMMBank(config) if config.model == "imm" else _CVBank(config)
        )
        self.time_s: float | None = None
        self.next_id = 1
        self.scans = 0
        self._ids = np.zeros(0, np.uint32)
        self._status = np.zeros(0, np.uint8)
        self._history = np.zeros(0, np.uint32)
        self._age = np.zeros(0, np.int64)
        self._hits = np.zeros(0, np.int64)
        self._misses = np.zeros(0, np.int64)
        self._time = np.zeros(0, np.float64)
        self._update = np.zeros(0, np.float64)
        self._birth = np.zeros(0, np.float64)
        self._leftovers: dict[str, _Leftovers] = {}

    def __len__(self) -> int:
        """Every track, tentative ones included."""
        return int(self._ids.shape[0])

    # -- public -------------------------------------------------------------------------------
    def tracks(self, *, include_tentative: bool = False) -> TrackTable:
        """Confirmed and coasting tracks (and tentative ones when asked), as arrays."""
        rows = (
            np.arange(len(self))
            if include_tentative
            else np.flatnonzero(self._status != _TENTATIVE)
        )
        x, P = self._bank.estimate()
        quality = self.mofn.hit_count(self._history[rows]) / float(self.config.confirm_n)
        return TrackTable(
            ids=self._ids[rows].copy(),
            status=self._status[rows].copy(),
            x=x[rows].copy(),
            P=P[rows].copy(),
            quality=np.asarray(quality, dtype=np.float64),
            hits=self._hits[rows].copy(),
            misses=self._misses[rows].copy(),
            update_s=self._update[rows].copy(),
            birth_s=self._birth[rows].copy(),
        )

    def step(self, scan: Scan) -> StepReport:
        """Predict every track to ``scan.time_s``, associate, update, confirm, delete, initiate."""
        t = float(scan.time_s)
        if not math.isfinite(t):
            raise ComputeError(f"scan time_s={scan.time_s!r} must be finite seconds")
        if self.time_s is not None and t < self.time_s:
            raise ComputeError(
                f"scan of {scan.sensor_id or 'a sensor'} at t={t:.6f} s is older than the "
                f"tracker's time {self.time_s:.6f} s; feed scans in time order"
            )
        z, R = self._measurements(scan)
        n = len(self)
        ti = mj = _EMPTY_I64
        confirmed = deleted = changed = np.zeros(0, np.uint32)
        if n:
            self._bank.predict(np.maximum(t - self._time, 0.0))
            self._time[:] = t
            x, P = self._bank.estimate()
            pos = x[:, : self.d]
            if z.shape[0]:
                ti, mj = self._associate(pos, P[:, : self.d, : self.d], z, R)
                if ti.size:
                    self._bank.update(ti, z[mj], R[mj] if R.ndim == 3 else R)
            covered = (
                np.ones(n, bool)
                if scan.coverage is None
                else np.asarray(scan.coverage(pos), dtype=bool).reshape(n)
            )
            confirmed, deleted, changed = self._track_life(ti, covered, t)
        free = np.ones(z.shape[0], bool)
        free[mj] = False
        initiated, refused = self._initiate(
            scan.sensor_id, t, z[free], R[free] if R.ndim == 3 else R
        )
        self.time_s = t
        self.scans += 1
        n_confirmed = int(np.count_nonzero(self._status != _TENTATIVE))
        return StepReport(
            time_s=t,
            detections=int(z.shape[0]),
            assigned=int(mj.size),
            initiated=initiated,
            confirmed=confirmed,
            deleted=deleted,
            status_changed=changed,
            tracks=n_confirmed,
            tentative=len(self) - n_confirmed,
            not_initiated=refused,
        )

    # -- steps --------------------------------------------------------------------------------
    def _measurements(self, scan: Scan) -> tuple[F64, F64]:
        d = self.d
        z = np.asarray(scan.positions_m, dtype=np.float64)
        if z.size == 0:
            z = z.reshape(0, d)
        R = np.asarray(scan.covariance_m2, dtype=np.float64)
        if z.ndim != 2 or z.shape[1] != d:
            raise ComputeError(
                f"scan positions_m must be (M, {d}) for a {d}-D tracker, got {z.shape}"
            )
        if R.shape not in ((d, d), (z.shape[0], d, d)):
            raise ComputeError(
                f"scan covariance_m2 must be ({d}, {d}) or ({z.shape[0]}, {d}, {d}), got {R.shape}"
            )
        if not (np.isfinite(z).all() and np.isfinite(R).all()):
            raise ComputeError("scan positions_m/covariance_m2 have NaN/inf values")
        return z, R

    def _associate(self, pos: F64, P_pos: F64, z: F64, R: F64) -> tuple[I64, I64]:
        per_meas = R.ndim == 3
        S_tracks = P_pos if per_meas else P_pos + R
        bound = _lambda_max_bound(S_tracks)
        if per_meas:
            bound = bound + float(_lambda_max_bound(R).max())
        radius = np.sqrt(self.gate * bound)
        ti, mj = _candidate_pairs(pos, radius, z)
        if ti.size == 0:
            return ti, mj
        diff = z[mj] - pos[ti]
        if per_meas:
            d2 = _quad(_inv_small(P_pos[ti] + R[mj]), diff)
        else:
            d2 = _quad(_inv_small(S_tracks[ti]), diff)
        ok = d2 <= self.gate
        ti, mj, d2 = ti[ok], mj[ok], d2[ok]
        # Confirmed tracks choose first, tentative ones share what is left: with a cost of d²
        # alone, a tentative track's wide gate would otherwise outbid a confirmed track for its
        # own detection (Stone Soup's initiator, too, only sees the detections left over).
        first = self._status[ti] != _TENTATIVE
        t1, m1 = _gnn_sparse(ti[first], mj[first], d2[first], max_cost=self.gate)
        used = np.zeros(z.shape[0], bool)
        used[m1] = True
        second = ~first & ~used[mj]
        t2, m2 = _gnn_sparse(ti[second], mj[second], d2[second], max_cost=self.gate)
        return np.concatenate([t1, t2]), np.concatenate([m1, m2])

    def _track_life(
        self, ti: I64, covered: npt.NDArray[np.bool_], t: float
    ) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32], npt.NDArray[np.uint32]]:
        cfg = self.config
        n = len(self)
        hit = np.zeros(n, bool)
        hit[ti] = True
        seen = np.flatnonzero(covered | hit)
        self._history[seen] = self.mofn.update(self._history[seen], hit[seen])
        self._age[seen] += 1
        self._misses[seen] = count_misses(self._misses[seen], hit[seen])
        self._hits += hit
        self._update[hit] = t

        status = self._status
        tentative = status == _TENTATIVE
        promote = tentative & self.mofn.confirmed(self._history)
        active = ~tentative  # confirmed or coasting before this step
        new_status = np.where(self._misses >= cfg.coast_after_misses, _COASTING, _CONFIRMED)
        changed_rows = active & (new_status != status)
        status[active] = new_status[active]
        n_new = int(promote.sum())
        if n_new:
            status[promote] = _CONFIRMED
            self._ids[promote] = np.arange(self.next_id, self.next_id + n_new, dtype=np.uint32)
            self.next_id += n_new

        _, P = self._bank.estimate()
        delete = (tentative & ~promote & self.mofn.failed(self._history, self._age)) | (
            deletion_mask(
                misses=np.where(tentative, 0, self._misses),
                max_misses=cfg.max_misses,
                covariance=P,
                max_position_var_m2=cfg.max_position_std_m**2,
                ndim=self.d,
            )
        )
        delete |= t - self._update > cfg.max_coast_s
        deleted = self._ids[delete & (status != _TENTATIVE)]
        confirmed = self._ids[promote & ~delete]
        changed = self._ids[changed_rows & ~delete]
        if delete.any():
            self._keep(~delete)
        return confirmed, deleted, changed

    def _keep(self, mask: npt.NDArray[np.bool_]) -> None:
        for name in (
            "_ids",
            "_status",
            "_history",
            "_age",
            "_hits",
            "_misses",
            "_time",
            "_update",
            "_birth",
        ):
            setattr(self, name, getattr(self, name)[mask])
        self._bank.keep(mask)

    def _initiate(self, sensor_id: str, t: float, z: F64, R: F64) -> tuple[int, int]:
        """Start tentative tracks: (started, not started for want of room: ``max_tracks``)."""
        cfg = self.config
        d = self.d
        room = max(cfg.max_tracks - len(self), 0)
        if cfg.initiation == "one_point":
            refused = max(z.shape[0] - room, 0)
            if z.shape[0] == 0 or room == 0:
                return 0, refused
            z, R = z[:room], (R[:room] if R.ndim == 3 else R)
            x, P = kalman.cv_initiate(z, R, velocity_sigma_mps=cfg.init_velocity_std_mps, xp=np)
            self._add(x, P, t, history=1, age=1, hits=1)
            return int(z.shape[0]), refused
        R_all = np.broadcast_to(R, (z.shape[0], d, d)) if R.ndim == 2 else R
        prev = self._leftovers.get(sensor_id)
        used = np.zeros(z.shape[0], bool)
        started = refused = 0
        if prev is not None and prev.z.shape[0] and z.shape[0] and t > prev.time_s:
            dt = t - prev.time_s
            # Bound on the distance: top speed plus the gate on both positions' noise.
            noise = _lambda_max_bound(R_all).max() + _lambda_max_bound(prev.R).max()
            radius = cfg.max_speed_mps * dt + math.sqrt(self.gate * noise)
            cur, old = _candidate_pairs(z, np.full(z.shape[0], radius), prev.z)
            refused = max(cur.size - room, 0)
            cur, old = cur[:room], old[:room]
            if cur.size:
                v = (z[cur] - prev.z[old]) / dt
                P = np.zeros((cur.size, 2 * d, 2 * d))
                Rc, Ro = R_all[cur], prev.R[old]
                P[:, :d, :d] = Rc
                P[:, :d, d:] = P[:, d:, :d] = Rc / dt
                P[:, d:, d:] = (Rc + Ro) / dt**2
                self._add(np.concatenate([z[cur], v], axis=1), P, t, history=3, age=2, hits=2)
                used[cur] = True
                started = int(cur.size)
        if sensor_id not in self._leftovers and len(self._leftovers) >= _MAX_SENSORS:
            del self._leftovers[next(iter(self._leftovers))]  # the sensor heard of longest ago
        self._leftovers.pop(sensor_id, None)
        self._leftovers[sensor_id] = _Leftovers(t, z[~used], R_all[~used])
        return started, refused

    def _add(self, x: F64, P: F64, t: float, *, history: int, age: int, hits: int) -> None:
        k = x.shape[0]
        self._ids = np.concatenate([self._ids, np.zeros(k, np.uint32)])
        self._status = np.concatenate([self._status, np.full(k, _TENTATIVE, np.uint8)])
        self._history = np.concatenate([self._history, np.full(k, history, np.uint32)])
        self._age = np.concatenate([self._age, np.full(k, age, np.int64)])
        self._hits = np.concatenate([self._hits, np.full(k, hits, np.int64)])
        self._misses = np.concatenate([self._misses, np.zeros(k, np.int64)])
        self._time = np.concatenate([self._time, np.full(k, t)])
        self._update = np.concatenate([self._update, np.full(k, t)])
        self._birth = np.concatenate([self._birth, np.full(k, t)])
        self._bank.append(x, P)


# ---------------------------------------------------------------------------------------------
# The app


DEFAULT_SIGMA_RANGE_M = 30.0
DEFAULT_SIGMA_AZIMUTH_RAD = 0.003
DEFAULT_SIGMA_ELEVATION_RAD = 0.005


@dataclass(frozen=True)
class _Sensor:
    """What the tracker knows of one radar: its accuracy and, when known, its coverage."""

    sigma_range_m: float
    sigma_azimuth_rad: float
    sigma_elevation_rad: float
    coverage: Coverage | None = None


def tracker(ctx: AppContext) -> int:
    """Track every radar's ``DetectionBatch``; publish ``AirPicture`` and ``Track`` samples.

    Each cycle takes the batches that have arrived, holds each until ``--reorder-ms`` past
    its ``origin_ns`` (so batches of several radars are folded in time order), runs
    `MultiTargetTracker.step` per batch and publishes one ``AirPicture`` (confirmed and
    coasting tracks; ``origin_ns`` = the oldest detection origin folded in, ``time_ns`` = the
    newest). Confirmed tracks are also published on the keyed ``Track`` topic every
    ``--track-period-s`` and on a status change; a deleted track gets a last sample with
    ``TRACK_DELETED`` and is then disposed. A batch older than the tracker's time is late:
    counted and dropped. The heartbeat counts batches in and pictures out and records
    publish − origin of every batch folded in.

    What a sender stamps never decides what the tracker holds: on arrival, a batch whose
    ``origin_ns`` is more than ``--max-future-ms`` ahead of the receive time, or more than
    ``--max-age-s`` behind it, is dropped, as is one of more than ``--max-detections``
    detections, one of a radar past the ``--max-sensors`` first, and one that would make the
    batches held for reordering more than ``--max-pending`` (or their detections more than
    ``--max-pending-detections``). Each is counted by reason and the first of each logged.

    Args (``ctx.args``): ``--config FILE`` (YAML `TrackerConfig`; the flags below override
    it), ``--model cv|imm``, ``--gate P`` (gate probability), ``--confirm M/N``,
    ``--max-misses K``, ``--sigma-a`` (m/s²), ``--initiation one_point|two_point``,
    ``--init-velocity-std`` (m/s), ``--scenario FILE`` (radar accuracy and coverage by
    ``sensor_id``), ``--sigma-range-m``/``--sigma-azimuth-rad``/``--sigma-elevation-rad``
    (radars the scenario does not name), ``--reorder-ms`` (20), ``--track-period-s`` (1),
    ``--epoch-ns`` (time base; default ``MCC_EPOCH_NS``, else the first batch's second),
    ``--max-future-ms`` (2000), ``--max-age-s`` (300), ``--max-detections`` (20 000),
    ``--max-sensors`` (64), ``--max-pending`` (1024), ``--max-pending-detections`` (200 000),
    ``--max-tracks`` (`TrackerConfig.max_tracks`).
    """
    parser = _app_parser()
    opts = parser.parse_args(ctx.args)
    try:
        config = _app_config(opts)
        sensors = _app_sensors(opts.scenario)
    except MccError as exc:
        print(f"mcc: error: {exc}", file=sys.stderr)
        return 2
    _TrackerApp(ctx, config, sensors, opts).run()
    return 0


def _app_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcc.apps.tracker:tracker", description="the multi-radar multi-target tracker"
    )
    parser.add_argument("--config", type=Path, help="YAML file of TrackerConfig fields")
    parser.add_argument("--model", choices=("cv", "imm"), help="motion model")
    parser.add_argument("--gate", type=float, help="gate probability, e.g. 0.999")
    parser.add_argument("--confirm", metavar="M/N", help="confirm after M hits in N scans")
    parser.add_argument("--max-misses", type=int, help="delete after more misses than this")
    parser.add_argument("--sigma-a", type=float, help="process noise: acceleration std, m/s²")
    parser.add_argument("--initiation", choices=("one_point", "two_point"))
    parser.add_argument("--init-velocity-std", type=float, help="one-point velocity std, m/s")
    parser.add_argument("--scenario", help="scenario YAML: radar accuracy and coverage")
    parser.add_argument("--sigma-range-m", type=float, default=DEFAULT_SIGMA_RANGE_M)
    parser.add_argument("--sigma-azimuth-rad", type=float, default=DEFAULT_SIGMA_AZIMUTH_RAD)
    parser.add_argument("--sigma-elevation-rad", type=float, default=DEFAULT_SIGMA_ELEVATION_RAD)
    parser.add_argument("--reorder-ms", type=float, default=20.0, help="hold after origin, ms")
    parser.add_argument("--track-period-s", type=float, default=1.0, help="Track sample period")
    parser.add_argument("--epoch-ns", type=int, help="time base, Unix ns")
    bound = parser.add_argument_group("bounds (hostile input is normal input)")
    bound.add_argument(
        "--max-future-ms",
        type=float,
        default=2000.0,
        help="drop batches stamped further ahead of the receive time (default %(default)s)",
    )
    bound.add_argument(
        "--max-age-s",
        type=float,
        default=300.0,
        help="drop batches stamped further behind the receive time (default %(default)s)",
    )
    bound.add_argument("--max-detections", type=int, default=20_000, help="per batch")
    bound.add_argument("--max-sensors", type=int, default=64, help="radars tracked")
    bound.add_argument("--max-pending", type=int, default=1024, help="batches held to reorder")
    bound.add_argument(
        "--max-pending-detections", type=int, default=200_000, help="detections held to reorder"
    )
    bound.add_argument("--max-tracks", type=int, help="tracks held (TrackerConfig.max_tracks)")
    return parser


def _app_config(opts: argparse.Namespace) -> TrackerConfig:
    for flag in ("max_detections", "max_sensors", "max_pending", "max_pending_detections"):
        if getattr(opts, flag) < 1:
            raise TrackerConfigError(f"--{flag.replace('_', '-')} {getattr(opts, flag)}: >= 1")
    for flag in ("max_future_ms", "max_age_s"):
        if not (math.isfinite(getattr(opts, flag)) and getattr(opts, flag) >= 0):
            raise TrackerConfigError(
                f"--{flag.replace('_', '-')} {getattr(opts, flag)}: a finite number >= 0"
            )
    base = TrackerConfig.load(opts.config) if opts.config else TrackerConfig()
    overrides: dict[str, Any] = {}
    for flag, name in (
        ("model", "model"),
        ("gate", "gate_probability"),
        ("max_misses", "max_misses"),
        ("sigma_a", "sigma_a_mps2"),
        ("initiation", "initiation"),
        ("init_velocity_std", "init_velocity_std_mps"),
        ("max_tracks", "max_tracks"),
    ):
        if getattr(opts, flag) is not None:
            overrides[name] = getattr(opts, flag)
    if opts.confirm is not None:
        m, sep, n = opts.confirm.partition("/")
        if not (sep and m.strip().isdigit() and n.strip().isdigit()):
            raise TrackerConfigError(f"--confirm {opts.confirm!r}: expected M/N, e.g. 3/4")
        overrides["confirm_m"], overrides["confirm_n"] = int(m), int(n)
    config = TrackerConfig.from_dict({**base.to_dict(), **overrides}, source="tracker options")
    if config.ndim != 3:
        raise TrackerConfigError(f"TrackerConfig.ndim={config.ndim}: the tracker app is 3-D")
    return config


def _app_sensors(scenario_path: str | None) -> dict[str, _Sensor]:
    if not scenario_path:
        return {}
    from mcc.apps.scenario import load_scenario

    return {
        radar.id: _Sensor(
            radar.sigma_range_m,
            radar.sigma_azimuth_rad,
            radar.sigma_elevation_rad,
            radar.in_coverage,
        )
        for radar in load_scenario(scenario_path).radars
    }


@dataclass
class _TrackerApp:
    ctx: AppContext
    config: TrackerConfig
    sensors: dict[str, _Sensor]
    opts: argparse.Namespace
    epoch_ns: int | None = None
    cycle: int = 0
    late: int = 0
    pending: list[tuple[int, int, DetectionBatch]] = field(default_factory=list)
    pending_detections: int = 0
    sent: dict[int, tuple[float, Track]] = field(default_factory=dict)
    step_ms: list[float] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)  # batches refused on arrival
    heard: set[str] = field(default_factory=set)  # radars whose batches were held

    def __post_init__(self) -> None:
        self.tracker = MultiTargetTracker(self.config)
        self.tracker_id = self.ctx.identity.id
        if self.opts.epoch_ns is not None:
            self.epoch_ns = self.opts.epoch_ns
        elif os.environ.get(ENV_EPOCH):
            self.epoch_ns = int(os.environ[ENV_EPOCH])
        self.default_sensor = _Sensor(
            self.opts.sigma_range_m, self.opts.sigma_azimuth_rad, self.opts.sigma_elevation_rad
        )
        self.reorder_ns = int(max(self.opts.reorder_ms, 0.0) * 1e6)
        self.max_future_ns = int(self.opts.max_future_ms * 1e6)
        self.max_age_ns = int(self.opts.max_age_s * 1e9)
        self.seq = 0

    def run(self) -> None:
        ctx = self.ctx
        reader = ctx.bus.reader("DetectionBatch")
        self.pictures = ctx.bus.writer("AirPicture")
        self.tracks_out = ctx.bus.writer("Track")
        ctx.log.info(
            "tracker %s: model %s, gate %.4g, confirm %d/%d, max misses %d, %d known radars",
            self.tracker_id,
            self.config.model,
            self.config.gate_probability,
            self.config.confirm_m,
            self.config.confirm_n,
            self.config.max_misses,
            len(self.sensors),
        )
        next_log = time.monotonic() + 10.0
        while not ctx.stopping:
            timeout_s = 0.1
            if self.pending:
                due_ns = self.pending[0][0] + self.reorder_ns
                timeout_s = min(max((due_ns - time.time_ns()) * 1e-9, 0.0), 0.1)
            if timeout_s > 0:
                reader.wait(timeout_s)
            for batch in reader.take(256):
                ctx.heartbeat.count_in()
                self._hold(batch, time.time_ns())
            now_ns = time.time_ns()
            due = []
            while self.pending and self.pending[0][0] + self.reorder_ns <= now_ns:
                batch = heapq.heappop(self.pending)[2]
                self.pending_detections -= int(batch.count)
                due.append(batch)
            if due:
                self._cycle(due)
            if time.monotonic() >= next_log:
                next_log += 10.0
                self._log_status()

    def _refusal(self, batch: DetectionBatch, receive_ns: int) -> tuple[str, str]:
        """Why ``batch`` is not held, as (kind, message); ("", "") when it is held. Times are
        checked against the receive clock, never against another sender's stamp."""
        opts = self.opts
        ahead_ns = batch.origin_ns - receive_ns
        if ahead_ns > self.max_future_ns:
            return "future", f"stamped {ahead_ns / 1e9:.3g} s ahead (--max-future-ms)"
        if -ahead_ns > self.max_age_ns:
            return "old", f"stamped {-ahead_ns / 1e9:.3g} s behind (--max-age-s)"
        if batch.count > opts.max_detections:
            return "large", f"{batch.count} detections (--max-detections {opts.max_detections})"
        if batch.sensor_id not in self.heard and len(self.heard) >= opts.max_sensors:
            return "sensors", f"one radar too many (--max-sensors {opts.max_sensors})"
        if len(self.pending) >= opts.max_pending:
            return "held", f"{len(self.pending)} batches held to reorder (--max-pending)"
        if self.pending_detections + batch.count > opts.max_pending_detections:
            return "held", f"{self.pending_detections} detections held (--max-pending-detections)"
        return "", ""

    def _hold(self, batch: DetectionBatch, receive_ns: int) -> None:
        """Hold ``batch`` until its reorder time, or drop it (counted, first of a kind logged)."""
        kind, why = self._refusal(batch, receive_ns)
        if kind:
            self.dropped[kind] += 1
            if self.dropped[kind] == 1:
                self.ctx.log.warning(
                    "batch %d of radar %r dropped: %s; further ones are counted, not logged",
                    batch.scan_id,
                    batch.sensor_id[:80],
                    why,
                )
            return
        self.heard.add(batch.sensor_id)
        self.seq += 1
        heapq.heappush(self.pending, (batch.origin_ns, self.seq, batch))
        self.pending_detections += int(batch.count)

    def _cycle(self, batches: list[DetectionBatch]) -> None:
        folded: list[DetectionBatch] = []
        confirmed: list[npt.NDArray[np.uint32]] = []
        deleted: list[npt.NDArray[np.uint32]] = []
        changed: list[npt.NDArray[np.uint32]] = []
        if self.epoch_ns is None:
            first = batches[0].origin_ns
            self.epoch_ns = first - first % 1_000_000_000
        for batch in batches:
            t_s = (batch.origin_ns - self.epoch_ns) * 1e-9
            if self.tracker.time_s is not None and t_s < self.tracker.time_s:
                self.late += 1
                if self.late == 1 or self.late % 100 == 0:
                    self.ctx.log.warning(
                        "late batch from %s (%.3f s behind the tracker; %d late so far): "
                        "dropped; raise --reorder-ms?",
                        batch.sensor_id,
                        self.tracker.time_s - t_s,
                        self.late,
                    )
                continue
            start = time.perf_counter()
            report = self.tracker.step(self._scan(batch, t_s))
            self.step_ms.append((time.perf_counter() - start) * 1e3)
            confirmed.append(report.confirmed)
            deleted.append(report.deleted)
            changed.append(report.status_changed)
            folded.append(batch)
        if not folded:
            return
        table = self.tracker.tracks()
        publish_ns = self._publish_picture(table, min(b.origin_ns for b in folded))
        for batch in folded:
            self.ctx.heartbeat.record_latency_ns(publish_ns - batch.origin_ns)
        self._publish_tracks(
            table, np.concatenate(confirmed + changed), np.concatenate(deleted), publish_ns
        )

    def _scan(self, batch: DetectionBatch, t_s: float) -> Scan:
        sensor = self.sensors.get(batch.sensor_id)
        if sensor is None:
            if self.sensors:
                self.ctx.log.warning(
                    "radar %r is not in the scenario; using the default accuracies",
                    batch.sensor_id,
                )
            sensor = self.sensors[batch.sensor_id] = self.default_sensor
        return Scan.from_polar(
            t_s,
            packed_field(batch, "range_m"),
            packed_field(batch, "azimuth_rad"),
            packed_field(batch, "elevation_rad"),
            sigma_range_m=sensor.sigma_range_m,
            sigma_azimuth_rad=sensor.sigma_azimuth_rad,
            sigma_elevation_rad=sensor.sigma_elevation_rad,
            sensor_position_m=(batch.sensor_x_m, batch.sensor_y_m, batch.sensor_z_m),
            sensor_id=batch.sensor_id,
            coverage=sensor.coverage,
        )

    def _ns(self, t_s: float) -> int:
        assert self.epoch_ns is not None
        return self.epoch_ns + int(round(t_s * 1e9))

    def _publish_picture(self, table: TrackTable, origin_ns: int) -> int:
        self.cycle += 1
        n = table.count
        publish_ns = time.time_ns()
        self.pictures.write(
            AirPicture(
                tracker_id=self.tracker_id,
                cycle=self.cycle,
                time_ns=self._ns(self.tracker.time_s or 0.0),
                origin_ns=origin_ns,
                publish_ns=publish_ns,
                count=n,
                track_id=pack(table.ids, "<u4"),
                status=pack(table.status, "u1"),
                classification=pack(np.zeros(n), "u1"),
                quality=pack(table.quality, "<f8"),
                state=pack(table.x, "<f8"),
                covariance=pack(table.P, "<f8"),
            )
        )
        self.ctx.heartbeat.count_out()
        return publish_ns

    def _publish_tracks(
        self,
        table: TrackTable,
        news: npt.NDArray[np.uint32],
        gone: npt.NDArray[np.uint32],
        now_ns: int,
    ) -> None:
        # Keyed state at a low rate: one sample per track per period, or on a change.
        period_ns = int(self.opts.track_period_s * 1e9)
        urgent = set(news.tolist())
        for row, track_id in enumerate(table.ids.tolist()):
            last = self.sent.get(track_id)
            if last is not None and track_id not in urgent and now_ns - last[0] < period_ns:
                continue
            x, P = table.x[row], table.P[row]
            update_ns = self._ns(float(table.update_s[row]))
            sample = Track(
                track_id=track_id,
                tracker_id=self.tracker_id,
                status=TrackStatus(int(table.status[row])),
                classification=TargetClass.CLASS_UNKNOWN,
                x_m=float(x[0]),
                y_m=float(x[1]),
                z_m=float(x[2]),
                vx_mps=float(x[3]),
                vy_mps=float(x[4]),
                vz_mps=float(x[5]),
                covariance=P.reshape(36).tolist(),
                quality=float(table.quality[row]),
                hits=int(table.hits[row]),
                misses=int(table.misses[row]),
                update_ns=update_ns,
                origin_ns=update_ns,
            )
            self.tracks_out.write(sample)
            self.sent[track_id] = (now_ns, sample)
        for track_id in gone.tolist():
            entry = self.sent.pop(track_id, None)
            if entry is None:
                continue
            final = dataclasses.replace(entry[1], status=TrackStatus.TRACK_DELETED)
            self.tracks_out.write(final)
            self.tracks_out.dispose(final)

    def _log_status(self) -> None:
        ms = self.step_ms
        self.step_ms = []
        n_conf = int(np.count_nonzero(self.tracker._status != _TENTATIVE))
        self.ctx.log.info(
            "cycle %d: %d tracks, %d tentative, step p50 %.2f ms max %.2f ms, %d late batches%s",
            self.cycle,
            n_conf,
            len(self.tracker) - n_conf,
            float(np.median(ms)) if ms else 0.0,
            max(ms) if ms else 0.0,
            self.late,
            "".join(f", {n} dropped {kind}" for kind, n in sorted(self.dropped.items())),
        )
