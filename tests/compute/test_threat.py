"""Threat evaluation against hand-computed geometry and a scalar reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mcc.compute import threat
from mcc.errors import ComputeError

ASSET = np.zeros((1, 3))


def test_inbound_passing_receding_and_still_tracks() -> None:
    pos = np.array(
        [
            [10_000.0, 0.0, 0.0],  # inbound, straight at the asset
            [-10_000.0, 3000.0, 0.0],  # passing 3 km abeam
            [5000.0, 0.0, 0.0],  # receding
            [500.0, 0.0, 0.0],  # hovering inside the asset radius
        ]
    )
    vel = np.array([[-200.0, 0, 0], [100.0, 0, 0], [100.0, 0, 0], [0.0, 0, 0]])
    ta = threat.evaluate_threats(pos, vel, ASSET, asset_radius_m=1000.0)
    np.testing.assert_allclose(ta.cpa_m[:, 0], [0.0, 3000.0, 5000.0, 500.0], atol=1e-9)
    np.testing.assert_allclose(ta.time_to_cpa_s[:, 0], [50.0, 100.0, 0.0, 0.0])
    np.testing.assert_allclose(ta.time_to_impact_s[:, 0], [45.0, -1.0, -1.0, 0.0])
    c = 10_000.0 / math.hypot(10_000.0, 3000.0)
    np.testing.assert_allclose(ta.heading_cos[:, 0], [1.0, c, -1.0, 0.0])
    np.testing.assert_allclose(ta.speed_mps, [200.0, 100.0, 100.0, 0.0])
    # Hand-computed score of the inbound track: proximity 1, urgency 60/105, approach 1.
    assert ta.score[0] == pytest.approx(60.0 / 105.0)
    # The hovering track is at the asset now: proximity exp(-0.5*0.01), urgency 1, approach 0.5.
    assert ta.score[3] == pytest.approx(0.5 * math.exp(-0.005))
    np.testing.assert_array_equal(ta.order, [0, 3, 1, 2])
    np.testing.assert_array_equal(ta.rank, [1, 3, 4, 2])
    np.testing.assert_array_equal(ta.asset_idx, [0, 0, 0, 0])


def test_grazing_impact_time_solves_the_sphere_entry() -> None:
    # Passing 600 m abeam of a 1000 m radius: entry when the along-track distance is 800 m.
    ta = threat.evaluate_threats(
        np.array([[-10_800.0, 600.0, 0.0]]), np.array([[100.0, 0.0, 0.0]]), ASSET
    )
    assert ta.time_to_impact_s[0, 0] == pytest.approx(100.0)
    assert ta.cpa_m[0, 0] == pytest.approx(600.0)


def _reference_pair(p, v, a, radius, cpa_scale, tau):
    rel = p - a
    s2 = v @ v
    t_cpa = max(0.0, -(rel @ v) / s2) if s2 > 0 else 0.0
    cpa = np.linalg.norm(rel + v * t_cpa)
    tti = -1.0
    if rel @ rel <= radius**2:
        tti = 0.0
    else:  # brute-force sphere entry on a 10 ms grid
        t = np.linspace(0, 2000, 200_001)
        inside = np.flatnonzero(np.linalg.norm(rel + v * t[:, None], axis=1) <= radius)
        if inside.size:
            tti = float(t[inside[0]])
    cos = -(rel @ v) / (np.linalg.norm(rel) * math.sqrt(s2))
    t_go = tti if tti >= 0 else t_cpa
    score = math.exp(-0.5 * (cpa / cpa_scale) ** 2) * tau / (tau + t_go) * 0.5 * (1 + cos)
    return cpa, t_cpa, tti, score


def test_matches_a_scalar_reference_over_tracks_and_assets() -> None:
    rng = np.random.default_rng(9)
    pos = rng.uniform(-3e4, 3e4, (6, 3))
    vel = rng.normal(0, 250, (6, 3))
    assets = rng.uniform(-5e3, 5e3, (3, 3))
    radius = np.array([2000.0, 4000.0, 8000.0])
    ta = threat.evaluate_threats(pos, vel, assets, asset_radius_m=radius)
    for i in range(6):
        for j in range(3):
            cpa, t_cpa, tti, score = _reference_pair(pos[i], vel[i], assets[j], radius[j], 5000, 60)
            assert ta.cpa_m[i, j] == pytest.approx(cpa, rel=1e-9)
            assert ta.time_to_cpa_s[i, j] == pytest.approx(t_cpa, rel=1e-9, abs=1e-9)
            assert ta.time_to_impact_s[i, j] == pytest.approx(tti, abs=0.011)
            assert ta.pair_score[i, j] == pytest.approx(score, rel=1e-3, abs=1e-9)
    assert (ta.score == ta.pair_score.max(axis=1)).all()
    assert sorted(ta.rank) == list(range(1, 7))
    assert (np.diff(ta.score[ta.order]) <= 0).all()


def test_class_weights_follow_the_idl_enum() -> None:
    from mcc.types import TargetClass

    assert len(threat.DEFAULT_CLASS_WEIGHTS) == len(TargetClass)
    pos = np.array([[1e4, 0.0, 0.0], [1e4, 0.0, 0.0]])
    vel = np.array([[-200.0, 0, 0], [-200.0, 0, 0]])
    cls = np.array([TargetClass.CLASS_DECOY.value, TargetClass.CLASS_CRUISE_MISSILE.value])
    ta = threat.evaluate_threats(pos, vel, ASSET, classification=cls)
    assert ta.score[1] / ta.score[0] == pytest.approx(1.0 / 0.1)
    np.testing.assert_array_equal(ta.rank, [2, 1])
    with pytest.raises(ComputeError, match="classification"):
        threat.evaluate_threats(pos, vel, ASSET, classification=np.array([0, 9]))


def test_rank_ties_break_on_time_then_index() -> None:
    rank, order = threat.rank_threats(
        np.array([0.5, 0.9, 0.5, 0.5]), tie_break=np.array([30.0, 1.0, 10.0, 30.0])
    )
    np.testing.assert_array_equal(order, [1, 2, 0, 3])
    np.testing.assert_array_equal(rank, [3, 1, 2, 4])


def test_rejects_nan_and_bad_shapes() -> None:
    with pytest.raises(ComputeError, match="position"):
        threat.evaluate_threats(np.array([[np.nan, 0, 0]]), np.zeros((1, 3)), ASSET)
    with pytest.raises(ComputeError, match="shapes disagree"):
        threat.evaluate_threats(np.zeros((2, 3)), np.zeros((1, 3)), ASSET)
    with pytest.raises(ComputeError, match="asset_value"):
        threat.evaluate_threats(np.zeros((1, 3)), np.zeros((1, 3)), ASSET, asset_value=2.0)
