"""Gating, GNN association and track-life rules against SciPy and brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.spatial.distance import mahalanobis

from mcc.compute import associate
from mcc.errors import ComputeError


def _spd(rng: np.random.Generator, size: int, m: int = 3) -> np.ndarray:
    a = rng.normal(size=(size, m, m))
    return a @ a.swapaxes(1, 2) + m * np.eye(m)


def test_chi2_gate_threshold_known_values() -> None:
    assert associate.chi2_gate_threshold(0.99, 3) == pytest.approx(11.3449, abs=1e-4)
    assert associate.chi2_gate_threshold(0.95, 2) == pytest.approx(5.9915, abs=1e-4)
    with pytest.raises(ComputeError, match=r"gate_probability=1\.0"):
        associate.chi2_gate_threshold(1.0, 3)


def test_pairwise_mahalanobis_matches_scipy() -> None:
    rng = np.random.default_rng(1)
    zp, z = rng.normal(size=(4, 3)) * 10, rng.normal(size=(5, 3)) * 10
    S = _spd(rng, 4)
    d2 = associate.pairwise_mahalanobis_sq(zp, S, z)
    R = _spd(rng, 5) * 0.5
    d2r = associate.pairwise_mahalanobis_sq(zp, S, z, meas_cov=R)
    for i, j in itertools.product(range(4), range(5)):
        ref = mahalanobis(z[j], zp[i], np.linalg.inv(S[i])) ** 2
        assert d2[i, j] == pytest.approx(ref, rel=1e-10)
        ref_r = mahalanobis(z[j], zp[i], np.linalg.inv(S[i] + R[j])) ** 2
        assert d2r[i, j] == pytest.approx(ref_r, rel=1e-10)


def test_mahalanobis_stays_accurate_far_from_the_origin() -> None:
    # 1000 km from the origin with 3 m sigma: the expanded quadratic form must not cancel.
    rng = np.random.default_rng(6)
    zp = 1e6 + rng.uniform(0, 2e5, (50, 3))
    z = np.vstack([zp[:20] + rng.normal(0, 3.0, (20, 3)), 1e6 + rng.uniform(0, 2e5, (10, 3))])
    S = np.broadcast_to(np.eye(3) * 9.0, (50, 3, 3))
    d2 = associate.pairwise_mahalanobis_sq(zp, S, z)
    diff = z[None, :, :] - zp[:, None, :]
    ref = (diff**2).sum(axis=2) / 9.0
    np.testing.assert_allclose(d2, ref, rtol=1e-9, atol=1e-5)


def test_pruned_pairs_are_really_outside_the_gate() -> None:
    rng = np.random.default_rng(2)
    zp, z = rng.uniform(0, 100, (30, 3)), rng.uniform(0, 100, (40, 3))
    S, R = _spd(rng, 30), _spd(rng, 40)
    full = associate.pairwise_mahalanobis_sq(zp, S, z, meas_cov=R)
    pruned = associate.pairwise_mahalanobis_sq(zp, S, z, meas_cov=R, max_d2=11.34)
    skipped = np.isinf(pruned)
    assert skipped.any() and (~skipped).any()
    assert (full[skipped] > 11.34).all()
    np.testing.assert_allclose(pruned[~skipped], full[~skipped])


def test_gnn_prefers_lower_total_cost_over_a_greedy_pick() -> None:
    # Greedy would take (0, 0) at cost 1 and leave track 1 + meas 1 out (cost 1 + 10).
    res = associate.gnn_assign(np.array([[1.0, 2.0], [2.0, 100.0]]), max_cost=10.0)
    assert list(zip(res.track_idx, res.meas_idx, strict=True)) == [(0, 1), (1, 0)]
    assert res.unassigned_tracks.size == 0 and res.unassigned_meas.size == 0


def test_gnn_leaves_pairs_out_when_cheaper() -> None:
    # Cross pairs cost 16; taking (0, 0) and leaving one track and one measurement costs 11.44.
    res = associate.gnn_assign(np.array([[0.1, 8.0], [8.0, np.inf]]), max_cost=11.34)
    assert list(zip(res.track_idx, res.meas_idx, strict=True)) == [(0, 0)]
    np.testing.assert_array_equal(res.unassigned_tracks, [1])
    np.testing.assert_array_equal(res.unassigned_meas, [1])


def _brute_force_cost(cost: np.ndarray, max_cost: float) -> float:
    n, m = cost.shape
    best = np.inf
    for k in range(min(n, m) + 1):
        for rows in itertools.combinations(range(n), k):
            for cols in itertools.permutations(range(m), k):
                c = cost[list(rows), list(cols)]
                if (c <= max_cost).all():
                    best = min(best, c.sum() + 0.5 * max_cost * (n + m - 2 * k))
    return float(best)


@pytest.mark.parametrize("seed", range(8))
def test_gnn_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, m = rng.integers(1, 5, size=2)
    cost = rng.uniform(0, 12, (n, m))
    cost[rng.random((n, m)) < 0.2] = np.inf
    res = associate.gnn_assign(cost, max_cost=9.0)
    got = cost[res.track_idx, res.meas_idx].sum() + 4.5 * (
        res.unassigned_tracks.size + res.unassigned_meas.size
    )
    assert got == pytest.approx(_brute_force_cost(cost, 9.0))
    assert len(set(res.track_idx)) == res.track_idx.size
    assert len(set(res.meas_idx)) == res.meas_idx.size
    assert res.track_idx.size + res.unassigned_tracks.size == n
    assert res.meas_idx.size + res.unassigned_meas.size == m


def test_gnn_splits_into_clusters() -> None:
    cost = np.full((5, 5), np.inf)
    cost[0, 0] = 1.0  # 1×1 cluster
    cost[1:3, 1:3] = [[1.0, 2.0], [2.0, 50.0]]  # 2×2 cluster
    cost[3, 3] = 20.0  # outside the gate
    res = associate.gnn_assign(cost, max_cost=10.0)
    assert res.n_clusters == 2
    assert list(zip(res.track_idx, res.meas_idx, strict=True)) == [(0, 0), (1, 2), (2, 1)]
    np.testing.assert_array_equal(res.unassigned_tracks, [3, 4])
    np.testing.assert_array_equal(res.unassigned_meas, [3, 4])


def test_gnn_empty_and_invalid_inputs() -> None:
    res = associate.gnn_assign(np.zeros((0, 3)), max_cost=5.0)
    assert res.track_idx.size == 0 and res.unassigned_meas.tolist() == [0, 1, 2]
    with pytest.raises(ComputeError, match="NaN"):
        associate.gnn_assign(np.array([[np.nan]]), max_cost=5.0)
    with pytest.raises(ComputeError, match="max_cost"):
        associate.gnn_assign(np.ones((2, 2)), max_cost=0.0)


def test_gnn_associate_recovers_shuffled_measurements() -> None:
    rng = np.random.default_rng(4)
    n = 200
    zp = rng.uniform(-5e4, 5e4, (n, 3))
    S = np.broadcast_to(np.eye(3) * 400.0, (n, 3, 3))
    perm = rng.permutation(n)
    z = zp[perm] + rng.normal(0, 5.0, (n, 3))
    z = np.vstack([z, [[1e6, 1e6, 1e6]]])  # a clutter detection far from everything
    res = associate.gnn_associate(zp, S, z, gate_probability=0.999)
    np.testing.assert_array_equal(res.track_idx, np.arange(n))
    np.testing.assert_array_equal(perm[res.meas_idx], np.arange(n))
    np.testing.assert_array_equal(res.unassigned_meas, [n])
    # Per-measurement noise path gives the same answer.
    R = np.broadcast_to(np.eye(3) * 25.0, (n + 1, 3, 3))
    res_r = associate.gnn_associate(zp, S, z, meas_cov=R)
    np.testing.assert_array_equal(res_r.meas_idx, res.meas_idx)


def test_mofn_initiator() -> None:
    init = associate.MofNInitiator(m=2, n=3)
    h = np.zeros(3, dtype=np.uint32)
    # Three tentative tracks: hit-hit, hit-miss-miss, miss-hit-hit over successive scans.
    h = init.update(h, [True, True, False])
    h = init.update(h, [True, False, True])
    np.testing.assert_array_equal(init.confirmed(h), [True, False, False])
    np.testing.assert_array_equal(init.failed(h, np.array([2, 2, 2])), [False, False, False])
    h = init.update(h, [False, False, True])
    np.testing.assert_array_equal(init.hit_count(h), [2, 1, 2])
    np.testing.assert_array_equal(init.confirmed(h), [True, False, True])
    np.testing.assert_array_equal(init.failed(h, np.array([3, 3, 3])), [False, True, False])
    h = init.update(h, [False, False, False])  # the oldest hit leaves the window
    np.testing.assert_array_equal(init.hit_count(h), [1, 0, 2])
    with pytest.raises(ComputeError, match="m=4"):
        associate.MofNInitiator(m=4, n=3)


def test_misses_and_deletion() -> None:
    misses = associate.count_misses(np.array([0, 2, 4]), np.array([False, True, False]))
    np.testing.assert_array_equal(misses, [1, 0, 5])
    P = np.stack([np.eye(6) * v for v in (1.0, 1e6, np.nan)])
    delete = associate.deletion_mask(
        misses=misses, max_misses=4, covariance=P, max_position_var_m2=1e5
    )
    np.testing.assert_array_equal(delete, [False, True, True])
    np.testing.assert_array_equal(
        associate.deletion_mask(misses=misses, max_misses=4), [False, False, True]
    )
