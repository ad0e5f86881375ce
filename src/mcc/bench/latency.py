"""``mcc bench latency``: ping-pong one-way latency (RTT/2) of MCC's bus beside its anchors.

MCC's side: the ping process writes a ``PerfSample`` (or ``PerfKeyedSample`` with ``--keyed``)
on ``PerfPing`` and takes the echo on ``PerfPong``; the pong process echoes every sample it
takes. Both use the perftest profiles (``perf_reliable`` / ``perf_best_effort``, with the send
queue of :func:`mcc.bench.perftest.perf_qos_file`) and the same transport as the anchors, so
rows compare like with like. RTT is measured with the ping process's monotonic clock; the
first ``warmup`` round trips are not recorded. With a send interval the next ping leaves at
the next multiple of the interval (or right after the echo when that is later); without, right
after the echo.

Anchors in the same run, per size and interval: Cyclone's C ``ddsperf`` ping/pong, ``sockperf``
UDP (or TCP) ping-pong and an MPI ping-pong (``mpi4py``, host network, flat out only). With
``--peer fastdds|cyclone-c`` a row of mcc pinging the echo of a foreign peer (``make interop``).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mcc.bench import perftest, runner
from mcc.bench.latency_pingpong import main, mcc_pingpong, run_mcc_pingpong
from mcc.bench.latency_rows import (
    PEERS,
    RowSpec,
    ddsperf_row,
    mpi_meaningful,
    mpi_row,
    peer_pingpong,
    sockperf_row,
)
from mcc.bench.perftest import Node, PerfOptions
from mcc.errors import MccError

__all__ = [
    "COLUMNS",
    "DEFAULT_IMPLS",
    "DEFAULT_INTERVALS_MS",
    "DEFAULT_SIZES",
    "IMPLS",
    "add_parser",
    "main",
    "mcc_pingpong",
    "run_latency",
    "run_mcc_pingpong",
]

DEFAULT_SIZES = (1, 64, 256, 1024, 4096, 10240, 65536)
QUICK_SIZES = (64,)
DEFAULT_INTERVALS_MS = (0.0, 1.0, 0.1)
QUICK_INTERVALS_MS = (0.0, 1.0)
IMPLS = (
    "mcc",  # the echo in an inline on_data handler (Cyclone's receive thread, as ddsperf's)
    "mcc-dispatcher",  # the echo in an on_data handler on the bus's dispatcher thread
    "mcc-waitset",  # the echo in a waitset loop of the bench's own thread
    "ddsperf",
    "sockperf",
    "mpi",
    "mcc-secure",  # mcc with DDS Security, signed and encrypted
    "ddsperf-11",  # ddsperf of MCC's own Cyclone build (11.0.1), the secured anchor's baseline
    "ddsperf-secure",  # that ddsperf with the same governance as mcc-secure
    "fastdds",  # mcc pinging the Fast DDS peer's echo (interop/fastdds, make interop)
    "cyclone-c",  # mcc pinging the Cyclone C peer's echo (interop/c, make interop)
)
#: The mcc rows and how each side handles a sample (`mcc.bench.latency_pingpong.MODES`).
MCC_MODES = {
    "mcc": "inline",
    "mcc-dispatcher": "listener",
    "mcc-waitset": "waitset",
    "mcc-secure": "inline",
}
SECURITY_IMPLS = ("mcc-secure", "ddsperf-11", "ddsperf-secure")
DEFAULT_IMPLS = ("mcc", "ddsperf", "sockperf", "mpi")
DEFAULT_COUNT = 100_000
QUICK_COUNT = 2_000
DEFAULT_MAX_DURATION_S = 5.0
QUICK_MAX_DURATION_S = 1.0
COLUMNS = (
    "impl",
    "load",
    "size_bytes",
    "interval_ms",
    "count",
    "lost",
    "p50_us",
    "p90_us",
    "p99_us",
    "p999_us",
    "max_us",
    "mean_us",
    "stdev_us",
    "ratio_p50_vs_ddsperf",
    "ratio_p99_vs_ddsperf",
    "ping_timeouts",
    "net",
    "efficiency_vs_host",
    "error",
)
# -- the bench: MCC and the anchors, row by row ---------------------------------------------------


@dataclass(frozen=True)
class LatencyPlan:
    """What ``mcc bench latency`` runs."""

    sizes: tuple[int, ...] = DEFAULT_SIZES
    intervals_ms: tuple[float, ...] = DEFAULT_INTERVALS_MS
    impls: tuple[str, ...] = DEFAULT_IMPLS
    count: int = DEFAULT_COUNT
    max_duration_s: float = DEFAULT_MAX_DURATION_S
    options: PerfOptions = PerfOptions()

    def __post_init__(self) -> None:
        unknown = sorted(set(self.impls) - set(IMPLS))
        if unknown or not self.impls:
            raise MccError(
                f"--impl: unknown implementation(s) {unknown}; choose from {list(IMPLS)}"
            )
        if not self.sizes or any(s < 1 or s > 1 << 24 for s in self.sizes):
            raise MccError(f"--sizes {list(self.sizes)}: use byte counts from 1 to 16 MiB")
        if not self.intervals_ms or any(not i >= 0 for i in self.intervals_ms):
            raise MccError(
                f"--intervals {list(self.intervals_ms)}: use milliseconds >= 0 (0 = flat out)"
            )
        if self.count < 1:
            raise MccError(f"--count {self.count}: use 1 or more round trips")
        if not self.max_duration_s > 0:
            raise MccError(f"--duration {self.max_duration_s}: use seconds > 0")

    def impls_at(self, interval_ms: float) -> list[str]:
        """The implementations that run at this interval (MPI only where it means something)."""
        return [i for i in self.impls if i != "mpi" or mpi_meaningful(self.options, interval_ms)]

    @property
    def rows(self) -> int:
        return len(self.sizes) * sum(len(self.impls_at(i)) for i in self.intervals_ms)


def run_latency(
    plan: LatencyPlan, *, progress: Any = None, nodes: Sequence[Node] | None = None
) -> list[dict[str, Any]]:
    """Rows of one-way latency for every size, interval and implementation, side by side.

    ``progress(text)`` is called before each row. ``nodes`` (two) place the processes; by
    default the plan's network is opened here (a NetLab for ``netns``) and closed after.
    """
    if nodes is None:
        with perftest.open_network(plan.options.net, 2, name="lat") as opened:
            return run_latency(plan, progress=progress, nodes=opened)
    rows: list[dict[str, Any]] = []
    for size in plan.sizes:
        for interval in plan.intervals_ms:
            group = []
            for impl in plan.impls_at(interval):
                if progress is not None:
                    every = "ASAP" if interval == 0 else f"{interval:g} ms"
                    progress(f"latency {impl} {size} B every {every}")
                group.append(_latency_row(plan, impl, size, interval, nodes))
            _add_ratios(group)
            rows += group
    return rows


def _latency_row(
    plan: LatencyPlan, impl: str, size: int, interval_ms: float, nodes: Sequence[Node]
) -> dict[str, Any]:
    options = plan.options
    row: dict[str, Any] = {
        "impl": impl,
        "size_bytes": size,
        "interval_ms": interval_ms,
        **options.row(),
    }
    domain = perftest.next_domain()
    duration_s = plan.max_duration_s

    def at(options: PerfOptions) -> RowSpec:
        return RowSpec(options, nodes, size, interval_ms, duration_s, domain)

    try:
        if impl in MCC_MODES or impl in PEERS:
            if impl == "mcc-secure":
                options = dataclasses.replace(options, security=True)
            if impl in PEERS:
                result = peer_pingpong(at(options), impl, plan.count)
                row["multicast"] = False
            else:
                result = mcc_pingpong(
                    options,
                    nodes,
                    size_bytes=size,
                    duration_s=duration_s,
                    domain_id=domain,
                    max_samples=plan.count,
                    mode=MCC_MODES[impl],
                    interval_ms=interval_ms,
                )
            row.update(result.stats().as_row())
            row["cdf_us"] = result.recorder.cdf()
            if result.crashes:  # attempts lost to a crash of Cyclone's TCP receive thread
                row["crashes"] = result.crashes
        elif impl in ("ddsperf", "ddsperf-11", "ddsperf-secure"):
            row["keyed"] = True  # ddsperf's sized topic (KS) is keyed; one instance
            if impl != "ddsperf":
                options = dataclasses.replace(options, security=impl == "ddsperf-secure")
            own = impl != "ddsperf"  # MCC's Cyclone build: the same library as mcc's rows
            row.update(ddsperf_row(at(options), own))
        else:  # sockperf and MPI: no DDS QoS
            row.update({"reliable": None, "keyed": None, "multicast": None, "send_queue": None})
            r = at(options)
            row.update(sockperf_row(r) if impl == "sockperf" else mpi_row(r, plan.count))
    except MccError as exc:
        row["error"] = str(exc).splitlines()[0][:300]
    return row


def _add_ratios(group: list[dict[str, Any]]) -> None:
    def measured(impl: str) -> dict[str, Any] | None:
        return next((r for r in group if r["impl"] == impl and r.get("p50_us")), None)

    def ratio(row: dict[str, Any], base: dict[str, Any], vs: str) -> None:
        for pct in ("p50", "p99"):
            row[f"ratio_{pct}_vs_{vs}"] = round(row[f"{pct}_us"] / base[f"{pct}_us"], 2)

    # The secured rows against their unsecured selves: the cost of security.
    for secure, plain in (("mcc-secure", "mcc"), ("ddsperf-secure", "ddsperf-11")):
        a, b = measured(secure), measured(plain)
        if a is not None and b is not None:
            ratio(a, b, "unsecured")
    if (anchor := measured("ddsperf")) is not None:
        for row in group:
            if row.get("p50_us"):
                ratio(row, anchor, "ddsperf")


# -- targets and the command --------------------------------------------------------------------

P50_TARGET = 1.5
P99_TARGET = 1.5
# Beside the CPU load of ``--load`` (one busy process per core), ddsperf measured under the
# same load.
LOADED_P50_TARGET = 2.5
LOADED_P99_TARGET = 3.0
TARGET_SIZE_BYTES = 64
TARGET_INTERVALS_MS = (0.0, 1.0)  # flat out and one ping a millisecond


def targets(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The latency targets, met or missed, from the 64 B rows of this run (flat out and at
    a 1 ms interval; with ``--load``, flat out under the load too)."""
    from mcc.bench.runner import target_row

    quiet = [r for r in rows if r.get("load") in (None, "none")]
    loaded = [r for r in rows if r.get("load") == "cpu"]
    out = []
    checks = [(quiet, i, "", P50_TARGET, P99_TARGET) for i in TARGET_INTERVALS_MS]
    if loaded:
        checks.append((loaded, 0.0, ", under CPU load", LOADED_P50_TARGET, LOADED_P99_TARGET))
    for group, interval, under, p50, p99 in checks:
        key = ("mcc", TARGET_SIZE_BYTES, interval)
        mcc = next(
            (r for r in group if (r["impl"], r["size_bytes"], r["interval_ms"]) == key), None
        )
        when = ("flat out" if not interval else f"every {interval:g} ms") + under
        for pct, target in (("p50", p50), ("p99", p99)):
            out.append(
                target_row(
                    f"latency {pct} at {TARGET_SIZE_BYTES} B {when} ≤ {target:g}× ddsperf's",
                    mcc.get(f"ratio_{pct}_vs_ddsperf") if mcc else None,
                    target,
                    unit="×",
                )
            )
    reliable = [r for r in rows if r["impl"] == "mcc" and r.get("reliable") and r.get("count")]
    if reliable:
        lost = sum(r["lost"] for r in reliable)
        out.append(
            target_row(
                "zero lost samples when reliable (all mcc latency rows)", lost, 0, unit=" lost"
            )
        )
    return out


def notes(rows: Sequence[dict[str, Any]], options: PerfOptions) -> str:
    return (
        "One-way latency = RTT/2 (µs). interval_ms 0 = next ping right after the echo. "
        "mcc: PerfSample"
        + (" (keyed: PerfKeyedSample)" if options.keyed else "")
        + f" on profile {options.profile} (send queue {options.send_queue}), echo and next "
        "ping in inline on_data handlers (on Cyclone's receive thread, as ddsperf's listener); "
        "mcc-dispatcher: in on_data handlers on the bus's dispatcher thread; mcc-waitset: in "
        "a waitset loop of the bench's own thread; ddsperf: KS topic (keyed, one instance; "
        "sizes below 12 B sent as 12 B), "
        "percentiles per second combined count-weighted; sockperf: "
        f"{options.transport.upper()} ping-pong (sizes below 14 B sent as 14 B); mpi: mpi4py "
        "Send/Recv between two ranks (MPICH, shared memory). count may stop short of --count "
        "when a row reaches --duration. ratio_* = this row's percentile / ddsperf's, same "
        "size and interval. lost: pings without an echo after 2 s (reliable; a later echo "
        "is waited for and counted) or 100 ms (best effort); ping_timeouts: ddsperf's count of "
        "pongs not back when the next ping was due (at a rate, late pongs; not losses)."
    )


def add_parser(bench_subparsers: Any) -> argparse.ArgumentParser:
    """Register ``latency`` on the ``mcc bench`` sub-command parsers."""
    p: argparse.ArgumentParser = bench_subparsers.add_parser(
        "latency",
        help="one-way latency (RTT/2): mcc vs ddsperf vs sockperf vs MPI",
        description="Ping-pong between two processes over mcc.bus, Cyclone's ddsperf, "
        "sockperf and MPI, in the same run: per size and send interval, percentiles from an "
        "HDR histogram and the ratio to ddsperf.",
    )
    p.add_argument(
        "--sizes",
        help="payload sizes in bytes, comma-separated (default "
        f"{','.join(map(str, DEFAULT_SIZES))}; quick {','.join(map(str, QUICK_SIZES))})",
    )
    p.add_argument(
        "--intervals",
        help="send intervals in ms, 0 = as fast as possible (default 0,1,0.1; quick 0,1)",
    )
    p.add_argument(
        "--count",
        type=int,
        help=f"round trips per row (default {DEFAULT_COUNT}, quick {QUICK_COUNT})",
    )
    p.add_argument(
        "--duration",
        type=float,
        help=f"at most this many seconds per row (default {DEFAULT_MAX_DURATION_S:g}, quick "
        f"{QUICK_MAX_DURATION_S:g}); anchors run this long",
    )
    p.add_argument(
        "--impl",
        default=",".join(DEFAULT_IMPLS),
        help="implementations (default %(default)s; also mcc-dispatcher, mcc-waitset); choose "
        f"from {','.join(IMPLS)}",
    )
    p.add_argument(
        "--security",
        action="store_true",
        help="add rows over DDS Security (signed and encrypted): mcc-secure beside mcc, "
        "and ddsperf-secure beside ddsperf-11 (MCC's own Cyclone build), same governance",
    )
    p.add_argument(
        "--peer",
        action="append",
        choices=sorted(PEERS),
        default=[],
        help="add a row of mcc pinging a foreign echo: the Fast DDS or Cyclone C peer of "
        "`make interop` (host network, loopback; docs/interop.md)",
    )
    perftest.add_common_options(p)
    runner.add_load_option(p)
    p.set_defaults(func=MODE.command)
    return p


def plan_from_args(args: argparse.Namespace) -> LatencyPlan:
    from mcc.bench.runner import parse_floats, parse_ints

    return LatencyPlan(
        sizes=parse_ints("--sizes", args.sizes) or (QUICK_SIZES if args.quick else DEFAULT_SIZES),
        intervals_ms=parse_floats("--intervals", args.intervals)
        or (QUICK_INTERVALS_MS if args.quick else DEFAULT_INTERVALS_MS),
        impls=tuple(i.strip() for i in args.impl.split(",") if i.strip())
        + (SECURITY_IMPLS if args.security else ())
        + tuple(getattr(args, "peer", None) or ()),
        count=args.count or (QUICK_COUNT if args.quick else DEFAULT_COUNT),
        max_duration_s=args.duration
        or (QUICK_MAX_DURATION_S if args.quick else DEFAULT_MAX_DURATION_S),
        options=perftest.options_from_args(args),
    )


MODE = runner.PerfMode(
    "latency",
    plan_from_args=lambda args, options: dataclasses.replace(plan_from_args(args), options=options),
    run=run_latency,
    rows=lambda plan: plan.rows,
    key=("impl", "load", "size_bytes", "interval_ms"),
    metric="p50_us",
    higher_is_better=False,
    columns=COLUMNS,
    title=lambda plan, nets: (
        f"one-way latency (RTT/2), {nets} network, {plan.options.transport}, µs"
    ),
    notes=lambda plan, rows: notes(rows, plan.options),
    targets=targets,
)
run_mode = MODE.run_mode


if __name__ == "__main__":  # `python -m mcc.bench.latency ping|pong` (docs/benchmarks.md)
    sys.exit(main())
