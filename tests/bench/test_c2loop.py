"""`mcc bench c2loop`: the C2 loop's round trip under load, as a JSON document and a table."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from mcc.bench.c2loop import COLUMNS, LOADS, add_parser, run_c2loop_bench
from mcc.errors import MccError
from tests.conftest import read_line


@pytest.mark.slow
def test_quick_bench_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "c2loop.json"
    code = run_c2loop_bench(
        quick=True,
        duration_s=1.0,
        loads=["none"],
        json_path=str(out),
        record=False,
        run_dir=str(tmp_path / "runs"),
    )
    assert code == 0
    doc = json.loads(out.read_text())
    assert doc["bench"] == "c2loop" and doc["host"]["cores"] >= 1
    assert set(doc) >= {"bench", "created", "host", "command", "rows"}
    [row] = doc["rows"]
    assert row["impl"] == "mcc" and row["load"] == "none"
    assert set(COLUMNS) <= set(row)
    assert row["cycles"] > 0 and row["lost"] >= 0
    assert 0 < row["p50_us"] <= row["p99_us"] <= row["max_us"]
    assert row["avg_us"] > 0 and row["stdev_us"] >= 0
    assert row["bus_load_mb_s"] is None and row["cpu_load_procs"] == 0
    assert "C2 loop round trip" in capsys.readouterr().out
    assert (tmp_path / "runs" / "0-none" / "c2-rtt-0.csv").exists()
    assert psutil.Process(os.getpid()).children(recursive=True) == []  # all stopped


@pytest.mark.slow
def test_bus_load_flows_between_its_processes(bus_env: dict[str, str], domain_id: int) -> None:
    """The bulk source and sink of the ``bus`` load, run as the bench runs them."""
    tag = bus_env["MCC_DISCOVERY_TAG"]
    opts = ["--domain", str(domain_id), "--tag", tag, "--max-s", "60"]
    role = [sys.executable, "-m", "mcc.bench.c2loop"]
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(
            subprocess.Popen(
                [*role, "bulk-sink", *opts], env=bus_env, stdout=subprocess.PIPE, text=True
            )
        )
        source = stack.enter_context(subprocess.Popen([*role, "bulk-source", *opts], env=bus_env))
        try:
            assert read_line(sink, 60.0).strip() == "flowing"
        finally:
            for proc in (source, sink):
                proc.send_signal(signal.SIGTERM)
            try:
                out, _ = sink.communicate(timeout=15)
                source.wait(15)
            except subprocess.TimeoutExpired:
                source.kill()
                sink.kill()
                raise
    stats = json.loads(out.strip().splitlines()[-1])
    assert stats["samples"] > 0 and stats["bytes"] == stats["samples"] * 8192
    assert sink.returncode == 0 and source.returncode == 0


def test_parser_registers_c2loop() -> None:
    parser = argparse.ArgumentParser(prog="mcc bench")
    add_parser(parser.add_subparsers(dest="bench_name"))
    args = parser.parse_args(["c2loop", "--quick", "--load", "none,cpu", "--json", "x.json"])
    assert args.bench_name == "c2loop" and args.quick and args.json == "x.json"
    assert args.load == "none,cpu" and not args.record and callable(args.func)
    defaults = parser.parse_args(["c2loop"])
    assert defaults.load == ",".join(LOADS) and defaults.priority == "normal"
    assert parser.parse_args(["c2loop", "--priority", "realtime"]).priority == "realtime"


def test_unknown_load_or_priority_is_refused() -> None:
    with pytest.raises(MccError, match="'gpu'.*none, cpu, bus, cpu\\+bus"):
        run_c2loop_bench(quick=True, duration_s=1.0, loads=["gpu"], json_path=None, record=False)
    with pytest.raises(MccError, match="'urgent'.*normal, high, realtime"):
        run_c2loop_bench(
            quick=True,
            duration_s=1.0,
            loads=["none"],
            json_path=None,
            record=False,
            priority="urgent",
        )
