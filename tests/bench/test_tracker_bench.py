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
    _discrete_cv_class,
    add_parser,
    run_scenario_bench,
    run_stonesoup_classic,
)
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
    model = _discrete_cv_class()(noise_diff_coeff=9.0)
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
