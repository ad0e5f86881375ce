"""``mcc bench NAME``: run a benchmark, its anchors in the same invocation, and report."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from mcc.bench import report
from mcc.errors import MccError

LATENCY_COLUMNS = (
    "impl",
    "size_bytes",
    "count",
    "lost",
    "p50_us",
    "p90_us",
    "p99_us",
    "p999_us",
    "max_us",
    "mean_us",
    "ratio_p50_vs_ddsperf",
)
IMPLS = ("mcc", "mcc-waitset", "ddsperf", "sockperf")


def run_latency(
    *,
    sizes: list[int],
    duration_s: float,
    impls: list[str],
    reliable: bool = True,
    domain_id: int | None = None,
) -> list[dict[str, Any]]:
    """Rows of one-way latency for every size and implementation, side by side."""
    from mcc.bench.anchors import run_ddsperf_pingpong, run_sockperf_pingpong
    from mcc.bench.latency import run_mcc_pingpong

    unknown = sorted(set(impls) - set(IMPLS))
    if unknown:
        raise MccError(f"--impl: unknown implementation(s) {unknown}; choose from {list(IMPLS)}")
    base_domain = domain_id if domain_id is not None else 100 + os.getpid() % 50
    rows: list[dict[str, Any]] = []
    for size in sizes:
        by_impl: dict[str, dict[str, Any]] = {}
        for impl in impls:
            domain = base_domain + len(rows)  # a fresh domain per row: no leftovers between rows
            if impl in ("mcc", "mcc-waitset"):
                stats = run_mcc_pingpong(
                    size_bytes=size,
                    duration_s=duration_s,
                    domain_id=domain,
                    reliable=reliable,
                    mode="waitset" if impl == "mcc-waitset" else "listener",
                )
            elif impl == "ddsperf":
                stats = run_ddsperf_pingpong(
                    size_bytes=size, duration_s=duration_s, domain_id=domain, reliable=reliable
                )
            else:
                stats = run_sockperf_pingpong(
                    size_bytes=size, duration_s=duration_s, port=20000 + os.getpid() % 20000
                )
            row = {
                "impl": impl,
                "size_bytes": size,
                "reliable": reliable if impl != "sockperf" else None,
                **stats.as_row(),
            }
            by_impl[impl] = row
            rows.append(row)
        anchor = by_impl.get("ddsperf")
        for row in by_impl.values():
            if anchor and anchor.get("p50_us"):
                row["ratio_p50_vs_ddsperf"] = round(row["p50_us"] / anchor["p50_us"], 2)
    return rows


def run_bench(args: argparse.Namespace) -> int:
    """Entry point of ``mcc bench``."""
    if args.bench_name != "latency":
        raise MccError(f"unknown bench {args.bench_name!r}")
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s]
    except ValueError:
        raise MccError(
            f"--sizes {args.sizes!r}: use comma-separated byte counts, e.g. 64,1024"
        ) from None
    duration_s = args.duration or (2.0 if args.quick else 10.0)
    impls = [i.strip() for i in args.impl.split(",") if i.strip()]
    rows = run_latency(sizes=sizes, duration_s=duration_s, impls=impls)
    command = (
        "mcc bench " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["bench"] else "mcc bench latency"
    )
    doc = report.document("latency", rows, command=command)
    report.print_table("one-way latency (RTT/2), loopback, µs", rows, LATENCY_COLUMNS)
    if args.json:
        report.write_json(doc, args.json)
    if args.record:
        report.record(doc, LATENCY_COLUMNS, notes=_latency_notes(rows))
    return 0


def _latency_notes(rows: list[dict[str, Any]]) -> str:
    ratios = [
        f"{r['size_bytes']} B: {r['ratio_p50_vs_ddsperf']}×"
        for r in rows
        if r["impl"] == "mcc" and r.get("ratio_p50_vs_ddsperf")
    ]
    if not ratios:
        return ""
    return "mcc p50 / ddsperf p50 (same run): " + ", ".join(ratios) + ". Target: ≤ 3× at 64 B."
