"""`mcc bench tracker`: MCC and Stone Soup side by side on the classic 2-D benchmark."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path

import numpy as np
import pytest

from mcc.apps.scenario import classic_2d
from mcc.bench.tracker import (
    COLUMNS,
    discrete_cv_class,
    run_scenario_bench,
    run_stonesoup_classic,
)
from mcc.bench.tracker_cli import add_parser
from mcc.errors import MccError
from tests.conftest import REPO


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mcc")
    add_parser(parser.add_subparsers(dest="bench_name"))
    return parser.parse_args(["tracker", *argv])


def test_tiny_bench_writes_json_with_both_implementations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "tracker.json"
    args = _parse("--targets", "10", "--scans", "10", "--json", str(out))
    assert args.func(args) == 0
    doc = json.loads(out.read_text())
    assert set(doc) >= {"bench", "created", "host", "command", "rows"}
    assert doc["bench"] == "tracker" and doc["host"]["versions"]["stonesoup"].startswith("1.")
    mcc, ss = doc["rows"]
    assert (mcc["impl"], ss["impl"]) == ("mcc", "stonesoup")
    for row in (mcc, ss):
        assert set(COLUMNS) <= set(row)
        assert row["targets"] == 10 and row["scans"] == 10
        assert 0 < row["ms_per_scan"] <= row["p99_ms_per_scan"]
        # c = 100 m: 224 m when all ten targets are missed (the first scans), 0 when perfect.
        assert 0 < row["gospa_m"] < 130
        assert row["gospa_loc_m"] >= 0 and row["gospa_missed"] >= 0 and row["gospa_false"] >= 0
        assert 5 <= row["tracks_final"] <= 15
    # Configured alike, the two trackers are about as accurate; MCC is much faster.
    assert abs(mcc["gospa_m"] - ss["gospa_m"]) < 15
    assert mcc["speedup_vs_stonesoup"] == pytest.approx(ss["ms_per_scan"] / mcc["ms_per_scan"], 0.1)
    assert mcc["speedup_vs_stonesoup"] > 5
    assert "multi-target tracker" in capsys.readouterr().out


def test_stonesoup_gets_the_data_s_process_noise() -> None:
    data = classic_2d(5, scans=2, sigma_v=3.0, dt_s=2.0)
    model = discrete_cv_class()(noise_diff_coeff=9.0)
    Q = np.asarray(model.covar(dt.timedelta(seconds=2.0)))
    np.testing.assert_allclose(Q, data.Q[:2, :2])


def test_scenario_mode_runs_mcc_in_3d() -> None:
    rows = run_scenario_bench(REPO / "scenarios" / "small.yaml", models=("cv",), duration_s=20)
    [row] = rows
    assert row["impl"] == "mcc" and row["scenario"] == "small" and row["model"] == "cv"
    assert row["targets"] == 3 and row["scans"] == 41  # one radar, 0.5 s, 0..20 s
    assert row["gospa_m"] < 400 and row["tracks_final"] == 3


def test_stonesoup_kdtree_preselection_changes_no_association() -> None:
    """The bench's Stone Soup anchor (kd-tree pre-selection) tracks exactly as the plain
    GNNWith2DAssignment: the search radius covers the gate."""
    data = classic_2d(10, scans=6, seed=2)
    plain = run_stonesoup_classic(data, assoc="plain")
    kdtree = run_stonesoup_classic(data, assoc="kdtree")
    for key in ("gospa_m", "gospa_loc_m", "gospa_missed", "gospa_false", "tracks_final"):
        assert plain[key] == kdtree[key], key


def test_families_run_mcc_defaults_beside_stonesoup(tmp_path: Path) -> None:
    """A short manoeuvring family (3-6 g): MCC's defaults beside Stone Soup's EKF, same
    detections and GOSPA; the defaults follow the turns where a CV EKF breaks its tracks."""
    from mcc.bench.tracker_families import FAMILY_NAMES, run_families

    assert FAMILY_NAMES == ("polar", "manoeuvre", "crossing", "slow1", "slow5", "slow12")
    rows = run_families(["manoeuvre"], variants=["ekf-cv"], quick=True)
    mcc, jpda, ss = rows
    assert (mcc["impl"], mcc["variant"], ss["impl"], ss["variant"]) == (
        "mcc", "defaults", "stonesoup", "ekf-cv"
    )  # fmt: skip
    assert (jpda["impl"], jpda["variant"], jpda["scans"]) == ("mcc", "jpda", 21)
    assert 0 <= jpda["jpda_fallbacks"] <= jpda["jpda_clusters"]  # counted (none cross here)
    assert jpda["gospa_ratio"] == pytest.approx(jpda["gospa_m"] / ss["gospa_m"], abs=1e-3)
    assert mcc["scans"] == ss["scans"] == 21 and mcc["targets"] == 30
    assert mcc["gospa_ratio"] == pytest.approx(mcc["gospa_m"] / ss["gospa_m"], abs=1e-3)
    assert mcc["gospa_m"] < ss["gospa_m"] and mcc["track_ids"] <= ss["track_ids"]
    assert mcc["speedup_vs_stonesoup"] > 10
    assert mcc["cpu_ms_per_scan"] > 0 and ss["cpu_ms_per_scan"] > 0


def test_families_cli_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "fam.json"
    args = _parse("--families", "slow12", "--impl", "mcc", "--quick", "--json", str(out))
    assert args.func(args) == 0
    doc = json.loads(out.read_text())
    assert doc["bench"] == "tracker-families"
    mcc, jpda = doc["rows"]
    assert mcc["family"] == "slow12" and mcc["period_s"] == 12.0 and mcc["scans"] == 21
    assert jpda["variant"] == "jpda"


def test_families_scale_to_a_target_count() -> None:
    """``NAME@TARGETS``: MCC's defaults alone (no JPDA row), Stone Soup's ekf-cv on the first
    scans only above 100 targets, none above 200, each limit in a note."""
    from mcc.bench.tracker_families import STONESOUP_SCALE_SCANS, run_families

    mcc, ss = run_families(["slow12@120"], variants=["ekf-cv", "ukf-cv"], quick=True)
    assert (mcc["variant"], mcc["targets"], mcc["scans"]) == ("defaults", 120, 21)
    assert ss["scans"] == STONESOUP_SCALE_SCANS and "GOSPA not" in ss["note"]
    assert "gospa_ratio" not in mcc and mcc["speedup_vs_stonesoup"] > 1
    [alone] = run_families(["slow12@300"], variants=["ekf-cv"], quick=True)
    assert alone["targets"] == 300 and "not run" in alone["note"]
    with pytest.raises(MccError, match="NAME@TARGETS"):
        run_families(["slow12@x"])


# -- seeded random scenarios (mcc.bench.tracker_scenarios) ------------------------------------


def test_scenario_draws_are_seeded_and_vary_every_parameter() -> None:
    """The same seed draws the same scenario; other seeds draw other target counts, radars
    (p_d, clutter, noise, period); training and report seeds are disjoint."""
    from mcc.bench import tracker_scenarios as ts

    assert not set(ts.TRAIN_SEEDS) & set(ts.REPORT_SEEDS) and len(ts.REPORT_SEEDS) >= 5
    assert set(ts.SEARCH_SEEDS) <= set(ts.TRAIN_SEEDS)
    a, b = ts.draw("multiradar", 11), ts.draw("multiradar", 11)
    assert a.params == b.params and len(a.scans) == len(b.scans)
    np.testing.assert_array_equal(a.scans[5][2], b.scans[5][2])
    assert 2 <= len(a.radars) <= 3 and len({r.period_s for r in a.radars.values()}) >= 2
    radars = [ts.draw("straight", s).params["radars"]["radar"] for s in ts.REPORT_SEEDS]
    for key in ("pd", "clutter_per_scan", "sigma_azimuth_deg", "period_s", "sigma_range_m"):
        assert len({r[key] for r in radars}) == len(radars), key
    slow = ts.draw("slow", 1001)
    assert 5.0 <= slow.radars["radar"].period_s <= 12.0
    bearing = ts.draw("bearing", 1001).radars["radar"]
    assert 1.0 <= np.degrees(bearing.sigma_azimuth_rad) <= 2.0
    form = ts.draw("formation", 1001)
    assert form.targets % 3 == 0 and 100 <= form.params["spacing_m"] <= 300
    # A turning formation turns as one: its members keep their spacing through the turns.
    turn = ts.draw("formation-turn", 1001)
    lead, wing = (turn.truth.targets[k][1][:-1] for k in ("0", "1"))
    gap = np.linalg.norm(lead - wing, axis=1)
    assert np.ptp(gap) < 1e-6 and gap[0] == pytest.approx(turn.params["spacing_m"], abs=0.1)
    v = np.diff(lead, axis=0)
    heading = np.unwrap(np.arctan2(v[:, 0], v[:, 1]))
    assert np.degrees(np.ptp(heading)) > 10
    # Each scan of the MCC feed carries what the sensors file says of its radar.
    scan = a.mcc_scans()[0]
    assert scan.pd == a.radars[scan.sensor_id].pd
    assert scan.clutter_per_scan == a.radars[scan.sensor_id].clutter_per_scan
    with pytest.raises(MccError, match="report seeds"):
        ts.search_stonesoup("formation", seeds=(ts.REPORT_SEEDS[0],))
    with pytest.raises(MccError, match="unknown scenario family"):
        ts.draw("nope", 1)


def test_the_stonesoup_search_keeps_a_better_component_and_logs_each_try() -> None:
    from mcc.bench import tracker_scenarios as ts

    space: dict[str, tuple[object, ...]] = {
        "init_points": (2, 3),
        "deleter": ("steps4", "steps2"),
    }
    doc = ts.search_stonesoup("formation", seeds=(11,), space=space)
    tried = [e["config"] for e in doc["log"]]
    assert tried[0] == ts.SSConfig().name and len(tried) == len(set(tried)) == 3
    best = min(doc["log"], key=lambda e: e["median_gospa_m"])
    assert doc["chosen"] == best["config"] and doc["median_gospa_m"] == best["median_gospa_m"]
    assert ts.SSConfig(**doc["config"]).name == doc["chosen"]
    assert ts.SSConfig.parse(doc["chosen"]) == ts.SSConfig(**doc["config"])
    # Continued, a recorded search runs none of its candidates again.
    again = ts.search_stonesoup("formation", seeds=(11,), space=space, resume=doc)
    assert again["log"] == doc["log"] and again["chosen"] == doc["chosen"]


def test_scenarios_cli_reports_rows_and_targets(tmp_path: Path) -> None:
    """MCC's defaults, the plain CV filter and Stone Soup (a search file) on one small family
    and seed; the targets are judged on the figures, met or missed."""
    from mcc.bench import tracker_scenarios as ts

    search = tmp_path / "search.json"
    search.write_text(json.dumps({"searches": [
        {"family": "formation", "config": ts.SSConfig(init_points=3).__dict__}
    ]}))  # fmt: skip
    out = tmp_path / "scen.json"
    args = _parse("--scenarios", "formation", "--seeds", "1001", "--search-json", str(search),
                  "--scale-targets", "100", "--json", str(out))  # fmt: skip
    assert args.func(args) == 0
    doc = json.loads(out.read_text())
    assert doc["bench"] == "tracker-scenarios" and doc["report_seeds"] == [1001]
    mcc, cv, ss = doc["rows"]
    assert (mcc["variant"], cv["variant"], ss["impl"]) == ("defaults", "plain-cv", "stonesoup")
    assert ss["config"] == ts.SSConfig(init_points=3).name
    assert mcc["gospa_ratio"] == pytest.approx(mcc["gospa_m"] / ss["gospa_m"], abs=1e-3)
    assert mcc["speedup_vs_stonesoup"] > 10 and mcc["unconfirmed_total"] == 0
    assert mcc["gospa_m"] < cv["gospa_m"]
    names = {(v["target"], v["family"]) for v in doc["targets"]}
    assert ("GOSPA <= Stone Soup's searched best", "formation") in names
    assert any(v["target"].startswith("100 targets <=") for v in doc["targets"])
    [scale] = doc["scale"]
    assert scale["targets"] == 100 and scale["cpu_ms_per_scan"] > 0


def test_targets_can_be_missed() -> None:
    """A worse GOSPA, more id switches, an unconfirmed target, a slow scale run: each is
    reported missed (the bench can fail)."""
    from mcc.bench.tracker_scenarios import check_targets

    base = {"family": "straight", "seeds": 5, "targets": 30, "id_switches": 1.0,
            "ms_per_scan": 1.0, "unconfirmed_total": 0}  # fmt: skip
    summary = [
        {**base, "impl": "mcc", "variant": "defaults", "gospa_m": 900.0, "id_switches": 3.0,
         "speedup_vs_stonesoup": 50.0, "unconfirmed_total": 1},
        {**base, "impl": "mcc", "variant": "plain-cv", "gospa_m": 800.0},
        {**base, "impl": "stonesoup", "variant": "searched", "gospa_m": 850.0,
         "ms_per_scan": 50.0},
    ]  # fmt: skip
    scale = [{"family": "straight@1000", "seed": 1001, "targets": 1000, "cpu_ms_per_scan": 12.0,
              "ms_per_scan": 13.0, "sigma_azimuth_deg": 1.0}]  # fmt: skip
    verdicts = check_targets(summary, scale)
    assert len(verdicts) == 6 and not any(v["met"] for v in verdicts)
    summary[0].update(gospa_m=700.0, id_switches=1.0, speedup_vs_stonesoup=120.0,
                      unconfirmed_total=0)  # fmt: skip
    scale[0]["cpu_ms_per_scan"] = 8.0
    assert all(v["met"] for v in check_targets(summary, scale))


def test_scenarios_cli_refuses_bad_names_and_seeds() -> None:
    for argv, message in (
        (("--scenarios", "straight,nope"), "unknown family 'nope'"),
        (("--scenarios", "straight", "--seeds", "1,x"), "--seeds"),
    ):
        args = _parse(*argv)
        with pytest.raises(MccError, match=message):
            args.func(args)
