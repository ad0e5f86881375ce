"""Scenarios: validation messages, determinism, truth kinematics, radar statistics, classic 2-D."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mcc.apps.scenario import (
    TARGET_CLASSES,
    Detections,
    RadarModel,
    Scenario,
    TruthState,
    classic_2d,
    load_scenario,
    parse_scenario,
)
from mcc.errors import MccError, ScenarioError
from mcc.types import IffAnswer, TargetClass
from tests.conftest import REPO

BASE = """\
seed: 7
duration_s: 60
assets:
  - id: depot
    position_m: [0, 0, 0]
radars:
  - id: r1
    position_m: [0, 0, 10]
    scan_period_s: 1.0
    sigma_range_m: 10
    sigma_azimuth_rad: 0.001
    sigma_elevation_rad: 0.001
    pd: 0.9
    clutter_rate: 1
    coverage: {max_range_m: 20000}
targets:
  - class: aircraft
    position_m: [1000, 1000, 1000]
    motion: {model: constant_velocity, velocity_mps: [100, 0, 0]}
raids:
  - {count: 3, class: cruise_missile, towards: depot, from_bearing_deg: 90, range_m: 5000,
     speed_mps: 250}
"""

CLASSES = "unknown, aircraft, cruise_missile, helicopter, ballistic, uav, decoy"
MODELS = "constant_velocity, coordinated_turn, direct, dive"

# (text to replace in BASE, replacement, expected message after "FILE:")
BAD = [
    ("pd: 0.9", "pd: 1.5", "13: radars[0].pd: must be <= 1.0 (got 1.5)"),
    ("clutter_rate: 1", "clutter_rate: -1", "14: radars[0].clutter_rate: must be >= 0.0 (got -1)"),
    (
        "scan_period_s: 1.0",
        "scan_period_s: fast",
        '9: radars[0].scan_period_s: must be a finite number (got "fast")',
    ),
    ("seed: 7\n", "", "1: seed: required field is missing: seed of every random draw"),
    (
        "class: aircraft",
        "class: tank",
        f'17: targets[0].class: must be one of {CLASSES} (got "tank")',
    ),
    (
        "velocity_mps: [100, 0, 0]}",
        "velocity_mps: [100, 0, 0], speed: 3}",
        "19: targets[0].motion.speed: unknown field; allowed here: model, velocity_mps (got 3)",
    ),
    (
        "model: constant_velocity",
        "model: warp",
        f'19: targets[0].motion.model: must be one of {MODELS} (got "warp")',
    ),
    (
        "model: constant_velocity, ",
        "",
        "19: targets[0].motion.model: required field is missing: the motion model, one of "
        + MODELS,
    ),
    (
        "position_m: [0, 0, 10]",
        "position_m: [0, 10]",
        "8: radars[0].position_m: must be [x, y, z] in metres (east, north, up), three numbers"
        " (got [0, 10])",
    ),
    (
        "towards: depot",
        "towards: dept",
        "21: raids[0].towards: no such asset; defined assets: depot (did you mean 'depot'?)"
        ' (got "dept")',
    ),
    (
        "range_m: 5000",
        "range_m: [6000, 5000]",
        "21: raids[0].range_m: must be a number or [min, max] with > 0 and min <= max"
        " (got [6000, 5000])",
    ),
    (
        "coverage: {max_range_m: 20000}",
        "coverage: {max_range_m: 20000, min_range_m: 30000}",
        "15: radars[0].coverage.min_range_m: must be < max_range_m (20000) (got 30000)",
    ),
    (
        "coverage: {max_range_m: 20000}",
        "coverage: {max_range_m: 20000, sector_deg: [10, 10]}",
        "15: radars[0].coverage.sector_deg: must be [from, to] in degrees clockwise from north,"
        " 0 <= from < 360, 0 < to <= 360, from != to (e.g. [300, 60]; [0, 360] is all round)"
        " (got [10, 10])",
    ),
    (
        "duration_s: 60",
        "duration_s: 60\nduraton: 3",
        "3: duraton: unknown field; allowed here: id, description, seed, duration_s, assets,"
        " radars, targets, raids; did you mean 'duration_s'? (got 3)",
    ),
    (
        "duration_s: 60",
        "duration_s: .inf",
        "2: duration_s: must be a number of seconds > 0, or endless (got Infinity)",
    ),
    (
        "    coverage: {max_range_m: 20000}\n",
        "    coverage: {max_range_m: 20000}\n    iff: {p_reply: 1.5}\n",
        "16: radars[0].iff.p_reply: must be <= 1.0 (got 1.5)",
    ),
    (
        "    coverage: {max_range_m: 20000}\n",
        "    coverage: {max_range_m: 20000}\n    iff: {p_reply: 0.9, p_false_reply: -0.1}\n",
        "16: radars[0].iff.p_false_reply: must be >= 0.0 (got -0.1)",
    ),
    (
        "    motion: {model: constant_velocity, velocity_mps: [100, 0, 0]}\n",
        "    motion: {model: constant_velocity, velocity_mps: [100, 0, 0]}\n    iff: {mode5: 1}\n",
        "20: targets[0].iff.mode5: must be true or false (got 1)",
    ),
    (
        "     speed_mps: 250}",
        "     speed_mps: 250, iff: {mode5: true, friend: true}}",
        "22: raids[0].iff.friend: unknown field; allowed here: mode5 (got true)",
    ),
    ("seed: 7", "seed: [7", "2: not valid YAML: expected ',' or ']', but got ':'"),
]


@pytest.mark.parametrize(("old", "new", "expected"), BAD, ids=[b[2].split(":")[1] for b in BAD])
def test_invalid_scenarios_are_refused_with_a_clear_message(
    tmp_path: Path, old: str, new: str, expected: str
) -> None:
    assert old in BASE
    path = tmp_path / "bad.yaml"
    path.write_text(BASE.replace(old, new, 1))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert str(info.value) == f"{path}:{expected}"
    assert isinstance(info.value, MccError)


def test_every_problem_is_listed_one_per_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BASE.replace("pd: 0.9", "pd: 2").replace("class: aircraft", "klass: aircraft"))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert str(info.value).splitlines() == [
        f"{path}:13: radars[0].pd: must be <= 1.0 (got 2)",
        f"{path}:17: targets[0].class: required field is missing: target class (IDL TargetClass)",
        f"{path}:17: targets[0].klass: unknown field; allowed here: id, class, position_m,"
        " birth_s, motion, iff; did you mean 'class'? (got \"aircraft\")",
    ]


def test_duplicate_ids_and_file_errors(tmp_path: Path) -> None:
    twice = (
        BASE
        + "  - {count: 1, class: uav, towards: depot, from_bearing_deg: 0, "
        + ("range_m: 100, speed_mps: 10}\n")
    )
    twice = twice.replace("assets:\n", "assets:\n  - {id: depot, position_m: [1, 1, 0]}\n")
    with pytest.raises(ScenarioError) as info:
        parse_scenario(twice, source="x.yaml")
    assert str(info.value) == 'x.yaml:5: assets[1].id: duplicate id (also assets[0]) (got "depot")'
    with pytest.raises(ScenarioError, match=r"missing\.yaml: cannot read the scenario"):
        load_scenario(tmp_path / "missing.yaml")
    with pytest.raises(ScenarioError, match=r"x\.yaml: a scenario is a YAML mapping"):
        parse_scenario("- 1\n", source="x.yaml")
    with pytest.raises(ScenarioError) as info:
        Scenario.from_dict({"seed": 1, "duration_s": 5, "assets": [{"id": "a"}]})
    assert str(info.value) == (
        "<dict>: assets[0].position_m: required field is missing: [x, y, z] ENU, metres"
    )


def test_the_documented_example_is_valid() -> None:
    doc = (REPO / "docs/scenario.md").read_text()
    example = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    s = parse_scenario(example, source="docs/scenario.md")
    assert (s.id, s.n_targets, len(s.radars)) == ("small", 23, 1)


def test_target_classes_match_the_idl() -> None:
    assert set(TARGET_CLASSES.values()) == set(TargetClass)
    assert TARGET_CLASSES["cruise_missile"] == TargetClass.CLASS_CRUISE_MISSILE


def test_shipped_scenarios_load() -> None:
    small = load_scenario(REPO / "scenarios/small.yaml")
    assert (small.id, small.n_targets, len(small.radars)) == ("small", 3, 1)
    sam = load_scenario(REPO / "scenarios/sam-toc.yaml")
    assert sam.n_targets >= 50 and len(sam.assets) == 2
    assert sorted(r.scan_period_s for r in sam.radars) == [0.5, 1.0]
    attackers = np.isfinite(sam.impact_s)
    assert attackers.sum() >= 45
    assert sam.impact_s[attackers].min() >= 35 and sam.impact_s[attackers].max() <= 65
    classes = set(sam.classes[attackers].tolist())
    assert {int(c.value) for c in _classes("aircraft", "cruise_missile", "helicopter")} <= classes
    # Every threat is in the coverage of at least one radar while it flies.
    for t in (10.0, 30.0, 45.0):
        truth = sam.truth_at(t)
        seen = np.zeros(truth.count, bool)
        for radar in sam.radars:
            seen |= radar.in_coverage(truth.positions_m)
        assert seen[truth.alive].all()


def _classes(*names: str) -> list[TargetClass]:
    return [TARGET_CLASSES[n] for n in names]


# -- truth ---------------------------------------------------------------------------------


def _scenario(
    targets: str, *, assets: str = "", duration_s: float = 1000, seed: int = 1
) -> Scenario:
    text = f"seed: {seed}\nduration_s: {duration_s}\nassets:\n{assets or '  []'}\n"
    return parse_scenario(text + f"targets:\n{targets}", source="t.yaml")


def test_truth_is_deterministic_from_the_seed() -> None:
    a = load_scenario(REPO / "scenarios/sam-toc.yaml")
    b = load_scenario(REPO / "scenarios/sam-toc.yaml")
    ta, tb = a.truth_at(23.4), b.truth_at(23.4)
    assert np.array_equal(ta.ids, tb.ids) and np.array_equal(ta.positions_m, tb.positions_m)
    assert np.array_equal(ta.velocities_mps, tb.velocities_mps)
    text = (REPO / "scenarios/sam-toc.yaml").read_text().replace("seed: 20240601", "seed: 99")
    c = parse_scenario(text)
    assert not np.allclose(c.truth_at(23.4).positions_m, ta.positions_m)
    assert np.array_equal(c.ids, a.ids)


def test_constant_velocity_matches_closed_form() -> None:
    s = _scenario(
        "  - {class: aircraft, birth_s: 5, position_m: [100, 200, 3000],"
        " motion: {model: constant_velocity, velocity_mps: [150, -50, 5]}}\n"
    )
    assert not s.truth_at(4.9).alive[0]
    truth = s.truth_at(15.0)
    assert truth.alive[0]
    np.testing.assert_allclose(truth.positions_m[0], [100 + 1500, 200 - 500, 3000 + 50])
    np.testing.assert_allclose(truth.velocities_mps[0], [150, -50, 5])
    assert not s.truth_at(1000.0).alive[0]  # the scenario is over


def test_coordinated_turn_matches_closed_form() -> None:
    # Northbound at 100 m/s, a right turn at 9 deg/s from t=2 s for 10 s: a quarter circle.
    s = _scenario(
        "  - {class: aircraft, position_m: [0, 0, 1000], motion: {model: coordinated_turn,"
        " velocity_mps: [0, 100, 2], turn_rate_dps: 9, start_s: 2, duration_s: 10}}\n"
    )
    radius = 100 / math.radians(9)
    start = np.array([0, 200, 1004.0])
    half = s.truth_at(7.0)  # 45 degrees into the turn
    psi = math.radians(45)
    np.testing.assert_allclose(
        half.positions_m[0],
        start + [radius * (1 - math.cos(psi)), radius * math.sin(psi), 10],
        atol=1e-6,
    )
    np.testing.assert_allclose(
        half.velocities_mps[0], [100 * math.sin(psi), 100 * math.cos(psi), 2], atol=1e-9
    )
    after = s.truth_at(15.0)  # heading east since t=12 s
    np.testing.assert_allclose(after.positions_m[0], start + [radius + 300, radius, 26], atol=1e-6)
    np.testing.assert_allclose(after.velocities_mps[0], [100, 0, 2], atol=1e-9)


def test_turn_positions_are_the_integral_of_the_velocities() -> None:
    s = _scenario(
        "  - {class: helicopter, position_m: [10, 20, 300], motion: {model: coordinated_turn,"
        " velocity_mps: [30, 40, -1], turn_rate_dps: -4, start_s: 1}}\n"
        "  - {class: uav, position_m: [0, 0, 300], motion: {model: coordinated_turn,"
        " velocity_mps: [30, 0, 0], turn_rate_dps: 0}}\n"
    )
    times = np.linspace(0.0, 60.0, 1201)
    vel = np.stack([s.truth_at(t).velocities_mps for t in times])
    integral = np.sum((vel[1:] + vel[:-1]) / 2 * np.diff(times)[:, None, None], axis=0)
    moved = s.truth_at(60.0).positions_m - s.truth_at(0.0).positions_m
    np.testing.assert_allclose(moved, integral, atol=0.05)
    speeds = np.linalg.norm(vel[:, :, :2], axis=2)
    np.testing.assert_allclose(speeds[:, 0], 50.0)
    np.testing.assert_allclose(speeds[:, 1], 30.0)


def test_dive_reaches_the_asset_and_counts_as_an_impact() -> None:
    s = _scenario(
        "  - {id: 9, class: aircraft, position_m: [10000, 0, 1000],"
        " motion: {model: dive, towards: base, speed_mps: 200, dive_range_m: 2000}}\n"
        "  - {id: 4, class: cruise_missile, position_m: [0, 5000, 0],"
        " motion: {model: direct, towards: base, speed_mps: 250}}\n",
        assets="  - {id: base, position_m: [0, 0, 0]}",
    )
    level = s.truth_at(20.0)
    np.testing.assert_allclose(level.positions_m[0], [6000, 0, 1000])
    np.testing.assert_allclose(level.velocities_mps[0], [-200, 0, 0])
    dive_len = math.hypot(2000, 1000)
    impact = 40 + dive_len / 200
    np.testing.assert_allclose(s.impact_s, [impact, 20.0])
    diving = s.truth_at(42.0)
    np.testing.assert_allclose(
        diving.positions_m[0], np.array([2000, 0, 1000]) * (1 - 400 / dive_len)
    )
    assert s.truth_at(impact - 0.01).alive[0] and not s.truth_at(impact).alive[0]
    assert [(i.target_id, i.asset_id) for i in s.impacts(100)] == [(4, "base"), (9, "base")]
    assert [i.target_id for i in s.impacts(30)] == [4]


def test_kill_removes_a_target_and_its_impact() -> None:
    s = _scenario(
        "  - {id: 4, class: cruise_missile, position_m: [0, 5000, 50],"
        " motion: {model: direct, towards: base, speed_mps: 250}}\n",
        assets="  - {id: base, position_m: [0, 0, 0]}",
    )
    assert s.kill(4, 10.0)
    assert s.truth_at(9.99).alive[0] and not s.truth_at(10.0).alive[0]
    assert s.impacts() == [] and s.kills() == {4: 10.0}
    assert not s.kill(4, 12.0)  # already dead
    assert not s.kill(77, 1.0)  # unknown


def test_raids_are_drawn_within_their_limits() -> None:
    assert "range_m: 5000,\n     speed_mps: 250}" in BASE
    text = BASE.replace(
        "range_m: 5000,\n     speed_mps: 250}",
        "range_m: [4000, 6000], speed_mps: [200, 300], spread_deg: 40, birth_s: [5, 10],"
        " altitude_m: [20, 80]}",
    ).replace("count: 3", "count: 500")
    s = parse_scenario(text)
    raid = s.asset_index >= 0
    first = s.truth_at(0.0).positions_m[raid]  # not born yet: where they will appear
    assert raid.sum() == 500 and first.shape == (500, 3)
    ground = np.hypot(first[:, 0], first[:, 1])
    bearing = np.degrees(np.arctan2(first[:, 0], first[:, 1]))
    assert ground.min() >= 4000 and ground.max() <= 6000
    assert bearing.min() >= 70 and bearing.max() <= 110
    assert first[:, 2].min() >= 20 and first[:, 2].max() <= 80
    assert s.birth_s[raid].min() >= 5 and s.birth_s[raid].max() <= 10
    assert sorted(s.ids.tolist()) == list(range(1, 502))


def test_truth_message_round_trip() -> None:
    s = load_scenario(REPO / "scenarios/small.yaml")
    state = s.truth_at(3.0)
    msg = state.to_msg(scenario_id=s.id, time_ns=1_700_000_003_000_000_000)
    back = TruthState.from_msg(msg)
    assert msg.count == 3 and back.time_s == pytest.approx(1_700_000_003.0)
    np.testing.assert_array_equal(back.ids, state.ids)
    np.testing.assert_array_equal(back.positions_m, state.positions_m)
    np.testing.assert_array_equal(back.velocities_mps, state.velocities_mps)


# -- radar ---------------------------------------------------------------------------------


def _radar(**overrides: float) -> RadarModel:
    params: dict[str, float] = dict(
        scan_period_s=1.0,
        sigma_range_m=20.0,
        sigma_azimuth_rad=0.002,
        sigma_elevation_rad=0.004,
        sigma_radial_velocity_mps=1.5,
        pd=1.0,
        clutter_rate=0.0,
        max_range_m=30000.0,
        min_range_m=100.0,
        min_elevation_rad=0.0,
        max_elevation_rad=math.radians(60),
    )
    params.update(overrides)
    return RadarModel(id="r", position_m=(100.0, -200.0, 10.0), **params)  # type: ignore[arg-type]


def _truth(positions: list[list[float]], velocities: list[list[float]] | None = None) -> TruthState:
    n = len(positions)
    return TruthState(
        0.0,
        np.arange(1, n + 1, dtype=np.uint32),
        np.full(n, 1, np.uint8),
        np.array(positions, dtype=float),
        np.array(velocities if velocities is not None else [[0, 0, 0]] * n, dtype=float),
        np.ones(n, bool),
    )


def test_geometry_conventions() -> None:
    radar = _radar(
        sigma_range_m=0, sigma_azimuth_rad=0, sigma_elevation_rad=0, sigma_radial_velocity_mps=0
    )
    north = [100.0, 4800.0, 10.0]
    east = [5100.0, -200.0, 10.0]
    up_ne = [100.0 + 3000, -200.0 + 3000, 10.0 + 3000 * math.sqrt(2)]
    truth = _truth([north, east, up_ne], [[0, 100, 0], [-50, 0, 0], [0, 0, 0]])
    dets = radar.scan(truth, 0.0, np.random.default_rng(0))
    order = np.argsort(dets.target_id)
    np.testing.assert_allclose(dets.azimuth_rad[order], [0.0, math.pi / 2, math.pi / 4], atol=1e-12)
    np.testing.assert_allclose(dets.elevation_rad[order], [0, 0, math.pi / 4], atol=1e-12)
    np.testing.assert_allclose(dets.range_m[order], [5000, 5000, 6000])
    # receding north: +100; closing from the east: -50
    np.testing.assert_allclose(dets.radial_velocity_mps[order], [100, -50, 0], atol=1e-9)
    np.testing.assert_allclose(dets.positions_m[order], truth.positions_m, atol=1e-6)


def test_scan_moves_truth_to_the_scan_time() -> None:
    radar = _radar(sigma_range_m=0, sigma_azimuth_rad=0, sigma_elevation_rad=0)
    truth = _truth([[5000.0, 5000.0, 1000.0]], [[-100.0, 20.0, -5.0]])
    dets = radar.scan(truth, 2.5, np.random.default_rng(0))
    np.testing.assert_allclose(dets.positions_m[0], [4750, 5050, 987.5], atol=1e-6)
    assert dets.time_s == 2.5


def test_measurement_noise_has_the_configured_std() -> None:
    radar = _radar()
    # 100 targets at the same place, 30 scans: 3000 independent draws of each error.
    truth = _truth([[3100.0, 3800.0, 1500.0]] * 100, [[30.0, -40.0, 0.0]] * 100)
    r0, az0, el0 = (v[0] for v in radar.polar(truth.positions_m))
    rng = np.random.default_rng(42)
    scans = [radar.scan(truth, 0.0, rng) for _ in range(30)]
    assert all(d.count == 100 for d in scans)

    def pooled(name: str) -> np.ndarray:
        return np.concatenate([getattr(d, name) for d in scans])

    vr0 = float(np.dot(truth.positions_m[0] - radar.position_m, truth.velocities_mps[0]) / r0)
    errors = {
        "range": (pooled("range_m") - r0, radar.sigma_range_m),
        "az": (pooled("azimuth_rad") - az0, radar.sigma_azimuth_rad),
        "el": (pooled("elevation_rad") - el0, radar.sigma_elevation_rad),
        "vr": (pooled("radial_velocity_mps") - vr0, radar.sigma_radial_velocity_mps),
    }
    n = 3000
    for name, (err, sigma) in errors.items():
        # The sample std of n normal draws has a relative std of 1/sqrt(2n) = 1.3 %.
        assert err.std() == pytest.approx(sigma, rel=0.06), name
        assert abs(err.mean()) < 4 * sigma / math.sqrt(n), name


def test_detection_probability_and_clutter_counts() -> None:
    pd, rate, n = 0.7, 4.0, 300
    radar = _radar(pd=pd, clutter_rate=rate)
    truth = _truth([[3000.0, 3000.0, 500.0], [-4000.0, 2000.0, 800.0]] * 10)
    rng = np.random.default_rng(5)
    scans = [radar.scan(truth, 0.0, rng) for _ in range(n)]
    hits = sum(int((d.target_id >= 0).sum()) for d in scans)
    false = np.array([int((d.target_id < 0).sum()) for d in scans])
    trials = truth.count * n
    assert abs(hits - pd * trials) < 4 * math.sqrt(trials * pd * (1 - pd))
    assert abs(false.sum() - rate * n) < 4 * math.sqrt(rate * n)
    # Poisson: the variance of the per-scan count equals its mean.
    assert false.var() == pytest.approx(rate, rel=0.35)


def test_clutter_is_uniform_in_the_coverage_volume() -> None:
    radar = _radar(
        clutter_rate=20.0,
        min_elevation_rad=math.radians(-2),
        max_elevation_rad=math.radians(40),
        sector_start_rad=math.radians(300),
        sector_width_rad=math.radians(120),
    )
    rng = np.random.default_rng(9)
    dets = [radar.scan(TruthState.empty(), 0.0, rng) for _ in range(500)]
    pos = np.concatenate([d.positions_m for d in dets])
    r, az, el = radar.polar(pos)
    n = len(r)
    assert n > 9000
    assert r.min() >= radar.min_range_m - 1e-6 and r.max() <= radar.max_range_m + 1e-6
    assert el.min() >= math.radians(-2) - 1e-9 and el.max() <= math.radians(40) + 1e-9
    assert np.all((az >= math.radians(300) - 1e-9) | (az <= math.radians(60) + 1e-9))
    # Half of a sphere shell's volume lies beyond r_half.
    r0, r1 = radar.min_range_m, radar.max_range_m
    r_half = ((r0**3 + r1**3) / 2) ** (1 / 3)
    assert abs((r < r_half).mean() - 0.5) < 4 * 0.5 / math.sqrt(n)
    # And half of it below the elevation whose sine is halfway.
    s0, s1 = math.sin(math.radians(-2)), math.sin(math.radians(40))
    assert abs((np.sin(el) < (s0 + s1) / 2).mean() - 0.5) < 4 * 0.5 / math.sqrt(n)


def test_coverage_limits_detection() -> None:
    radar = _radar(sector_start_rad=math.radians(350), sector_width_rad=math.radians(40))
    sx, sy, sz = radar.position_m
    inside = [sx + 1000, sy + 10000, sz + 500]  # bearing ~6 deg
    too_far = [sx, sy + 31000, sz + 500]
    too_close = [sx + 50, sy + 50, sz]
    too_low = [sx, sy + 10000, sz - 300]
    too_high = [sx, sy + 1000, sz + 5000]
    outside_sector = [sx + 10000, sy, sz + 500]  # due east
    truth = _truth([inside, too_far, too_close, too_low, too_high, outside_sector])
    assert radar.in_coverage(truth.positions_m).tolist() == [True] + [False] * 5
    rng = np.random.default_rng(1)
    seen = np.concatenate([radar.scan(truth, 0.0, rng).target_id for _ in range(50)])
    assert set(seen.tolist()) == {1}


def test_detection_message_round_trip() -> None:
    radar = _radar(clutter_rate=3.0)
    dets = radar.scan(_truth([[2000.0, 2000.0, 300.0]]), 0.0, np.random.default_rng(3))
    msg = dets.to_msg(
        sensor_id="r", scan_id=4, origin_ns=10, publish_ns=20, sensor_position_m=radar.position_m
    )
    back = Detections.from_msg(msg)
    assert msg.count == dets.count and msg.sensor_y_m == -200.0
    np.testing.assert_array_equal(back.range_m, dets.range_m)
    np.testing.assert_array_equal(back.positions_m, dets.positions_m)


# -- classic 2-D benchmark -----------------------------------------------------------------


def test_classic_2d_shapes_and_models() -> None:
    data = classic_2d(10, scans=50, seed=3)
    assert data.scans == 50 and len(data.measurements) == 50 and len(data.truth_ids) == 50
    assert data.region == ((-1000.0, 1000.0), (-1000.0, 1000.0))
    assert data.clutter_rate == 30.0
    for ids, pos, vel, z, zid in zip(
        data.truth_ids,
        data.truth_positions,
        data.truth_velocities,
        data.measurements,
        data.measurement_ids,
        strict=True,
    ):
        assert pos.shape == (len(ids), 2) and vel.shape == (len(ids), 2)
        assert z.shape == (len(zid), 2)
        assert set(zid[zid >= 0].tolist()) <= set(ids.tolist())
        for target in zid[zid >= 0]:  # a detection lies near its target (R = 10² I)
            meas = z[zid == target][0]
            assert np.linalg.norm(meas - pos[ids == target][0]) < 60
    np.testing.assert_allclose(data.F[:2, :2], [[1, 1], [0, 1]])
    np.testing.assert_allclose(data.Q[:2, :2], 25 * np.array([[0.25, 0.5], [0.5, 1.0]]))
    np.testing.assert_allclose(data.H @ np.array([1, 2, 3, 4]), [1, 3])
    np.testing.assert_allclose(data.R, np.diag([100.0, 100.0]))


def test_classic_2d_is_reproducible_and_scales() -> None:
    a, b = classic_2d(10, scans=30, seed=1), classic_2d(10, scans=30, seed=1)
    for za, zb in zip(a.measurements, b.measurements, strict=True):
        np.testing.assert_array_equal(za, zb)
    c = classic_2d(10, scans=30, seed=2)
    assert not np.array_equal(a.measurements[5], c.measurements[5])
    big = classic_2d(40, scans=100, seed=4)
    assert big.region == ((-2000.0, 2000.0), (-2000.0, 2000.0)) and big.clutter_rate == 120.0
    assert big.clutter_density == pytest.approx(a.clutter_density)
    alive = np.array([len(ids) for ids in big.truth_ids])
    assert 25 <= alive.mean() <= 45
    clutter = np.array([(zid < 0).sum() for zid in big.measurement_ids])
    assert abs(clutter.mean() - 120) < 4 * math.sqrt(120 / 100)
    hits = sum(int((zid >= 0).sum()) for zid in big.measurement_ids)
    assert abs(hits / alive.sum() - 0.98) < 0.02
    with pytest.raises(ValueError, match="n_targets >= 1"):
        classic_2d(0)


# -- IFF -----------------------------------------------------------------------------------


def _friendly_truth() -> TruthState:
    """Targets 1 and 2 answer Mode 5, 3 and 4 do not; all in coverage."""
    truth = _truth([[5000.0 + 500 * i, 3000.0, 1000.0] for i in range(4)])
    return replace(truth, mode5=np.array([True, True, False, False]))


def test_an_interrogator_answers_friends_and_nothing_else() -> None:
    trials = 400
    radar = _radar(clutter_rate=3.0, iff_p_reply=0.9)
    truth = _friendly_truth()
    rng = np.random.default_rng(3)
    friend_answers, others = [], []
    for _ in range(trials):
        dets = radar.scan(truth, 0.0, rng)
        assert dets.iff is not None and dets.iff.shape == (dets.count,)
        is_friend = np.isin(dets.target_id, [1, 2])
        friend_answers.append(dets.iff[is_friend])
        others.append(dets.iff[~is_friend])  # hostiles and clutter (-1)
    friends, rest = np.concatenate(friend_answers), np.concatenate(others)
    assert set(friends.tolist()) == {IffAnswer.IFF_FRIEND.value, IffAnswer.IFF_NO_REPLY.value}
    assert (friends == IffAnswer.IFF_FRIEND.value).mean() == pytest.approx(0.9, abs=0.03)
    assert set(rest.tolist()) == {IffAnswer.IFF_NO_REPLY.value}  # no false replies by default
    assert rest.size > 2 * trials  # hostiles and clutter were there to answer nothing
    spoofed = _radar(clutter_rate=3.0, iff_p_reply=0.9, iff_p_false_reply=0.2)
    answers = np.concatenate(
        [d.iff[d.target_id < 0] for d in (spoofed.scan(truth, 0.0, rng) for _ in range(trials))]
    )
    assert (answers == IffAnswer.IFF_INVALID.value).mean() == pytest.approx(0.2, abs=0.05)


def test_without_an_interrogator_iff_stays_empty_and_the_scan_is_unchanged() -> None:
    truth = _friendly_truth()
    plain = _radar(clutter_rate=2.0).scan(truth, 0.0, np.random.default_rng(5))
    asked = _radar(clutter_rate=2.0, iff_p_reply=1.0).scan(truth, 0.0, np.random.default_rng(5))
    assert plain.iff is None
    msg = plain.to_msg(
        sensor_id="r", scan_id=1, origin_ns=1, publish_ns=2, sensor_position_m=(0, 0, 0)
    )
    assert msg.iff == b"" and Detections.from_msg(msg).iff is None
    # The answers are drawn after everything else: the detections themselves do not move.
    np.testing.assert_array_equal(plain.range_m, asked.range_m)
    np.testing.assert_array_equal(plain.target_id, asked.target_id)
    back = Detections.from_msg(
        asked.to_msg(
            sensor_id="r", scan_id=1, origin_ns=1, publish_ns=2, sensor_position_m=(0, 0, 0)
        )
    )
    assert asked.iff is not None and back.iff is not None
    np.testing.assert_array_equal(back.iff, asked.iff)
    assert set(asked.iff[np.isin(asked.target_id, [1, 2])].tolist()) == {IffAnswer.IFF_FRIEND.value}


def test_friends_from_the_file_and_a_friendly_raid_lands_without_impact() -> None:
    s = _scenario(
        "  - {id: 5, class: aircraft, position_m: [0, 5000, 3000],"
        " motion: {model: direct, towards: base, speed_mps: 250}, iff: {mode5: true}}\n"
        "  - {id: 6, class: cruise_missile, position_m: [5000, 0, 50],"
        " motion: {model: direct, towards: base, speed_mps: 250}}\n",
        assets="  - {id: base, position_m: [0, 0, 0]}",
    )
    assert s.mode5.tolist() == [True, False]
    assert [i.target_id for i in s.impacts(100)] == [6]  # the friend lands, the missile hits
    assert not s.truth_at(30.0).alive[0]  # landed: no longer flying
    truth = s.truth_at(1.0)
    assert truth.mode5 is not None and truth.mode5.tolist() == [True, False]
    from_bus = TruthState.from_msg(truth.to_msg(scenario_id="t", time_ns=1))
    assert from_bus.mode5 is None  # Truth does not carry IFF: the radar app asks the scenario
    assert s.with_iff(from_bus).answers_mode5([6, 5, -1]).tolist() == [False, True, False]
    sam = load_scenario(REPO / "scenarios/sam-toc.yaml")
    assert sorted(sam.ids[sam.mode5].tolist()) == [901, 902]
    assert all(r.iff_p_reply for r in sam.radars)


# -- continuous scenarios: repeating raids, no end ---------------------------------------------

CONTINUOUS = """\
seed: 3
duration_s: endless
assets:
  - {id: base, position_m: [0, 0, 0]}
targets:
  - {id: 7, class: uav, position_m: [0, 5000, 500],
     motion: {model: coordinated_turn, velocity_mps: [30, 0, 0], turn_rate_dps: 3}}
raids:
  - {count: 4, class: cruise_missile, towards: base, from_bearing_deg: 90, range_m: [5000, 6000],
     speed_mps: 250, birth_s: [0, 20], repeat_s: 20}
  - {count: 2, class: aircraft, towards: base, from_bearing_deg: 0, range_m: 8000,
     speed_mps: 200, birth_s: [0, 5], repeat_s: 60, iff: {mode5: true}}
"""


def test_a_continuous_scenario_keeps_coming_and_holds_only_recent_waves() -> None:
    """Raids with ``repeat_s`` in an endless scenario: targets are born at a steady rate for
    ever, while the targets held (the arrays truth_at works on) stay bounded."""
    s = parse_scenario(CONTINUOUS, source="c.yaml")
    assert s.continuous and s.duration_s == math.inf
    held, alive = [], []
    for t_s in np.arange(0.0, 20_000.0, 7.0):
        truth = s.truth_at(float(t_s))
        held.append(s.n_targets)
        alive.append(int(truth.alive.sum()))
    assert max(held) <= 1 + 4 * 4 + 2 * 2  # a few waves of each raid, never the hours behind
    assert min(alive[10:]) >= 2  # something always flies after the first waves
    threats, friends = s.spawned(20_000.0)
    assert threats == 1 + 4 * 1000 and friends == 2 * 334  # every wave born counted
    assert len(np.unique(s.ids)) == s.n_targets


def test_a_continuous_scenario_is_the_same_whenever_a_process_starts() -> None:
    """A process that starts late (a restarted truth app, a radar propagating the file) sees
    the same targets, with the same ids, as one that ran from the start."""
    early = parse_scenario(CONTINUOUS, source="c.yaml")
    for t_s in np.arange(0.0, 5000.0, 3.0):
        early.truth_at(float(t_s))
    late = parse_scenario(CONTINUOUS, source="c.yaml")
    a, b = early.truth_at(5000.0).live(), late.truth_at(5000.0).live()
    assert a.count > 0
    order_a, order_b = np.argsort(a.ids), np.argsort(b.ids)
    assert np.array_equal(a.ids[order_a], b.ids[order_b])
    np.testing.assert_allclose(a.positions_m[order_a], b.positions_m[order_b])


def test_a_continuous_scenario_knows_its_friends_kills_and_impacts_by_wave() -> None:
    s = parse_scenario(CONTINUOUS, source="c.yaml")
    live = s.truth_at(3010.0).live()
    friends = live.ids[s.is_friend(live.ids)]
    assert friends.size and np.array_equal(s.with_iff(live).mode5, s.is_friend(live.ids))
    assert set(friends.tolist()) <= set(s.ids[s.mode5].tolist())
    assert not s.is_friend([7])[0]
    victim = int(live.ids[~s.is_friend(live.ids)][0])
    assert s.kill(victim, 3010.0)
    s.truth_at(3025.0)  # new waves come: the kill stays recorded
    assert s.kills()[victim] == 3010.0 and victim not in s.truth_at(3025.0).live().ids
    # impacts since a time: each leaker reported once when asked in steps
    seen = []
    for t_s in np.arange(3025.0, 3400.0, 0.5):
        seen += [i.target_id for i in s.impacts(float(t_s), since_s=float(t_s) - 0.5)]
    assert len(seen) == len(set(seen)) > 50 and victim not in seen


def test_repeat_s_and_endless_are_checked_with_their_line() -> None:
    bad = CONTINUOUS.replace("repeat_s: 20", "repeat_s: 0")
    with pytest.raises(ScenarioError, match=r"c.yaml:\d+: raids\[0\].repeat_s: must be > 0"):
        parse_scenario(bad, source="c.yaml")
    with pytest.raises(ScenarioError, match="or endless"):
        parse_scenario(CONTINUOUS.replace("endless", "forever"), source="c.yaml")


def test_the_shipped_continuous_scenario_keeps_a_steady_density() -> None:
    s = load_scenario(REPO / "scenarios/sam-toc-continuous.yaml")
    alive = [int(s.truth_at(float(t)).alive.sum()) for t in range(600, 7200, 60)]
    assert min(alive) >= 5 and max(alive) <= 30
    threats_1h = load_scenario(REPO / "scenarios/sam-toc-continuous.yaml").spawned(3600.0)[0]
    assert 800 <= threats_1h <= 1400  # about 18 a minute
