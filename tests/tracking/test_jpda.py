"""JPDA: marginals against brute-force enumeration of joint events and Stone Soup's JPDA, the C
kernel's against the NumPy reference, the PDA update against the textbook formula, and the
tracker with ``association: jpda``."""

from __future__ import annotations

import datetime as dt
import itertools
import math

import numpy as np
import pytest

from mcc.tracking import JPDAAssociator, Measurements, MultiTargetTracker, Scan, TrackerConfig
from mcc.tracking.jpda import KERNEL, _codes, pda_mix
from mcc.tracking.predictors import CVPredictor, IMMPredictor
from mcc.tracking.updaters import PositionUpdater

PD, PG = 0.9, 0.999


def _brute_force(ti, mj, log_g, log_w0):
    """Marginals by listing every joint event (each track: missed or one of its detections;
    no detection twice), the definition the vectorised enumeration must reproduce."""
    tracks = sorted(set(ti.tolist()))
    options = [[None] + [k for k in range(ti.size) if ti[k] == t] for t in tracks]
    beta, beta0 = np.zeros(ti.size), np.zeros(len(tracks))
    total = 0.0
    for event in itertools.product(*options):
        dets = [mj[k] for k in event if k is not None]
        if len(dets) != len(set(dets)):
            continue
        w = math.exp(sum(log_w0 if k is None else log_g[k] for k in event))
        total += w
        for i, k in enumerate(event):
            if k is None:
                beta0[i] += w
            else:
                beta[k] += w
    return beta / total, np.array(tracks), beta0 / total


def _random_pairs(rng, n_tracks, n_meas, density):
    ti, mj = np.nonzero(rng.random((n_tracks, n_meas)) < density)
    return ti.astype(np.int64), mj.astype(np.int64), rng.normal(0.0, 2.0, ti.size)


@pytest.mark.parametrize("seed", range(12))
def test_marginals_match_brute_force_enumeration(seed: int) -> None:
    rng = np.random.default_rng(seed)
    ti, mj, log_g = _random_pairs(rng, int(rng.integers(1, 7)), int(rng.integers(1, 7)), 0.5)
    if ti.size == 0:
        ti, mj, log_g = np.array([0]), np.array([0]), np.array([0.3])
    jpda = JPDAAssociator(PD, PG)
    beta, tracks, beta0 = jpda.marginals(ti, mj, log_g)
    want, want_tracks, want0 = _brute_force(ti, mj, log_g, jpda.log_w0)
    np.testing.assert_array_equal(tracks, want_tracks)
    np.testing.assert_allclose(beta, want, rtol=0, atol=1e-9)
    np.testing.assert_allclose(beta0, want0, rtol=0, atol=1e-9)
    assert jpda.fallbacks == 0
    # Each track's hypotheses sum to one, each detection is at most one track's.
    np.testing.assert_allclose(np.bincount(np.searchsorted(tracks, ti), beta, tracks.size)
                               + beta0, 1.0, atol=1e-12)  # fmt: skip
    assert np.bincount(mj, beta).max() <= 1.0 + 1e-12


def test_large_clusters_fall_back_to_cheap_jpda_and_are_counted() -> None:
    rng = np.random.default_rng(5)
    ti, mj, log_g = _random_pairs(rng, 6, 6, 0.7)
    jpda = JPDAAssociator(PD, PG, max_cluster=3)
    beta, tracks, beta0 = jpda.marginals(ti, mj, log_g)
    assert jpda.fallbacks == jpda.clusters == 1
    exact, _, exact0 = _brute_force(ti, mj, log_g, jpda.log_w0)
    np.testing.assert_allclose(np.bincount(np.searchsorted(tracks, ti), beta, tracks.size)
                               + beta0, 1.0, atol=1e-12)  # fmt: skip
    # An approximation (measured on dense random 6 × 6 clusters: mean error 0.06-0.10):
    assert np.abs(beta - exact).mean() < 0.12
    assert np.corrcoef(beta, exact)[0, 1] > 0.75
    # A lone track (a cluster of one) is exact either way: the PDA weights.
    one = np.zeros(3, np.int64)
    b, _, b0 = JPDAAssociator(PD, PG, max_cluster=1).marginals(one, np.arange(3), log_g[:3])
    g = np.exp(log_g[:3])
    np.testing.assert_allclose(b, g / (1 - PD * PG + g.sum()), atol=1e-12)
    np.testing.assert_allclose(b0, (1 - PD * PG) / (1 - PD * PG + g.sum()), atol=1e-12)


def test_marginals_match_stone_soup_jpda() -> None:
    """Three tracks, four detections close together (one cluster), linear Gaussian
    measurements: Stone Soup's JPDA hypothesis probabilities against ours."""
    pytest.importorskip("stonesoup")
    from stonesoup.dataassociator.probability import JPDA
    from stonesoup.hypothesiser.probability import PDAHypothesiser
    from stonesoup.models.measurement.linear import LinearGaussian
    from stonesoup.models.transition.linear import (
        CombinedLinearGaussianTransitionModel,
        ConstantVelocity,
    )
    from stonesoup.predictor.kalman import KalmanPredictor
    from stonesoup.types.detection import Detection
    from stonesoup.types.state import GaussianState
    from stonesoup.types.track import Track
    from stonesoup.updater.kalman import KalmanUpdater

    t0 = dt.datetime(2024, 1, 1)
    R = np.diag([400.0, 400.0])
    model = LinearGaussian(ndim_state=4, mapping=(0, 2), noise_covar=R)
    transition = CombinedLinearGaussianTransitionModel([ConstantVelocity(1.0)] * 2)
    density = 1e-6
    hyp = PDAHypothesiser(
        KalmanPredictor(transition), KalmanUpdater(model),
        clutter_spatial_density=density, prob_detect=PD, prob_gate=PG,
    )  # fmt: skip
    # Ours: [x y vx vy]; Stone Soup's: [x vx y vy].
    x = np.array([[0.0, 0.0, 200.0, 0.0], [40.0, 30.0, 200.0, 10.0], [-30.0, 50.0, 190.0, 0.0]])
    P = np.stack([np.diag([900.0, 900.0, 100.0, 100.0]) * s for s in (1.0, 1.5, 0.8)])
    z = np.array([[5.0, 10.0], [35.0, 20.0], [-20.0, 45.0], [15.0, 35.0]])
    perm = [0, 2, 1, 3]
    tracks = [
        Track([GaussianState(x[i][perm][:, None], P[i][np.ix_(perm, perm)], timestamp=t0)])
        for i in range(3)
    ]
    dets = [Detection(z[j][:, None], timestamp=t0, measurement_model=model) for j in range(4)]
    result = JPDA(hyp).associate(set(tracks), set(dets), t0)

    ti, mj = (a.ravel().astype(np.int64) for a in np.indices((3, 4)))
    meas = Measurements("s", 0.0, z, R)
    _, _, ll = PositionUpdater(2).update(x[ti], P[ti], meas, mj)
    jpda = JPDAAssociator(PD, PG)
    beta, _, beta0 = jpda.marginals(ti, mj, jpda.log_ratio(ll, density))
    compared = 0
    for i, track in enumerate(tracks):
        for h in result[track]:
            p = float(h.probability)
            if not h:
                assert beta0[i] == pytest.approx(p, rel=1e-7, abs=1e-12)
            else:
                j = next(k for k in range(4) if dets[k] is h.measurement)
                assert beta[i * 4 + j] == pytest.approx(p, rel=1e-7, abs=1e-12)
            compared += 1
    assert compared >= 12


def _random_scan(rng, clusters, max_tracks=8, max_meas=10):
    """Gated pairs of ``clusters`` independent clusters of 1-``max_tracks`` tracks and
    1-``max_meas`` detections (sparse gates: each track at least one), their tracks and
    detections numbered with gaps and their pairs shuffled, as the tracker's are."""
    ti, mj = [], []
    t0 = m0 = 0
    for _ in range(clusters):
        n_t, n_m = int(rng.integers(1, max_tracks + 1)), int(rng.integers(1, max_meas + 1))
        gate = rng.random((n_t, n_m)) < rng.uniform(0.1, 0.7)
        gate[np.arange(n_t), rng.integers(0, n_m, n_t)] = True
        t, m = np.nonzero(gate)
        ti.append(t + t0)
        mj.append(m + m0)
        t0 += n_t + int(rng.integers(0, 3))
        m0 += n_m + int(rng.integers(0, 3))
    order = rng.permutation(sum(t.size for t in ti))
    return (np.concatenate(ti)[order].astype(np.int64), np.concatenate(mj)[order].astype(np.int64),
            rng.normal(0.0, 2.0, order.size))  # fmt: skip


def _both(ti, mj, log_g, rank_g=None, **kw):
    """The C kernel's marginals and the NumPy reference's, and their associators."""
    native, numpy = JPDAAssociator(PD, PG, **kw), JPDAAssociator(PD, PG, native=False, **kw)
    assert native.kernel is not None and numpy.kernel is None
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        return (native.marginals(ti, mj, log_g, rank_g), numpy.marginals(ti, mj, log_g, rank_g),
                native, numpy)  # fmt: skip


def _assert_same(got, want, rtol=1e-12):
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_allclose(got[0], want[0], rtol=rtol, atol=0)
    np.testing.assert_allclose(got[2], want[2], rtol=rtol, atol=0)


def test_the_c_kernel_is_built() -> None:
    """setup.py builds it with the package: a checkout without it is not a test run."""
    assert KERNEL is not None


@pytest.mark.parametrize("star", [False, True])
@pytest.mark.parametrize("seed", range(10))
def test_the_c_kernel_matches_the_numpy_marginals(seed: int, star: bool) -> None:
    """Scans of 1-12 clusters of 1-8 tracks and 1-10 detections; some clusters past
    ``max_cluster`` or ``max_events`` (the cheap JPDA), the same counted."""
    rng = np.random.default_rng(200 + seed)
    for _ in range(20):
        ti, mj, log_g = _random_scan(rng, int(rng.integers(1, 13)))
        max_cluster, max_events = int(rng.integers(2, 9)), int(rng.choice([50, 1 << 16]))
        got, want, native, numpy = _both(
            ti, mj, log_g, star=star, max_cluster=max_cluster, max_events=max_events
        )
        _assert_same(got, want)
        assert (native.clusters, native.fallbacks) == (numpy.clusters, numpy.fallbacks)


@pytest.mark.parametrize("seed", range(6))
def test_jpda_star_ranks_by_rank_g_and_weighs_by_log_g(seed: int) -> None:
    """With ``rank_g``, JPDA* keeps of each set of events differing only by who took which the
    one likeliest by ``rank_g`` and weighs it by ``log_g``: the C kernel as the reference;
    ``rank_g = log_g`` is the same as none, to the bit; plain JPDA ignores it."""
    rng = np.random.default_rng(400 + seed)
    for _ in range(20):
        ti, mj, log_g = _random_scan(rng, int(rng.integers(1, 13)))
        rank_g = log_g + rng.normal(0.0, 3.0, log_g.size)
        max_cluster = int(rng.integers(2, 9))
        got, want, native, numpy = _both(ti, mj, log_g, rank_g, star=True, max_cluster=max_cluster)
        _assert_same(got, want)
        assert (native.clusters, native.fallbacks) == (numpy.clusters, numpy.fallbacks)
        same, _, _, _ = _both(ti, mj, log_g, log_g.copy(), star=True, max_cluster=max_cluster)
        none, _, _, _ = _both(ti, mj, log_g, star=True, max_cluster=max_cluster)
        for a, b in zip(same, none, strict=True):
            np.testing.assert_array_equal(a, b)
        plain, _, _, _ = _both(ti, mj, log_g, rank_g, max_cluster=max_cluster)
        unranked, _, _, _ = _both(ti, mj, log_g, max_cluster=max_cluster)
        for a, b in zip(plain, unranked, strict=True):
            np.testing.assert_array_equal(a, b)


def test_jpda_star_keeps_the_event_rank_g_prefers() -> None:
    """Two tracks, two detections each in both gates. ``log_g`` prefers the crossed
    assignment (0-1, 1-0), ``rank_g`` the straight one: JPDA* keeps the straight one, whose
    weight is then ``log_g``'s, against the events where a track missed."""
    ti, mj = np.array([0, 0, 1, 1], np.int64), np.array([0, 1, 0, 1], np.int64)
    log_g = np.array([1.0, 3.0, 3.0, 1.0])  # crossed: 6, straight: 2
    rank_g = np.array([3.0, 1.0, 1.0, 3.0])  # straight: 6, crossed: 2
    for native in (True, False):
        jpda = JPDAAssociator(PD, PG, star=True, native=native)
        beta, _, beta0 = jpda.marginals(ti, mj, log_g, rank_g)
        w0 = jpda.log_w0
        # kept: both missed; 0 took 0 or 1, 1 missed; 1 took 0 or 1, 0 missed; straight
        events = {"miss": 2 * w0, "0-0": 1.0 + w0, "0-1": 3.0 + w0, "1-0": 3.0 + w0,
                  "1-1": 1.0 + w0, "straight": 2.0}  # fmt: skip
        total = sum(math.exp(v) for v in events.values())
        p = {k: math.exp(v) / total for k, v in events.items()}
        np.testing.assert_allclose(
            beta,
            [p["0-0"] + p["straight"], p["0-1"], p["1-0"], p["1-1"] + p["straight"]],
            rtol=1e-12,
        )
        want0 = [p["miss"] + p["1-0"] + p["1-1"], p["miss"] + p["0-0"] + p["0-1"]]
        np.testing.assert_allclose(beta0, want0, rtol=1e-12)
        crossed, _, _ = jpda.marginals(ti, mj, log_g)
        assert crossed[1] > crossed[0] and crossed[2] > crossed[3]


@pytest.mark.parametrize("star", [False, True])
def test_the_c_kernel_takes_the_cheap_jpda_at_the_same_limits(star: bool) -> None:
    """Four tracks sharing three detections: 4⁴ = 256 joint events before feasibility, exact
    at ``max_events`` 256 (to the definition), the cheap JPDA at 255 and at 3 tracks."""
    ti, mj = (a.ravel().astype(np.int64) for a in np.indices((4, 3)))
    log_g = np.random.default_rng(1).normal(0.0, 2.0, ti.size)
    for limits, fallbacks in (({"max_events": 256}, 0), ({"max_events": 255}, 1),
                              ({"max_cluster": 3}, 1)):  # fmt: skip
        got, want, native, numpy = _both(ti, mj, log_g, star=star, **limits)
        _assert_same(got, want)
        assert native.fallbacks == numpy.fallbacks == fallbacks
    got, _, _, _ = _both(ti, mj, log_g, max_events=256)
    beta, _, beta0 = _brute_force(ti, mj, log_g, JPDAAssociator(PD, PG).log_w0)
    np.testing.assert_allclose(got[0], beta, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got[2], beta0, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("star", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_the_c_kernel_treats_hostile_likelihoods_as_numpy_does(seed: int, star: bool) -> None:
    """NaN and infinite ln g and rankings (NaN where NumPy gives NaN, JPDA* preferring a finite
    event to a NaN one), ln g past exp's range, and equal likelihoods (JPDA* keeps the first of
    equal events, as the reference's stable sort does)."""
    rng = np.random.default_rng(300 + seed)
    for _ in range(40):
        ti, mj, log_g = _random_scan(rng, int(rng.integers(1, 4)))
        bad = rng.integers(0, ti.size, int(rng.integers(1, 4)))
        log_g[bad] = rng.choice([np.nan, np.inf, -np.inf, 800.0, -800.0], bad.size)
        got, want, _, _ = _both(ti, mj, log_g, star=star, max_cluster=int(rng.integers(1, 9)))
        _assert_same(got, want)
        rank_g = rng.normal(0.0, 2.0, ti.size)
        rank_g[rng.integers(0, ti.size, 2)] = rng.choice([np.nan, np.inf, -np.inf, 800.0], 2)
        _assert_same(*_both(ti, mj, log_g, rank_g, star=star)[:2])
        ties = np.full(ti.size, float(rng.normal()))
        _assert_same(*_both(ti, mj, ties, star=star)[:2])


def test_the_c_kernel_without_pairs_and_with_lone_tracks() -> None:
    """No gated pair (no detection, or none in a gate): nothing; tracks alone in their
    clusters: the PDA closed form, as the reference."""
    empty = np.zeros(0, np.int64)
    got, want, native, _ = _both(empty, empty, np.zeros(0))
    assert got[0].size == got[1].size == got[2].size == 0
    _assert_same(got, want)
    assert native.clusters == 0
    ti, mj = np.array([3, 3, 7, 9], np.int64), np.array([0, 5, 2, 4], np.int64)
    got, want, native, _ = _both(ti, mj, np.array([0.5, -1.0, 2.0, -30.0]))
    _assert_same(got, want)
    assert native.clusters == 0


def test_the_c_kernel_refuses_malformed_arrays() -> None:
    """Indices out of range and arrays of the wrong type raise instead of reading past them."""
    assert KERNEL is not None
    t, m, g = np.array([0, 1], np.int64), np.array([0, 2], np.int64), np.zeros(2)
    args = (2, 2, -2.0, True, 8, 65536.0, _codes(16), np.empty(2), np.empty(2))
    with pytest.raises(ValueError, match="out of range"):
        KERNEL(t, m, g, *args)
    with pytest.raises(TypeError, match="m_loc"):
        KERNEL(t, m.astype(np.int32), g, *args)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="beta0"):
        KERNEL(t, m - m, g, *args[:-1], np.empty(3))
    with pytest.raises(ValueError, match="rank_g"):
        KERNEL(t, m - m, g, *args, np.zeros(3))


@pytest.mark.parametrize("rank", ["straight", "mixture"])
def test_the_imm_ranks_jpda_star_by_its_straight_model(rank: str) -> None:
    """`IMMPredictor.pda_update` hands ``weigh`` the model mixture's log-likelihoods and, with
    ``jpda_rank: straight``, the 0 deg/s model's to rank JPDA*'s events by; a CV filter none."""
    config = TrackerConfig(ndim=2, jpda_rank=rank, imm_turn_rates_dps=(12.0, 0.0, -12.0))
    seen: dict[str, object] = {}

    def weigh(ll, ranked):
        seen["ll"], seen["rank"] = ll, ranked
        return np.full(ll.size, 0.5), np.array([0]), np.array([0.5])

    meas = Measurements("s", 0.0, np.array([[1000.0, 5.0], [980.0, 60.0]]), np.diag([100.0, 100.0]))
    ti, mj = np.array([0, 0], np.int64), np.array([0, 1], np.int64)
    updater = PositionUpdater(2)
    for predictor in (IMMPredictor(config), CVPredictor(config)):
        predictor.append(
            np.array([[0.0, 0.0, 200.0, 0.0]]), np.diag([100.0, 100.0, 25.0, 25.0])[None]
        )
        predictor.predict(np.array([5.0]))
        if isinstance(predictor, IMMPredictor):
            st = predictor.state
            _, _, ll = updater.pair_update(st.x, st.P, meas, ti, mj)
            with np.errstate(divide="ignore"):
                mixture = np.logaddexp.reduce(ll + np.log(st.mu[ti]), axis=1)
        predictor.pda_update(ti, updater, meas, mj, weigh)
        if isinstance(predictor, IMMPredictor):
            np.testing.assert_allclose(seen["ll"], mixture, rtol=1e-12)
            if rank == "straight":
                np.testing.assert_array_equal(seen["rank"], ll[:, 1])  # the 0 deg/s model
            else:
                assert seen["rank"] is None
        else:
            assert seen["rank"] is None


def test_the_pda_mix_is_the_textbook_pda_update() -> None:
    """One model, linear update: x⁺ = x + K Σβ_j y_j and
    P⁺ = β0 P + (1 − β0)(I − KH) P + K (Σ β_j y_j y_jᵀ − ȳ ȳᵀ) Kᵀ."""
    rng = np.random.default_rng(3)
    x = np.array([100.0, -50.0, 20.0, 5.0])
    A = rng.normal(size=(4, 4))
    P = A @ A.T + np.diag([400.0, 400.0, 50.0, 50.0])
    R = np.diag([100.0, 150.0])
    z = x[:2] + rng.normal(0.0, 20.0, (3, 2))
    meas = Measurements("s", 0.0, z, R)
    cols = np.arange(3)
    xs, Ps, ll = PositionUpdater(2).update(np.repeat(x[None], 3, 0), np.repeat(P[None], 3, 0),
                                            meas, cols)  # fmt: skip
    beta = np.array([0.5, 0.2, 0.1])
    beta0 = np.array([0.2])
    xn, Pn, mu = pda_mix(x[None, None], P[None, None], np.ones((1, 1)), xs[:, None],
                         Ps[:, None], ll[:, None], np.zeros(3, np.int64), beta, beta0)  # fmt: skip
    H = np.eye(2, 4)
    S = H @ P @ H.T + R
    K = P @ H.T @ np.linalg.inv(S)
    y = z - x[:2]
    y_bar = beta @ y
    want_x = x + K @ y_bar
    spread = (beta[:, None, None] * y[:, :, None] * y[:, None, :]).sum(0) - np.outer(y_bar, y_bar)
    want_P = beta0[0] * P + (1 - beta0[0]) * (np.eye(4) - K @ H) @ P + K @ spread @ K.T
    np.testing.assert_allclose(xn[0, 0], want_x, rtol=1e-10)
    np.testing.assert_allclose(Pn[0, 0], want_P, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(mu, 1.0)


@pytest.mark.parametrize("model", ["cv", "imm"])
def test_the_tracker_with_jpda_follows_two_close_targets(model: str) -> None:
    """Two targets 150 m apart with 30 m noise and clutter: JPDA keeps two tracks on them."""
    rng = np.random.default_rng(0)
    cfg = TrackerConfig(ndim=2, model=model, association="jpda")  # type: ignore[arg-type]
    trk = MultiTargetTracker(cfg)
    for k in range(20):
        truth = np.array([[200.0 * k, 0.0], [200.0 * k, 150.0]])
        z = truth + rng.normal(0.0, 30.0, truth.shape)
        clutter = rng.uniform(-5e3, 5e3, (3, 2)) + [2e4, 0.0]
        trk.step(Scan(float(k), np.vstack([z, clutter]), np.diag([900.0, 900.0])))
    table = trk.tracks()
    near = np.linalg.norm(table.positions_m[:, None] - truth[None], axis=2).min(axis=1) < 100.0
    assert near.sum() == 2
    assert trk.jpda is not None and trk.jpda.clusters > 0
