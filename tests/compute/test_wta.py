"""Weapon-target assignment against brute-force enumeration of small problems."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from mcc.compute import wta
from mcc.errors import ComputeError


def _brute_one_per_target(pk: np.ndarray, value: np.ndarray, rounds: np.ndarray) -> float:
    """Best EV when each target takes at most one round: try every target → weapon|none map."""
    n_weapons, n_targets = pk.shape
    best = 0.0
    for choice in itertools.product(range(-1, n_weapons), repeat=n_targets):
        used = np.bincount([w for w in choice if w >= 0], minlength=n_weapons)
        if (used <= rounds).all():
            ev = sum(value[t] * pk[w, t] for t, w in enumerate(choice) if w >= 0)
            best = max(best, ev)
    return best


def _brute_any(pk: np.ndarray, value: np.ndarray, rounds: np.ndarray) -> float:
    """Best EV over every way each weapon can split its rounds among targets (or hold them)."""
    n_weapons, n_targets = pk.shape
    per_weapon = []
    for w in range(n_weapons):
        options = [
            c
            for c in itertools.product(range(rounds[w] + 1), repeat=n_targets)
            if sum(c) <= rounds[w]
        ]
        per_weapon.append(options)
    best = 0.0
    for combo in itertools.product(*per_weapon):
        best = max(best, wta.expected_value(pk, value, np.array(combo)))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_hungarian_is_exact(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_weapons, n_targets = rng.integers(1, 4), rng.integers(1, 5)
    pk = rng.uniform(0, 0.95, (n_weapons, n_targets))
    value = rng.uniform(0, 1, n_targets)
    rounds = rng.integers(0, 3, n_weapons)
    res = wta.wta_hungarian(pk, value, rounds=rounds)
    assert res.expected_value == pytest.approx(_brute_one_per_target(pk, value, rounds))
    assert (res.shots.sum(axis=0) <= 1).all()
    assert (res.shots.sum(axis=1) <= rounds).all()
    assert res.expected_value == pytest.approx(wta.expected_value(pk, value, res.shots))


def test_greedy_is_optimal_when_pk_does_not_depend_on_the_weapon() -> None:
    rng = np.random.default_rng(3)
    for _ in range(4):
        pk = np.broadcast_to(rng.uniform(0.2, 0.9, 3), (2, 3)).copy()
        value = rng.uniform(0.1, 1, 3)
        rounds = np.array([2, 2])
        res = wta.wta_greedy(pk, value, rounds=rounds)
        assert res.expected_value == pytest.approx(_brute_any(pk, value, rounds))
        assert res.shots.sum() == 4


@pytest.mark.parametrize("seed", range(4))
def test_greedy_is_near_optimal_in_general(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    pk = rng.uniform(0.05, 0.95, (2, 3))
    value = rng.uniform(0.1, 1, 3)
    rounds = np.array([2, 2])
    res = wta.wta_greedy(pk, value, rounds=rounds)
    best = _brute_any(pk, value, rounds)
    assert best * (1 - 1 / np.e) <= res.expected_value <= best + 1e-12
    np.testing.assert_array_equal(res.shots.sum(axis=1), rounds)


def test_greedy_stacks_rounds_on_a_valuable_target() -> None:
    # One weapon, 3 rounds: 10·0.5 = 5 > 1·0.5; then 10·0.25 = 2.5 > 0.5; then 1.25 > 0.5.
    res = wta.wta_greedy(np.array([[0.5, 0.5]]), np.array([10.0, 1.0]), rounds=3)
    np.testing.assert_array_equal(res.shots, [[3, 0]])
    assert res.expected_value == pytest.approx(10 * (1 - 0.5**3))
    capped = wta.wta_greedy(
        np.array([[0.5, 0.5]]), np.array([10.0, 1.0]), rounds=3, max_rounds_per_target=2
    )
    np.testing.assert_array_equal(capped.shots, [[2, 1]])
    stingy = wta.wta_greedy(np.array([[0.5, 0.5]]), np.array([10.0, 1.0]), rounds=3, min_gain=2.0)
    np.testing.assert_array_equal(stingy.shots, [[2, 0]])


def test_readiness_rounds_and_range_are_respected() -> None:
    pk = np.full((3, 3), 0.8)
    weapons = np.array([[0.0, 0.0, 0.0], [1e5, 0.0, 0.0], [0.0, 1e5, 0.0]])
    targets = np.array([[1e4, 0.0, 0.0], [9e4, 0.0, 0.0], [0.0, 5e4, 0.0]])
    in_range = wta.engagement_mask(weapons, targets, min_range_m=2e3, max_range_m=4e4)
    np.testing.assert_array_equal(
        in_range, [[True, False, False], [False, True, False], [False, False, False]]
    )
    value = np.ones(3)
    for solve in (wta.wta_hungarian, wta.wta_greedy):
        res = solve(pk, value, ready=[True, False, True], rounds=[1, 1, 1], in_range=in_range)
        assert list(zip(res.weapon_idx, res.target_idx, strict=True)) == [(0, 0)]
        res0 = solve(pk, value, rounds=[0, 0, 5])
        assert set(res0.weapon_idx) <= {2}
    with pytest.raises(ComputeError, match="pk"):
        wta.wta_hungarian(np.array([[1.5]]), np.ones(1))
    with pytest.raises(ComputeError, match="value"):
        wta.wta_greedy(np.array([[0.5]]), np.array([np.nan]))


def test_expected_value_hand_value() -> None:
    pk = np.array([[0.5, 0.2], [0.4, 0.0]])
    shots = np.array([[2, 1], [1, 0]])
    # target 0: 1 - 0.5² · 0.6 = 0.85 → 0.85 · 2; target 1: 0.2 · 1
    assert wta.expected_value(pk, [2.0, 1.0], shots) == pytest.approx(1.9)
