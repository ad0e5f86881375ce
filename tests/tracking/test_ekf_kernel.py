"""The C kernel `mcc.tracking._ekf` against the NumPy code it replaces (its reference, and what
runs without it): the 2-D range/azimuth gate distances and IMM model mixture, the EKF update,
JPDA's PDA mixture, the IMM's mixing and prediction, the spatial grid's candidate pairs, and a
whole tracker run with and without it. Hostile inputs too: empty, NaN, zero model
probabilities, bad shapes and indices."""

from __future__ import annotations

import numpy as np
import pytest

from mcc.compute import kalman
from mcc.errors import ComputeError
from mcc.tracking import MultiTargetTracker, Scan, TrackerConfig, gaters, jpda, predictors, updaters
from mcc.tracking.base import Measurements
from mcc.tracking.scan import PolarDetections

pytestmark = pytest.mark.skipif(updaters.KERNEL is None, reason="mcc.tracking._ekf not built")

M7 = 7
# The kernel's transcendental functions (atan2, exp, log) are the C library's, NumPy's are its
# own: the last bit of some results differs; everything else is the same arithmetic.
RTOL = 1e-12


def _meas(rng: np.random.Generator, m: int) -> Measurements:
    r = rng.uniform(2e3, 4e4, m)
    az = rng.uniform(0, 2 * np.pi, m)
    scan = Scan.from_polar(0.0, r, az, sigma_range_m=25.0, sigma_azimuth_rad=0.004,
                           sensor_position_m=(700.0, -300.0))  # fmt: skip
    return Measurements("", 0.0, scan.positions_m, scan.covariance_m2, scan.polar)


def _states(rng: np.random.Generator, n: int, models: int) -> tuple[np.ndarray, np.ndarray]:
    lead = (n, models) if models else (n,)
    x = rng.normal(0.0, 1.0, (*lead, 4))
    x[..., :2] *= 2e4
    x[..., 2:] *= 200.0
    a = rng.normal(0.0, 1.0, (*lead, 4, 4))
    P = a @ a.swapaxes(-1, -2) * 400.0 + np.eye(4) * 50.0
    return x, P


def _updaters() -> tuple[updaters.PolarEKFUpdater, updaters.PolarEKFUpdater]:
    return updaters.PolarEKFUpdater(2), updaters.PolarEKFUpdater(2, native=False)


def _close(got: np.ndarray, want: np.ndarray, rtol: float = RTOL) -> None:
    np.testing.assert_allclose(got, want, rtol=rtol, atol=0.0)


@pytest.mark.parametrize("models", [0, M7])
@pytest.mark.parametrize("pairs", [0, 1, 150])
def test_gate_distances_are_those_of_pair_innovation(models: int, pairs: int) -> None:
    rng = np.random.default_rng(10 + pairs + models)
    x, P = _states(rng, 30, models)
    meas = _meas(rng, 25)
    rows, cols = rng.integers(0, 30, pairs), rng.integers(0, 25, pairs)
    native, ref = _updaters()
    d2, logdet, ll = native.pair_distance(x, P, meas, rows, cols)
    want_d2, want_logdet = updaters.mahalanobis(*ref.pair_innovation(x, P, meas, rows, cols))
    assert ll is None and d2.shape == want_d2.shape
    _close(d2, want_d2)
    _close(logdet, want_logdet)


def test_a_2d_tracker_ignores_elevation_as_numpy_does() -> None:
    """Detections with an elevation in a 2-D tracker: range and azimuth only, both paths."""
    rng = np.random.default_rng(12)
    flat = _meas(rng, 9)
    assert flat.polar is not None
    p = flat.polar
    polar = PolarDetections(p.range_m, p.azimuth_rad, rng.uniform(0.0, 0.2, 9), None,
                            p.sigma_range_m, p.sigma_azimuth_rad, 0.01, 1.0,
                            p.sensor_position_m)  # fmt: skip
    meas = Measurements("", 0.0, flat.z, flat.R, polar)
    x, P = _states(rng, 8, M7)
    rows, cols = rng.integers(0, 8, 30), rng.integers(0, 9, 30)
    native, ref = _updaters()
    assert native.native(meas)
    _close(native.pair_distance(x, P, meas, rows, cols)[0],
           updaters.mahalanobis(*ref.pair_innovation(x, P, meas, rows, cols))[0])  # fmt: skip
    for g, w in zip(native.pair_update(x, P, meas, rows, cols),
                    ref.pair_update(x, P, meas, rows, cols), strict=True):  # fmt: skip
        _close(g, w)


@pytest.mark.parametrize("pairs", [0, 120])
def test_model_gate_is_numpys(pairs: int) -> None:
    """The mixture over the models, the least distance and its model's ln|S|; a model of
    probability 0 (ln μ = −inf) included."""
    rng = np.random.default_rng(3)
    x, P = _states(rng, 20, M7)
    mu = rng.random((20, M7))
    mu[0, 3] = 0.0
    mu /= mu.sum(axis=1, keepdims=True)
    meas = _meas(rng, 15)
    rows, cols = rng.integers(0, 20, pairs), rng.integers(0, 15, pairs)
    rows[:5] = 0
    pred = predictors.IMMPredictor(TrackerConfig(ndim=2))
    pred.state = kalman.IMMState(x, P, mu)
    native, ref = _updaters()
    with np.errstate(divide="ignore"):
        got = pred.model_gate(rows, native, meas, cols)
        want = pred.model_gate(rows, ref, meas, cols)
    for g, w in zip(got, want, strict=True):
        _close(g, w)


@pytest.mark.parametrize("models", [0, M7])
def test_update_and_pair_update_are_numpys(models: int) -> None:
    rng = np.random.default_rng(5)
    x, P = _states(rng, 25, models)
    meas = _meas(rng, 20)
    rows, cols = rng.integers(0, 25, 90), rng.integers(0, 20, 90)
    native, ref = _updaters()
    for got, want in (
        (native.pair_update(x, P, meas, rows, cols), ref.pair_update(x, P, meas, rows, cols)),
        (native.update(x[rows], P[rows], meas, cols), ref.update(x[rows], P[rows], meas, cols)),
    ):
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape
            _close(g, w)
        np.testing.assert_array_equal(got[1], want[1])  # no transcendental function in P


def test_the_update_mixture_and_posterior_model_probabilities() -> None:
    """`pair_update_mix`'s mixture likelihood and posterior μ: `IMMPredictor`'s NumPy
    formulas (`pda_update`, `update`) on `pair_update`'s log-likelihoods."""
    rng = np.random.default_rng(6)
    x, P = _states(rng, 12, M7)
    mu = rng.random((12, M7))
    mu[2, :3] = 0.0
    mu /= mu.sum(axis=1, keepdims=True)
    meas = _meas(rng, 10)
    rows, cols = rng.integers(0, 12, 40), rng.integers(0, 10, 40)
    native, ref = _updaters()
    xp, Pp, ll, mix, mu_post = native.pair_update_mix(x, P, mu, meas, rows, cols)
    _, _, want_ll = ref.pair_update(x, P, meas, rows, cols)
    _close(ll, want_ll)
    with np.errstate(divide="ignore"):
        a = want_ll + np.log(mu[rows])
    top = a.max(axis=1)
    _close(mix, top + np.log(np.exp(a - top[:, None]).sum(axis=1)))
    w = np.exp(a - top[:, None])
    _close(mu_post, w / w.sum(axis=1, keepdims=True))


def test_nan_states_and_singular_covariances_raise_as_numpy_does() -> None:
    rng = np.random.default_rng(7)
    x, P = _states(rng, 6, M7)
    x[2, 1, 0] = np.nan
    meas = _meas(rng, 5)
    rows, cols = np.array([0, 2, 3]), np.array([1, 1, 4])
    native, ref = _updaters()
    for upd in (native, ref):
        with pytest.raises(ComputeError, match="positive definite"):
            upd.pair_update(x, P, meas, rows, cols)
    with pytest.raises(ComputeError, match="positive definite"):
        updaters.mahalanobis(*ref.pair_innovation(x, P, meas, rows, cols))
    with pytest.raises(ComputeError, match="positive definite"):
        native.pair_distance(x, P, meas, rows, cols)
    # A NaN where no pair looks: nothing raised, the same numbers as NumPy's.
    rows = np.array([0, 3])
    d2, _, _ = native.pair_distance(x, P, meas, rows, cols[:2])
    _close(d2, updaters.mahalanobis(*ref.pair_innovation(x, P, meas, rows, cols[:2]))[0])


def test_the_kernel_checks_its_arguments() -> None:
    kernel = updaters.KERNEL
    assert kernel is not None
    rng = np.random.default_rng(8)
    x, P = _states(rng, 4, M7)
    meas = _meas(rng, 3)
    assert meas.polar is not None
    z, R = meas.polar.z(), np.eye(2).ravel()
    d2, ld = np.empty((1, M7)), np.empty((1, M7))
    args = (z, R, 0.0, 0.0, None, d2, ld, None)
    with pytest.raises(IndexError):
        kernel.gate(x, P, M7, np.array([4]), np.array([0]), *args)
    with pytest.raises(IndexError):
        kernel.gate(x, P, M7, np.array([0]), np.array([-1]), *args)
    with pytest.raises(TypeError):
        kernel.gate(x, P, 3, np.array([0]), np.array([0]), *args)  # 7 models, not 3
    with pytest.raises(TypeError):
        kernel.gate(x[..., :3], P, M7, np.array([0]), np.array([0]), *args)
    with pytest.raises(ValueError):
        kernel.gate(x, P, M7, np.array([0]), np.array([0]), z, R, 0.0, 0.0, None,
                    np.empty(3), ld, None)  # fmt: skip


@pytest.mark.parametrize("models", [1, M7])
@pytest.mark.parametrize("pairs", [0, 60])
def test_pda_mix_is_jpdas(models: int, pairs: int) -> None:
    """`jpda.pda_mix` of the tracks with pairs, read in place: bit for bit (no
    transcendental function but the exp and log of the models' weights)."""
    rng = np.random.default_rng(20 + pairs)
    x, P = _states(rng, 30, models)
    mu = rng.random((30, models))
    if models > 1:
        mu[:3, 1] = 0.0
    mu /= mu.sum(axis=1, keepdims=True)
    rows = np.sort(rng.choice(30, pairs))
    tracks = np.unique(rows) if pairs else np.array([4, 9])
    at = np.searchsorted(tracks, rows)
    xp, Pp = _states(rng, pairs, models)
    ll = rng.normal(-10.0, 3.0, (pairs, models))
    beta = rng.random(pairs) * 0.4
    beta0 = rng.random(tracks.size)
    beta0[:1] = 0.0
    with np.errstate(invalid="ignore"):  # a track of no mass (β_0 = 0, no pair): NaN in both
        want = jpda.pda_mix(x[tracks], P[tracks], mu[tracks], xp, Pp, ll, at, beta, beta0)
    assert updaters.KERNEL is not None
    got = predictors._native_pda_mix(
        updaters.KERNEL, x[:, 0] if models == 1 else x, P[:, 0] if models == 1 else P,
        mu[:, 0] if models == 1 else mu, tracks, at, xp, Pp, ll, beta, beta0,
    )  # fmt: skip
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-14, atol=0.0)


@pytest.mark.parametrize("tracks", [1, 2, 3, 5, 40, 513, 600])
def test_the_imm_prediction_is_numpys(tracks: int) -> None:
    """Mixing and one step of every model, against the NumPy branch (its products are
    OpenBLAS's; the kernel sums as it does, so most tracks agree to the bit)."""
    cfg = TrackerConfig(ndim=2)
    rng = np.random.default_rng(tracks)
    native, ref = predictors.IMMPredictor(cfg), predictors.IMMPredictor(cfg)
    ref.kernel = None
    x, P = _states(rng, tracks, 0)
    for p in (native, ref):
        p.append(x, P)
    for k in range(3):
        dt = np.full(tracks, 1.0 + 0.7 * k)
        native.predict(dt)
        ref.predict(dt)
        mu = rng.random((tracks, M7))
        mu[0, 2] = 0.0
        mu /= mu.sum(axis=1, keepdims=True)
        native.state.mu[:] = mu
        ref.state.mu[:] = mu
        for g, w in zip(native.state, ref.state, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-9)
    np.testing.assert_array_equal(native.estimate()[0].shape, (tracks, 4))


def test_the_imm_prediction_keeps_nan_where_numpy_does() -> None:
    cfg = TrackerConfig(ndim=2)
    native, ref = predictors.IMMPredictor(cfg), predictors.IMMPredictor(cfg)
    ref.kernel = None
    rng = np.random.default_rng(9)
    x, P = _states(rng, 4, 0)
    x[1, 0] = np.nan
    for p in (native, ref):
        p.append(x, P)
        p.predict(np.full(4, 2.0))
    for g, w in zip(native.state, ref.state, strict=True):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("tracks", [0, 1, 3, 50])
def test_the_combined_estimate_is_kalman_imm_combine(tracks: int) -> None:
    """With the models' weights and with equal ones; its matrix-vector products are summed
    otherwise than OpenBLAS's (a few ulps); a NaN stays in its track."""
    rng = np.random.default_rng(30 + tracks)
    x, P = _states(rng, tracks, M7)
    mu = rng.random((tracks, M7))
    mu[:1, 4] = 0.0
    mu /= mu.sum(axis=1, keepdims=True)
    if tracks > 1:
        x[1, 3, 2] = np.nan
    pred = predictors.IMMPredictor(TrackerConfig(ndim=2))
    assert pred.kernel is not None
    state = kalman.IMMState(x, P, mu)
    flat = np.full(mu.shape, 1.0 / M7)
    for got, want in (
        (pred._combine(state), kalman.imm_combine(state, xp=np)),
        (pred._combine(state, equal=True), kalman.imm_combine(kalman.IMMState(x, P, flat), xp=np)),
    ):
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-9)


@pytest.mark.parametrize("ndim", [2, 3])
@pytest.mark.parametrize(
    "sizes", [(3000, 2500), (0, 50), (80, 0), (200, 300), (40, 60), (100, 150)]
)
def test_candidate_pairs_are_numpys(ndim: int, sizes: tuple[int, int]) -> None:
    """The same pairs in the same order: the grid's, or (track, detection) order up to
    `_DENSE_PAIRS_NATIVE` pairs (40 x 60 and 100 x 150: the kernel tests every pair)."""
    rng = np.random.default_rng(sizes[0] + ndim)
    n, m = sizes
    tp = rng.uniform(-5e4, 5e4, (n, ndim))
    mp = rng.uniform(-5e4, 5e4, (m, ndim))
    tp[:, 2:] *= 0.01  # heights within 500 m
    mp[:, 2:] *= 0.01
    radius = np.exp(rng.uniform(np.log(50.0), np.log(4000.0), n))  # several radius groups
    want = gaters.candidate_pairs(tp, radius, mp)
    got = gaters.candidate_pairs(tp, radius, mp, kernel=updaters.KERNEL)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert got[0].dtype == np.int64 and got[1].dtype == np.int64
    assert got[0].size > 0 or n * m == 0


def test_candidate_pairs_refuse_a_nan_position_with_or_without_the_kernel() -> None:
    """The grid cannot place a NaN (the tracker never has one: scans and restored states are
    checked): the same error on both paths, before the kernel runs."""
    rng = np.random.default_rng(1)
    tp, mp = rng.uniform(-5e4, 5e4, (100, 2)), rng.uniform(-5e4, 5e4, (100, 2))
    tp[7] = np.nan
    for kernel in (None, updaters.KERNEL):
        with pytest.raises(ValueError):
            gaters.candidate_pairs(tp, np.full(100, 500.0), mp, kernel=kernel)


def _crossing_run(kernels: bool, monkeypatch: pytest.MonkeyPatch) -> list[tuple[np.ndarray, ...]]:
    """Five crossing targets (two of them close: JPDA) in clutter, 2-D polar; every scan's
    tracks."""
    monkeypatch.setattr(updaters, "KERNEL", updaters.KERNEL if kernels else None)
    rng = np.random.default_rng(11)
    start = np.array([[20e3, 5e3], [20e3, 5.3e3], [-15e3, 30e3], [5e3, -25e3], [3e4, 3e4]])
    vel = np.array([[-150.0, 10.0], [-150.0, -10.0], [120.0, -40.0], [0.0, 200.0],
                    [-100.0, -100.0]])  # fmt: skip
    trk = MultiTargetTracker(TrackerConfig(ndim=2))
    out = []
    for k in range(40):
        pos = start + vel * k
        r = np.hypot(pos[:, 0], pos[:, 1]) + rng.normal(0, 20.0, 5)
        az = np.arctan2(pos[:, 0], pos[:, 1]) + rng.normal(0, 0.003, 5)
        r = np.concatenate([r, rng.uniform(0, 5e4, 8)])
        az = np.concatenate([az, rng.uniform(0, 2 * np.pi, 8)])
        scan = Scan.from_polar(float(k) * (1.0 + 1e-12 * (k % 3)), r, az,
                               sigma_range_m=20.0, sigma_azimuth_rad=0.003, pd=0.9,
                               clutter_per_scan=8.0)  # fmt: skip
        trk.step(scan)
        table = trk.tracks(include_tentative=True)
        out.append((table.ids, table.status, table.x, table.P))
    return out


def test_a_tracker_run_is_the_same_with_and_without_the_kernel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fast = _crossing_run(True, monkeypatch)
    plain = _crossing_run(False, monkeypatch)
    assert sum(ids.size for ids, *_ in fast) > 100
    for (i1, s1, x1, P1), (i2, s2, x2, P2) in zip(fast, plain, strict=True):
        np.testing.assert_array_equal(i1, i2)
        np.testing.assert_array_equal(s1, s2)
        np.testing.assert_allclose(x1, x2, rtol=1e-9, atol=1e-6)
        np.testing.assert_allclose(P1, P2, rtol=1e-9, atol=1e-6)
