"""``mcc bench load``: ping-pong latency unloaded and loaded (CPU, bus, both), MCC and ddsperf.

For each load condition the load starts first, then the latency rows of the
``latency`` bench (MCC and ``ddsperf``, same sizes and send interval) run under it:

* ``none``: nothing else runs;
* ``cpu``: one busy-loop process per core (``os.cpu_count()``);
* ``bus``: a publisher process writing 8 KiB samples flat out (reliable) to a subscriber
  process over the same network (loopback or the lab bridge), on a domain of its own;
* ``cpu+bus``: both.

``ratio_p50_vs_unloaded`` / ``ratio_p99_vs_unloaded`` compare each row with the same
implementation and size under ``none`` in the same run. ``bus_load_mb_s`` is what the load's
subscriber took meanwhile.

``--load`` of ``mcc bench latency|throughput|compute|hpc`` (`mcc.bench.runner.beside_load`)
runs this bench's ``cpu`` load beside them.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mcc.bench import latency, perftest, runner
from mcc.bench.loadgen import BUS_LOAD_SIZE_BYTES, LOADS, applied_load
from mcc.bench.perftest import Node, PerfOptions

__all__ = ["COLUMNS", "LoadPlan", "add_parser", "run_load"]

QUICK_LOADS = ("none", "cpu+bus")
IMPLS = ("mcc", "ddsperf")
DEFAULT_SIZES = (64, 1024)
QUICK_SIZES = (64,)
DEFAULT_INTERVAL_MS = 1.0
DEFAULT_DURATION_S = 5.0
QUICK_DURATION_S = 1.0
COLUMNS = (
    "impl",
    "load",
    "size_bytes",
    "interval_ms",
    "count",
    "lost",
    "p50_us",
    "p99_us",
    "p999_us",
    "max_us",
    "ratio_p50_vs_unloaded",
    "ratio_p99_vs_unloaded",
    "ratio_p50_vs_ddsperf",
    "bus_load_mb_s",
    *runner.NET_COLUMNS,
)


@dataclass(frozen=True)
class LoadPlan:
    """What ``mcc bench load`` runs."""

    loads: tuple[str, ...] = LOADS
    sizes: tuple[int, ...] = DEFAULT_SIZES
    interval_ms: float = DEFAULT_INTERVAL_MS
    impls: tuple[str, ...] = IMPLS
    duration_s: float = DEFAULT_DURATION_S
    count: int = latency.DEFAULT_COUNT
    options: PerfOptions = PerfOptions()

    def __post_init__(self) -> None:
        runner.require_choices("--loads", self.loads, LOADS)
        runner.require_choices("--impl", self.impls, latency.IMPLS)
        runner.require(
            self.interval_ms >= 0, f"--interval {self.interval_ms}: use ms >= 0 (0 = flat out)"
        )

    def latency_plan(self) -> latency.LatencyPlan:
        return latency.LatencyPlan(
            sizes=self.sizes,
            intervals_ms=(self.interval_ms,),
            impls=self.impls,
            count=self.count,
            max_duration_s=self.duration_s,
            options=self.options,
        )

    @property
    def rows(self) -> int:
        return len(self.loads) * self.latency_plan().rows


def run_load(
    plan: LoadPlan, *, progress: Any = None, nodes: Sequence[Node] | None = None
) -> list[dict[str, Any]]:
    """The latency rows under every load condition; ratios to the unloaded rows."""
    if nodes is None:
        with perftest.open_network(plan.options.net, 2, name="load") as opened:
            return run_load(plan, progress=progress, nodes=opened)
    rows: list[dict[str, Any]] = []
    lat_plan = plan.latency_plan()
    for load in plan.loads:
        step = None
        if progress is not None:
            step = lambda text, load=load: progress(f"load {load}: {text}")  # noqa: E731
        with applied_load(
            load, plan.options, nodes, max_s=20 * lat_plan.rows * plan.duration_s + 120
        ) as info:
            group = latency.run_latency(lat_plan, progress=step, nodes=nodes)
        for row in group:
            row.update(load=load, cpu_load_procs=info.cpu_procs, bus_load_mb_s=info.bus_mb_s)
        rows += group
    _ratios(rows)
    return rows


def _ratios(rows: list[dict[str, Any]]) -> None:
    base = {
        (r["impl"], r["size_bytes"]): r for r in rows if r["load"] == "none" and r.get("p50_us")
    }
    for row in rows:
        ref = base.get((row["impl"], row["size_bytes"]))
        if ref is not None and row.get("p50_us"):
            row["ratio_p50_vs_unloaded"] = round(row["p50_us"] / ref["p50_us"], 2)
            row["ratio_p99_vs_unloaded"] = round(row["p99_us"] / ref["p99_us"], 2)


def targets(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """No target is set for loaded latency; the rows are for judging, not pass/fail."""
    return []


def notes(plan: LoadPlan, _rows: object = None) -> str:
    every = "flat out" if not plan.interval_ms else f"one ping every {plan.interval_ms:g} ms"
    return (
        f"Ping-pong one-way latency (µs), {every}, {plan.duration_s:g} s per row, under each "
        f"load: cpu = one busy-loop process per core; bus = {BUS_LOAD_SIZE_BYTES} B samples "
        "flat out (reliable) between two more processes over the same network, own domain; "
        "the load starts before and runs through the rows of its condition. ratio_*_vs_unloaded "
        "= this row's percentile over the same implementation and size under none, same run."
    )


def add_parser(bench_subparsers: Any) -> argparse.ArgumentParser:
    """Register ``load`` on the ``mcc bench`` sub-command parsers."""
    p: argparse.ArgumentParser = bench_subparsers.add_parser(
        "load",
        help="latency unloaded vs loaded (CPU, bus, both): mcc and ddsperf",
        description="Ping-pong latency of mcc and ddsperf while other processes load the CPU, "
        "the bus, or both; ratios to the unloaded rows of the same run.",
    )
    p.add_argument("--loads", default=None, help=f"load conditions (default {','.join(LOADS)})")
    p.add_argument("--sizes", help="sizes in bytes (default 64,1024)")
    p.add_argument(
        "--interval",
        type=float,
        default=DEFAULT_INTERVAL_MS,
        help="ms between pings, 0 = flat out (default %(default)g)",
    )
    MODE.add_options(p, impls=IMPLS, duration_s=(DEFAULT_DURATION_S, QUICK_DURATION_S))
    return p


def plan_from_args(args: argparse.Namespace, options: PerfOptions) -> LoadPlan:
    from mcc.bench.runner import parse_ints

    return LoadPlan(
        loads=runner.parse_names(args.loads) or (QUICK_LOADS if args.quick else LOADS),
        sizes=parse_ints("--sizes", args.sizes) or (QUICK_SIZES if args.quick else DEFAULT_SIZES),
        interval_ms=args.interval,
        impls=runner.parse_names(args.impl),
        duration_s=args.duration or (QUICK_DURATION_S if args.quick else DEFAULT_DURATION_S),
        count=latency.QUICK_COUNT if args.quick else latency.DEFAULT_COUNT,
        options=options,
    )


MODE = runner.PerfMode(
    "load",
    plan_from_args=plan_from_args,
    run=run_load,
    key=("impl", "load", "size_bytes"),
    metric="p50_us",
    higher_is_better=False,
    columns=COLUMNS,
    title=lambda plan, nets: f"latency unloaded vs loaded, {nets} network, µs",
    notes=notes,
    targets=targets,
)
