"""GOSPA, OSPA and track continuity on tiny cases computed by hand and by brute force."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from mcc.apps import metrics
from mcc.errors import ComputeError

EMPTY = np.zeros((0, 2))


def test_gospa_one_missed_target_costs_half_c_to_the_p() -> None:
    res = metrics.gospa(np.array([[0.0, 0.0]]), EMPTY, c=10.0, p=2.0)
    assert res.missed == pytest.approx(50.0)
    assert res.false == 0.0 and res.localisation == 0.0
    assert res.distance == pytest.approx(math.sqrt(50.0))
    assert res.n_missed == 1 and res.n_false == 0


def test_gospa_one_false_track() -> None:
    res = metrics.gospa(EMPTY, np.array([[3.0, 4.0]]), c=10.0, p=1.0)
    assert res.false == pytest.approx(5.0)
    assert res.distance == pytest.approx(5.0)


def test_gospa_localisation_and_cut_off() -> None:
    res = metrics.gospa(np.array([[0.0, 0.0]]), np.array([[3.0, 4.0]]), c=10.0, p=2.0)
    assert res.localisation == pytest.approx(25.0) and res.distance == pytest.approx(5.0)
    far = metrics.gospa(np.array([[0.0, 0.0]]), np.array([[30.0, 40.0]]), c=10.0, p=2.0)
    # Beyond c the pair is one missed truth plus one false track: c^p/2 + c^p/2.
    assert (far.n_missed, far.n_false) == (1, 1)
    assert far.distance == pytest.approx(10.0)
    assert far.truth_idx.size == 0


def test_gospa_mixed_case_by_hand() -> None:
    truth = np.array([[0.0, 0.0], [10.0, 0.0], [20.0, 0.0]])
    est = np.array([[1.0, 0.0], [50.0, 50.0]])
    res = metrics.gospa(truth, est, c=5.0, p=1.0)
    # (0,0)-(1,0) at 1 m; two missed truths and one false estimate at c/2 = 2.5 each.
    assert res.localisation == pytest.approx(1.0)
    assert (res.n_missed, res.n_false) == (2, 1)
    assert res.distance == pytest.approx(1.0 + 3 * 2.5)
    np.testing.assert_array_equal(res.truth_idx, [0])
    np.testing.assert_array_equal(res.estimate_idx, [0])
    assert metrics.gospa(EMPTY, EMPTY, c=5.0).distance == 0.0


def _gospa_brute(x: np.ndarray, y: np.ndarray, c: float, p: float) -> float:
    """min over partial assignments of Σ d^p + c^p/2 (|X| + |Y| - 2|γ|), then ^(1/p)."""
    best = np.inf
    for k in range(min(len(x), len(y)) + 1):
        for rows in itertools.combinations(range(len(x)), k):
            for cols in itertools.permutations(range(len(y)), k):
                d = np.linalg.norm(x[list(rows)] - y[list(cols)], axis=1)
                total = (d**p).sum() + c**p / 2 * (len(x) + len(y) - 2 * k)
                best = min(best, total)
    return float(best ** (1 / p))


@pytest.mark.parametrize("seed", range(6))
def test_gospa_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 20, (rng.integers(0, 4), 2))
    y = rng.uniform(0, 20, (rng.integers(0, 4), 2))
    res = metrics.gospa(x, y, c=6.0, p=2.0)
    assert res.distance == pytest.approx(_gospa_brute(x, y, 6.0, 2.0))
    assert res.distance**2 == pytest.approx(res.localisation + res.missed + res.false)


def test_ospa_by_hand() -> None:
    truth = np.array([[0.0, 0.0]])
    est = np.array([[3.0, 0.0], [100.0, 0.0]])
    assert metrics.ospa(truth, est, c=10.0, p=1.0) == pytest.approx((3.0 + 10.0) / 2)
    assert metrics.ospa(truth, truth, c=10.0) == 0.0
    assert metrics.ospa(truth, EMPTY, c=10.0) == pytest.approx(10.0)
    assert metrics.ospa(EMPTY, EMPTY, c=10.0) == 0.0


def test_metric_inputs_are_checked() -> None:
    with pytest.raises(ComputeError, match="c=-1"):
        metrics.gospa(EMPTY, EMPTY, c=-1.0)
    with pytest.raises(ComputeError, match="alpha"):
        metrics.gospa(EMPTY, EMPTY, c=1.0, alpha=3.0)
    with pytest.raises(ComputeError, match="estimates has NaN"):
        metrics.ospa(np.zeros((1, 2)), np.array([[np.nan, 0.0]]), c=1.0)
    with pytest.raises(ComputeError, match="3-D"):
        metrics.gospa(np.zeros((1, 2)), np.zeros((1, 3)), c=1.0)


def test_track_continuity_by_hand() -> None:
    assigned = np.array(
        [
            # truth 0: 7 → 7 → gap → 7 (fragment, no switch) → 9 (switch)
            # truth 1: -1 → 4 → 5 (switch) → 5 → 4 (switch)
            [7, -1],
            [7, 4],
            [-1, 5],
            [7, 5],
            [9, 4],
        ]
    )
    res = metrics.track_continuity(assigned)
    np.testing.assert_array_equal(res.switches_per_truth, [1, 2])
    assert res.id_switches == 3
    assert res.fragmentations == 1
    assert res.coverage == pytest.approx(8 / 10)


def test_truth_track_ids() -> None:
    truth = np.array([[0.0, 0.0], [100.0, 0.0], [500.0, 0.0]])
    est = np.array([[101.0, 0.0], [1.0, 1.0], [900.0, 0.0]])
    ids = metrics.truth_track_ids(truth, est, np.array([11, 22, 33]), max_distance_m=10.0)
    np.testing.assert_array_equal(ids, [22, 11, -1])
