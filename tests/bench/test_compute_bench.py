"""`mcc bench compute`: local vs remote rows in the benches' JSON shape, target notes, plots."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from mcc.bench.compute import COLUMNS, add_parser, notes, run_compute_bench
from mcc.errors import MccError


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mcc")
    add_parser(parser.add_subparsers(dest="bench_name"))
    return parser.parse_args(["compute", *argv])


def test_tiny_bench_writes_json_rows_and_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "compute.json"
    args = _parse(
        "--kernels",
        "nw,montecarlo",
        "--sizes",
        "64",
        "--reps",
        "2",
        "--devices",
        "cpu",
        "--json",
        str(out),
        "--plot",
        str(tmp_path / "plots"),
    )
    assert args.func(args) == 0
    doc = json.loads(out.read_text())
    assert set(doc) >= {"bench", "created", "host", "command", "rows"}
    assert doc["bench"] == "compute" and "--kernels nw,montecarlo" in doc["command"]
    rows = doc["rows"]
    assert [(r["impl"], r["kernel"]) for r in rows] == [
        ("local", "nw"),
        ("remote", "nw"),
        ("local", "montecarlo"),
        ("remote", "montecarlo"),
    ]
    for row in rows:
        assert set(COLUMNS) <= set(row) and row["device"] == "cpu" and row["size"] == 64
        assert row["ms"] > 0 and row["reps"] == 2 and "error" not in row
    local_nw, remote_nw = rows[0], rows[1]
    assert local_nw["overhead_ratio"] is None and local_nw["copy_share"] is None
    # From the unrounded medians; the row's ms are rounded to µs.
    assert remote_nw["overhead_ratio"] == pytest.approx(
        remote_nw["ms"] / local_nw["ms"] - 1, rel=0.01, abs=0.01
    )
    assert remote_nw["api_overhead_ratio"] > 0
    assert 0 < remote_nw["copy_share"] < 1 and remote_nw["compute_ms"] < remote_nw["ms"]
    assert (
        remote_nw["request_mb"]
        == remote_nw["reply_mb"]
        == pytest.approx(65 * 65 * 4 / 1e6, abs=1e-3)
    )
    assert rows[2]["bound"] == "compute" and rows[0]["bound"] == "copy"
    assert (tmp_path / "plots" / "compute_cpu.png").stat().st_size > 10_000
    printed = capsys.readouterr().out
    assert "local vs remote" in printed and "target overhead" in printed


def test_notes_check_the_target_at_the_largest_compute_bound_size() -> None:
    def row(kernel: str, size: int, bound: str, overhead: float) -> dict[str, object]:
        return {
            "impl": "remote",
            "device": "cpu",
            "kernel": kernel,
            "size": size,
            "bound": bound,
            "overhead_ratio": overhead,
            "api_overhead_ratio": overhead / 2,
            "copy_share": 0.5,
            "request_mb": 1.0,
            "reply_mb": 2.0,
        }

    text = notes(
        [
            row("hotspot", 256, "compute", 0.5),  # small size: not the target's
            row("hotspot", 1024, "compute", 0.04),
            row("montecarlo", 10, "compute", 0.2),
            row("nw", 2048, "copy", 1.3),
        ],
        load="Load average: 1.0",
    )
    assert "hotspot 1024: +4.0% end to end, +2.0% outside the kernel (met)" in text
    assert "hotspot 256" not in text
    assert "montecarlo 10: +20.0% end to end, +10.0% outside the kernel (MISSED)" in text
    assert "up to +65% outside the kernel (nw 2048, 1.0 MB in, 2.0 MB out" in text
    assert text.endswith("Load average: 1.0")


def test_small_call_note_checks_the_half_millisecond_target() -> None:
    small = {
        "device": "cpu",
        "kernel": "gospa",
        "size": 100,
        "reps": 300,
        "ms": 0.9,
        "overhead_ms": 0.4,
        "overhead_p90_ms": 0.6,
        "overhead_ratio": 0.8,
    }
    text = notes([], small_calls=[small], load="Load average: 1.0")
    assert (
        "remote overhead p50 for the small call (gospa 100, 300 calls): 0.400 ms (p90 0.600 ms) "
        "vs target 0.5 ms (met); anchor: the local kernel call 0.500 ms" in text
    )
    assert text.endswith("Load average: 1.0")
    assert "(MISSED)" in notes([], small_calls=[{**small, "overhead_ms": 0.7}])


def test_bad_options_are_refused() -> None:
    with pytest.raises(MccError, match=r"--kernels: unknown \['fft'\]"):
        run_compute_bench(kernels=["fft"])
    with pytest.raises(MccError, match="--reps 0: give at least 1"):
        run_compute_bench(kernels=["nw"], reps=0)
    with pytest.raises(MccError, match="--transport 'tcp'"):
        run_compute_bench(kernels=["nw"], transport="tcp")
