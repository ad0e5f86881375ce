"""Every implementation of each pipeline step through the same tests, against explicit values
or an independent reference (filterpy, the dense kernels of mcc.compute)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from filterpy.kalman import ExtendedKalmanFilter, KalmanFilter

import mcc.tracking as tracking
from mcc.compute import kalman
from mcc.compute.associate import chi2_gate_threshold, gnn_assign
from mcc.tracking import (
    Chi2Gater,
    CVPredictor,
    GNNAssociator,
    IMMPredictor,
    Measurements,
    OnePointInitiator,
    PolarEKFUpdater,
    PositionUpdater,
    Scan,
    ScanPeriodDeleter,
    TrackerConfig,
    TrackLife,
    TwoPointInitiator,
)
from mcc.tracking.base import Gated
from mcc.tracking.predictors import imm_transition
from mcc.tracking.replay import SensorSpec


def test_the_public_names_are_pinned() -> None:
    assert sorted(tracking.__all__) == sorted(
        [
            "Associator", "Births", "CVPredictor", "Chi2Gater", "Deleter", "GNNAssociator",
            "Gated", "Gater", "IMMPredictor", "Initiator", "JPDAAssociator", "Measurements",
            "MultiTargetTracker",
            "OnePointInitiator", "PolarDetections", "PolarEKFUpdater", "PositionUpdater",
            "Predictor", "Scan", "ScanPeriodDeleter", "StepReport", "TrackLife", "TrackTable",
            "TrackerConfig", "TrackerConfigError", "TwoPointInitiator", "Updater",
        ]
    )  # fmt: skip
    assert SensorSpec.__module__ == "mcc.tracking.replay"


# -- predictors ----------------------------------------------------------------------------------


def _states(rng: np.random.Generator, n_tracks: int, ndim: int) -> tuple[np.ndarray, np.ndarray]:
    n = 2 * ndim
    x = rng.normal(size=(n_tracks, n)) * 100
    A = rng.normal(size=(n_tracks, n, n))
    return x, A @ A.transpose(0, 2, 1) + np.eye(n)


@pytest.mark.parametrize("ndim", [2, 3])
@pytest.mark.parametrize("kind", ["cv", "imm"])
def test_predictors_with_one_straight_model_match_kalman_predict(kind: str, ndim: int) -> None:
    """A CV bank and an IMM whose only model is CV predict as `kalman.predict` does."""
    rng = np.random.default_rng(ndim)
    cfg = TrackerConfig(
        ndim=ndim,
        model=kind,  # type: ignore[arg-type]
        sigma_a_mps2=3.0 if kind == "cv" else 9.0,  # the IMM's straight model has its own
        sigma_a_straight_mps2=3.0,
        imm_turn_rates_dps=(0.0,),
    )
    bank = CVPredictor(cfg) if kind == "cv" else IMMPredictor(cfg)
    x, P = _states(rng, 30, ndim)
    bank.append(x, P)
    for dt in (np.full(30, 0.7), rng.uniform(0.0, 2.0, 30)):
        F = kalman.cv_transition(dt, ndim=ndim)
        Q = kalman.cv_process_noise(dt, 3.0, ndim=ndim, model="discrete")
        x, P = kalman.predict(x, P, F, Q)
        bank.predict(dt)
        got = bank.estimate()
        np.testing.assert_allclose(got[0], x, atol=1e-9)
        np.testing.assert_allclose(got[1], P, atol=1e-8)
    bank.keep(np.arange(30) % 3 == 0)
    assert len(bank) == 10


def test_imm_transitions_follow_the_step() -> None:
    """Staying in a model over dt is exp(-dt/τ); the rest is shared evenly."""
    pi = kalman.imm_transition(np.array([1.0, 12.0]), 3, sojourn_s=10.0)
    np.testing.assert_allclose(np.diagonal(pi, axis1=1, axis2=2)[:, 0], np.exp([-0.1, -1.2]))
    np.testing.assert_allclose(pi[1, 0, 1], (1 - math.exp(-1.2)) / 2)
    np.testing.assert_allclose(pi.sum(axis=2), 1.0)


def test_imm_transitions_leave_straight_flight_for_the_turns_and_turns_half_for_straight() -> None:
    """The straight model is kept exp(-dt/τ_straight) and left evenly for the turns; a turn is
    kept exp(-dt/τ_turn) and left half for the straight model, half for the other turns; with
    one sojourn and two models it is `kalman.imm_transition`."""
    rates = (0.0, 6.0, -6.0, 12.0)
    pi = imm_transition(np.array([2.0, 12.0]), rates, 100.0, 5.0)
    np.testing.assert_allclose(pi.sum(axis=2), 1.0)
    stay_s, stay_t = math.exp(-2.0 / 100.0), math.exp(-2.0 / 5.0)
    np.testing.assert_allclose(pi[0, 0], [stay_s, *[(1 - stay_s) / 3] * 3])
    np.testing.assert_allclose(pi[0, 1], [(1 - stay_t) / 2, stay_t, *[(1 - stay_t) / 4] * 2])
    np.testing.assert_allclose(pi[1, 3, 3], math.exp(-12.0 / 5.0))
    both = imm_transition(np.array([1.0, 3.0]), (0.0, 9.0), 10.0, 10.0)
    np.testing.assert_allclose(both, kalman.imm_transition(np.array([1.0, 3.0]), 2, sojourn_s=10.0))


def test_imm_mixing_drops_weights_below_the_floor() -> None:
    """A turn model of probability 1e-3 whose state turned away leaves the straight model's
    mixed state and covariance as they were (the textbook mixing widens them); weights above
    the floor mix as `kalman.imm_mix` does."""
    from mcc.tracking.predictors import imm_mix

    x = np.zeros((2, 2, 4))
    x[:, 0, 2:] = [200.0, 0.0]  # straight
    x[:, 1, 2:] = [150.0, 130.0]  # a turn, 40 deg away
    P = np.broadcast_to(np.eye(4) * 4.0, (2, 2, 4, 4)).copy()
    mu = np.array([[0.999, 0.001], [0.5, 0.5]])
    pi = imm_transition(np.float64(2.0), (0.0, 6.0), 120.0, 5.0)
    state = kalman.IMMState(x, P, mu)
    floored = imm_mix(state, pi, 0.02)
    textbook = kalman.imm_mix(state, pi)
    np.testing.assert_allclose(floored.x[0, 0], x[0, 0])
    np.testing.assert_allclose(floored.P[0, 0], P[0, 0])
    assert textbook.P[0, 0, 2, 2] > P[0, 0, 2, 2] + 0.5  # widened by a 0.1 % model
    for a, b in zip(floored, textbook, strict=True):  # track 1: every weight above the floor
        np.testing.assert_allclose(a[1], b[1], atol=1e-9)
    np.testing.assert_allclose(floored.mu, textbook.mu)
    np.testing.assert_allclose(imm_mix(state, pi, 0.0).P, textbook.P)


def test_the_default_imm_covers_0_to_20_dps_within_3_dps() -> None:
    rates = np.array(TrackerConfig().imm_turn_rates_dps)
    wanted = np.linspace(-20, 20, 81)
    assert np.abs(wanted[:, None] - rates[None]).min(axis=1).max() <= 3.0


# -- updaters ------------------------------------------------------------------------------------


def _polar_meas(
    rng: np.random.Generator, k: int, ndim: int, *, elevation: bool, doppler: bool
) -> tuple[Measurements, np.ndarray]:
    truth = np.concatenate(
        [rng.uniform(2e3, 2e4, (k, ndim)), rng.uniform(-200, 200, (k, ndim))], axis=1
    )
    sensor = np.array([100.0, -300.0, 20.0])
    h, _ = kalman.polar_measurement(
        truth, sensor, ndim=ndim, elevation=elevation, range_rate=doppler
    )
    h = h + rng.normal(size=h.shape) * np.array([20.0, 0.01, 0.01, 3.0])[: h.shape[1]]
    scan = Scan.from_polar(
        1.0,
        h[:, 0],
        h[:, 1],
        h[:, 2] if elevation and ndim == 3 else None,
        sigma_range_m=20.0,
        sigma_azimuth_rad=0.01,
        sigma_elevation_rad=0.01,
        range_rate_mps=h[:, -1] if doppler else None,
        sigma_range_rate_mps=3.0,
        sensor_position_m=sensor,
    )
    meas = Measurements("r", 1.0, scan.positions_m, scan.covariance_m2, scan.polar)
    return meas, truth


@pytest.mark.parametrize(
    ("ndim", "elevation", "doppler"),
    [(2, False, False), (2, False, True), (3, True, False), (3, True, True)],
)
def test_the_polar_ekf_update_matches_filterpy(ndim: int, elevation: bool, doppler: bool) -> None:
    """`PolarEKFUpdater` equals filterpy's ExtendedKalmanFilter with the same h, Jacobian and
    an azimuth-wrapping residual, track by track."""
    rng = np.random.default_rng(ndim + 2 * doppler)
    meas, truth = _polar_meas(rng, 8, ndim, elevation=elevation, doppler=doppler)
    x = truth + rng.normal(size=truth.shape) * 50.0
    _, P = _states(rng, 8, ndim)
    P = P * 100.0
    cols = np.arange(8)
    upd = PolarEKFUpdater(ndim)
    x_post, P_post, ll = upd.update(x, P, meas, cols)
    assert upd.dim(meas) == 2 + int(elevation) + int(doppler)
    sensor = meas.polar.sensor_position_m  # type: ignore[union-attr]
    m = upd.dim(meas)
    R = np.diag(np.square([20.0, 0.01] + [0.01] * elevation + [3.0] * doppler))

    def hx(s: np.ndarray) -> np.ndarray:
        return kalman.polar_measurement(
            s, sensor, ndim=ndim, elevation=elevation, range_rate=doppler
        )[0]

    def jac(s: np.ndarray) -> np.ndarray:
        return kalman.polar_measurement(
            s, sensor, ndim=ndim, elevation=elevation, range_rate=doppler
        )[1]

    def residual(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        y = a - b
        y[1] = (y[1] + math.pi) % (2 * math.pi) - math.pi
        return y

    z = meas.polar.z()  # type: ignore[union-attr]
    for i in range(8):
        ekf = ExtendedKalmanFilter(dim_x=2 * ndim, dim_z=m)
        ekf.x, ekf.P, ekf.R = x[i].copy(), P[i].copy(), R
        ekf.update(z[i], jac, hx, residual=residual)
        np.testing.assert_allclose(x_post[i], ekf.x, rtol=1e-9, atol=1e-6)
        np.testing.assert_allclose(P_post[i], ekf.P, rtol=1e-7, atol=1e-6)
        y = residual(z[i].copy(), hx(x[i]))
        S = jac(x[i]) @ P[i] @ jac(x[i]).T + R
        ref = -0.5 * (
            y @ np.linalg.solve(S, y) + np.linalg.slogdet(S)[1] + m * math.log(2 * math.pi)
        )
        assert ll[i] == pytest.approx(ref, rel=1e-9)


@pytest.mark.parametrize("ndim", [2, 3])
def test_the_position_update_matches_filterpy(ndim: int) -> None:
    rng = np.random.default_rng(10 + ndim)
    x, P = _states(rng, 6, ndim)
    z = x[:, :ndim] + rng.normal(size=(6, ndim)) * 5
    B = rng.normal(size=(6, ndim, ndim))
    R = B @ B.transpose(0, 2, 1) + np.eye(ndim)
    x_post, P_post, _ = PositionUpdater(ndim).update(
        x, P, Measurements("r", 0.0, z, R), np.arange(6)
    )
    for i in range(6):
        kf = KalmanFilter(dim_x=2 * ndim, dim_z=ndim)
        kf.x, kf.P, kf.H = x[i].copy(), P[i].copy(), kalman.cv_measurement_matrix(ndim=ndim)
        kf.update(z[i], R=R[i])
        np.testing.assert_allclose(x_post[i], kf.x, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(P_post[i], kf.P, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("ndim", [2, 3])
def test_the_debiased_conversion_is_unbiased(ndim: int) -> None:
    """Converted 5° bearing noise: the plain conversion falls short in range by r(1-λ), the
    debiased one does not (mean of 200 000 draws)."""
    rng = np.random.default_rng(1)
    n, r, s = 200_000, 10_000.0, math.radians(5.0)
    az = math.radians(30.0) + rng.normal(0, s, n)
    el = math.radians(10.0) + rng.normal(0, s, n) if ndim == 3 else None
    kw = dict(sigma_range_m=1.0, sigma_azimuth_rad=s, sigma_elevation_rad=s)
    plain, _ = kalman.polar_to_cartesian(np.full(n, r), az, el, debias=False, **kw)
    fixed, cov = kalman.polar_to_cartesian(np.full(n, r), az, el, **kw)
    true = kalman.polar_to_cartesian(
        r, math.radians(30.0), None if el is None else math.radians(10.0), debias=False, **kw
    )[0][0]
    assert np.linalg.norm(plain.mean(axis=0) - true) > 20.0  # r(1 - λ) ≈ 38 m (2-D)
    assert np.linalg.norm(fixed.mean(axis=0) - true) < 8.0
    assert cov.shape == (n, ndim, ndim)


# -- gater and associator ------------------------------------------------------------------------


@pytest.mark.parametrize("updater_kind", ["position", "ekf"])
def test_the_gater_finds_exactly_the_pairs_inside_the_gate(updater_kind: str) -> None:
    rng = np.random.default_rng(4)
    ndim = 2
    meas, truth = _polar_meas(rng, 60, ndim, elevation=False, doppler=False)
    x = truth[:40] + rng.normal(size=(40, 4)) * 80.0
    _, P = _states(rng, 40, ndim)
    P = P * 400.0
    upd = PositionUpdater(ndim) if updater_kind == "position" else PolarEKFUpdater(ndim)
    gater = Chi2Gater(0.999, ndim)
    gated = gater.gate(x, P, meas, upd)
    ti, mj = np.meshgrid(np.arange(40), np.arange(60), indexing="ij")
    y, S = upd.innovation(x[ti.ravel()], P[ti.ravel()], meas, mj.ravel())
    d2 = np.einsum("ki,ki->k", y, np.linalg.solve(S, y[..., None])[..., 0])
    gate = chi2_gate_threshold(0.999, 2)
    expected = set(
        zip(ti.ravel()[d2 <= gate].tolist(), mj.ravel()[d2 <= gate].tolist(), strict=True)
    )
    assert len(expected) >= 30  # the test has pairs inside the gate
    assert set(zip(gated.ti.tolist(), gated.mj.tolist(), strict=True)) == expected
    order = np.argsort(gated.ti * 60 + gated.mj)
    np.testing.assert_allclose(np.sort(gated.d2), np.sort(d2[d2 <= gate]), rtol=1e-9)
    assert gated.logdet[order].shape == order.shape


@pytest.mark.parametrize("cost", ["distance", "likelihood"])
def test_gnn_reaches_the_dense_optimum(cost: str) -> None:
    """With equal |S| both costs are the dense `gnn_assign` optimum on d²."""
    rng = np.random.default_rng(2)
    gate = 9.21
    for _ in range(20):
        n_t, n_m = rng.integers(1, 40, 2)
        d2 = rng.exponential(6.0, (n_t, n_m))
        d2[rng.random((n_t, n_m)) < 0.7] = np.inf
        ti, mj = np.nonzero(d2 <= gate)
        gated = Gated(ti, mj, d2[ti, mj], np.zeros(ti.size))
        t_idx, m_idx = GNNAssociator(gate, cost=cost).associate(gated, np.ones(ti.size, bool), n_m)  # type: ignore[arg-type]
        ref = gnn_assign(d2, max_cost=gate)
        assert t_idx.size == ref.track_idx.size
        assert d2[t_idx, m_idx].sum() == pytest.approx(d2[ref.track_idx, ref.meas_idx].sum())


def test_the_likelihood_cost_gives_a_detection_to_the_surer_track() -> None:
    """Two tracks at the same d² from one detection: d² alone cannot choose; d² + ln|S| gives
    it to the track with the smaller innovation covariance."""
    gated = Gated(np.array([0, 1]), np.array([0, 0]), np.array([2.0, 2.0]), np.log([4e4, 1e2]))
    t, m = GNNAssociator(9.2).associate(gated, np.ones(2, bool), 1)
    assert t.tolist() == [1] and m.tolist() == [0]


# -- initiators and deleter ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["one_point", "two_point"])
def test_initiators_start_tracks_from_left_over_detections(kind: str) -> None:
    cfg = TrackerConfig(ndim=2, initiation=kind, init_velocity_std_mps=100.0)  # type: ignore[arg-type]
    init = OnePointInitiator(cfg) if kind == "one_point" else TwoPointInitiator(cfg)
    R = np.diag([25.0, 25.0])
    first, _ = init.initiate(Measurements("r", 0.0, np.array([[0.0, 0.0]]), R), 10)
    births, refused = init.initiate(Measurements("r", 2.0, np.array([[100.0, 40.0]]), R), 10)
    assert births is not None and refused == 0
    if kind == "one_point":
        assert first is not None
        np.testing.assert_allclose(births.x, [[100.0, 40.0, 0.0, 0.0]])
        np.testing.assert_allclose(births.P[0], np.diag([25.0, 25.0, 1e4, 1e4]))
        assert (births.history, births.age, births.hits) == (1, 1, 1)
    else:
        assert first is None
        np.testing.assert_allclose(births.x, [[100.0, 40.0, 50.0, 20.0]])
        assert (births.history, births.age, births.hits) == (3, 2, 2)


def test_one_point_initiation_uses_the_range_rate() -> None:
    """Doppler measures the radial velocity: v = ṙ u, tight along the line of sight."""
    scan = Scan.from_polar(
        0.0, [5000.0], [math.pi / 2], sigma_range_m=10.0, sigma_azimuth_rad=0.01,
        range_rate_mps=[-200.0], sigma_range_rate_mps=2.0,
    )  # fmt: skip
    cfg = TrackerConfig(ndim=2)
    births, _ = OnePointInitiator(cfg).initiate(
        Measurements("r", 0.0, scan.positions_m, scan.covariance_m2, scan.polar), 5
    )
    assert births is not None
    np.testing.assert_allclose(births.x[0, 2:], [-200.0, 0.0], atol=1e-9)
    np.testing.assert_allclose(np.diag(births.P[0])[2:], [4.0, 300.0**2], rtol=1e-9)


@pytest.mark.parametrize("period_s", [1.0, 5.0, 12.0])
def test_deletion_follows_the_scan_period(period_s: float) -> None:
    """Covered every scan: kept through max_misses misses, deleted at the next, whatever the
    period; out of coverage (no misses counted): deleted after max(max_coast_s, 3.5 periods)."""
    cfg = TrackerConfig(ndim=2, max_misses=3, max_coast_s=3.0)
    deleter = ScanPeriodDeleter(cfg)
    no = np.zeros(1, bool)
    P = np.eye(4)[None] * 100.0

    def life(misses: int) -> TrackLife:
        return TrackLife(
            no, no, np.zeros(1, np.uint32), np.array([9]), np.array([misses]),
            np.array([0.0]), np.array([period_s]), np.zeros(1),
        )  # fmt: skip

    assert not deleter.delete(life(3), P, 3 * period_s)[0]
    assert deleter.delete(life(4), P, 4 * period_s)[0]
    limit = max(3.0, 3.5 * period_s)
    assert not deleter.delete(life(0), P, limit - 1e-6)[0]
    assert deleter.delete(life(0), P, limit + 1e-6)[0]


@pytest.mark.parametrize("same_dt", [True, False])
def test_the_imm_predictor_matches_kalman_imm_predict(same_dt: bool) -> None:
    """The predictor's fast path (one dt for all tracks) and its general path give
    `kalman.imm_predict` with `kalman.imm_models` and `kalman.imm_transition`."""
    rng = np.random.default_rng(7)
    cfg = TrackerConfig(ndim=2, imm_mix_floor=0.0)  # the textbook mixing
    bank = IMMPredictor(cfg)
    x, P = _states(rng, 25, 2)
    bank.append(x, P)
    bank.state.mu[:] = rng.dirichlet(np.ones(7), 25)
    ref = kalman.IMMState(*(a.copy() for a in bank.state))
    dt = np.full(25, 1.3) if same_dt else rng.uniform(0.1, 2.0, 25)
    bank.predict(dt)
    rates = cfg.imm_turn_rates_dps
    F, Q = kalman.imm_models(
        dt, turn_rates_rps=np.radians(rates), sigma_a=cfg.sigma_a_mps2, ndim=2,
        noise_model="discrete",
    )  # fmt: skip
    # The straight model's own white acceleration (Q scales with sigma²).
    Q[:, 0] *= (cfg.sigma_a_straight_mps2 / cfg.sigma_a_mps2) ** 2
    assert rates[0] == 0.0 and cfg.sigma_a_straight_mps2 < cfg.sigma_a_mps2
    pi = imm_transition(dt, rates, cfg.imm_sojourn_s, cfg.imm_turn_sojourn_s)
    want = kalman.imm_predict(ref, F=F, Q=Q, trans_prob=pi)
    for got, exp in zip(bank.state, want, strict=True):
        np.testing.assert_allclose(got, exp, rtol=1e-9, atol=1e-8)


def test_classification_from_kinematics() -> None:
    """A fast high flyer is an aircraft, a sea-skimmer a cruise missile, a slow low flyer a
    helicopter, a steep fast diver ballistic; a slow track between helicopter and UAV stays
    UNKNOWN."""
    from mcc.tracking.classify import classify
    from mcc.types import TargetClass as C

    x = np.array(
        [
            [0, 0, 8000, 250, 0, 0],
            [0, 0, 50, 240, 10, 0],
            [0, 0, 300, 50, 0, 0],
            [0, 0, 30000, 1500, 0, -700],
            [0, 0, 900, 45, 0, 0],
        ],
        dtype=float,
    )
    classes, p = classify(x, ndim=3)
    want = [C.CLASS_AIRCRAFT, C.CLASS_CRUISE_MISSILE, C.CLASS_HELICOPTER, C.CLASS_BALLISTIC]
    assert classes[:4].tolist() == [int(c.value) for c in want]
    assert classes[4] == int(C.CLASS_UNKNOWN.value) and p[4].max() < 0.6
    np.testing.assert_allclose(p.sum(axis=1), 1.0)


def test_imm_prediction_matches_filterpy_imm_estimator() -> None:
    """Mixing and model-conditioned prediction of seven distinct model estimates: the same as
    filterpy's IMMEstimator (an independent implementation)."""
    from filterpy.kalman import IMMEstimator

    rng = np.random.default_rng(11)
    rates = np.radians([0.0, 6.0, -6.0, 12.0, -12.0, 18.0, -18.0])
    F, Q = kalman.imm_models(1.5, turn_rates_rps=rates, sigma_a=5.0, ndim=2, noise_model="discrete")
    pi = kalman.imm_transition(1.5, 7, sojourn_s=10.0)
    filters = []
    xs, Ps = [], []
    for m in range(7):
        kf = KalmanFilter(dim_x=4, dim_z=2)
        x, P = _states(rng, 1, 2)
        kf.x, kf.P, kf.F, kf.Q = x[0] + [2e4, -3e4, 200, 50], P[0] * 50, F[m], Q[m]
        xs.append(kf.x.copy())
        Ps.append(kf.P.copy())
        filters.append(kf)
    mu = rng.dirichlet(np.ones(7))
    imm = IMMEstimator(filters, mu, pi)
    imm.predict()
    state = kalman.IMMState(np.array(xs)[None], np.array(Ps)[None], mu[None])
    got = kalman.imm_predict(state, F=F, Q=Q, trans_prob=pi)
    for m in range(7):
        np.testing.assert_allclose(got.x[0, m], filters[m].x, rtol=1e-10, atol=1e-7)
        np.testing.assert_allclose(got.P[0, m], filters[m].P, rtol=1e-9, atol=1e-6)
    np.testing.assert_allclose(got.mu[0], imm.cbar, rtol=1e-12)


@pytest.mark.parametrize("ndim", [2, 3])
def test_the_dense_and_grid_candidate_searches_find_the_same_pairs(
    ndim: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcc.tracking import gaters

    rng = np.random.default_rng(ndim)
    tracks, meas = rng.uniform(-2e4, 2e4, (60, ndim)), rng.uniform(-2e4, 2e4, (50, ndim))
    radius = rng.uniform(500.0, 8000.0, 60)
    dense = set(zip(*gaters.candidate_pairs(tracks, radius, meas), strict=True))
    monkeypatch.setattr(gaters, "_DENSE_PAIRS", 0)
    grid = set(zip(*gaters.candidate_pairs(tracks, radius, meas), strict=True))
    want = {(i, j) for i in range(60) for j in range(50)
            if np.sum((tracks[i] - meas[j]) ** 2) <= radius[i] ** 2}  # fmt: skip
    assert dense == grid == want and len(want) > 10
