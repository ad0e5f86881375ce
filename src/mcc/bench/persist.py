"""``mcc bench persist``: what durability costs — a stored write against a DDS-acked one.

One run, side by side: ``write_stored`` (the sample committed to SQLite by a replica of the
service and acknowledged) alternates with its anchor, ``write`` + ``wait_for_acks`` (Cyclone's
reliable delivery to the same service, nothing stored). Then the store's throughput for samples
written back to back, and how long a late joiner waits for the retained samples. The replica
runs as its own process (``python -m mcc.persist serve``) on loopback.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mcc.bench import report
from mcc.bench.anchor_tools import reap
from mcc.errors import MccError
from mcc.settings import child_env, current

BENCH = "persist"
COLUMNS = (
    "impl", "what", "size_bytes", "count", "p50_us", "p99_us", "max_us", "ratio_p50",
    "msgs_per_s", "samples",
)  # fmt: skip
INSTANCES = 64


def add_parser(bench_subparsers: Any) -> None:
    parser = report.add_bench_parser(
        bench_subparsers,
        BENCH,
        help="persistence: stored write vs DDS ack, store rate, late-joiner history",
        description="write_stored (committed by the persistence service) against write + "
        "wait_for_acks (Cyclone's reliable delivery) in the same run; then samples/s stored "
        "and the time a late joiner waits for its history.",
        func=cmd_bench,
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run, well under a minute")
    parser.add_argument("--rounds", type=int, help="stored/acked writes each (default 500)")
    parser.add_argument("--size", type=int, default=1024, help="state bytes per sample")
    parser.add_argument("--domain", type=int, default=current().domain)


def cmd_bench(args: argparse.Namespace) -> int:
    rounds = args.rounds or (50 if args.quick else 500)
    burst = 1000 if args.quick else 4000
    joiners = 3 if args.quick else 10
    rows = run(
        rounds=rounds, burst=burst, joiners=joiners, size_bytes=args.size, domain=args.domain
    )
    command = "mcc bench persist" + (" --quick" if args.quick else "")
    doc = report.document(BENCH, rows, command=command)
    report.print_table("persistence service (one replica, loopback)", rows, COLUMNS)
    if args.json:
        report.write_json(doc, args.json)
    if args.record:
        notes = "p50/p99 of alternating rounds; ratio_p50 = mcc / dds-ack."
        report.record(doc, COLUMNS, notes=notes)
    return 0


def run(
    *, rounds: int, burst: int, joiners: int, size_bytes: int, domain: int
) -> list[dict[str, Any]]:
    """Measure; rows in the benches' JSON shape (docs/benchmarks.md)."""
    from mcc import types
    from mcc.bus import Bus, DurableWriter, HistoryReader

    # Our own discovery tag, passed to the replica and to our buses (never set in os.environ).
    tag = f"bench-persist-{os.getpid()}"
    state = bytes(size_bytes)

    def sample(i: int) -> types.Checkpoint:
        return types.Checkpoint(
            job_id="bench", worker_id=f"w{i % INSTANCES}", items_done=i, state=state
        )

    with (
        _replica(domain, tag) as _,
        Bus(domain, name="mcc bench persist", discovery_tag=tag) as bus,
    ):
        writer = bus.writer("Checkpoint")
        if not isinstance(writer, DurableWriter):
            raise MccError("topic Checkpoint is not on a durable profile: nothing to measure")
        if not writer.wait_for_replicas(1, timeout_s=30.0):
            raise MccError("the persistence replica did not subscribe within 30 s")
        stored_s: list[float] = []
        acked_s: list[float] = []
        for i in range(rounds):  # alternate, so that both see the same machine
            start = time.perf_counter()
            writer.write_stored(sample(i), timeout_s=30.0)
            stored_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            writer.write(sample(i))
            writer.dds.wait_for_acks(30_000_000_000)
            acked_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        for i in range(burst):
            writer.write(sample(i))
        writer.write_stored(sample(burst), timeout_s=60.0)
        rate = (burst + 1) / (time.perf_counter() - start)
        fetch_s: list[float] = []
        retained = 0
        for _ in range(joiners):
            with Bus(domain, name="mcc bench persist joiner", discovery_tag=tag) as late:
                start = time.perf_counter()
                reader = late.reader("Checkpoint", history_timeout_s=30.0)
                if not isinstance(reader, HistoryReader) or not reader.wait_for_history(35.0):
                    raise MccError("no history from the persistence replica within 35 s")
                retained = len(reader.take(100_000))
                fetch_s.append(time.perf_counter() - start)
    stored, acked = _stats(stored_s), _stats(acked_s)
    return [
        {"impl": impl, "what": what, "size_bytes": size_bytes, **fields}
        for impl, what, fields in (
            ("mcc", "write_stored", {**stored, "ratio_p50": stored["p50_us"] / acked["p50_us"]}),
            ("dds-ack", "write+wait_for_acks", acked),
            ("mcc", "store, back to back", {"count": burst + 1, "msgs_per_s": rate}),
            ("mcc", "late-joiner history", {**_stats(fetch_s), "samples": retained}),
        )
    ]


def _stats(seconds: list[float]) -> dict[str, Any]:
    ordered = sorted(seconds)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return {
        "count": len(ordered),
        "p50_us": statistics.median(ordered) * 1e6,
        "p99_us": p99 * 1e6,
        "max_us": ordered[-1] * 1e6,
    }


@contextmanager
def _replica(domain: int, tag: str) -> Iterator[subprocess.Popen[str]]:
    """A replica in its own process, on a store in a temporary directory."""
    with tempfile.TemporaryDirectory(prefix="mcc-bench-persist-") as tmp:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mcc.persist", "serve", "--store", str(Path(tmp) / "p.sqlite")]
            + ["--domain", str(domain), "--replica", "bench"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=child_env(discovery_tag=tag),
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if "ready" not in line:
                raise MccError(f"the persistence replica did not start: {line!r}")
            yield proc
        finally:
            proc.terminate()
            reap(proc, 15, kill_wait_s=5)
            if proc.stdout is not None:
                proc.stdout.close()
