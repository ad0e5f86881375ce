"""The tracker's fast paths against the plain computations they replace: JPDA*'s pruned
enumeration against the definition, the table `small_unique` against `np.unique`, the 2-D polar
linearisation against `kalman.polar_measurement`, the IMM's cached step against `np.kron`, and
a whole tracker run with the fast linearisation against one without it (the same numbers)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from mcc.tracking import (
    JPDAAssociator,
    MultiTargetTracker,
    Scan,
    TrackerConfig,
    associators,
    predictors,
    updaters,
)
from mcc.tracking.associators import bipartite_components, run_starts, small_unique
from mcc.tracking.base import Measurements

PD, PG = 0.9, 0.999


def _brute_force_star(ti, mj, log_g, log_w0):
    """JPDA* by its definition: every feasible joint event; of those using the same
    detections and missing the same tracks, the likeliest only; marginals normalised."""
    tracks = sorted(set(ti.tolist()))
    options = [[None] + [k for k in range(ti.size) if ti[k] == t] for t in tracks]
    best: dict[tuple[frozenset[int], frozenset[int]], tuple[float, tuple[int | None, ...]]] = {}
    for event in itertools.product(*options):
        dets = [int(mj[k]) for k in event if k is not None]
        if len(dets) != len(set(dets)):
            continue
        w = sum(log_w0 if k is None else log_g[k] for k in event)
        key = (frozenset(dets), frozenset(i for i, k in enumerate(event) if k is None))
        if key not in best or w > best[key][0]:
            best[key] = (w, event)
    beta, beta0 = np.zeros(ti.size), np.zeros(len(tracks))
    top = max(w for w, _ in best.values())
    total = 0.0
    for w, event in best.values():
        p = math.exp(w - top)
        total += p
        for i, k in enumerate(event):
            if k is None:
                beta0[i] += p
            else:
                beta[k] += p
    return beta / total, np.array(tracks), beta0 / total


@pytest.mark.parametrize("seed", range(16))
def test_jpda_star_marginals_match_the_definition(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    n_t, n_m = int(rng.integers(2, 6)), int(rng.integers(1, 7))
    ti, mj = np.nonzero(rng.random((n_t, n_m)) < rng.uniform(0.3, 1.0))
    ti, mj = ti.astype(np.int64), mj.astype(np.int64)
    if ti.size == 0:
        ti, mj = np.array([0, 1]), np.array([0, 0])
    log_g = rng.normal(0.0, 2.0, ti.size)
    jpda = JPDAAssociator(PD, PG, star=True)
    beta, tracks, beta0 = jpda.marginals(ti, mj, log_g)
    want, want_tracks, want0 = _brute_force_star(ti, mj, log_g, jpda.log_w0)
    np.testing.assert_array_equal(tracks, want_tracks)
    np.testing.assert_allclose(beta, want, rtol=0, atol=1e-12)
    np.testing.assert_allclose(beta0, want0, rtol=0, atol=1e-12)


def test_jpda_star_of_a_formation_cluster_matches_the_definition() -> None:
    """Five tracks sharing six detections (the formation family's largest clusters), and a
    second cluster beside it: enumerated together, each as by definition."""
    rng = np.random.default_rng(7)
    a_t, a_m = (x.ravel().astype(np.int64) for x in np.indices((5, 6)))
    ti = np.concatenate([a_t, [5, 5, 6]])
    mj = np.concatenate([a_m, [6, 7, 7]])
    log_g = rng.normal(0.0, 3.0, ti.size)
    for star in (True, False):
        jpda = JPDAAssociator(PD, PG, star=star)
        beta, _, beta0 = jpda.marginals(ti, mj, log_g)
        assert jpda.clusters == 2 and jpda.fallbacks == 0
        for sel in (ti < 5, ti >= 5):
            if star:
                want, _, want0 = _brute_force_star(ti[sel] - ti[sel].min(), mj[sel], log_g[sel],
                                                   jpda.log_w0)  # fmt: skip
            else:
                want, want0 = _brute_force_plain(ti[sel], mj[sel], log_g[sel], jpda.log_w0)
            np.testing.assert_allclose(beta[sel], want, rtol=0, atol=1e-12)
            np.testing.assert_allclose(beta0[np.unique(ti[sel])], want0, rtol=0, atol=1e-12)


def _brute_force_plain(ti, mj, log_g, log_w0):
    tracks = sorted(set(ti.tolist()))
    options = [[None] + [k for k in range(ti.size) if ti[k] == t] for t in tracks]
    beta, beta0, total = np.zeros(ti.size), np.zeros(len(tracks)), 0.0
    for event in itertools.product(*options):
        dets = [int(mj[k]) for k in event if k is not None]
        if len(dets) != len(set(dets)):
            continue
        p = math.exp(sum(log_w0 if k is None else log_g[k] for k in event))
        total += p
        for i, k in enumerate(event):
            if k is None:
                beta0[i] += p
            else:
                beta[k] += p
    return beta / total, beta0 / total


@pytest.mark.parametrize("kernel", [True, False], ids=["c", "numpy"])
@pytest.mark.parametrize("size", [0, 1, 7, 300])
def test_small_unique_and_run_starts_are_numpys(
    size: int, kernel: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert associators.KERNEL is not None  # built by `make test`
    if not kernel:
        monkeypatch.setattr(associators, "KERNEL", None)
    x = np.random.default_rng(size).integers(0, max(size // 3, 1), size).astype(np.int64)
    values, inverse = small_unique(x)
    want, want_inverse = np.unique(x, return_inverse=True)
    np.testing.assert_array_equal(values, want)
    np.testing.assert_array_equal(inverse, want_inverse)
    s = np.sort(x)
    np.testing.assert_array_equal(np.flatnonzero(run_starts(s)), np.unique(s, return_index=True)[1])


@pytest.mark.parametrize("kernel", [True, False], ids=["c", "numpy"])
@pytest.mark.parametrize("seed", range(6))
def test_bipartite_components_label_each_track_by_its_components_smallest_track(
    seed: int, kernel: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against scipy's connected components of the same graph (tracks 0..T-1, detections
    T..T+M-1), lone tracks included."""
    from scipy.sparse import coo_array
    from scipy.sparse.csgraph import connected_components

    if not kernel:
        monkeypatch.setattr(associators, "KERNEL", None)
    rng = np.random.default_rng(seed)
    n_t, n_m = int(rng.integers(1, 60)), int(rng.integers(1, 60))
    k = int(rng.integers(0, 2 * n_t))
    t, m = rng.integers(0, n_t, k), rng.integers(0, n_m, k)
    graph = coo_array((np.ones(k), (t, n_t + m)), shape=(n_t + n_m, n_t + n_m))
    _, comp = connected_components(graph, directed=False)
    smallest = {c: int(np.flatnonzero(comp[:n_t] == c)[0]) for c in set(comp[:n_t].tolist())}
    want = np.array([smallest[c] for c in comp[:n_t]])
    np.testing.assert_array_equal(bipartite_components(t, m, n_t, n_m), want)


def test_the_association_kernels_refuse_malformed_arrays() -> None:
    kernel = associators.KERNEL
    assert kernel is not None
    x = np.array([3, 1, 3])
    with pytest.raises(ValueError, match="negative"):
        kernel.unique_inverse(np.array([1, -2]), np.empty(2, np.int64), np.empty(2, np.int64))
    with pytest.raises(ValueError, match="must hold"):
        kernel.unique_inverse(x, np.empty(2, np.int64), np.empty(3, np.int64))
    with pytest.raises(TypeError):
        kernel.unique_inverse(x.astype(np.int32), np.empty(3, np.int64), np.empty(3, np.int64))
    with pytest.raises(IndexError, match="out of range"):
        kernel.components(np.array([0, 5]), np.array([0, 0]), 3, 1, np.empty(3, np.int64))
    with pytest.raises(ValueError):
        kernel.components(np.array([0]), np.array([0]), 3, 1, np.empty(2, np.int64))


def _polar_meas(rng: np.random.Generator, m: int, *, elevation: bool = False) -> Measurements:
    scan = Scan.from_polar(
        0.0,
        rng.uniform(5e3, 60e3, m),
        rng.uniform(0, 2 * np.pi, m),
        rng.uniform(0.0, 0.1, m) if elevation else None,
        sigma_range_m=30.0,
        sigma_azimuth_rad=0.004,
        sigma_elevation_rad=0.01,
        sensor_position_m=(1500.0, -700.0, 0.0),
    )
    return Measurements("s", 0.0, scan.positions_m, scan.covariance_m2, scan.polar)


@pytest.mark.parametrize("elevation", [False, True])
def test_the_2d_polar_linearisation_is_kalman_polar_measurement(elevation: bool) -> None:
    """The same numbers, to the last bit, as the general linearisation, over (K,) and
    (K, M) batches (an IMM's models)."""
    rng = np.random.default_rng(3)
    meas = _polar_meas(rng, 9, elevation=elevation)
    ekf = updaters.PolarEKFUpdater(2)
    cols = rng.integers(0, 9, 20)
    for shape in ((20,), (20, 7)):
        x = np.concatenate([rng.uniform(-6e4, 6e4, (*shape, 2)), rng.normal(0, 200, (*shape, 2))],
                           axis=-1)  # fmt: skip
        y, Hp, R = ekf._linearise_2d(x, meas.polar, cols)
        y_ref, H_ref, R_ref = ekf._linearise(x, meas.polar, cols)
        np.testing.assert_array_equal(y, y_ref)
        np.testing.assert_array_equal(Hp, H_ref[..., :2])
        np.testing.assert_array_equal(R, R_ref)


def test_the_imm_step_is_kron_and_the_transition_formula() -> None:
    cfg = TrackerConfig(ndim=2)
    imm = predictors.IMMPredictor(cfg)
    rates = tuple(imm.turn_rates.tolist())
    for dt in (0.5, 1.7000000000000002, 12.0):
        FT, FFT, _, pi = predictors._imm_step(dt, rates, imm.sigma_a, 2, cfg.noise_model,
                                              imm.sojourn_s)  # fmt: skip
        F = FT.swapaxes(-1, -2)
        np.testing.assert_array_equal(FFT, np.stack([np.kron(f, f).T for f in F]))
        np.testing.assert_allclose(pi.sum(axis=1), 1.0, atol=1e-15)
        np.testing.assert_array_equal(np.diag(pi), np.exp(-dt / np.where(imm.turn_rates == 0,
                                      *imm.sojourn_s)))  # fmt: skip


def test_a_tracker_run_gives_the_same_numbers_without_the_fast_linearisation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Five crossing targets in clutter, 2-D polar: every scan's tracks (ids, states,
    covariances) bit for bit with and without `PolarEKFUpdater._linearise_2d` (the NumPy path:
    the C kernel off, tests/tracking/test_ekf_kernel.py compares it)."""
    monkeypatch.setattr(updaters, "KERNEL", None)

    def run() -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        rng = np.random.default_rng(11)
        start = np.array([[20e3, 5e3], [20e3, 5.3e3], [-15e3, 30e3], [5e3, -25e3], [3e4, 3e4]])
        vel = np.array([[-150.0, 10.0], [-150.0, -10.0], [120.0, -40.0], [0.0, 200.0],
                        [-100.0, -100.0]])  # fmt: skip
        trk = MultiTargetTracker(TrackerConfig(ndim=2))
        out = []
        for k in range(30):
            pos = start + vel * k
            r = np.hypot(pos[:, 0], pos[:, 1]) + rng.normal(0, 20.0, 5)
            az = np.arctan2(pos[:, 0], pos[:, 1]) + rng.normal(0, 0.003, 5)
            r = np.concatenate([r, rng.uniform(0, 5e4, 8)])
            az = np.concatenate([az, rng.uniform(0, 2 * np.pi, 8)])
            scan = Scan.from_polar(float(k), r, az, sigma_range_m=20.0, sigma_azimuth_rad=0.003,
                                   pd=0.9, clutter_per_scan=8.0)  # fmt: skip
            trk.step(scan)
            table = trk.tracks(include_tentative=True)
            out.append((table.ids, table.x, table.P))
        return out

    fast = run()
    ekf = updaters.PolarEKFUpdater

    def general(self, x, polar, cols):  # type: ignore[no-untyped-def]
        y, H, R = self._linearise(x, polar, cols)
        return y, np.ascontiguousarray(H[..., :2]), R

    monkeypatch.setattr(ekf, "_linearise_2d", general)
    plain = run()
    assert sum(ids.size for ids, _, _ in fast) > 100
    for (i1, x1, P1), (i2, x2, P2) in zip(fast, plain, strict=True):
        np.testing.assert_array_equal(i1, i2)
        np.testing.assert_array_equal(x1, x2)
        np.testing.assert_array_equal(P1, P2)


@pytest.mark.parametrize("models", [0, 7])
def test_pair_innovation_and_update_are_those_of_the_gathered_rows(models: int) -> None:
    """Linearising (and, for the update, computing the gain) once per row gives the numbers
    of the per-pair computation, rows repeated (JPDA: a track with several detections)."""
    rng = np.random.default_rng(5)
    meas = _polar_meas(rng, 12)
    shape = (30, models) if models else (30,)
    x = np.concatenate([rng.uniform(-6e4, 6e4, (*shape, 2)), rng.normal(0, 200, (*shape, 2))],
                       axis=-1)  # fmt: skip
    A = rng.normal(0, 1, (*shape, 4, 4))
    P = A @ A.swapaxes(-1, -2) * 1e4 + np.eye(4) * 100.0
    rows = rng.integers(0, 30, 50)
    cols = rng.integers(0, 12, 50)
    for updater in (updaters.PolarEKFUpdater(2), updaters.PositionUpdater(2)):
        y, S = updater.pair_innovation(x, P, meas, rows, cols)
        y_ref, S_ref = updater.innovation(x[rows], P[rows], meas, cols)
        np.testing.assert_array_equal(y, y_ref)
        np.testing.assert_array_equal(S, S_ref)
        got = updater.pair_update(x, P, meas, rows, cols)
        want = updater.update(x[rows], P[rows], meas, cols)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
