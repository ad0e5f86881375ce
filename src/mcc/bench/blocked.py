"""``mcc bench blocked``: writes that block on a full send queue, apart from the steady state.

A reliable writer may hold ``--send-queue`` unacknowledged samples (50 by default, as in the
paper); a write beyond that blocks until acknowledgements free a slot, at most the profile's
``max_blocking_time`` (100 ms), after which it fails (``timeouts``). Each row runs one
publisher and one subscriber process; the publisher times every ``write`` call with
``perf_counter_ns`` and, after each, reads Cyclone's own writer statistics
(``throttle_count``, ``time_throttle`` through ``dds_create_statistics``, as ddsperf does):

- ``blocked``: writes during which Cyclone throttled the writer, i.e. the send queue was
  full; their durations in ``blocked_p50_us``/``blocked_max_us``, the total in
  ``throttle_ms``;
- ``stalls``: other writes that took at least ``--stall-threshold-ms`` (1 ms): the process
  was pre-empted or waited on a lock, not on the queue (on a loaded 2-core machine these
  happen; a VM's are the paper's 30 ms stalls at 0.1 ms intervals);
- the steady state: all other writes (``write_p50_us``, ``write_p99_us``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mcc.bench import perftest, runner
from mcc.bench.perftest import Node, PerfOptions, PubSpec
from mcc.bench.stats import LatencyRecorder

__all__ = ["COLUMNS", "BlockedPlan", "add_parser", "run_blocked"]

DEFAULT_SIZES = (64, 1024, 4096, 10240, 65536)
QUICK_SIZES = (1024,)
DEFAULT_INTERVALS_MS = (1.0, 0.1, 0.0)
QUICK_INTERVALS_MS = (1.0, 0.0)
DEFAULT_DURATION_S = 5.0
QUICK_DURATION_S = 1.0
DEFAULT_THRESHOLD_MS = 1.0
COLUMNS = (
    "impl",
    "size_bytes",
    "interval_ms",
    "writes",
    "blocked",
    "blocked_pct",
    "blocked_p50_us",
    "blocked_max_us",
    "throttle_ms",
    "timeouts",
    "stalls",
    "stall_max_us",
    "write_p50_us",
    "write_p99_us",
    "samples_per_s",
    "lost",
    *runner.NET_COLUMNS,
)
TARGET_INTERVAL_MS = 1.0
TARGET_MAX_SIZE_BYTES = 10240


@dataclass(frozen=True)
class BlockedPlan:
    """What ``mcc bench blocked`` runs."""

    sizes: tuple[int, ...] = DEFAULT_SIZES
    intervals_ms: tuple[float, ...] = DEFAULT_INTERVALS_MS
    duration_s: float = DEFAULT_DURATION_S
    threshold_ms: float = DEFAULT_THRESHOLD_MS
    options: PerfOptions = PerfOptions()

    def __post_init__(self) -> None:
        runner.require(
            bool(self.sizes) and all(1 <= s <= 1 << 24 for s in self.sizes),
            f"--sizes {list(self.sizes)}: use byte counts from 1 to 16 MiB",
        )
        runner.require(
            bool(self.intervals_ms) and all(i >= 0 for i in self.intervals_ms),
            f"--intervals {list(self.intervals_ms)}: use ms >= 0 (0 = flat out)",
        )
        runner.require(self.duration_s > 0, f"--duration {self.duration_s}: use seconds > 0")
        runner.require(
            self.threshold_ms > 0, f"--stall-threshold-ms {self.threshold_ms}: use ms > 0"
        )

    @property
    def rows(self) -> int:
        return len(self.sizes) * len(self.intervals_ms)


def run_blocked(
    plan: BlockedPlan, *, progress: Any = None, nodes: Sequence[Node] | None = None
) -> list[dict[str, Any]]:
    """One row per size × send interval."""
    if nodes is None:
        with perftest.open_network(plan.options.net, 2, name="blk") as opened:
            return run_blocked(plan, progress=progress, nodes=opened)
    rows = []
    for interval in plan.intervals_ms:
        for size in plan.sizes:
            if progress is not None:
                every = "flat out" if not interval else f"every {interval:g} ms"
                progress(f"blocked writes {size} B {every}")
            rows.append(_row(plan, size, interval, nodes))
    return rows


def _row(plan: BlockedPlan, size: int, interval_ms: float, nodes: Sequence[Node]) -> dict[str, Any]:
    row: dict[str, Any] = {
        "impl": "mcc",
        "size_bytes": size,
        "interval_ms": interval_ms,
        "threshold_ms": plan.threshold_ms,
        "duration_s": plan.duration_s,
        **plan.options.row(),
    }
    spec = PubSpec(
        domain=perftest.next_domain(),
        writer_id="p1",
        size_bytes=size,
        rate_hz=1000.0 / interval_ms if interval_ms else 0.0,
        duration_s=plan.duration_s,
        block_threshold_us=plan.threshold_ms * 1000,
        count_throttles=True,
    )
    run = perftest.pubsub_or_error(row, plan.options, nodes, [spec], latency=False)
    if run is None:
        return row
    pub = run.pubs[0]
    writes = pub["sent"]
    result = perftest.throughput_of(run.subs[0], run.sent_samples)
    row.update(
        writes=writes,
        blocked=pub["blocked"],
        blocked_pct=round(100.0 * pub["blocked"] / writes, 3) if writes else None,
        timeouts=pub["timeouts"],
        throttle_ms=round(pub["throttle_ms"], 3),
        throttle_count=pub["throttle_count"],
        stalls=pub["stalls"],
        samples_per_s=round(result.samples_per_s, 1),
        lost=result.lost,
    )
    stats = {
        k: LatencyRecorder.decode(pub[f"{k}_hist"]).stats()
        for k in ("steady", "blocked", "stall")
        if pub[f"{k}_hist"]
    }
    if "steady" in stats:
        s = stats["steady"]
        row.update(write_p50_us=s.p50_us, write_p99_us=s.p99_us, write_steady_max_us=s.max_us)
    if "blocked" in stats:
        row.update(blocked_p50_us=stats["blocked"].p50_us, blocked_max_us=stats["blocked"].max_us)
    if "stall" in stats:
        row["stall_max_us"] = stats["stall"].max_us
    row["write_max_us"] = max((s.max_us for s in stats.values() if s.max_us), default=None)
    return row


def targets(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """At 1 ms intervals no write blocks, for every size up to 10 KiB."""
    relevant = [
        r
        for r in rows
        if r["interval_ms"] == TARGET_INTERVAL_MS
        and r["size_bytes"] <= TARGET_MAX_SIZE_BYTES
        and r.get("writes")
    ]
    blocked = sum(r["blocked"] + r["timeouts"] for r in relevant) if relevant else None
    return [
        runner.target_row(
            f"zero blocked writes at {TARGET_INTERVAL_MS:g} ms intervals, sizes ≤ 10 KiB "
            f"({len(relevant)} rows)",
            blocked,
            0,
            unit=" blocked",
        )
    ]


def notes(plan: BlockedPlan, _rows: object = None) -> str:
    return (
        f"One publisher and one subscriber process, {plan.duration_s:g} s per row, profile "
        f"{plan.options.stream_profile} with a send queue of {plan.options.send_queue} samples "
        "(reliable: keep-all, writes block while that many are unacknowledged, at most 100 ms). "
        "blocked = writes during which Cyclone throttled the writer (its throttle_count rose: "
        "the queue was full), blocked_* their durations, throttle_ms Cyclone's total "
        "time_throttle; timeouts = writes that failed after 100 ms blocked; stalls = other "
        f"writes of ≥ {plan.threshold_ms:g} ms (pre-emption, locks: not the queue); "
        "write_p50/p99 = the remaining steady writes. interval_ms 0 = flat out (the queue "
        "fills by construction). samples_per_s and lost at the subscriber."
    )


def add_parser(bench_subparsers: Any) -> argparse.ArgumentParser:
    """Register ``blocked`` on the ``mcc bench`` sub-command parsers."""
    p: argparse.ArgumentParser = bench_subparsers.add_parser(
        "blocked",
        help="writes that block on a full send queue, counted apart from the steady state",
        description="Time every write of a publisher at 1 ms, 0.1 ms and flat out: how many "
        "block on a full send queue and for how long, beside the steady writes.",
    )
    p.add_argument("--sizes", help="sizes in bytes (default 64,1024,4096,10240,65536)")
    p.add_argument("--intervals", help="send intervals in ms, 0 = flat out (default 1,0.1,0)")
    p.add_argument(
        "--stall-threshold-ms",
        type=float,
        default=DEFAULT_THRESHOLD_MS,
        help="an unthrottled write this long or longer counts as a stall (default %(default)g)",
    )
    MODE.add_options(p, duration_s=(DEFAULT_DURATION_S, QUICK_DURATION_S))
    return p


def plan_from_args(args: argparse.Namespace, options: PerfOptions) -> BlockedPlan:
    from mcc.bench.runner import parse_floats, parse_ints

    return BlockedPlan(
        sizes=parse_ints("--sizes", args.sizes) or (QUICK_SIZES if args.quick else DEFAULT_SIZES),
        intervals_ms=parse_floats("--intervals", args.intervals)
        or (QUICK_INTERVALS_MS if args.quick else DEFAULT_INTERVALS_MS),
        duration_s=args.duration or (QUICK_DURATION_S if args.quick else DEFAULT_DURATION_S),
        threshold_ms=args.stall_threshold_ms,
        options=options,
    )


MODE = runner.PerfMode(
    "blocked",
    plan_from_args=plan_from_args,
    run=run_blocked,
    key=("size_bytes", "interval_ms"),
    metric="samples_per_s",
    higher_is_better=True,
    columns=COLUMNS,
    title=lambda plan, nets: (
        f"blocked writes (send queue {plan.options.send_queue}), {nets} network"
    ),
    notes=notes,
    targets=targets,
)
