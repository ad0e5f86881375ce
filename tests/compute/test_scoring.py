"""WTA candidate scoring against `wta.expected_value`, edge cases and refusals."""

from __future__ import annotations

import numpy as np
import pytest

from mcc.compute import wta
from mcc.compute.scoring import score_assignments
from mcc.errors import ComputeError


def _shots(assignment: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    shots = np.zeros(shape, dtype=np.int64)
    for w, t in enumerate(assignment):
        if t >= 0:
            shots[w, t] += 1
    return shots


def test_scores_equal_expected_value_of_each_plan() -> None:
    rng = np.random.default_rng(4)
    pk = rng.uniform(0, 1, (5, 4))
    pk[0, 1] = 1.0  # a certain kill must not produce NaN
    value = rng.uniform(0, 2, 4)
    plans = rng.integers(-1, 4, (40, 5))
    plans[0] = -1  # holding fire everywhere scores 0
    plans[1] = 1  # every weapon at one target
    got = score_assignments(pk, value, plans)
    assert got[0] == 0.0
    for k, plan in enumerate(plans):
        assert got[k] == pytest.approx(wta.expected_value(pk, value, _shots(plan, pk.shape)))


def test_by_hand_two_weapons_on_one_target() -> None:
    got = score_assignments([[0.5], [0.5]], [2.0], [[0, 0], [0, -1]])
    np.testing.assert_allclose(got, [2.0 * 0.75, 2.0 * 0.5])


def test_refusals_name_the_argument() -> None:
    pk = np.full((2, 3), 0.5)
    with pytest.raises(ComputeError, match=r"value must have shape \(3,\)"):
        score_assignments(pk, [1.0, 1.0], [[0, 1]])
    with pytest.raises(ComputeError, match=r"assignment must be a \(K, 2\) integer array"):
        score_assignments(pk, [1.0] * 3, [[0.0, 1.0]])
    with pytest.raises(ComputeError, match=r"assignment holds targets -1..3; allowed -1"):
        score_assignments(pk, [1.0] * 3, [[3, -1]])
    with pytest.raises(ComputeError, match="pk must be in 0..1"):
        score_assignments(pk * 3, [1.0] * 3, [[0, 1]])
