"""``mcc bench hpc``: the DDS task farm against MPI, side by side in one run.

Four measurements, each on both implementations (``mcc.hpc.jobs``), same algorithm and chunking:

1. **primes vs workers**: [1, N] with 1, 2 and 4 workers (4 oversubscribes a 2-core host);
2. **primes vs N**: 2 workers, N over two decades;
3. **stream vs chunk size**: a buffer sent to another process and back (one bulk transfer each
   way, ``mcc.bus.bulk``), one-way MB/s, over UDP as missions run, signed and encrypted
   (``dds``), over UDP with ``security: none`` (``dds-plain``) and over iceoryx shared memory
   (``dds-shm``); MPI runs twice, as configured by default (shared memory between ranks of one
   host) and over TCP (``mpi-tcp``, the path two nodes would use); ``ddsperf`` is Cyclone's own
   C tool publishing samples of the chunk's size flat out (one way, same Cyclone settings as
   the stream's UDP), the transport's ceiling: Debian's (``ddsperf``), MCC's own Cyclone build
   (``ddsperf-11``) and that build with DDS Security, signed and encrypted with the bench's
   identities (``ddsperf-secure``), the anchor of the secured ``dds`` row.
   ``secured_vs_plain`` is the share of its rate a side keeps under DDS Security (``dds`` /
   ``dds-plain``, ``ddsperf-secure`` / ``ddsperf-11``);
4. **recovery**: a worker killed (``kill -9``) once 40 % of the results are in. DDS: the
   orchestrator restarts it under the same identity, it reads its checkpoint back through the
   persistence service and the master re-issues what it left unfinished. MPI: the job aborts
   and runs again from the start (MPI has no way to replace a rank).
   ``recovery_s`` = median over the runs of (runtime with the kill − runtime of the undisturbed
   run just before it, same N, W and items); ``replacement_s`` = kill → the replacement's
   hello at the master (DDS) or → the rerun's first item (MPI).

Clocks (``mcc.hpc.base``): ``runtime_s`` from the first work item sent to the last result
received, measured by the job's master on both; ``launch_s`` (processes, bus or MPI start,
workers ready: DDS's master also waits for its item writer to match the workers' readers)
apart. Each figure is the median of ``--repeats`` runs, DDS and MPI interleaved.
``ratio_vs_mpi``: the median over the repeats of DDS runtime / MPI runtime of the MPI run right
after it (primes: pairs cancel drift in the host's load), DDS MB/s / MPI MB/s (stream).
Targets: primes ratio ≤ 1.05; stream over shm ≥ 0.5 of MPI's shared memory, over UDP ≥ 0.9 of
ddsperf at 64 KiB (unsecured against unsecured, secured against secured), shm faster than UDP
from 64 KiB, under DDS Security no less of its rate kept than ddsperf keeps; recovery < 0.5 s
with no lost or duplicate items.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcc.bench import report, runner
from mcc.errors import MccError
from mcc.hpc.base import JobResult
from mcc.hpc.primes import PrimeCount, base_primes, count_primes, isqrt

if TYPE_CHECKING:
    from mcc.bus.transport import ScratchDomains

COLUMNS = (
    "impl",
    "app",
    "workers",
    "n",
    "chunk_kib",
    "launch_s",
    "runtime_s",
    "mb_per_s",
    "recovery_s",
    "replacement_s",
    "lost_items",
    "duplicate_items",
    "reissued_items",
    "ratio_vs_mpi",
    "ratio_vs_ddsperf",
    "ratio_vs_ddsperf_secure",
    "ratio_vs_udp",
    "secured_vs_plain",
    "correct",
)
_KIB = 1 << 10
#: Checkpoint period of the recovery runs' workers (DDS): a killed worker loses at most this.
CHECKPOINT_INTERVAL_S = 0.05
_GIB = 1 << 30
#: How long the ddsperf anchor publishes (its first second, ramp-up, is not counted).
DDSPERF_SECONDS = 5.0
#: The ddsperf anchors of a stream: Debian's, MCC's own Cyclone build, and that build secured.
DDSPERF_IMPLS = ("ddsperf", "ddsperf-11", "ddsperf-secure")
_DDS_STREAMS = ("dds", "dds-plain", "dds-shm")
_MPI = (("ratio_vs_mpi", "mpi"), ("ratio_vs_mpi_tcp", "mpi-tcp"))
#: Each stream's ratios (column, anchor): the secured DDS one against ddsperf secured alike,
#: the plain one against ddsperf, shared memory against ddsperf and against the secured UDP;
#: ``secured_vs_plain``: the cost of DDS Security, each side (MCC, ddsperf) on its own.
_STREAM_ANCHORS = {
    "dds": (
        *_MPI,
        ("ratio_vs_ddsperf_secure", "ddsperf-secure"),
        ("secured_vs_plain", "dds-plain"),
    ),
    "dds-plain": (*_MPI, ("ratio_vs_ddsperf", "ddsperf"), ("ratio_vs_ddsperf_11", "ddsperf-11")),
    "dds-shm": (*_MPI, ("ratio_vs_ddsperf", "ddsperf"), ("ratio_vs_udp", "dds")),
    "ddsperf-secure": (("secured_vs_plain", "ddsperf-11"),),
}


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one invocation measures; the defaults are the full run (`FULL`)."""

    workers: tuple[int, ...] = (1, 2, 4)
    n_workers: int = 1_000_000_000  # N of the workers sweep
    ns: tuple[int, ...] = (10_000_000, 100_000_000, 1_000_000_000)  # the N sweep (2 workers)
    stream_bytes: int = _GIB
    chunks_kib: tuple[int, ...] = (64, 256, 1024, 4096)
    stream_impls: tuple[str, ...] = (*_DDS_STREAMS, "mpi", "mpi-tcp", *DDSPERF_IMPLS)
    recovery_n: int = 500_000_000
    recovery_workers: int = 2
    recovery_items: int = 8  # few, long items: a kill lands inside one
    repeats: int = 5
    kill_repeats: int = 5
    stream_repeats: int = 3


FULL = Plan()
QUICK = Plan(
    workers=(1, 2),
    n_workers=20_000_000,
    ns=(),
    stream_bytes=_GIB // 32,
    chunks_kib=(64,),
    # items of 2.5e8 numbers: long enough that the kill lands after two mid-item checkpoints
    recovery_n=1_000_000_000,
    recovery_items=4,
    repeats=1,
    kill_repeats=1,
    stream_repeats=1,
)


def add_parser(bench_subparsers: Any) -> None:
    parser = report.add_bench_parser(
        bench_subparsers,
        "hpc",
        help="DDS task farm vs MPI: primes runtime, streaming MB/s, recovery from a kill",
        description="The fault-tolerant task farm on the bus against mpi4py + MPICH, same "
        "algorithm and chunking, in one run: primes runtime vs workers and vs N, streaming "
        "MB/s vs chunk size, and the delay a killed and replaced worker adds.",
        func=cmd_hpc,
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat (< 1 min)")
    parser.add_argument(
        "--repeats", type=int, help="runs per figure (default 5, streams 3; quick 1)"
    )
    runner.add_load_option(parser)


def cmd_hpc(args: argparse.Namespace) -> int:
    plan = QUICK if args.quick else FULL
    if args.repeats is not None:
        if args.repeats < 1:
            raise MccError(f"--repeats {args.repeats}: give at least 1")
        plan = dataclasses.replace(
            plan, repeats=args.repeats, kill_repeats=args.repeats, stream_repeats=args.repeats
        )
    with runner.beside_load(args) as loaded:  # --load: beside mcc bench load's CPU load
        rows = loaded(run_hpc(plan, progress=lambda text: print(text, flush=True)))
    doc = report.document("hpc", rows, command=runner.command_line("hpc"))
    report.print_table("DDS task farm vs MPI", rows, COLUMNS)
    notes = summary(rows)
    print(notes)
    if args.json:
        print(f"wrote {report.write_json(doc, args.json)}")
    if args.record:
        report.record(doc, COLUMNS, notes=NOTES + "\n\n" + notes)
    return 0


NOTES = (
    "runtime_s: first work item sent → last result received (the job's master, both impls); "
    "launch_s apart (DDS: supervisor, fork server, bus, persistence service; MPI: mpiexec, "
    "MPI_Init). Stream: one-way MB/s = 2 × bytes / (first chunk sent → last chunk back). "
    "recovery_s: median of (runtime with one worker killed at 40 % − runtime of the undisturbed "
    "run just before it); "
    "replacement_s: kill → the replacement's hello (DDS) or the rerun's first item (MPI). "
    "Method: docs/hpc.md."
)


def _median(values: Sequence[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return round(statistics.median(got), 4) if got else None


def run_hpc(
    plan: Plan, *, progress: Callable[[str], None] = lambda _: None
) -> list[dict[str, Any]]:
    """Every row of the plan (the JSON's ``rows``)."""
    from mcc.bus.transport import ScratchDomains
    from mcc.hpc.jobs import run_primes

    # a fresh domain per DDS job: a killed worker lingers until its lease expires
    domains = ScratchDomains()
    rows: list[dict[str, Any]] = []
    references: dict[int, PrimeCount] = {}
    with tempfile.TemporaryDirectory(prefix="mcc-bench-hpc-") as tmp:
        home = Path(tmp) / "home"  # the jobs' agents and records: apart from the user's
        sweep = [(w, plan.n_workers) for w in plan.workers]
        sweep += [(2, n) for n in plan.ns if (2, n) not in sweep]
        for workers, n in sweep:
            expected = references.setdefault(n, _reference(n))
            results: dict[str, list[JobResult]] = {"dds": [], "mpi": []}
            for _ in range(plan.repeats):
                for impl in ("dds", "mpi"):
                    progress(f"primes {impl}: n={n} workers={workers}")
                    results[impl].append(
                        run_primes(impl, n=n, workers=workers, domain=next(domains), home=home)
                    )
            rows += _primes_rows(results, workers, n, expected)
        rows += _recovery_rows(plan, domains, references, progress, home=home)
        rows += _stream_rows(plan, domains, progress, home=home)
    return rows


def _reference(n: int) -> PrimeCount:
    """The answer, computed here in one process (the same kernel, no farm)."""
    return count_primes(1, n + 1, base_primes(isqrt(n)))


def _job_row(
    impl: str,
    app: str,
    workers: int,
    n: int,
    runs: Sequence[JobResult],
    counted: Sequence[JobResult],
    expected: PrimeCount,
) -> dict[str, Any]:
    """The fields of a primes row: medians over the ``counted`` runs, totals and checks over
    all ``runs``."""
    return {
        "impl": impl,
        "app": app,
        "workers": workers,
        "n": n,
        "launch_s": _median([r.launch_s for r in counted]),
        "runtime_s": _median([r.runtime_s for r in counted]),
        "lost_items": sum(r.lost_items for r in runs),
        # Items counted twice: the master drops repeated results (``duplicate_results`` counts
        # those); a count above the true one would be a duplicate that got through.
        "duplicate_items": sum(1 for r in runs if (r.count or 0) > expected.count),
        "correct": all((r.count, r.largest) == (expected.count, expected.largest) for r in runs),
        "repeats": len(counted),
    }


def _primes_rows(
    results: dict[str, list[JobResult]], workers: int, n: int, expected: PrimeCount
) -> list[dict[str, Any]]:
    rows = {
        impl: _job_row(impl, "primes", workers, n, runs, runs, expected)
        for impl, runs in results.items()
    }
    pairs = zip(results["dds"], results["mpi"], strict=True)
    ratios = [d.runtime_s / m.runtime_s for d, m in pairs if d.runtime_s and m.runtime_s]
    if ratios:
        rows["dds"]["ratio_vs_mpi"] = round(statistics.median(ratios), 3)
    return list(rows.values())


def _recovery_rows(
    plan: Plan,
    domains: ScratchDomains,
    references: dict[int, PrimeCount],
    progress: Callable[[str], None],
    *,
    home: Path,
) -> list[dict[str, Any]]:
    from mcc.hpc.jobs import KillPlan, run_primes

    n, workers, items = plan.recovery_n, plan.recovery_workers, plan.recovery_items
    expected = references.setdefault(n, _reference(n))
    kill = KillPlan(worker=workers - 1, at_fraction=0.4, mid_item=True)
    rows = []
    for impl in ("dds", "mpi"):
        common: dict[str, Any] = {"n": n, "workers": workers, "items": items}
        if impl == "dds":
            common["checkpoint_interval_s"] = CHECKPOINT_INTERVAL_S
        base: list[float] = []
        killed: list[JobResult] = []
        for _ in range(plan.kill_repeats):  # undisturbed and killed runs interleaved
            progress(f"primes {impl} undisturbed (recovery baseline): {common}")
            run = run_primes(impl, domain=next(domains), home=home, **common)
            base.append(run.runtime_s or 0.0)
            progress(f"primes {impl} with worker {kill.worker} killed at 40 %: {common}")
            killed.append(run_primes(impl, kill=kill, domain=next(domains), home=home, **common))
        # counted: the runs whose victim was caught inside an item and that ran to the end,
        # each against the undisturbed run just before it (drift in the host's load cancels out)
        pairs = [
            (k, k.runtime_s - b)
            for k, b in zip(killed, base, strict=True)
            if k.extra.get("kill") and k.runtime_s is not None
        ]
        done = [k for k, _ in pairs]
        row = _job_row(impl, "primes-kill", workers, n, killed, done, expected)
        row |= {
            "items": items,
            "recovery_s": _median([added for _, added in pairs]),
            "replacement_s": _median([r.extra["kill"].get("replacement_s") for r in done]),
            "duplicate_results_dropped": sum(r.duplicate_results for r in killed),
            "reissued_items": _median([r.reissued_items for r in done]),
            "results_thrown_away": sum(r.extra["kill"].get("results_thrown_away", 0) for r in done),
            "undisturbed_runtime_s": _median(base),
        }
        if len(done) < len(killed):
            row["error"] = (
                f"{len(killed) - len(done)} of {len(killed)} runs ended before the victim was "
                "caught inside an item, or gave no runtime (not counted)"
            )
        rows.append(row)
    return rows


def _stream_rows(
    plan: Plan, domains: ScratchDomains, progress: Callable[[str], None], *, home: Path
) -> list[dict[str, Any]]:
    # One RouDi for every shm stream of the bench: this process's iceoryx runtime registers
    # once, with the RouDi that runs then, and dies with the process when that one is gone (a
    # mission's supervisor stops the RouDi it started; with one running, it starts none).
    roudi = None
    if "dds-shm" in plan.stream_impls:
        from mcc.bus.shm import RouDi

        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        roudi = RouDi.ensure(log_path=home / "iox-roudi.log")
    rows = []
    try:
        for chunk_kib in plan.chunks_kib:
            runs: dict[str, list[JobResult]] = {impl: [] for impl in plan.stream_impls}
            for _ in range(plan.stream_repeats):
                for impl in plan.stream_impls:
                    progress(f"stream {impl}: {plan.stream_bytes} B in {chunk_kib} KiB chunks")
                    runs[impl].append(_stream_run(impl, plan, chunk_kib * _KIB, domains, home=home))
            mb = {impl: _median([r.mb_per_s for r in rs]) for impl, rs in runs.items()}
            for impl, rs in runs.items():
                row: dict[str, Any] = {
                    "impl": impl,
                    "app": "stream",
                    "workers": 1,
                    "chunk_kib": chunk_kib,
                    "size_bytes": plan.stream_bytes,
                    "launch_s": _median([r.launch_s for r in rs]),
                    "runtime_s": _median([r.runtime_s for r in rs]),
                    "mb_per_s": mb[impl],
                    "correct": all(r.verified for r in rs),
                    "repeats": len(rs),
                }
                for column, anchor in _STREAM_ANCHORS.get(impl, ()):
                    ours, theirs = mb[impl], mb.get(anchor)
                    if ours and theirs:
                        row[column] = round(ours / theirs, 3)
                rows.append(row)
    finally:
        if roudi is not None:
            roudi.stop()
    return rows


def _stream_run(
    impl: str, plan: Plan, chunk_bytes: int, domains: ScratchDomains, *, home: Path
) -> JobResult:
    """One stream of ``impl`` (the module doc says which is which); ``home``: the MCC home of a
    DDS stream's supervisor."""
    from mcc.hpc.jobs import run_stream

    if impl in _DDS_STREAMS:
        return run_stream(
            "dds",
            size_bytes=plan.stream_bytes,
            chunk_bytes=chunk_bytes,
            domain=next(domains),
            kind="shm" if impl == "dds-shm" else "udp",
            home=home,
            security="none" if impl == "dds-plain" else "on",
        )
    if impl in DDSPERF_IMPLS:
        return _ddsperf_stream(impl, chunk_bytes, next(domains))
    return run_stream(impl, size_bytes=plan.stream_bytes, chunk_bytes=chunk_bytes)


def _ddsperf_stream(impl: str, chunk_bytes: int, domain: int) -> JobResult:
    """``ddsperf pub`` → ``ddsperf sub`` (one of `DDSPERF_IMPLS`) with the stream's UDP
    settings, samples of ``chunk_bytes``: its MB/s only."""
    from mcc import cyclone_tool
    from mcc.bench.anchors import run_ddsperf_throughput
    from mcc.bench.perftest_net import secured
    from mcc.bus.transport import Transport
    from mcc.hpc.stream import bulk_transport

    transport = bulk_transport(Transport.loopback(f"mcc-bench-hpc-{os.getpid()}"))
    pub = sub = transport
    if impl == "ddsperf-secure":
        pub, sub = secured(transport, "first"), secured(transport, "second")
    got = run_ddsperf_throughput(
        size_bytes=chunk_bytes,
        duration_s=DDSPERF_SECONDS,
        domain_id=domain,
        pub_config=pub.to_xml(),
        sub_config=sub.to_xml(),
        executable=None if impl == "ddsperf" else str(cyclone_tool("ddsperf")),
    )
    return JobResult(
        app="stream",
        impl=impl,
        workers=1,
        job_id=impl,
        size_bytes=chunk_bytes,
        chunk_bytes=chunk_bytes,
        verified=got.lost == 0,
        mb_per_s=got.mb_per_s,
    )


def _stream_summary(rows: Sequence[dict[str, Any]]) -> list[str]:
    lines = []
    for impl, column, what, target in (
        ("dds-shm", "ratio_vs_mpi", "stream over shm / MPI shared memory", 0.5),
        ("dds-plain", "ratio_vs_ddsperf", "stream over UDP / ddsperf (both unsecured)", 0.9),
        ("dds", "ratio_vs_ddsperf_secure", "secured stream over UDP / ddsperf secured", 0.9),
        ("dds-shm", "ratio_vs_udp", "stream over shm / over UDP", 1.0),
    ):
        got = [r for r in rows if r["app"] == "stream" and r["impl"] == impl and r.get(column)]
        if got:
            figures = ", ".join(f"{r[column]} at {r['chunk_kib']} KiB" for r in got)
            at_64 = column.startswith("ratio_vs_ddsperf")
            judged = [r for r in got if (r["chunk_kib"] == 64 if at_64 else r["chunk_kib"] >= 64)]
            met = all(r[column] >= target for r in judged or got)
            lines.append(
                f"{what}: {figures}; target >= {target:g}"
                + (" at 64 KiB" if at_64 else " from 64 KiB")
                + f": {'met' if met else 'MISSED'}"
            )
    kept = {
        (r["impl"], r["chunk_kib"]): float(r["secured_vs_plain"])
        for r in rows
        if r["app"] == "stream" and r.get("secured_vs_plain")
    }
    ours = {k: v for (impl, k), v in kept.items() if impl == "dds"}
    theirs = {k: v for (impl, k), v in kept.items() if impl == "ddsperf-secure"}
    both = sorted(k for k in ours if k in theirs)
    if both:
        figures = ", ".join(f"{ours[k]} vs {theirs[k]} at {k} KiB" for k in both)
        met = all(ours[k] >= theirs[k] for k in both)
        lines.append(
            f"stream rate kept under DDS Security, MCC vs ddsperf: {figures}; target: no less "
            f"than ddsperf's: {'met' if met else 'MISSED'}"
        )
    return lines


def summary(rows: Sequence[dict[str, Any]]) -> str:
    """The targets, met or not, from this run's rows."""
    lines = []
    primes = [r for r in rows if r["app"] == "primes" and r.get("ratio_vs_mpi")]
    if primes:
        worst = max(primes, key=lambda r: r["ratio_vs_mpi"])
        largest = max(primes, key=lambda r: (r["n"], r["workers"]))
        lines.append(
            f"primes DDS/MPI runtime: {largest['ratio_vs_mpi']} at n={largest['n']}, "
            f"{largest['workers']} workers; worst {worst['ratio_vs_mpi']} (n={worst['n']}, "
            f"{worst['workers']} workers); target <= 1.05"
        )
    lines += _stream_summary(rows)
    for r in rows:
        if r["app"] == "primes-kill":
            lines.append(
                f"recovery {r['impl']}: +{r['recovery_s']} s runtime, replacement "
                f"{r['replacement_s']} s, lost {r['lost_items']}, duplicate "
                f"{r['duplicate_items']}, correct {r['correct']}"
                + ("; target < 0.5 s, 0 lost, 0 duplicate" if r["impl"] == "dds" else "")
            )
    return "\n".join(lines)
