"""`mcc bench throughput|scale|blocked|load|all` in --quick form with tiny counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcc.bench import scale
from tests.bench.perf_cli import run_mode
from tests.conftest import require_tool

pytestmark = pytest.mark.slow


@pytest.mark.tool
def test_throughput_mcc_beside_ddsperf(tmp_path: Path) -> None:
    require_tool("ddsperf")
    doc = run_mode(
        tmp_path,
        "throughput",
        "--quick",
        "--sizes",
        "1024",
        "--duration",
        "0.5",
        "--batching",
        "none,app",
        "--app-batch",
        "4",
        "--plot",
        str(tmp_path),
    )
    rows = {(r["impl"], r["batching"]): r for r in doc["rows"]}
    assert set(rows) == {("mcc", "none"), ("mcc", "app"), ("ddsperf", "cyclone")}
    anchor = rows[("ddsperf", "cyclone")]
    assert anchor["samples_per_s"] > 0 and anchor["ratio_vs_ddsperf"] == 1.0
    for batching in ("none", "app"):
        row = rows[("mcc", batching)]
        assert row["lost"] == 0 and row["received"] == row["sent"] > 0, row
        assert row["ratio_vs_ddsperf"] == pytest.approx(
            row["samples_per_s"] / anchor["samples_per_s"], rel=1e-2
        )
        assert row["mb_per_s"] == pytest.approx(row["samples_per_s"] * 1024 / 1e6, rel=0.05)
    assert rows[("mcc", "app")]["received"] % 4 == 0
    statuses = {t["target"]: t["status"] for t in doc["targets"]}
    assert statuses["throughput at 1 KiB ≥ 75% of ddsperf's, Cyclone write batching"] == (
        "not measured"  # not run here
    )
    plain = statuses["throughput at 1 KiB ≥ 75% of ddsperf's samples/s (plain writes)"]
    assert plain == ("met" if rows[("mcc", "none")]["ratio_vs_ddsperf"] >= 0.75 else "missed")
    assert (tmp_path / "throughput_vs_size.png").exists()


def test_scale_rows_per_subscriber(tmp_path: Path) -> None:
    doc = run_mode(
        tmp_path,
        "scale",
        "--pairs",
        "1x1,1x2",
        "--rate",
        "500",
        "--duration",
        "0.5",
        "--plot",
        str(tmp_path),
    )
    rows = doc["rows"]
    assert [(r["publishers"], r["subscribers"], r["subscriber"]) for r in rows] == [
        (1, 1, 1),
        (1, 2, 1),
        (1, 2, 2),
    ]
    base = rows[0]["p50_us"]
    for row in rows:
        assert row["lost"] == 0 and row["received"] > 0
        assert row["ratio_p50_vs_1x1"] == pytest.approx(row["p50_us"] / base, abs=0.01)
    assert rows[1]["received"] == rows[2]["received"]  # both subscribers took everything
    assert doc["targets"][0]["status"] == "not measured"  # no 4-4 in this run
    assert (tmp_path / "scale_latency_vs_nxm.png").exists()


def test_scale_target_is_the_worst_4x4_subscriber() -> None:
    rows = [
        {"publishers": 1, "subscribers": 1, "ratio_p50_vs_1x1": 1.0},
        *({"publishers": 4, "subscribers": 4, "ratio_p50_vs_1x1": r} for r in (1.1, 1.7, 1.2)),
    ]
    (target,) = scale.targets(rows)
    assert (target["measured"], target["status"]) == ("1.70×", "missed")


def test_load_compares_loaded_with_unloaded(tmp_path: Path) -> None:
    doc = run_mode(
        tmp_path,
        "load",
        "--loads",
        "none,bus",
        "--sizes",
        "64",
        "--impl",
        "mcc",
        "--interval",
        "0",
        "--duration",
        "0.5",
        "--plot",
        str(tmp_path),
    )
    unloaded, loaded = doc["rows"]
    assert (unloaded["load"], loaded["load"]) == ("none", "bus")
    assert unloaded["ratio_p50_vs_unloaded"] == 1.0
    assert loaded["ratio_p50_vs_unloaded"] == pytest.approx(
        loaded["p50_us"] / unloaded["p50_us"], abs=0.01
    )
    assert loaded["bus_load_mb_s"] > 0 and loaded["cpu_load_procs"] == 0
    assert unloaded["bus_load_mb_s"] is None and unloaded["lost"] == loaded["lost"] == 0
    assert (tmp_path / "load_latency.png").exists()


def test_all_runs_blocked_writes_and_collects_the_targets(tmp_path: Path) -> None:
    # `all` with one mode: blocked writes at quick defaults (1 KiB, 1 ms and flat out) with a
    # send queue of 2 samples, so the flat-out writes must block.
    doc = run_mode(tmp_path, "all", "--quick", "--modes", "blocked", "--send-queue", "2")
    assert doc["bench"] == "perftest"
    paced, flat = doc["rows"]
    assert {paced["mode"], flat["mode"]} == {"blocked"}
    assert (paced["interval_ms"], flat["interval_ms"]) == (1.0, 0.0)
    for row in (paced, flat):
        assert row["writes"] > 0 and row["lost"] == 0 and row["send_queue"] == 2
        assert row["blocked"] <= row["throttle_count"]
    assert flat["blocked"] > 0 and flat["blocked_max_us"] >= flat["blocked_p50_us"] > 0
    (target,) = doc["targets"]
    assert "blocked writes" in target["target"]
    assert target["status"] == ("met" if paced["blocked"] + paced["timeouts"] == 0 else "missed")
