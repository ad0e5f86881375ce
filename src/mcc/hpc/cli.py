"""``mcc hpc primes|stream``: run an HPC job on DDS (a mission) or MPI and print its result."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from mcc.hpc.base import HpcError, JobResult

__all__ = ["add_parsers"]

_GIB = 1 << 30
_KIB = 1 << 10


def add_parsers(sub: Any) -> None:
    """Register ``mcc hpc`` and its actions on the ``mcc`` sub-parser set."""
    hpc = sub.add_parser(
        "hpc",
        help="HPC jobs on the bus (fault-tolerant task farm) or on MPI",
        description="Run the task-farm applications on DDS (as a mission under the "
        "supervisor: killed workers are replaced and resume) or on MPI (mpi4py + MPICH), "
        "same algorithm, same chunking. docs/hpc.md.",
    )
    hsub = hpc.add_subparsers(dest="hpc_command", metavar="APP", required=True)

    primes = hsub.add_parser(
        "primes",
        help="count the primes in [1, N] and find the largest",
        description="Count the primes in [1, N] (segmented sieve), N cut into work items "
        "strided over the workers. The runtime is from the first work item to the last "
        "result; the launch (processes, bus or MPI start-up) is reported apart.",
    )
    primes.add_argument("--n", type=int, required=True, help="search [1, N]")
    primes.add_argument("--workers", type=int, default=2, help="workers (default %(default)s)")
    primes.add_argument("--items", type=int, help="work items (default 8 per worker)")
    primes.add_argument(
        "--mode",
        choices=["strided", "dynamic"],
        default="strided",
        help="dds: items strided over the workers up front, or handed out as results come",
    )
    primes.add_argument(
        "--kill-worker",
        type=int,
        metavar="INDEX",
        help="kill -9 this worker mid-run (dds: it is replaced and resumes; mpi: the job "
        "aborts and runs again)",
    )
    primes.add_argument(
        "--kill-master",
        action="store_true",
        help="dds: kill -9 the master mid-run (the master restarted, or its standby, takes the "
        "job over from its journal)",
    )
    primes.add_argument(
        "--kill-at",
        type=float,
        default=0.4,
        help="kill once this fraction of the results is in (default %(default)s)",
    )
    primes.add_argument(
        "--no-persist",
        action="store_true",
        help="dds: run without the persistence service (no checkpoint to resume from)",
    )
    primes.set_defaults(func=cmd_primes)

    stream = hsub.add_parser(
        "stream",
        help="send a large buffer to another process and back, checked; one-way MB/s",
        description="Send G GiB in chunks from one process (node) to another and back, "
        "reliably, with flow control; check the bytes; one-way MB/s = 2 × size / time.",
    )
    stream.add_argument("--gib", type=float, default=1.0, help="GiB each way (default 1)")
    stream.add_argument(
        "--chunk-kib", type=int, default=1024, help="chunk size, KiB (default %(default)s)"
    )
    stream.set_defaults(func=cmd_stream)

    for parser in (primes, stream):
        parser.add_argument(
            "--backend",
            choices=["dds", "mpi", "mpi-tcp"],
            default="dds",
            help="dds: the bus; mpi: MPICH (shared memory on one host); mpi-tcp: MPICH over "
            "TCP, as between nodes",
        )
        parser.add_argument("--domain", type=int, help="dds: DDS domain (default: 21)")
        parser.add_argument("--run-dir", help="dds: run folder (default: a temporary one)")
        parser.add_argument("--timeout", type=float, default=900.0, help="seconds (900)")
        parser.add_argument("--json", metavar="FILE", help="also write the result as JSON")


def cmd_primes(args: argparse.Namespace) -> int:
    from mcc.hpc.jobs import KillPlan, run_primes

    kill = None
    if args.kill_worker is not None:
        if not 0 <= args.kill_worker < args.workers:
            raise HpcError(
                f"--kill-worker {args.kill_worker}: the workers are 0..{args.workers - 1}"
            )
        kill = KillPlan(worker=args.kill_worker, at_fraction=args.kill_at)
    if args.kill_master:
        if kill is not None or args.backend != "dds" or args.no_persist:
            raise HpcError(
                "--kill-master: only with --backend dds, the persistence service (no "
                "--no-persist) and no --kill-worker"
            )
        kill = KillPlan(system="master", at_fraction=args.kill_at)
    result = run_primes(
        args.backend,
        n=args.n,
        workers=args.workers,
        items=args.items,
        mode=args.mode,
        kill=kill,
        persist=not args.no_persist,
        run_dir=Path(args.run_dir) if args.run_dir else None,
        domain=args.domain,
        timeout_s=args.timeout,
    )
    _report(result, args.json)
    if kill is not None and not result.extra.get("kill"):
        print(
            f"mcc hpc primes: {kill.system} {kill.worker} was never killed: the job ended before "
            f"{kill.at_fraction:.0%} of the results were in with it inside an item "
            "(use more --items or a larger --n)",
            file=sys.stderr,
        )
    return 0 if result.lost_items == 0 else 1


def cmd_stream(args: argparse.Namespace) -> int:
    from mcc.hpc.jobs import run_stream

    if not args.gib > 0 or args.chunk_kib < 1:
        raise HpcError(
            f"--gib {args.gib} --chunk-kib {args.chunk_kib}: give a size > 0 and a chunk >= 1"
        )
    result = run_stream(
        args.backend,
        size_bytes=int(args.gib * _GIB),
        chunk_bytes=args.chunk_kib * _KIB,
        run_dir=Path(args.run_dir) if args.run_dir else None,
        domain=args.domain,
        timeout_s=args.timeout,
    )
    _report(result, args.json)
    return 0 if result.verified else 1


def _report(result: JobResult, json_path: str | None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"mcc hpc {result.app} on {result.impl}", title_justify="left")
    table.add_column("measure")
    table.add_column("value", justify="right")
    rows: list[tuple[str, Any]] = [("workers", result.workers)]
    if result.app == "primes":
        rows += [
            ("range", f"[1, {result.n}]"),
            ("work items", result.items),
            ("primes", result.count),
            ("largest prime", result.largest),
        ]
    else:
        rows += [
            ("bytes each way", result.size_bytes),
            ("chunk bytes", result.chunk_bytes),
            ("data verified", result.verified),
            ("one-way MB/s", _num(result.mb_per_s, 1)),
        ]
    rows += [
        ("launch s (start → first item)", _num(result.launch_s, 3)),
        ("runtime s (first item → last result)", _num(result.runtime_s, 3)),
    ]
    if result.app == "primes":
        rows += [
            ("items re-issued", result.reissued_items),
            ("duplicate results dropped", result.duplicate_results),
            ("items lost", result.lost_items),
        ]
    kill = result.extra.get("kill")
    if kill:
        rows.append(("killed", f"{kill.get('worker', 'rank')} pid {kill['pid']}"))
        rows.append(("kill → replacement ready s", _num(kill.get("replacement_s"), 3)))
    for name, value in rows:
        table.add_row(name, "-" if value is None else str(value))
    Console().print(table)
    if json_path:
        out = Path(json_path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result.as_dict(), indent=2) + "\n")
        print(f"wrote {out}")


def _num(value: float | None, digits: int) -> str | None:
    return None if value is None else f"{value:.{digits}f}"
