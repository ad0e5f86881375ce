"""``mcc bench scale``: N publishers × M subscribers as separate processes (1-1 … 4-4).

Each configuration runs N publisher and M subscriber processes of ``python -m
mcc.bench.perftest`` on one fresh domain; every publisher writes ``--size`` byte samples at
``--rate`` per second for ``--duration`` seconds and every subscriber takes from all of them.
One row per subscriber: its samples/s, lost samples and the one-way latency of what it took
(send stamp → take, monotonic clock of the one kernel every process shares). The reference
is the 1-1 row of the same run: the target compares each N-M configuration's worst
subscriber p50 with it.

ddsperf has no N × M mode that reports per-subscriber latency, so this bench has no
anchor row; the latency bench holds the ddsperf ratio.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mcc.bench import perftest, runner
from mcc.bench.perftest import Node, PerfOptions, PubSpec

__all__ = ["COLUMNS", "ScalePlan", "add_parser", "run_scale"]

DEFAULT_PAIRS = ((1, 1), (2, 2), (3, 3), (4, 4))
QUICK_PAIRS = ((1, 1), (2, 2))
DEFAULT_SIZE_BYTES = 64
DEFAULT_RATE_HZ = 1000.0
DEFAULT_DURATION_S = 5.0
QUICK_DURATION_S = 1.5
COLUMNS = (
    "impl",
    "publishers",
    "subscribers",
    "subscriber",
    "size_bytes",
    "rate_hz",
    "samples_per_s",
    "received",
    "lost",
    "p50_us",
    "p90_us",
    "p99_us",
    "max_us",
    "ratio_p50_vs_1x1",
    *runner.NET_COLUMNS,
)
TARGET_RATIO = 1.5


@dataclass(frozen=True)
class ScalePlan:
    """What ``mcc bench scale`` runs."""

    pairs: tuple[tuple[int, int], ...] = DEFAULT_PAIRS
    size_bytes: int = DEFAULT_SIZE_BYTES
    rate_hz: float = DEFAULT_RATE_HZ
    duration_s: float = DEFAULT_DURATION_S
    options: PerfOptions = PerfOptions()

    def __post_init__(self) -> None:
        runner.require(
            bool(self.pairs) and all(n <= 16 and m <= 16 for n, m in self.pairs),
            f"--pairs {list(self.pairs)}: use 1 to 16 publishers and subscribers",
        )
        runner.require(
            1 <= self.size_bytes <= 1 << 24, f"--size {self.size_bytes}: use 1 byte to 16 MiB"
        )
        runner.require(self.rate_hz > 0, f"--rate {self.rate_hz}: use samples/s > 0 per publisher")
        runner.require(self.duration_s > 0, f"--duration {self.duration_s}: use seconds > 0")


def run_scale(
    plan: ScalePlan, *, progress: Any = None, nodes: Sequence[Node] | None = None
) -> list[dict[str, Any]]:
    """One row per subscriber of every N × M configuration."""
    if nodes is None:
        with perftest.open_network(plan.options.net, 2, name="scale") as opened:
            return run_scale(plan, progress=progress, nodes=opened)
    rows: list[dict[str, Any]] = []
    for n, m in plan.pairs:
        if progress is not None:
            progress(f"scale {n} publishers x {m} subscribers")
        rows += _configuration(plan, n, m, nodes)
    base = [r["p50_us"] for r in rows if (r["publishers"], r["subscribers"]) == (1, 1)]
    base_p50 = base[0] if base and base[0] else None
    for row in rows:
        if base_p50 and row.get("p50_us"):
            row["ratio_p50_vs_1x1"] = round(row["p50_us"] / base_p50, 2)
    return rows


def _configuration(plan: ScalePlan, n: int, m: int, nodes: Sequence[Node]) -> list[dict[str, Any]]:
    common = {
        "impl": "mcc",
        "publishers": n,
        "subscribers": m,
        "size_bytes": plan.size_bytes,
        "rate_hz": plan.rate_hz,
        "duration_s": plan.duration_s,
        **plan.options.row(),
    }
    domain = perftest.next_domain()
    pubs = [
        PubSpec(
            domain=domain,
            writer_id=f"p{i + 1}",
            size_bytes=plan.size_bytes,
            rate_hz=plan.rate_hz,
            duration_s=plan.duration_s,
        )
        for i in range(n)
    ]
    failed = {**common, "subscriber": None}
    run = perftest.pubsub_or_error(failed, plan.options, nodes, pubs, subscribers=m)
    if run is None:
        return [failed]
    rows = []
    for i, sub in enumerate(run.subs):
        result = perftest.throughput_of(sub, run.sent_samples)
        row = {
            **common,
            "subscriber": i + 1,
            "samples_per_s": round(result.samples_per_s, 1),
            "received": result.received,
            "lost": result.lost,
        }
        if result.latency is not None:
            stats = result.latency.stats()
            for key in ("p50_us", "p90_us", "p99_us", "p999_us", "max_us", "mean_us"):
                row[key] = getattr(stats, key)
            row["cdf_us"] = result.latency.cdf()
        rows.append(row)
    return rows


def targets(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """4-4: the worst subscriber's p50 against the 1-1 subscriber's."""
    ratios = [
        r["ratio_p50_vs_1x1"]
        for r in rows
        if (r["publishers"], r["subscribers"]) == (4, 4) and r.get("ratio_p50_vs_1x1")
    ]
    return [
        runner.target_row(
            f"scale 4-4: per-subscriber p50 ≤ {TARGET_RATIO:g}× the 1-1 value (worst subscriber)",
            max(ratios) if ratios else None,
            TARGET_RATIO,
            unit="×",
        )
    ]


def notes(plan: ScalePlan, _rows: object = None) -> str:
    return (
        f"Each publisher writes {plan.size_bytes} B samples at {plan.rate_hz:g}/s for "
        f"{plan.duration_s:g} s; every subscriber takes from all publishers (profile "
        f"{plan.options.stream_profile}). One row per subscriber: samples/s it took, samples lost "
        "(written − taken) and one-way latency (send stamp → take). ratio_p50_vs_1x1 = this "
        "subscriber's p50 over the 1-1 subscriber's, same run. No anchor: ddsperf reports no "
        "per-subscriber latency for N × M."
    )


def add_parser(bench_subparsers: Any) -> argparse.ArgumentParser:
    """Register ``scale`` on the ``mcc bench`` sub-command parsers."""
    p: argparse.ArgumentParser = bench_subparsers.add_parser(
        "scale",
        help="N publishers x M subscribers (processes): per-subscriber latency, throughput",
        description="N publisher and M subscriber processes on one domain (1-1, 2-2, 3-3, "
        "4-4 by default): per-subscriber one-way latency, samples/s and losses.",
    )
    p.add_argument("--pairs", help="publishers x subscribers (default 1x1,2x2,3x3,4x4)")
    p.add_argument(
        "--size", type=int, default=DEFAULT_SIZE_BYTES, help="bytes per sample (default 64)"
    )
    p.add_argument(
        "--rate",
        type=float,
        default=DEFAULT_RATE_HZ,
        help="samples/s per publisher (default %(default)g)",
    )
    MODE.add_options(p, duration_s=(DEFAULT_DURATION_S, QUICK_DURATION_S), per="configuration")
    return p


def plan_from_args(args: argparse.Namespace, options: PerfOptions) -> ScalePlan:
    from mcc.bench.runner import parse_pairs

    return ScalePlan(
        pairs=parse_pairs("--pairs", args.pairs) or (QUICK_PAIRS if args.quick else DEFAULT_PAIRS),
        size_bytes=args.size,
        rate_hz=args.rate,
        duration_s=args.duration or (QUICK_DURATION_S if args.quick else DEFAULT_DURATION_S),
        options=options,
    )


MODE = runner.PerfMode(
    "scale",
    plan_from_args=plan_from_args,
    run=run_scale,
    rows=lambda plan: len(plan.pairs),
    key=("publishers", "subscribers", "subscriber"),
    metric="p50_us",
    higher_is_better=False,
    columns=COLUMNS,
    title=lambda plan, nets: f"N publishers x M subscribers, per subscriber, {nets} network",
    notes=notes,
    targets=targets,
)
