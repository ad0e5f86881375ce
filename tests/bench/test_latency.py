"""`mcc bench latency`: MCC's ping-pong and the anchors, in one run, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcc.bench.latency import run_mcc_pingpong
from mcc.errors import MccError
from tests.conftest import require_tool, run_cli

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("mode", ["listener", "waitset"])
def test_mcc_pingpong_measures_round_trips(mode: str, domain_id: int) -> None:
    stats = run_mcc_pingpong(
        size_bytes=64, duration_s=1.0, domain_id=domain_id, mode=mode, warmup=10
    )
    assert stats.count > 100
    assert 0 < stats.min_us <= stats.p50_us <= stats.p99_us <= stats.max_us
    assert stats.p50_us < 5_000  # loopback: anything near 5 ms means a broken loop


def test_best_effort_pingpong(domain_id: int) -> None:
    stats = run_mcc_pingpong(
        size_bytes=1024, duration_s=1.0, domain_id=domain_id, reliable=False, warmup=10
    )
    assert stats.count > 100


def test_bad_mode_is_refused(domain_id: int) -> None:
    with pytest.raises(MccError, match="mode = 'spin'"):
        run_mcc_pingpong(size_bytes=64, duration_s=1, domain_id=domain_id, mode="spin")


@pytest.mark.tool
def test_cli_runs_mcc_and_anchors_side_by_side(tmp_path: Path, bus_env: dict[str, str]) -> None:
    require_tool("ddsperf")
    require_tool("sockperf")
    out = tmp_path / "latency.json"
    proc = run_cli(
        ["bench", "latency", "--quick", "--duration", "1", "--sizes", "64", "--json", str(out)],
        env=bus_env,
        timeout_s=180,
    )
    doc = json.loads(out.read_text())
    assert doc["bench"] == "latency" and doc["host"]["cores"] >= 1
    rows = {r["impl"]: r for r in doc["rows"]}
    assert set(rows) == {"mcc", "mcc-waitset", "ddsperf", "sockperf"}
    for row in rows.values():
        assert row["size_bytes"] == 64 and row["count"] > 0 and row["p50_us"] > 0
    assert rows["ddsperf"]["ratio_p50_vs_ddsperf"] == 1.0
    assert rows["mcc"]["ratio_p50_vs_ddsperf"] == pytest.approx(
        rows["mcc"]["p50_us"] / rows["ddsperf"]["p50_us"], rel=0.01
    )
    assert "one-way latency" in proc.stdout


def test_cli_rejects_bad_sizes(bus_env: dict[str, str]) -> None:
    proc = run_cli(["bench", "latency", "--sizes", "64,abc"], env=bus_env, check=False)
    assert proc.returncode == 2 and "--sizes" in proc.stderr
