"""Kalman filter bank, IMM and radar conversion against FilterPy and hand-computed values."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
from filterpy.common import Q_continuous_white_noise, Q_discrete_white_noise
from filterpy.kalman import KalmanFilter

import mcc.compute
from mcc.compute import backend, kalman
from mcc.errors import ComputeError, MccError


def _random_spd(rng: np.random.Generator, n: int, size: int, scale: float) -> np.ndarray:
    a = rng.normal(size=(size, n, n))
    return scale * (a @ a.swapaxes(1, 2) + n * np.eye(n))


# --- backend and public surface -----------------------------------------------------------------


def test_public_surface() -> None:
    for name in mcc.compute.__all__:
        assert hasattr(mcc.compute, name), name
    assert {"kalman", "associate", "threat", "wta", "montecarlo", "get_xp"} <= set(
        mcc.compute.__all__
    )


def test_get_xp_cpu_and_to_numpy() -> None:
    assert backend.get_xp("cpu") is np
    a = np.arange(3.0)
    assert backend.to_numpy(a) is a
    assert backend.array_module(a, [1.0]) is np


def test_get_xp_cuda_without_cupy_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.import_module

    def no_cupy(name: str, package: str | None = None) -> object:
        if name == "cupy":
            raise ImportError("No module named 'cupy'")
        return real(name, package)

    monkeypatch.setattr(backend.importlib, "import_module", no_cupy)
    with pytest.raises(MccError, match=r"pip install mcc\[gpu\]"):
        backend.get_xp("cuda:0")


def test_kernels_accept_an_explicit_numpy_backend() -> None:
    xp = backend.get_xp("cpu")
    x, P = kalman.cv_initiate(np.ones((2, 3)), np.eye(3), xp=xp)
    F, Q = kalman.cv_transition(1.0, xp=xp), kalman.cv_process_noise(1.0, 2.0, xp=xp)
    x1, P1 = kalman.predict(x, P, F, Q, xp=xp)
    x2, P2 = kalman.predict(x, P, F, Q)
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(P1, P2)


@pytest.mark.parametrize("device", ["tpu", "cuda:x", "gpu"])
def test_get_xp_rejects_unknown_devices(device: str) -> None:
    with pytest.raises(ComputeError, match=device.replace(":", ".")):
        backend.get_xp(device)


# --- models ------------------------------------------------------------------------------------


def test_cv_transition_3d_and_2d() -> None:
    F = kalman.cv_transition(2.0)
    expected = np.eye(6)
    expected[0, 3] = expected[1, 4] = expected[2, 5] = 2.0
    np.testing.assert_array_equal(F, expected)
    F2 = kalman.cv_transition(0.5, ndim=2)
    np.testing.assert_array_equal(F2, [[1, 0, 0.5, 0], [0, 1, 0, 0.5], [0, 0, 1, 0], [0, 0, 0, 1]])
    Fb = kalman.cv_transition(np.array([1.0, 3.0]))
    assert Fb.shape == (2, 6, 6)
    assert Fb[1, 2, 5] == 3.0


@pytest.mark.parametrize("dt", [0.1, 1.0, 4.0])
def test_cv_process_noise_matches_filterpy(dt: float) -> None:
    q = kalman.cv_process_noise(dt, 3.0, model="continuous")
    ref = Q_continuous_white_noise(
        dim=2, dt=dt, spectral_density=9.0, block_size=3, order_by_dim=False
    )
    np.testing.assert_allclose(q, ref, rtol=1e-12)
    qd = kalman.cv_process_noise(dt, 3.0, model="discrete")
    refd = Q_discrete_white_noise(dim=2, dt=dt, var=9.0, block_size=3, order_by_dim=False)
    np.testing.assert_allclose(qd, refd, rtol=1e-12)
    batched = kalman.cv_process_noise(np.array([dt, dt]), np.array([3.0, 1.0]))
    assert batched.shape == (2, 6, 6)
    np.testing.assert_allclose(batched[0], q)
    np.testing.assert_allclose(batched[1], q / 9.0)


def test_invalid_model_inputs_raise() -> None:
    with pytest.raises(ComputeError, match="dt_s"):
        kalman.cv_transition(-1.0)
    with pytest.raises(ComputeError, match="dt_s"):
        kalman.cv_transition(float("nan"))
    with pytest.raises(ComputeError, match="ndim"):
        kalman.cv_transition(1.0, ndim=4)
    with pytest.raises(ComputeError, match="model"):
        kalman.cv_process_noise(1.0, 1.0, model="singer")  # type: ignore[arg-type]


def test_ct_transition_reduces_to_cv_and_turns_a_quarter_circle() -> None:
    np.testing.assert_allclose(kalman.ct_transition(2.0, 0.0), kalman.cv_transition(2.0))
    np.testing.assert_allclose(
        kalman.ct_transition(2.0, 1e-9), kalman.cv_transition(2.0), atol=1e-8
    )
    speed, w = 200.0, 0.02  # counter-clockwise
    quarter = (math.pi / 2) / w
    x0 = np.array([0.0, 0.0, 100.0, speed, 0.0, 5.0])
    x1 = kalman.ct_transition(quarter, w) @ x0
    radius = speed / w
    np.testing.assert_allclose(
        x1, [radius, radius, 100.0 + 5.0 * quarter, 0.0, speed, 5.0], atol=1e-9
    )
    # Composition: ten small steps equal one large step.
    step = kalman.ct_transition(quarter / 10, w)
    np.testing.assert_allclose(np.linalg.matrix_power(step, 10) @ x0, x1, atol=1e-8)
    # Batched over rates and times.
    Fb = kalman.ct_transition(np.array([[1.0], [2.0]]), np.array([0.0, 0.1, -0.1]))
    assert Fb.shape == (2, 3, 6, 6)
    np.testing.assert_allclose(Fb[1, 0], kalman.cv_transition(2.0))


# --- batch KF against FilterPy ------------------------------------------------------------------


def test_batch_kalman_matches_filterpy_per_track() -> None:
    rng = np.random.default_rng(7)
    n_tracks, n_steps, dt = 5, 6, 1.5
    F = kalman.cv_transition(dt)
    Q = kalman.cv_process_noise(dt, 4.0)
    H = kalman.cv_measurement_matrix()
    x0 = np.c_[rng.normal(0, 1e4, (n_tracks, 3)), rng.normal(0, 200, (n_tracks, 3))]
    P0 = _random_spd(rng, 6, n_tracks, 50.0)
    R = _random_spd(rng, 3, n_tracks, 10.0)  # per-track measurement noise
    zs = x0[None, :, :3] + rng.normal(0, 50, (n_steps, n_tracks, 3))

    refs = []
    for i in range(n_tracks):
        kf = KalmanFilter(dim_x=6, dim_z=3)
        kf.x, kf.P, kf.F, kf.Q, kf.H, kf.R = x0[i].copy(), P0[i].copy(), F, Q, H, R[i]
        refs.append(kf)

    x, P = x0.copy(), P0.copy()
    for k in range(n_steps):
        x, P = kalman.predict(x, P, F, Q)
        res = kalman.update(x, P, zs[k], H, R)
        x, P = res.x, res.P
        for i, kf in enumerate(refs):
            kf.predict()
            kf.update(zs[k, i])
            np.testing.assert_allclose(res.innovation[i], kf.y, rtol=1e-9, atol=1e-9)
            np.testing.assert_allclose(res.S[i], kf.S, rtol=1e-9)
            np.testing.assert_allclose(x[i], kf.x, rtol=1e-9, atol=1e-7)
            np.testing.assert_allclose(P[i], kf.P, rtol=1e-8, atol=1e-8)
    np.testing.assert_array_equal(P, P.swapaxes(1, 2))
    assert (np.linalg.eigvalsh(P) > 0).all()


def test_update_rejects_nan_measurement() -> None:
    x, P = kalman.cv_initiate(np.zeros((2, 3)), np.eye(3))
    z = np.array([[0.0, 0.0, np.nan], [1.0, 1.0, 1.0]])
    with pytest.raises(ComputeError, match=r"^z has 1 NaN"):
        kalman.update(x, P, z, kalman.cv_measurement_matrix(), np.eye(3))


def test_cv_initiate_and_log_likelihood() -> None:
    x, P = kalman.cv_initiate(
        np.array([[1.0, 2.0, 3.0]]), np.diag([4.0, 9.0, 16.0]), velocity_sigma_mps=100.0
    )
    np.testing.assert_array_equal(x, [[1, 2, 3, 0, 0, 0]])
    np.testing.assert_array_equal(np.diag(P[0]), [4, 9, 16, 1e4, 1e4, 1e4])
    y = np.array([[1.0, -2.0]])
    S = np.array([[[4.0, 0.0], [0.0, 1.0]]])
    expected = -0.5 * (1 / 4 + 4 + math.log(4.0) + 2 * math.log(2 * math.pi))
    np.testing.assert_allclose(kalman.gaussian_log_likelihood(y, S), [expected])


# --- IMM ---------------------------------------------------------------------------------------


def _kf_setup(n_tracks: int = 4, seed: int = 3):
    rng = np.random.default_rng(seed)
    x0 = np.c_[rng.normal(0, 5e3, (n_tracks, 3)), rng.normal(0, 150, (n_tracks, 3))]
    P0 = _random_spd(rng, 6, n_tracks, 20.0)
    zs = x0[None, :, :3] + rng.normal(0, 30, (5, n_tracks, 3))
    return x0, P0, zs


def test_imm_with_one_model_is_the_kalman_filter() -> None:
    x0, P0, zs = _kf_setup()
    F, Q = kalman.imm_models(1.0, turn_rates_rps=(0.0,), sigma_a=3.0)
    H, R = kalman.cv_measurement_matrix(), np.eye(3) * 100.0
    state = kalman.imm_initiate(x0, P0, [1.0])
    x, P = x0, P0
    for z in zs:
        state = kalman.imm_predict(state, F=F, Q=Q, trans_prob=[[1.0]])
        state, _ = kalman.imm_update(state, z, H, R)
        x, P = kalman.predict(x, P, F[0], Q[0])
        upd = kalman.update(x, P, z, H, R)
        x, P = upd.x, upd.P
    xc, Pc = kalman.imm_combine(state)
    np.testing.assert_allclose(xc, x, rtol=1e-12)
    np.testing.assert_allclose(Pc, P, rtol=1e-10)
    np.testing.assert_allclose(state.mu, 1.0)


def test_imm_with_identical_models_is_the_kalman_filter() -> None:
    x0, P0, zs = _kf_setup()
    F, Q = kalman.imm_models(np.full(4, 2.0), turn_rates_rps=(0.0, 0.0, 0.0), sigma_a=3.0)
    assert F.shape == (4, 3, 6, 6)
    H, R = kalman.cv_measurement_matrix(), np.eye(3) * 100.0
    pi = np.array([[0.9, 0.05, 0.05], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]])
    mu0 = np.array([0.5, 0.3, 0.2])
    state = kalman.imm_initiate(x0, P0, mu0)
    x, P = x0, P0
    mu = mu0
    for z in zs:
        state = kalman.imm_predict(state, F=F, Q=Q, trans_prob=pi)
        state, _ = kalman.imm_update(state, z, H, R)
        x, P = kalman.predict(x, P, F[:, 0], Q[:, 0])
        upd = kalman.update(x, P, z, H, R)
        x, P = upd.x, upd.P
        mu = mu @ pi  # identical likelihoods leave the predicted probabilities unchanged
    xc, Pc = kalman.imm_combine(state)
    np.testing.assert_allclose(xc, x, rtol=1e-10)
    np.testing.assert_allclose(Pc, P, rtol=1e-8)
    np.testing.assert_allclose(state.mu, np.broadcast_to(mu, (4, 3)), rtol=1e-10)


def test_imm_prefers_the_turn_model_on_a_turning_target() -> None:
    w, dt = math.radians(6.0), 1.0
    truth = np.array([0.0, 0.0, 3000.0, 250.0, 0.0, 0.0])
    F, Q = kalman.imm_models(dt, turn_rates_rps=(0.0, w, -w), sigma_a=1.0)
    H, R = kalman.cv_measurement_matrix(), np.eye(3) * 25.0
    state = kalman.imm_initiate(truth[None], np.eye(6)[None] * 100.0, [1 / 3, 1 / 3, 1 / 3])
    pi = np.full((3, 3), 0.025) + np.eye(3) * 0.925
    rng = np.random.default_rng(11)
    for _ in range(20):
        truth = kalman.ct_transition(dt, w) @ truth
        state = kalman.imm_predict(state, F=F, Q=Q, trans_prob=pi)
        z = truth[None, :3] + rng.normal(0, 5.0, (1, 3))
        state, loglik = kalman.imm_update(state, z, H, R)
        assert np.isfinite(loglik).all()
    assert state.mu[0, 1] > 0.8  # the left-turn model
    xc, _ = kalman.imm_combine(state)
    assert np.linalg.norm(xc[0, :3] - truth[:3]) < 20.0


def test_imm_rejects_bad_transition_matrix() -> None:
    x0, P0, _ = _kf_setup()
    state = kalman.imm_initiate(x0, P0, [0.5, 0.5])
    F, Q = kalman.imm_models(1.0, turn_rates_rps=(0.0, 0.1), sigma_a=1.0)
    with pytest.raises(ComputeError, match="trans_prob"):
        kalman.imm_predict(state, F=F, Q=Q, trans_prob=[[0.5, 0.6], [0.5, 0.5]])


# --- radar conversion --------------------------------------------------------------------------


def test_rae_to_enu_hand_values_and_round_trip() -> None:
    r = np.array([1000.0, 1000.0, 1000.0, 2000.0])
    az = np.radians([90.0, 0.0, 0.0, 225.0])
    el = np.radians([0.0, 0.0, 90.0, 30.0])
    pos = kalman.rae_to_enu(r, az, el, sensor_pos=(10.0, 20.0, 30.0))
    c30 = math.cos(math.radians(30.0))
    expected = np.array(
        [
            [1000.0, 0.0, 0.0],
            [0.0, 1000.0, 0.0],
            [0.0, 0.0, 1000.0],
            [-2000 * c30 / math.sqrt(2), -2000 * c30 / math.sqrt(2), 1000.0],
        ]
    ) + [10.0, 20.0, 30.0]
    np.testing.assert_allclose(pos, expected, atol=1e-9)
    r2, az2, el2 = kalman.enu_to_rae(pos[[0, 1, 3]], sensor_pos=(10.0, 20.0, 30.0))
    np.testing.assert_allclose(r2, r[[0, 1, 3]])
    np.testing.assert_allclose(az2, az[[0, 1, 3]], atol=1e-12)
    np.testing.assert_allclose(el2, el[[0, 1, 3]], atol=1e-12)


def test_rae_covariance_hand_value_and_numerical_jacobian() -> None:
    sr, sa, se = 10.0, 1e-3, 2e-3
    cov = kalman.rae_covariance(
        5e4, 0.0, 0.0, sigma_range_m=sr, sigma_azimuth_rad=sa, sigma_elevation_rad=se
    )
    # Due north on the horizon: east error from azimuth, north from range, up from elevation.
    np.testing.assert_allclose(cov, np.diag([(5e4 * sa) ** 2, sr**2, (5e4 * se) ** 2]), atol=1e-9)

    rng = np.random.default_rng(5)
    r = rng.uniform(1e3, 1e5, 8)
    az = rng.uniform(0, 2 * math.pi, 8)
    el = rng.uniform(0, 1.2, 8)
    cov = kalman.rae_covariance(
        r, az, el, sigma_range_m=sr, sigma_azimuth_rad=sa, sigma_elevation_rad=se
    )
    eps = np.array([1e-3, 1e-8, 1e-8])
    base = np.stack([r, az, el], axis=1)
    J = np.empty((8, 3, 3))
    for k in range(3):
        hi, lo = base.copy(), base.copy()
        hi[:, k] += eps[k]
        lo[:, k] -= eps[k]
        J[:, :, k] = (kalman.rae_to_enu(*hi.T) - kalman.rae_to_enu(*lo.T)) / (2 * eps[k])
    ref = J @ np.diag([sr**2, sa**2, se**2]) @ J.swapaxes(1, 2)
    np.testing.assert_allclose(cov, ref, rtol=1e-5, atol=1e-6)
