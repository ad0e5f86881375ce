"""``mcc bench throughput``: samples/s and MB/s at the subscriber, MCC beside ``ddsperf``.

Each row runs one publisher process and one subscriber process (``python -m
mcc.bench.perftest pub|sub``) on a fresh domain: the publisher writes ``PerfData`` samples of
``size_bytes`` flat out (or at ``--rate``) for ``--duration`` seconds, the subscriber counts
what it takes between its first and last sample. ``lost`` = written − taken (reliable: 0).

Batching, three ways for MCC:

- ``none``: one DDS sample and one packet per write;
- ``cyclone``: Cyclone's write batching (``Internal/WriteBatch``): writes queue in the writer
  until a packet is full, the publisher flushes (``dds_write_flush``) when it sleeps and at
  the end;
- ``app``: ``--app-batch`` logical samples packed into one written sample (what an
  application that sends per-scan batches does); counted as that many samples.

The anchor ``ddsperf pub``/``sub`` always batches its data writer (ddsperf sets the writer
batching QoS), so its rows are labelled ``cyclone``.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mcc.bench import perftest, runner
from mcc.bench.perftest import Node, PerfOptions, PubSpec
from mcc.errors import MccError

__all__ = ["BATCHINGS", "COLUMNS", "ThroughputPlan", "add_parser", "run_throughput"]

BATCHINGS = ("none", "cyclone", "app")
IMPLS = ("mcc", "ddsperf")
DEFAULT_SIZES = (64, 256, 1024, 4096, 10240, 65536)
QUICK_SIZES = (1024,)
DEFAULT_DURATION_S = 5.0
QUICK_DURATION_S = 1.5
DEFAULT_APP_BATCH = 16
COLUMNS = (
    "impl",
    "load",
    "size_bytes",
    "batching",
    "rate_hz",
    "samples_per_s",
    "mb_per_s",
    "received",
    "lost",
    "p50_us",
    "p99_us",
    "ratio_vs_ddsperf",
    *runner.NET_COLUMNS,
)
TARGET_SIZE_BYTES = 1024
TARGET_LARGE_BYTES = 65536
TARGET_PLAIN = 0.75  # samples/s at 1 KiB, no application batching
TARGET_LARGE = 0.75  # bytes/s at 64 KiB


@dataclass(frozen=True)
class ThroughputPlan:
    """What ``mcc bench throughput`` runs."""

    sizes: tuple[int, ...] = DEFAULT_SIZES
    batchings: tuple[str, ...] = BATCHINGS
    impls: tuple[str, ...] = IMPLS
    rate_hz: float = 0.0
    duration_s: float = DEFAULT_DURATION_S
    app_batch: int = DEFAULT_APP_BATCH
    options: PerfOptions = PerfOptions()

    def __post_init__(self) -> None:
        runner.require_choices("--batching", self.batchings, BATCHINGS)
        runner.require_choices("--impl", self.impls, IMPLS)
        runner.require(
            bool(self.sizes) and all(1 <= s <= 1 << 24 for s in self.sizes),
            f"--sizes {list(self.sizes)}: use byte counts from 1 to 16 MiB",
        )
        runner.require(
            self.rate_hz >= 0, f"--rate {self.rate_hz}: use samples/s >= 0 (0 = flat out)"
        )
        runner.require(self.duration_s > 0, f"--duration {self.duration_s}: use seconds > 0")
        runner.require(
            self.app_batch >= 2, f"--app-batch {self.app_batch}: use 2 or more samples per write"
        )

    @property
    def rows(self) -> int:
        mcc = len(self.batchings) if "mcc" in self.impls else 0
        return len(self.sizes) * (mcc + ("ddsperf" in self.impls))


def run_throughput(
    plan: ThroughputPlan, *, progress: Any = None, nodes: Sequence[Node] | None = None
) -> list[dict[str, Any]]:
    """One row per size × (MCC batching | ddsperf); ratios to ddsperf at the same size."""
    if nodes is None:
        with perftest.open_network(plan.options.net, 2, name="tput") as opened:
            return run_throughput(plan, progress=progress, nodes=opened)
    rows: list[dict[str, Any]] = []
    for size in plan.sizes:
        group = []
        if "mcc" in plan.impls:
            for batching in plan.batchings:
                if progress is not None:
                    progress(f"throughput mcc {size} B, batching {batching}")
                group.append(_mcc_row(plan, size, batching, nodes))
        if "ddsperf" in plan.impls:
            if progress is not None:
                progress(f"throughput ddsperf {size} B")
            group.append(_ddsperf_row(plan, size, nodes))
        anchor = next((r for r in group if r["impl"] == "ddsperf" and r.get("samples_per_s")), None)
        for row in group:
            if anchor is not None and row.get("samples_per_s"):
                row["ratio_vs_ddsperf"] = round(row["samples_per_s"] / anchor["samples_per_s"], 3)
        rows += group
    return rows


def _base_row(plan: ThroughputPlan, impl: str, size: int, batching: str) -> dict[str, Any]:
    return {
        "impl": impl,
        "size_bytes": size,
        "batching": batching,
        "app_batch": plan.app_batch if batching == "app" else None,
        "rate_hz": plan.rate_hz,
        "duration_s": plan.duration_s,
        **plan.options.row(),
    }


def _mcc_row(
    plan: ThroughputPlan, size: int, batching: str, nodes: Sequence[Node]
) -> dict[str, Any]:
    row = _base_row(plan, "mcc", size, batching)
    batch = plan.app_batch if batching == "app" else 1
    spec = PubSpec(
        domain=perftest.next_domain(),
        writer_id="p1",
        size_bytes=size,
        rate_hz=plan.rate_hz / batch,
        duration_s=plan.duration_s,
    )
    run = perftest.pubsub_or_error(
        row, plan.options, nodes, [spec], batch=batch, write_batching=batching == "cyclone"
    )
    if run is None:
        return row
    result = perftest.throughput_of(run.subs[0], run.sent_samples, batch)
    row.update(
        samples_per_s=round(result.samples_per_s, 1),
        mb_per_s=round(result.mb_per_s, 3),
        received=result.received,
        lost=result.lost,
        sent=run.sent_samples,
        pub_samples_per_s=round(run.sent_samples / run.pubs[0]["seconds"], 1),
        blocked_writes=run.pubs[0]["blocked"],
    )
    if result.latency is not None:
        stats = result.latency.stats()
        row.update(p50_us=stats.p50_us, p99_us=stats.p99_us, max_us=stats.max_us)
    return row


def _ddsperf_row(plan: ThroughputPlan, size: int, nodes: Sequence[Node]) -> dict[str, Any]:
    from mcc.bench.anchors import DDSPERF_MIN_SIZE_BYTES, run_ddsperf_throughput

    row = _base_row(plan, "ddsperf", size, "cyclone")
    row["keyed"] = True
    sent = max(size, DDSPERF_MIN_SIZE_BYTES)
    pub_config, sub_config = perftest.anchor_configs(
        plan.options, nodes, extra_xml=perftest.queue_xml(plan.options.send_queue, sent)
    )
    try:
        result = run_ddsperf_throughput(
            size_bytes=sent,
            duration_s=plan.duration_s,
            domain_id=perftest.next_domain(),
            reliable=plan.options.reliable,
            rate_hz=plan.rate_hz,
            pub_config=pub_config,
            sub_config=sub_config,
            pub_prefix=nodes[0].argv([]),
            sub_prefix=nodes[-1].argv([]),
        )
    except MccError as exc:
        row["error"] = perftest.error_line(exc)
        return row
    row.update(dataclasses.asdict(result))
    if nodes[0].netns is None:
        row["multicast"] = False  # ddsperf 0.10 does not multicast over lo: unicast
    if sent != size:
        row["sent_size_bytes"] = sent
    return row


def targets(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Throughput against ddsperf's: samples/s at 1 KiB without application batching (plain
    writes, and Cyclone's write batching), bytes/s at 64 KiB; quiet rows (``--load``'s
    loaded rows are for reading beside them)."""
    rows = [r for r in rows if r.get("load") in (None, "none") and r["impl"] == "mcc"]
    ratios = {(r["size_bytes"], r["batching"]): r.get("ratio_vs_ddsperf") for r in reversed(rows)}
    small, large = f"{TARGET_SIZE_BYTES // 1024} KiB", f"{TARGET_LARGE_BYTES // 1024} KiB"
    whats = (
        f"at {small} ≥ {TARGET_PLAIN:.0%} of ddsperf's samples/s (plain writes)",
        f"at {small} ≥ {TARGET_PLAIN:.0%} of ddsperf's, Cyclone write batching",
        f"at {large} ≥ {TARGET_LARGE:.0%} of ddsperf's bytes/s (plain writes)",
    )
    keys = (
        (TARGET_SIZE_BYTES, "none"),
        (TARGET_SIZE_BYTES, "cyclone"),
        (TARGET_LARGE_BYTES, "none"),
    )
    limits = (TARGET_PLAIN, TARGET_PLAIN, TARGET_LARGE)
    return [
        runner.target_row(f"throughput {what}", ratios.get(key), limit, unit="×", at_least=True)
        for what, key, limit in zip(whats, keys, limits, strict=True)
    ]


def notes(plan: ThroughputPlan, _rows: object = None) -> str:
    rate = "flat out" if not plan.rate_hz else f"at {plan.rate_hz:g} samples/s"
    return (
        f"One publisher and one subscriber process, {rate}, {plan.duration_s:g} s per row, "
        f"profile {plan.options.stream_profile} (send queue {plan.options.send_queue}). "
        "samples_per_s and mb_per_s at the subscriber between its first and last sample; "
        "lost = written − taken; p50/p99 = one-way latency of the samples at that load "
        "(queueing included). "
        "batching: none | cyclone (Internal/WriteBatch + dds_write_flush) | app "
        f"({plan.app_batch} samples per written sample, counted as {plan.app_batch}). ddsperf "
        "always batches its writer (writer-batching QoS), keeps all (10000 samples), KS topic "
        "(sizes include its 12-byte fixed part). Both sides get Cyclone's byte watermarks "
        "sized to the send queue's bytes (perftest.queue_xml). ratio_vs_ddsperf = samples/s over "
        "ddsperf's at the same size."
    )


def add_parser(bench_subparsers: Any) -> argparse.ArgumentParser:
    """Register ``throughput`` on the ``mcc bench`` sub-command parsers."""
    p: argparse.ArgumentParser = bench_subparsers.add_parser(
        "throughput",
        help="samples/s and MB/s at the subscriber: mcc (with/without batching) vs ddsperf",
        description="Publisher and subscriber processes, flat out or at a rate, per size: "
        "samples/s, MB/s and lost samples at the subscriber, with Cyclone write batching, "
        "app-level batching and none, beside ddsperf pub/sub.",
    )
    p.add_argument("--sizes", help="sizes in bytes (default 64,256,1024,4096,10240,65536)")
    p.add_argument("--rate", type=float, default=0.0, help="samples/s, 0 = flat out (default)")
    p.add_argument(
        "--batching",
        default=",".join(BATCHINGS),
        help="MCC batching modes (default %(default)s)",
    )
    p.add_argument(
        "--app-batch",
        type=int,
        default=DEFAULT_APP_BATCH,
        help="samples per written sample with app batching (default %(default)s)",
    )
    MODE.add_options(p, impls=IMPLS, duration_s=(DEFAULT_DURATION_S, QUICK_DURATION_S))
    runner.add_load_option(p)
    return p


def plan_from_args(args: argparse.Namespace, options: PerfOptions) -> ThroughputPlan:
    from mcc.bench.runner import parse_ints

    return ThroughputPlan(
        sizes=parse_ints("--sizes", args.sizes) or (QUICK_SIZES if args.quick else DEFAULT_SIZES),
        batchings=runner.parse_names(args.batching),
        impls=runner.parse_names(args.impl),
        rate_hz=args.rate,
        duration_s=args.duration or (QUICK_DURATION_S if args.quick else DEFAULT_DURATION_S),
        app_batch=args.app_batch,
        options=options,
    )


MODE = runner.PerfMode(
    "throughput",
    plan_from_args=plan_from_args,
    run=run_throughput,
    key=("impl", "load", "size_bytes", "batching"),
    metric="samples_per_s",
    higher_is_better=True,
    columns=COLUMNS,
    title=lambda plan, nets: (
        f"throughput at the subscriber, {nets} network, {plan.options.transport}"
    ),
    notes=notes,
    targets=targets,
)
