"""Monte Carlo engagement simulation against closed forms, within its confidence interval."""

from __future__ import annotations

import time

import numpy as np
import pytest

from mcc.compute import montecarlo, wta
from mcc.compute.montecarlo import EngagementPlan
from mcc.errors import ComputeError

PK = np.array([[0.7, 0.5], [0.8, 0.0], [0.6, 0.6], [0.9, 0.3]])


def test_matches_closed_form_for_independent_shots() -> None:
    res = montecarlo.simulate_raid(EngagementPlan(pk=PK), trials=200_000, rng=12, confidence=0.999)
    exact = montecarlo.raid_annihilation_exact(PK)
    survive = np.prod(1 - PK, axis=1)
    assert exact == pytest.approx(0.85 * 0.8 * 0.84 * 0.93)
    lo, hi = res.annihilation_ci
    assert lo <= exact <= hi
    assert hi - lo < 0.01
    lo, hi = res.leakers_ci
    assert lo <= survive.sum() <= hi
    np.testing.assert_allclose(res.kill_prob, 1 - survive, atol=0.005)
    assert res.expected_rounds == 7
    assert res.trials == 200_000 and res.n_threats == 4


def test_seeded_runs_repeat_exactly() -> None:
    a = montecarlo.simulate_raid(EngagementPlan(pk=PK), trials=10_000, rng=5)
    b = montecarlo.simulate_raid(EngagementPlan(pk=PK), trials=10_000, rng=np.random.default_rng(5))
    assert a.annihilation_prob == b.annihilation_prob
    np.testing.assert_array_equal(a.kill_prob, b.kill_prob)


def test_shoot_look_shoot_with_a_shared_reserve() -> None:
    a, b, q = 0.6, 0.7, 0.8
    plan = EngagementPlan(pk=np.array([[a], [b]]), reserve_rounds=1, reserve_pk=np.array([q, q]))
    assert plan.shoot_look_shoot
    res = montecarlo.simulate_raid(plan, trials=200_000, rng=3, confidence=0.999)
    # One reserve round goes to the single survivor; two survivors cannot both be killed.
    exact = a * b + q * (a * (1 - b) + (1 - a) * b)
    lo, hi = res.annihilation_ci
    assert lo <= exact <= hi
    # The reserve round is used whenever someone survives the salvo.
    assert res.expected_rounds == pytest.approx(2 + (1 - a * b), abs=0.005)
    # With both survivors, the reserve goes to the priority threat (threat 1 first here).
    first = EngagementPlan(pk=np.array([[0.0], [0.0]]), reserve_rounds=1, priority=[1, 0])
    res = montecarlo.simulate_raid(first, trials=1000, rng=1)
    assert res.kill_prob[0] == 0.0  # reserve_pk defaults to the salvo's best pk, 0 here


def test_two_looks_give_a_second_chance() -> None:
    p = 0.5
    plan = EngagementPlan(pk=np.array([[p]]), reserve_rounds=2, looks=2)
    res = montecarlo.simulate_raid(plan, trials=100_000, rng=2, confidence=0.999)
    lo, hi = res.annihilation_ci
    assert lo <= 1 - (1 - p) ** 3 <= hi


def test_weapon_availability_is_a_common_cause() -> None:
    r, p = 0.7, 0.9
    plan = EngagementPlan(
        pk=np.array([[p], [p]]), weapon=np.array([[0], [0]]), weapon_availability=np.array([r])
    )
    res = montecarlo.simulate_raid(plan, trials=200_000, rng=8, confidence=0.999)
    lo, hi = res.annihilation_ci
    assert lo <= r * p * p <= hi  # not (r p)², which independence would give
    assert not lo <= (r * p) ** 2 <= hi


def test_plan_from_wta_shots() -> None:
    pk = np.array([[0.5, 0.9], [0.6, 0.2]])
    res = wta.wta_greedy(pk, np.array([1.0, 1.0]), rounds=[2, 1])
    plan = EngagementPlan.from_shots(res.shots, pk)
    assert plan.n_threats == 2
    np.testing.assert_allclose(1 - np.prod(1 - plan.pk, axis=1), res.kill_prob)
    with_avail = EngagementPlan.from_shots(res.shots, pk, weapon_availability=[1.0, 1.0])
    assert with_avail.weapon is not None
    assert set(with_avail.weapon[with_avail.pk > 0]) <= {0, 1}


def test_compare_plans_picks_the_better_plan() -> None:
    weak = EngagementPlan(pk=np.array([[0.5], [0.5]]))
    strong = EngagementPlan(pk=np.array([[0.5, 0.5], [0.5, 0.5]]))
    cmp = montecarlo.compare_plans([weak, strong], trials=20_000, rng=4)
    assert cmp.best_index == 1 and cmp.separated
    cmp = montecarlo.compare_plans([strong, weak], trials=20_000, rng=4, objective="leakers")
    assert cmp.best_index == 0
    assert cmp.results[0].expected_leakers < cmp.results[1].expected_leakers


def test_invalid_plans_are_rejected() -> None:
    with pytest.raises(ComputeError, match="pk"):
        EngagementPlan(pk=np.array([[1.2]]))
    with pytest.raises(ComputeError, match="weapon"):
        EngagementPlan(pk=np.array([[0.5]]), weapon=np.array([[3]]), weapon_availability=[1.0])
    with pytest.raises(ComputeError, match="trials"):
        montecarlo.simulate_raid(EngagementPlan(pk=PK), trials=0)
    with pytest.raises(ComputeError, match="plans"):
        montecarlo.compare_plans([])


def test_rate_exceeds_a_million_engagements_per_second() -> None:
    plan = EngagementPlan(pk=np.full((20, 2), 0.6))
    trials = 100_000
    best = np.inf
    for _ in range(3):
        t0 = time.perf_counter()
        montecarlo.simulate_raid(plan, trials=trials, rng=0)
        best = min(best, time.perf_counter() - t0)
    rate = trials * plan.n_threats / best
    assert rate > 1e6, f"{rate:.3g} engagements/s"
