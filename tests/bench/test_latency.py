"""`mcc bench latency`: MCC's ping-pong and the anchors, in one run, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcc.bench.latency import run_mcc_pingpong
from mcc.bus.transport import tcp_supported
from mcc.errors import MccError
from tests.bench.perf_cli import bench_parser, run_mode
from tests.conftest import require_tool, run_cli

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("mode", "interval_ms", "reliable", "keyed"),
    [
        ("inline", 0.0, True, False),
        ("listener", 0.0, True, False),
        ("waitset", 5.0, True, False),
        ("inline", 5.0, False, True),
    ],
    ids=["inline-flat-out", "listener-flat-out", "waitset-paced", "inline-paced-best-effort-keyed"],
)
def test_mcc_pingpong_measures_round_trips(
    mode: str, interval_ms: float, reliable: bool, keyed: bool, domain_id: int
) -> None:
    duration_s = 1.0
    stats = run_mcc_pingpong(
        size_bytes=64,
        duration_s=duration_s,
        domain_id=domain_id,
        mode=mode,
        interval_ms=interval_ms,
        reliable=reliable,
        keyed=keyed,
        warmup=5,
    )
    assert stats.count > 20
    assert 0 < stats.min_us <= stats.p50_us <= stats.p99_us <= stats.max_us
    assert stats.p50_us < 5_000  # loopback: anything near 5 ms means a broken loop
    if reliable:
        assert stats.lost == 0
    if interval_ms:
        assert stats.count <= duration_s * 1000 / interval_ms  # one ping per interval at most
        assert stats.p50_us < interval_ms * 1000  # echoes came back within their interval


def test_bad_arguments_are_refused(domain_id: int) -> None:
    with pytest.raises(MccError, match="mode = 'spin'"):
        run_mcc_pingpong(size_bytes=64, duration_s=1, domain_id=domain_id, mode="spin")
    with pytest.raises(MccError, match="interval_ms = -1"):
        run_mcc_pingpong(size_bytes=64, duration_s=1, domain_id=domain_id, interval_ms=-1)


@pytest.mark.tool
def test_cli_runs_mcc_and_anchors_side_by_side(tmp_path: Path, bus_env: dict[str, str]) -> None:
    require_tool("ddsperf")
    impls = "mcc,ddsperf"
    out = tmp_path / "latency.json"
    plots = tmp_path / "plots"
    proc = run_cli(
        [
            "bench",
            "latency",
            "--quick",
            "--duration",
            "1",
            "--count",
            "1000",
            "--sizes",
            "64",
            "--intervals",
            "0",
            "--impl",
            impls,
            "--json",
            str(out),
            "--plot",
            str(plots),
        ],
        env=bus_env,
        timeout_s=180,
    )
    doc = json.loads(out.read_text())
    assert doc["bench"] == "latency" and doc["host"]["cores"] >= 1
    rows = {r["impl"]: r for r in doc["rows"]}
    assert set(rows) == set(impls.split(","))
    for row in rows.values():
        assert row["size_bytes"] == 64 and row["interval_ms"] == 0
        assert row["count"] > 0 and row["p50_us"] > 0, row
    assert rows["ddsperf"]["ratio_p50_vs_ddsperf"] == 1.0
    assert rows["mcc"]["ratio_p50_vs_ddsperf"] == pytest.approx(
        rows["mcc"]["p50_us"] / rows["ddsperf"]["p50_us"], rel=0.01, abs=0.005
    )  # the row's ratio is rounded to 2 decimals
    assert rows["mcc"]["ratio_p99_vs_ddsperf"] == pytest.approx(
        rows["mcc"]["p99_us"] / rows["ddsperf"]["p99_us"], rel=0.01, abs=0.005
    )
    cdf = rows["mcc"]["cdf_us"]
    assert cdf[0][0] == 0 and cdf[-1][0] == 100 and cdf[-1][1] == rows["mcc"]["max_us"]
    targets = {t["target"]: t for t in doc["targets"]}
    p50 = targets["latency p50 at 64 B flat out ≤ 1.5× ddsperf's"]
    expected = "met" if rows["mcc"]["ratio_p50_vs_ddsperf"] <= 1.5 else "missed"
    assert p50["status"] == expected
    assert targets["latency p99 at 64 B every 1 ms ≤ 1.5× ddsperf's"]["status"] == "not measured"
    assert (plots / "latency_vs_size.png").stat().st_size > 1000
    assert (plots / "latency_cdf.png").stat().st_size > 1000
    assert "one-way latency" in proc.stdout


@pytest.mark.tool
def test_tcp_runs_mcc_beside_the_anchors(tmp_path: Path) -> None:
    require_tool("ddsperf")
    require_tool("sockperf")
    doc = run_mode(
        tmp_path,
        "latency",
        "--transport",
        "tcp",
        "--sizes",
        "64",
        "--intervals",
        "0",
        "--count",
        "500",
        "--duration",
        "1",
        "--impl",
        "mcc,ddsperf,sockperf",
    )
    rows = {r["impl"]: r for r in doc["rows"]}
    assert all(r["transport"] == "tcp" for r in rows.values())
    for anchor in ("ddsperf", "sockperf"):
        assert rows[anchor]["count"] > 0 and not rows[anchor].get("error"), rows[anchor]
    if tcp_supported():
        assert rows["mcc"]["count"] > 0
    else:
        assert "TCP not supported" in rows["mcc"]["error"]
        assert rows["mcc"].get("count") is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sizes", "64,abc"], "--sizes '64,abc'"),
        (["--intervals", "1,fast"], "--intervals '1,fast'"),
        (["--impl", "mcc,zmq"], "zmq"),
        (["--net", "vm"], "--net 'vm'"),
        (["--send-queue", "0"], "--send-queue 0"),
        (["--transport", "tcp", "--multicast"], "TCP has no multicast"),
    ],
)
def test_bad_options_are_refused_with_the_option(argv: list[str], message: str) -> None:
    args = bench_parser().parse_args(["latency", *argv])
    with pytest.raises(MccError, match=message):
        args.func(args)


@pytest.mark.tool
def test_security_rows_measure_the_cost_of_dds_security(tmp_path: Path) -> None:
    """--security adds mcc over DDS Security beside mcc, and ddsperf of MCC's own Cyclone
    with the same governance beside it unsecured: each secured row has its ratio."""
    require_tool("ddsperf")
    doc = run_mode(
        tmp_path,
        "latency",
        "--sizes",
        "64",
        "--intervals",
        "0",
        "--count",
        "300",
        "--duration",
        "1",
        "--impl",
        "mcc",
        "--security",
    )
    rows = {r["impl"]: r for r in doc["rows"]}
    assert set(rows) == {"mcc", "mcc-secure", "ddsperf-11", "ddsperf-secure"}
    for impl in rows:
        assert rows[impl].get("p50_us") and not rows[impl].get("error"), rows[impl]
    for secure, plain in (("mcc-secure", "mcc"), ("ddsperf-secure", "ddsperf-11")):
        assert rows[secure]["ratio_p50_vs_unsecured"] == pytest.approx(
            rows[secure]["p50_us"] / rows[plain]["p50_us"], rel=0.02
        )
    assert rows["mcc-secure"]["lost"] == 0


def test_a_ping_or_pong_killed_by_a_signal_is_told_apart_from_an_error() -> None:
    """Cyclone 11.0.1's TCP receive thread can crash its process (SIGSEGV): the latency bench
    names a ping/pong that died of a signal (`_Crashed`, run again and counted in the row's
    ``crashes``), and says nothing for one that exited on its own."""
    import sys

    from mcc.bench.anchor_tools import background
    from mcc.bench.latency_pingpong import _Crashed, _raise_if_crashed
    from mcc.bench.perftest import Worker

    crash = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]
    clean = [sys.executable, "-c", "raise SystemExit(2)"]
    with background(crash) as dead, background(clean) as done:
        dead.proc.wait(30)
        done.proc.wait(30)
        with pytest.raises(_Crashed, match="pong died of signal 11"):
            _raise_if_crashed(Worker("ping", done), Worker("pong", dead))
        _raise_if_crashed(Worker("ping", done))  # exit 2: an error, not a crash
