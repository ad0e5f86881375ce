"""``mcc bench tracker``: MCC's multi-target tracker against Stone Soup, speed and accuracy.

Method
------
**Data.** `mcc.apps.scenario.classic_2d` (the classic 2-D RFS benchmark after Vo & Ma, scaled
to ``targets``: region ``[-L, L]²`` with ``L = 1000·sqrt(n/10)`` m, clutter ``3·n`` per scan,
``p_d`` 0.98, ``p_s`` 0.99, R = diag(10², 10²) m², nearly-constant velocity with discrete white
acceleration ``σ_v`` = 5 m/s², dt = 1 s), drawn once per target count from ``seed``. Both
implementations get the same scans, detection for detection, in the same order.

**Trackers, configured alike.**

* ``mcc``: `mcc.tracking.MultiTargetTracker`, 2-D CV Kalman filters with the data's exact
  F, Q (``noise_model="discrete"``, σ_a = σ_v) and R, chi-square gate of probability
  `GATE_PROBABILITY`, GNN, one-point initiation (velocity 0 ± `INIT_VELOCITY_STD_MPS` per
  axis), confirmation after `CONFIRM` consecutive hits (M-of-N with M = N), deletion after more
  than `MAX_MISSES` consecutive misses.
* ``stonesoup`` (Stone Soup 1.9): ``KalmanPredictor`` with a
  ``CombinedLinearGaussianTransitionModel`` of two ``ConstantVelocity`` models whose covariance
  is the discrete white-noise one (σ_v² G Gᵀ, the data's Q; the stock ``ConstantVelocity`` has
  the continuous form), ``KalmanUpdater`` with ``LinearGaussian`` (the data's R),
  ``DistanceHypothesiser`` with the ``Mahalanobis`` measure and ``missed_distance`` = the same
  gate (as a distance, ``sqrt(chi2.ppf(p, 2))``), ``GNNWith2DAssignment`` through Stone Soup's
  own kd-tree pre-selection (``DetectionKDTreeGNN2D``, a subclass; its search radius,
  ``max(diag S)`` metres, is never smaller than the gate's, so the associations are those of
  the plain class: ``--stonesoup-assoc plain`` runs the plain class, ~20× slower at 100
  targets), ``MultiMeasurementInitiator`` (same prior, ``min_points`` = M, holding tracks
  dropped by ``UpdateTimeStepsDeleter(N − M + 1)``, i.e. at their first miss when M = N), and
  ``UpdateTimeStepsDeleter(MAX_MISSES + 1)`` for tracks, in ``MultiTargetTracker``. Known
  difference: Stone Soup's GNN minimises the sum of Mahalanobis distances, MCC's the sum of
  squared distances (χ²), each with "missed" at the gate.

**Timing.** Wall time of one scan's processing (``step`` for MCC, one iteration of Stone
Soup's tracker), detection objects built beforehand; ``ms_per_scan`` is the median over the
scans, ``p99_ms_per_scan`` the 99th percentile. Rows run one after the other in one process,
so ``speedup_vs_stonesoup`` (Stone Soup's median / MCC's, same target count) is a same-run
ratio. Stone Soup runs at most ``--stonesoup-max-targets`` (default 100) targets for all scans;
above that it runs only its first ``--stonesoup-large-scans`` (default 5) scans, enough for a
time per scan but not for its GOSPA (the row's ``note`` says so).

**Accuracy.** After each scan, the confirmed (and coasting) tracks' positions against the live
truth: GOSPA (García-Fernández et al. 2020, `mcc.apps.metrics.gospa`) with cut-off
c = `GOSPA_C_M` = 100 m (10 σ of the measurement noise, the usual choice for this benchmark),
p = 2, α = 2. ``gospa_m`` is the mean over scans of the GOSPA distance; ``gospa_loc_m`` the mean
of its localisation part (√ of the summed squared errors of the assigned pairs, metres);
``gospa_missed`` and ``gospa_false`` the mean numbers of missed targets and false tracks per
scan; ``tracks_final`` the confirmed tracks after the last scan.

**Seeded random scenarios** (``--scenarios all``): eight families of scenarios drawn from
seeded random parameters, MCC's defaults beside the first release's plain CV filter and Stone
Soup configured per family by a search over its components on training seeds (``--search``),
reported on other seeds with each target judged met or missed: the method is the docstring of
`mcc.bench.tracker_scenarios`. ``--families`` (`mcc.bench.tracker_families`) is the older
bench of six fixed families.

**Mission scenarios** (``--scenario FILE``, MCC alone): every radar of the scenario scans at its
period (`RadarModel.scan`, seeded by the scenario), the scans are merged in time order and fed
to the 3-D tracker (range/azimuth/elevation → ENU with per-detection covariance, sensor
coverage for misses), once with ``model=cv`` and once with ``model=imm``; GOSPA against the live
targets inside at least one radar's coverage, in 3-D, with c = `SCENARIO_GOSPA_C_M` = 500 m (a
search radar's cross-range and height errors reach 100 m at 25 km).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from mcc.apps.metrics import gospa
from mcc.apps.scenario import Classic2D, Scenario, classic_2d, load_scenario
from mcc.bench import report, runner
from mcc.compute import kalman
from mcc.errors import MccError
from mcc.tracking import MultiTargetTracker, Scan, TrackerConfig

if TYPE_CHECKING:
    from mcc.tracking.replay import PictureScore, SensorSpec

__all__ = [
    "COLUMNS",
    "Feed",
    "bearing_range",
    "classic_config",
    "discrete_cv_class",
    "fly",
    "picture_row",
    "polar_detections",
    "polar_feed",
    "polar_scan",
    "publish",
    "run_mcc_classic",
    "run_mcc_scans",
    "run_scans",
    "run_scenario_bench",
    "run_stonesoup_classic",
    "run_stonesoup_scans",
    "run_tracker_bench",
    "stonesoup_predictor",
    "stonesoup_tracker",
    "say",
    "versions",
]

COLUMNS = (
    "impl",
    "targets",
    "scans",
    "ms_per_scan",
    "p99_ms_per_scan",
    "gospa_m",
    "gospa_loc_m",
    "gospa_missed",
    "gospa_false",
    "tracks_final",
    "speedup_vs_stonesoup",
)
SCENARIO_COLUMNS = ("impl", "scenario", "model", *COLUMNS[1:-1])
GOSPA_C_M = 100.0
SCENARIO_GOSPA_C_M = 500.0
GOSPA_P = 2.0
GOSPA_ALPHA = 2.0
GATE_PROBABILITY = 0.99
INIT_VELOCITY_STD_MPS = 15.0
CONFIRM = 3
MAX_MISSES = 1
DEFAULT_TARGETS = (10, 100, 1000)
QUICK_TARGETS = (10, 100)
DEFAULT_SCANS = 100
QUICK_SCANS = 20
STONESOUP_MAX_TARGETS = 100
STONESOUP_LARGE_SCANS = 5

F64 = npt.NDArray[np.float64]


# ---------------------------------------------------------------------------------------------
# One run of one implementation


class _Scores:
    """Per-scan times and GOSPA parts, summarised into a row."""

    def __init__(self, c_m: float = GOSPA_C_M) -> None:
        self.c_m = c_m
        self.ms: list[float] = []
        self.distance: list[float] = []
        self.loc: list[float] = []
        self.missed: list[int] = []
        self.false: list[int] = []
        self.tracks_final = 0

    def add(self, elapsed_s: float, truth: F64, estimates: F64) -> None:
        g = gospa(truth, estimates, c=self.c_m, p=GOSPA_P, alpha=GOSPA_ALPHA)
        self.ms.append(elapsed_s * 1e3)
        self.distance.append(g.distance)
        self.loc.append(g.localisation ** (1.0 / GOSPA_P))
        self.missed.append(g.n_missed)
        self.false.append(g.n_false)
        self.tracks_final = int(estimates.shape[0])

    def row(self, impl: str, targets: int) -> dict[str, Any]:
        return {
            "impl": impl,
            "targets": targets,
            "scans": len(self.ms),
            "ms_per_scan": round(statistics.median(self.ms), 3),
            "p99_ms_per_scan": round(float(np.percentile(self.ms, 99)), 3),
            "gospa_m": round(float(np.mean(self.distance)), 2),
            "gospa_loc_m": round(float(np.mean(self.loc)), 2),
            "gospa_missed": round(float(np.mean(self.missed)), 2),
            "gospa_false": round(float(np.mean(self.false)), 2),
            "tracks_final": self.tracks_final,
            "speedup_vs_stonesoup": None,
        }


def classic_config(data: Classic2D) -> TrackerConfig:
    """MCC's configuration for `classic_2d` data: its exact models, the bench's track logic."""
    sigma_v = float(np.sqrt(data.Q[1, 1])) / data.dt_s  # Q[vx, vx] = σ_v² dt²
    return TrackerConfig(
        ndim=2,
        model="cv",
        sigma_a_mps2=sigma_v,
        noise_model="discrete",
        gate_probability=GATE_PROBABILITY,
        initiation="one_point",
        init_velocity_std_mps=INIT_VELOCITY_STD_MPS,
        track_logic="mofn",
        confirm_m=CONFIRM,
        confirm_n=CONFIRM,
        max_misses=MAX_MISSES,
        coast_after_misses=1,
    )


def run_mcc_classic(
    data: Classic2D, config: TrackerConfig | None = None, *, scans: int | None = None
) -> dict[str, Any]:
    """MCC's row on ``data`` (its first ``scans`` scans, default all)."""
    inputs = [
        Scan(float(t), z, data.R, sensor_id="classic")
        for t, z in zip(data.times_s, data.measurements, strict=True)
    ][: scans or data.scans]
    tracker = MultiTargetTracker(config or classic_config(data))
    scores = _run_mcc(tracker, zip(inputs, data.truth_positions, strict=False), _Scores())
    return scores.row("mcc", int(data.truth_ids[0].size))


def _run_mcc(
    tracker: MultiTargetTracker, scans: Iterable[tuple[Scan, F64]], scores: _Scores
) -> _Scores:
    """Each ``(scan, truth)``: ``tracker.step`` timed, its tracks scored against the truth."""
    for scan, truth in scans:
        start = time.perf_counter()
        tracker.step(scan)
        elapsed = time.perf_counter() - start
        scores.add(elapsed, truth, tracker.tracks().positions_m)
    return scores


def run_stonesoup_classic(
    data: Classic2D,
    config: TrackerConfig | None = None,
    *,
    scans: int | None = None,
    assoc: str = "kdtree",
) -> dict[str, Any]:
    """Stone Soup's row on ``data`` with the components and settings of the module docstring."""
    from stonesoup.models.measurement.linear import LinearGaussian

    if assoc not in ("kdtree", "plain"):
        raise MccError(f"--stonesoup-assoc {assoc!r}: choose kdtree or plain")
    config = config or classic_config(data)
    predictor = stonesoup_predictor(config.sigma_a_mps2**2)
    measurement = LinearGaussian(ndim_state=4, mapping=(0, 2), noise_covar=data.R)
    n_scans = scans or data.scans
    times, zs = data.times_s[:n_scans], data.measurements[:n_scans]
    tracker = stonesoup_tracker(
        predictor,
        measurement,
        Feed((t_s, z, measurement) for t_s, z in zip(times, zs, strict=True)),
        updater="kf",
        gate=config.gate_probability,
        init_points=config.confirm_m,
        init_hold=config.confirm_n - config.confirm_m + 1,
        deleter=f"steps{config.max_misses + 1}",
        association="kdtree" if assoc == "kdtree" else "gnn",
        init_velocity_std_mps=config.init_velocity_std_mps,
        position_var=(data.R[0, 0], data.R[1, 1]),
    )
    scores = _Scores()
    steps = iter(tracker)
    for k in range(n_scans):
        start = time.perf_counter()
        _, tracks = next(steps)
        elapsed = time.perf_counter() - start
        positions = np.array([[t.state_vector[0, 0], t.state_vector[2, 0]] for t in tracks])
        scores.add(elapsed, data.truth_positions[k], positions.reshape(-1, 2))
    row = scores.row("stonesoup", int(data.truth_ids[0].size))
    row["stonesoup_assoc"] = assoc
    return row


def stonesoup_predictor(q: float, ct: bool = False) -> Any:
    """Stone Soup's predictor: ``KalmanPredictor`` of constant velocity per axis with the
    discrete white-noise covariance (`discrete_cv_class`) of ``q`` = σ_a², or with ``ct``
    ``ConstantTurn`` (the same ``q``, turn-rate σ 3°/s; state [x vx y vy ω]) with the
    ``ExtendedKalmanPredictor``."""
    from stonesoup.models.transition.linear import CombinedLinearGaussianTransitionModel
    from stonesoup.models.transition.nonlinear import ConstantTurn
    from stonesoup.predictor.kalman import ExtendedKalmanPredictor, KalmanPredictor

    if ct:
        return ExtendedKalmanPredictor(
            ConstantTurn(
                linear_noise_coeffs=np.array([q, q]), turn_noise_coeff=math.radians(3.0) ** 2
            )
        )
    cv = discrete_cv_class()
    return KalmanPredictor(
        CombinedLinearGaussianTransitionModel([cv(noise_diff_coeff=q), cv(noise_diff_coeff=q)])
    )


def bearing_range(
    predictor: Any,
    sigma_range_m: float,
    sigma_azimuth_rad: float,
    position_m: tuple[float, float] = (0.0, 0.0),
) -> Any:
    """Stone Soup's ``CartesianToBearingRange`` of a radar at ``position_m`` over
    ``predictor``'s state."""
    from stonesoup.models.measurement.nonlinear import CartesianToBearingRange
    from stonesoup.types.array import StateVector

    return CartesianToBearingRange(
        ndim_state=predictor.transition_model.ndim_state,
        mapping=(0, 2),
        noise_covar=np.diag([sigma_azimuth_rad**2, sigma_range_m**2]),
        translation_offset=StateVector([position_m[0], position_m[1]]),
    )


def stonesoup_tracker(
    predictor: Any,
    measurement: Any,
    feed: Feed,
    *,
    updater: str,
    gate: float,
    init_points: int,
    init_hold: int,
    deleter: str,
    association: str = "gnn",
    init_velocity_std_mps: float = 300.0,
    position_var: tuple[float, float] = (0.0, 0.0),
    pd: float = 1.0,
    clutter_density: float = 0.0,
) -> Any:
    """Stone Soup's tracker over ``feed`` (module docstrings): ``updater`` kf, ekf or ukf;
    ``association`` gnn, kdtree (GNN through ``DetectionKDTreeGNN2D``) or jpda (the
    initiator's association stays GNN); an initiator of ``init_points`` points whose holding
    tracks go after ``init_hold`` steps without update; ``deleter`` ``stepsN`` or
    ``covariance``."""
    from scipy.stats import chi2  # slow to import: only when Stone Soup runs
    from stonesoup.dataassociator.neighbour import GNNWith2DAssignment
    from stonesoup.dataassociator.probability import JPDA
    from stonesoup.dataassociator.tree import DetectionKDTreeGNN2D
    from stonesoup.deleter.error import CovarianceBasedDeleter
    from stonesoup.deleter.time import UpdateTimeStepsDeleter
    from stonesoup.hypothesiser.distance import DistanceHypothesiser
    from stonesoup.hypothesiser.probability import PDAHypothesiser
    from stonesoup.initiator.simple import MultiMeasurementInitiator
    from stonesoup.measures import Mahalanobis
    from stonesoup.tracker.simple import MultiTargetMixtureTracker
    from stonesoup.tracker.simple import MultiTargetTracker as StoneSoupTracker
    from stonesoup.types.array import CovarianceMatrix, StateVector
    from stonesoup.types.state import GaussianState
    from stonesoup.updater.kalman import (
        ExtendedKalmanUpdater,
        KalmanUpdater,
        UnscentedKalmanUpdater,
    )

    kinds = {"kf": KalmanUpdater, "ekf": ExtendedKalmanUpdater, "ukf": UnscentedKalmanUpdater}
    update = kinds[updater](measurement)
    missed = float(np.sqrt(chi2.ppf(gate, 2)))
    hypothesiser = DistanceHypothesiser(predictor, update, Mahalanobis(), missed_distance=missed)

    def gnn() -> Any:
        if association != "kdtree":
            return GNNWith2DAssignment(hypothesiser)
        return DetectionKDTreeGNN2D(
            hypothesiser, predictor, update, max_distance_covariance_multiplier=1.0
        )

    ndim = predictor.transition_model.ndim_state
    v2 = init_velocity_std_mps**2
    prior_diag = [position_var[0], v2, position_var[1], v2] + [math.radians(10.0) ** 2] * (ndim - 4)
    initiator = MultiMeasurementInitiator(
        prior_state=GaussianState(StateVector([0.0] * ndim), CovarianceMatrix(np.diag(prior_diag))),
        deleter=UpdateTimeStepsDeleter(init_hold),
        data_associator=gnn(),
        updater=update,
        measurement_model=measurement,
        min_points=init_points,
    )
    parts = {
        "initiator": initiator,
        "deleter": CovarianceBasedDeleter(covar_trace_thresh=4 * 2000.0**2, mapping=[0, 2])
        if deleter == "covariance"
        else UpdateTimeStepsDeleter(int(deleter.removeprefix("steps"))),
        "detector": feed,
        "updater": update,
    }
    if association != "jpda":
        return StoneSoupTracker(data_associator=gnn(), **parts)
    pda = PDAHypothesiser(
        predictor, update, clutter_spatial_density=clutter_density, prob_detect=pd, prob_gate=gate
    )
    return MultiTargetMixtureTracker(data_associator=JPDA(pda), **parts)


class Feed:
    """A Stone Soup detector over scans ``(time_s, measurement vectors, model)``, its
    detections built beforehand."""

    def __init__(self, scans: Iterable[tuple[float, Iterable[Any], Any]]) -> None:
        from stonesoup.types.array import StateVector
        from stonesoup.types.detection import Detection

        epoch = dt.datetime(2024, 1, 1)
        self.scans = []
        for t_s, zs, model in scans:
            stamp = epoch + dt.timedelta(seconds=float(t_s))
            dets = {Detection(StateVector(z), timestamp=stamp, measurement_model=model) for z in zs}
            self.scans.append((stamp, dets))

    def __iter__(self) -> Any:
        return iter(self.scans)


_DISCRETE_CV: Any = None


def discrete_cv_class() -> Any:
    """``ConstantVelocity`` with the discrete white-noise covariance q [[dt⁴/4, dt³/2],
    [dt³/2, dt²]] (classic_2d's and MCC's ``noise_model="discrete"``), built on first use so
    that Stone Soup is imported only when it runs."""
    global _DISCRETE_CV
    if _DISCRETE_CV is None:
        from stonesoup.models.transition.linear import ConstantVelocity
        from stonesoup.types.array import CovarianceMatrix

        class DiscreteWhiteNoiseConstantVelocity(ConstantVelocity):
            def covar(self, time_interval: dt.timedelta, **kwargs: Any) -> Any:
                t = abs(time_interval.total_seconds())
                return CovarianceMatrix(
                    self.noise_diff_coeff
                    * np.array([[t**4 / 4, t**3 / 2], [t**3 / 2, t**2]], dtype=np.float64)
                )

        _DISCRETE_CV = DiscreteWhiteNoiseConstantVelocity
    return _DISCRETE_CV


def polar_feed(scans: Iterable[tuple[float, F64, F64, Any]]) -> Feed:
    """`Feed` of radar scans ``(time_s, range_m, azimuth_rad, model)``: each detection a
    (bearing, range) pair of the scan's ``CartesianToBearingRange`` ``model``, the azimuth
    (from north, clockwise) turned into Stone Soup's bearing (from x, anticlockwise)."""
    from stonesoup.types.angle import Bearing

    def pairs(r: F64, az: F64) -> Iterable[Any]:
        return (
            [[Bearing(math.pi / 2 - a)], [ri]]
            for ri, a in zip(r.tolist(), az.tolist(), strict=True)
        )

    return Feed((t_s, pairs(r, az), model) for t_s, r, az, model in scans)


# ---------------------------------------------------------------------------------------------
# Running a tracker over the scans of a scenario (``--families`` and ``--scenarios``)


def run_scans(
    scans: Iterable[tuple[float, Any]],
    step: Callable[[Any], object],
    picture: Callable[[], tuple[Any, F64]],
    score: PictureScore,
    also: Callable[[float, F64], None] | None = None,
) -> PictureScore:
    """Each ``(time_s, scan)`` in turn: ``step(scan)`` timed (wall and process CPU), then
    ``picture()``'s confirmed tracks (ids, positions) scored with those times, and given to
    ``also`` (time, positions) when there is one. Returns ``score``."""
    for t_s, scan in scans:
        start, cpu = time.perf_counter(), time.process_time()
        step(scan)
        ms = (time.perf_counter() - start) * 1e3
        cpu_ms = (time.process_time() - cpu) * 1e3
        ids, positions = picture()
        score.add(t_s, ids, positions, ms=ms, cpu_ms=cpu_ms)
        if also is not None:
            also(t_s, positions)
    return score


def run_mcc_scans(
    tracker: MultiTargetTracker,
    scans: Iterable[Scan],
    score: PictureScore,
    also: Callable[[float, F64], None] | None = None,
) -> PictureScore:
    """`run_scans` of MCC's tracker: ``tracker.step`` timed, its track table scored."""

    def picture() -> tuple[Any, F64]:
        table = tracker.tracks()
        return table.ids, table.positions_m

    return run_scans(((scan.time_s, scan) for scan in scans), tracker.step, picture, score, also)


def run_stonesoup_scans(
    tracker: Any,
    times_s: Iterable[float],
    score: PictureScore,
    also: Callable[[float, F64], None] | None = None,
) -> PictureScore:
    """`run_scans` of a Stone Soup tracker, one iteration per time of ``times_s`` (those of its
    detector's scans) timed; its tracks numbered in order of first appearance."""
    steps = iter(tracker)
    ids: dict[str, int] = {}  # by Stone Soup's track id (a uuid): id() of a deleted track recurs
    tracks: list[Any] = []

    def step(_: object) -> None:
        nonlocal tracks
        _, tracks = next(steps)

    def picture() -> tuple[Any, F64]:
        held = list(tracks)
        pos = np.array([[tr.state_vector[0, 0], tr.state_vector[2, 0]] for tr in held])
        tid = [ids.setdefault(tr.id, len(ids) + 1) for tr in held]
        return tid, pos.reshape(-1, 2)

    return run_scans(((float(t_s), None) for t_s in times_s), step, picture, score, also)


def picture_row(score: PictureScore) -> dict[str, Any]:
    """A row's figures of `run_scans`' ``score``: medians of the wall and CPU time per scan,
    means over scans of GOSPA and its parts, track ids and id switches."""
    s = score.summary()
    return {
        "scans": s["scans"],
        "ms_per_scan": s["ms_per_scan_median"],
        # CPU time of the process (all its threads) per scan, median: what the scan cost
        # on a shared machine, beside the wall time that includes waiting for a core.
        "cpu_ms_per_scan": round(statistics.median(r["cpu_ms"] for r in score.rows), 4),
        "gospa_m": s["gospa_mean_m"],
        "gospa_loc_m": s["localisation_m"],
        "gospa_missed": s["missed"],
        "gospa_false": s["false"],
        "track_ids": s["track_ids"],
        "id_switches": s["id_switches"],
    }


# ---------------------------------------------------------------------------------------------
# Simulated radar data (``--families`` and ``--scenarios``)


def fly(x: F64, omega: F64, dt_s: float) -> F64:
    """Positions ``(steps, N, 2)`` of targets starting from states ``x`` ``(N, 4)`` [x y vx vy],
    turning at ``omega`` ``(steps, N)`` rad/s (left = positive) per step of ``dt_s``, with the
    exact coordinated-turn transition."""
    track = np.empty((omega.shape[0], x.shape[0], 2))
    for k in range(omega.shape[0]):
        track[k] = x[:, :2]
        F = kalman.ct_transition(dt_s, -omega[k], ndim=2, xp=np)
        x = (F @ x[:, :, None])[:, :, 0]
    return track


def polar_detections(
    rng: np.random.Generator,
    positions: F64,
    radar: SensorSpec,
    clutter_range_m: tuple[float, float],
) -> tuple[Any, F64, F64]:
    """One scan of ``radar`` over targets at ``positions`` ``(N, 2)``: which were detected
    (each with probability p_d), and the range and azimuth (from north, clockwise) of the
    detections with Gaussian noise and Poisson false alarms uniform in ``clutter_range_m`` and
    azimuth, in random order."""
    assert radar.pd is not None and radar.clutter_per_scan is not None
    seen = rng.random(positions.shape[0]) < radar.pd
    rel = positions[seen] - np.asarray(radar.position_m[:2])
    r = np.hypot(rel[:, 0], rel[:, 1]) + rng.normal(0, radar.sigma_range_m, len(rel))
    az = np.arctan2(rel[:, 0], rel[:, 1]) + rng.normal(0, radar.sigma_azimuth_rad, len(rel))
    m = rng.poisson(radar.clutter_per_scan)
    r = np.concatenate([r, rng.uniform(*clutter_range_m, m)])
    az = np.concatenate([az, rng.uniform(0.0, 2 * math.pi, m)])
    order = rng.permutation(r.size)
    return seen, np.abs(r[order]), np.mod(az[order], 2 * math.pi)


def polar_scan(t_s: float, r: F64, az: F64, radar: SensorSpec, sensor_id: str) -> Scan:
    """MCC's scan of ``radar``'s detections as ``mcc track replay`` builds it from the files
    (p_d and false alarms per scan from SENSORS.yaml)."""
    return Scan.from_polar(
        t_s,
        r,
        az,
        sigma_range_m=radar.sigma_range_m,
        sigma_azimuth_rad=radar.sigma_azimuth_rad,
        sensor_position_m=radar.position_m,
        sensor_id=sensor_id,
        pd=radar.pd,
        clutter_per_scan=radar.clutter_per_scan,
    )


# ---------------------------------------------------------------------------------------------
# The classic benchmark, both implementations side by side


def run_tracker_bench(
    *,
    targets: Sequence[int] = DEFAULT_TARGETS,
    scans: int = DEFAULT_SCANS,
    impls: Sequence[str] = ("mcc", "stonesoup"),
    seed: int = 0,
    stonesoup_max_targets: int = STONESOUP_MAX_TARGETS,
    stonesoup_large_scans: int = STONESOUP_LARGE_SCANS,
    stonesoup_assoc: str = "kdtree",
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Rows for every target count: MCC, then Stone Soup on the same data (module docstring)."""
    unknown = sorted(set(impls) - {"mcc", "stonesoup"})
    if unknown:
        raise MccError(f"--impl: unknown {unknown}; choose from mcc, stonesoup")
    if scans < 1 or any(n < 1 for n in targets):
        raise MccError(f"need scans >= 1 and targets >= 1, got scans={scans}, {list(targets)}")
    rows: list[dict[str, Any]] = []
    for n in targets:
        data = classic_2d(n, scans=scans, seed=seed)
        by_impl: dict[str, dict[str, Any]] = {}
        if "mcc" in impls:
            say(progress, f"mcc, {n} targets, {scans} scans")
            by_impl["mcc"] = run_mcc_classic(data)
        if "stonesoup" in impls:
            limited = n > stonesoup_max_targets
            ss_scans = min(scans, stonesoup_large_scans) if limited else scans
            say(progress, f"stonesoup, {n} targets, {ss_scans} scans")
            row = run_stonesoup_classic(data, scans=ss_scans, assoc=stonesoup_assoc)
            if limited and ss_scans < scans:
                row["note"] = (
                    f"first {ss_scans} of {scans} scans only (time budget: more than "
                    f"{stonesoup_max_targets} targets); time per scan comparable, GOSPA not"
                )
            by_impl["stonesoup"] = row
        anchor = by_impl.get("stonesoup")
        for row in by_impl.values():
            if anchor is not None and row["ms_per_scan"] > 0:
                row["speedup_vs_stonesoup"] = round(anchor["ms_per_scan"] / row["ms_per_scan"], 1)
            rows.append(row)
    return rows


def say(progress: bool, text: str) -> None:
    """``text`` on stderr as the bench's progress, when ``progress``."""
    if progress:
        print(f"bench tracker: {text} …", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# A mission scenario, MCC alone


def scenario_config(model: str = "cv") -> TrackerConfig:
    """MCC's 3-D configuration for the mission scenarios (the tracker app's defaults)."""
    return replace(TrackerConfig(), model=model)  # type: ignore[arg-type]


def run_scenario_bench(
    path: str | Path,
    *,
    models: Sequence[str] = ("cv", "imm"),
    duration_s: float | None = None,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """MCC on the radars of a scenario file, one row per motion model."""
    scenario = load_scenario(path)
    if not scenario.radars:
        raise MccError(f"{path}: the scenario has no radars; nothing to track")
    scans = _scenario_scans(scenario, duration_s or scenario.duration_s)
    rows = []
    for model in models:
        say(progress, f"mcc {model}, scenario {scenario.id}, {len(scans)} scans")
        tracker = MultiTargetTracker(scenario_config(model))
        row = _run_mcc(tracker, scans, _Scores(SCENARIO_GOSPA_C_M)).row("mcc", scenario.n_targets)
        rows.append({"impl": "mcc", "scenario": scenario.id, "model": model, **row})
    for row in rows:
        del row["speedup_vs_stonesoup"]
    return rows


def _scenario_scans(scenario: Scenario, duration_s: float) -> list[tuple[Scan, F64]]:
    """Every radar's scans up to ``duration_s`` in time order, each with the truth it tracks:
    the live targets inside at least one radar's coverage."""
    events = []
    for number, radar in enumerate(scenario.radars):
        rng = np.random.default_rng(np.random.SeedSequence([scenario.seed, number]))
        for k in range(int(duration_s / radar.scan_period_s) + 1):
            events.append((k * radar.scan_period_s, number, rng))
    events.sort(key=lambda e: (e[0], e[1]))
    out = []
    for t_s, number, rng in events:
        radar = scenario.radars[number]
        truth = scenario.truth_at(t_s).live()
        dets = radar.scan(truth, t_s, rng)
        scan = Scan.from_polar(
            t_s,
            dets.range_m,
            dets.azimuth_rad,
            dets.elevation_rad,
            sigma_range_m=radar.sigma_range_m,
            sigma_azimuth_rad=radar.sigma_azimuth_rad,
            sigma_elevation_rad=radar.sigma_elevation_rad,
            sensor_position_m=radar.position_m,
            sensor_id=radar.id,
            coverage=radar.in_coverage,
        )
        seen = np.zeros(truth.count, bool)
        for other in scenario.radars:
            seen |= other.in_coverage(truth.positions_m)
        out.append((scan, truth.positions_m[seen]))
    return out


def versions() -> dict[str, str]:
    """The versions of Stone Soup and SciPy installed (for a result's host record)."""
    out = {}
    for dist in ("stonesoup", "scipy"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    return out


def publish(
    args: argparse.Namespace,
    bench: str,
    rows: list[dict[str, Any]],
    columns: Sequence[str],
    title: str,
    notes: str,
    *,
    where: Callable[[dict[str, Any]], str] | None = lambda r: (
        f"{r['impl']}, {r['targets']} targets"
    ),
    command: str | None = None,
    after: Sequence[str] = (),
    **fields: Any,
) -> int:
    """The results of one bench: the document ``bench`` of ``rows`` (and ``fields``) with the
    Stone Soup and SciPy versions, the table, each row's note (``where`` names the row), the
    lines ``after``; written to ``--json``, recorded with ``notes`` by ``--record``."""
    doc = report.document(bench, rows, command=command or runner.command_line("tracker"))
    doc["host"]["versions"].update(versions())
    doc.update(fields)
    report.print_table(title, rows, columns)
    for row in rows:
        if where is not None and row.get("note"):
            print(f"note ({where(row)}): {row['note']}")
    for line in after:
        print(line)
    if args.json:
        print(f"wrote {report.write_json(doc, args.json)}")
    if args.record:
        report.record(doc, columns, notes=notes)
    return 0
