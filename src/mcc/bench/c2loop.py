"""``mcc bench c2loop``: the C2 loop's round trip (sensor → elaborator → actuator) under load.

Each row starts the loop as it is deployed, two processes under the app runtime
(``mcc.apps.c2loop:plant`` and ``mcc.apps.c2loop:elaborator``) on a fresh DDS domain and
discovery tag over loopback, lets it run ``duration_s`` seconds with one load condition, stops
the plant (SIGTERM) and reads the summary it writes. The round trip is the plant's: command
applied − sample time, both on the plant's clock. Load conditions:

* ``none``: nothing else runs;
* ``cpu``: one busy-loop process per core (``os.cpu_count()``), at the loop's priority;
* ``bus``: bulk traffic on the same domain, another topic: one process publishes 8 KiB
  ``PerfSample``s at its maximum rate (reliable, ``perf_reliable``) to a second one;
* ``cpu+bus``: both.

The load starts first and the loop starts under it; the plant leaves its first cycles out of
the summary (``--warmup-cycles``), so a row measures the loaded steady state.

``priority`` runs the plant and the elaborator as a manifest's ``priority:`` would: ``normal``
(as the loads), ``high`` (nice -10) or ``realtime`` (SCHED_FIFO 10); the bench sets it on each
process right after starting it, before its interpreter has started any thread (threads inherit
it). Both need root or CAP_SYS_NICE.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from mcc import settings
from mcc.bench import report, runner
from mcc.bench.anchor_tools import reap
from mcc.errors import MccError
from mcc.lifecycle import Closeable

__all__ = ["COLUMNS", "LOADS", "PRIORITIES", "add_parser", "run_c2loop_bench", "run_c2loop_row"]

LOADS = ("none", "cpu", "bus", "cpu+bus")
PRIORITIES = ("normal", "high", "realtime")
NICE_HIGH = -10
RT_PRIORITY = 10
COLUMNS = (
    "load",
    "avg_us",
    "stdev_us",
    "p50_us",
    "p99_us",
    "max_us",
    "cycles",
    "lost",
    "bus_load_mb_s",
)
RATE_HZ = 50.0
QUICK_DURATION_S = 3.0
FULL_DURATION_S = 20.0
WARMUP_CYCLES = 25
BULK_TOPIC = "C2BulkLoad"
BULK_SIZE_BYTES = 8192
MISSION = "c2-loop-bench"

_START_TIMEOUT_S = 60.0  # process start and discovery, slow under the cpu load
_STOP_TIMEOUT_S = 15.0
_READY = "flowing"


def run_c2loop_row(
    *,
    load: str,
    duration_s: float,
    domain_id: int,
    run_dir: Path,
    rate_hz: float = RATE_HZ,
    priority: str = "normal",
    tag: str | None = None,
) -> dict[str, Any]:
    """One row: the loop under ``load`` for ``duration_s`` s on ``domain_id``; files in
    ``run_dir`` (the plant's CSV and summary, one log per process)."""
    if load not in LOADS:
        raise MccError(f"load {load!r}: choose from {', '.join(LOADS)}")
    if priority not in PRIORITIES:
        raise MccError(f"priority {priority!r}: choose from {', '.join(PRIORITIES)}")
    if not duration_s > 0:
        raise MccError(f"duration_s = {duration_s}: must be > 0")
    from mcc.apps.c2loop import rtt_csv_path, summary_path
    from mcc.bus.transport import Transport

    run_dir.mkdir(parents=True, exist_ok=True)
    tag = tag or f"mcc-c2-{os.getpid()}-{domain_id}"
    env = settings.child_env(
        Transport.loopback(tag).apply_to_env(settings.environ()),
        domain=domain_id,
        discovery_tag=tag,
        mission=MISSION,
        index=0,
        run_dir=run_dir,
    )
    cpu_procs = (os.cpu_count() or 1) if "cpu" in load else 0
    # Load processes end by themselves after this long, should the bench die without
    # stopping them.
    max_s = duration_s + 3 * _START_TIMEOUT_S
    with _Processes(run_dir) as procs:
        burn = f"import time\nend = time.monotonic() + {max_s}\nwhile time.monotonic() < end: pass"
        for i in range(cpu_procs):
            procs.start(f"cpu-{i}", [sys.executable, "-S", "-c", burn], env=env)
        sink = None
        if "bus" in load:
            role = [sys.executable, "-m", "mcc.bench.c2loop"]
            opts = ["--domain", str(domain_id), "--tag", tag, "--max-s", str(max_s)]
            sink = bulk_sink = procs.start("bulk-sink", [*role, "bulk-sink", *opts], env=env)
            procs.start("bulk-source", [*role, "bulk-source", *opts], env=env)
            procs.wait_for(lambda: _READY in bulk_sink.output(), "bulk traffic to flow")
        runtime = [sys.executable, "-m", "mcc.orchestrate.runtime"]
        config = json.dumps({"rate_hz": rate_hz, "warmup_cycles": WARMUP_CYCLES})
        c2: dict[str, _Process] = {}
        for system, fields in (("plant", {"config": config}), ("elaborator", {})):
            system_env = settings.child_env(env, system=system, **fields)
            c2[system] = procs.start(
                system, [*runtime, f"mcc.apps.c2loop:{system}"], env=system_env
            )
            _set_priority(c2[system].popen.pid, priority)
        plant = c2["plant"]
        csv_path = rtt_csv_path(run_dir, 0)
        procs.wait_for(lambda: _csv_rows(csv_path) > WARMUP_CYCLES, "the C2 loop to close")
        procs.watch(duration_s)
        plant.stop()
        if plant.returncode != 0:
            raise MccError(f"the plant exited {plant.returncode}:\n{plant.output()[-2000:]}")
        mb_s = None
        if sink is not None:
            sink.stop()
            mb_s = _bulk_mb_s(sink.output())
    path = summary_path(run_dir, 0)
    if not path.exists():
        raise MccError(f"the plant wrote no summary ({path}); its log: {run_dir / 'plant.log'}")
    summary = json.loads(path.read_text())
    return {
        "impl": "mcc",
        "load": load,
        "priority": priority,
        "rate_hz": rate_hz,
        "duration_s": summary["duration_s"],
        "cycles": summary["count"],
        "lost": summary["lost"],
        "unanswered_at_stop": summary["unanswered_at_stop"],
        "avg_us": summary["avg_us"],
        "stdev_us": summary["stdev_us"],
        "min_us": summary["min_us"],
        "p50_us": summary["p50_us"],
        "p90_us": summary["p90_us"],
        "p99_us": summary["p99_us"],
        "max_us": summary["max_us"],
        "overruns": summary["overruns"],
        "warmup_cycles": summary["warmup_cycles"],
        "cpu_load_procs": cpu_procs,
        "bus_load_size_bytes": BULK_SIZE_BYTES if sink is not None else None,
        "bus_load_mb_s": mb_s,
    }


def run_c2loop_bench(
    *,
    quick: bool,
    duration_s: float | None,
    loads: list[str],
    json_path: str | None,
    record: bool,
    rate_hz: float = RATE_HZ,
    priority: str = "normal",
    run_dir: str | None = None,
) -> int:
    """Run one row per load (a fresh domain each), print the table, write JSON, maybe record.

    ``duration_s`` defaults to 3 s per row with ``quick``, else 20 s. The plants' CSVs and the
    logs stay in ``run_dir`` when one is given (a temporary folder otherwise).
    """
    if priority not in PRIORITIES:
        raise MccError(f"--priority {priority!r}: choose from {', '.join(PRIORITIES)}")
    unknown = [load for load in loads if load not in LOADS]
    if unknown or not loads:
        raise MccError(f"--load {','.join(loads)!r}: choose from {', '.join(LOADS)}")
    duration = duration_s or (QUICK_DURATION_S if quick else FULL_DURATION_S)
    from rich.console import Console

    from mcc.bus.transport import ScratchDomains

    console = Console(stderr=True)
    domains = ScratchDomains()
    rows: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        root = (
            Path(run_dir)
            if run_dir
            else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mcc-c2loop-")))
        )
        for i, load in enumerate(loads):
            console.print(
                f"c2loop: load {load}, {duration:g} s at {rate_hz:g} Hz, priority {priority} …"
            )
            rows.append(
                run_c2loop_row(
                    load=load,
                    duration_s=duration,
                    domain_id=next(domains),  # a fresh domain per row: no leftovers
                    run_dir=root / f"{i}-{load.replace('+', '-')}",
                    rate_hz=rate_hz,
                    priority=priority,
                )
            )
    doc = report.document("c2loop", rows, command=runner.command_line("c2loop"))
    report.print_table(
        f"C2 loop round trip (sensor → elaborator → actuator), {rate_hz:g} Hz, "
        f"priority {priority}, loopback, µs",
        rows,
        COLUMNS,
    )
    if json_path:
        report.write_json(doc, json_path)
    if record:
        report.record(doc, COLUMNS, notes=_notes(rows))
    return 0


def _notes(rows: list[dict[str, Any]]) -> str:
    cpu = next((r["cpu_load_procs"] for r in rows if r["cpu_load_procs"]), os.cpu_count())
    priority = rows[0]["priority"] if rows else "normal"
    return (
        "Round trip = command applied − sample time (origin_ns), both on the plant's clock; "
        "plant and elaborator are two processes over mcc.bus on loopback, NavSample and "
        f"GuidanceCommand best effort (profile sensor_stream), at priority {priority} "
        f"(normal = nice 0, high = nice {NICE_HIGH}, realtime = SCHED_FIFO {RT_PRIORITY}); "
        f"the loads run at nice 0. cpu: {cpu} busy-loop processes; "
        f"bus: {BULK_SIZE_BYTES} B PerfSamples at the maximum rate (reliable) between two "
        "more processes on the same domain. stdev is the population standard deviation."
    )


def add_parser(bench_subparsers: Any) -> argparse.ArgumentParser:
    """Register ``c2loop`` on the ``mcc bench`` sub-command parsers."""
    p = report.add_bench_parser(
        bench_subparsers,
        "c2loop",
        help="C2 loop round trip (sensor → elaborator → actuator) with and without load",
        description="Run the aircraft-guiding C2 loop (plant and elaborator processes over "
        "the bus) under each load condition and report its round trip: avg, stdev, "
        "percentiles and max.",
        func=_cmd_c2loop,
    )
    p.add_argument("--quick", action="store_true", help="3 s per row (smoke check)")
    p.add_argument("--duration", type=float, help="seconds per row (default 20, quick 3)")
    p.add_argument(
        "--load",
        default=",".join(LOADS),
        help="load conditions, comma-separated (default %(default)s)",
    )
    p.add_argument("--rate-hz", type=float, default=RATE_HZ, help="sensor rate (default 50)")
    p.add_argument(
        "--priority",
        choices=PRIORITIES,
        default="normal",
        help="priority of the plant and the elaborator: normal, high (nice -10) or realtime "
        "(SCHED_FIFO); the loads stay at normal (default %(default)s)",
    )
    p.add_argument("--run-dir", help="keep the plants' CSVs and the logs in this folder")
    return p


def _cmd_c2loop(args: argparse.Namespace) -> int:
    return run_c2loop_bench(
        quick=args.quick,
        duration_s=args.duration,
        loads=[x.strip() for x in args.load.split(",") if x.strip()],
        json_path=args.json,
        record=args.record,
        rate_hz=args.rate_hz,
        priority=args.priority,
        run_dir=args.run_dir,
    )


# -- processes -------------------------------------------------------------------------------


def _set_priority(pid: int, priority: str) -> None:
    """Give process ``pid`` (its main thread, so every thread it starts) ``priority``."""
    try:
        if priority == "realtime":
            os.sched_setscheduler(pid, os.SCHED_FIFO, os.sched_param(RT_PRIORITY))
        elif priority == "high":
            os.setpriority(os.PRIO_PROCESS, pid, NICE_HIGH)
    except PermissionError as exc:
        raise MccError(
            f"priority {priority!r} is not permitted ({exc.strerror}): run as root or grant "
            "CAP_SYS_NICE (realtime also needs an rtprio limit), or use --priority normal"
        ) from None


class _Process:
    """A child process whose output goes to ``run_dir/NAME.log``."""

    def __init__(self, name: str, argv: list[str], *, env: dict[str, str], log: Path) -> None:
        self.name = name
        self.log = log
        self._file: IO[str] = log.open("w")
        self.popen = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._file,
            stderr=subprocess.STDOUT,
            text=True,
        )

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, timeout_s: float = _STOP_TIMEOUT_S) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s``; always reaped and its log closed."""
        try:
            if self.popen.poll() is None:
                self.popen.send_signal(signal.SIGTERM)
                reap(self.popen, timeout_s, kill_wait_s=5)
        finally:
            self._file.close()


class _Processes(Closeable):
    """The processes of one row, all stopped on exit, last started first."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.procs: list[_Process] = []

    def start(self, name: str, argv: list[str], *, env: dict[str, str]) -> _Process:
        proc = _Process(name, argv, env=env, log=self.run_dir / f"{name}.log")
        self.procs.append(proc)
        return proc

    def _check_alive(self) -> None:
        for p in self.procs:
            code = p.returncode
            if code is not None and not p._file.closed:
                raise MccError(f"{p.name} exited {code} early:\n{p.output()[-2000:]}")

    def wait_for(self, condition: Callable[[], bool], what: str) -> None:
        """Poll ``condition`` until true; ``MccError`` if a process dies or it takes too long."""
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not condition():
            self._check_alive()
            if time.monotonic() > deadline:
                logs = ", ".join(str(p.log) for p in self.procs)
                raise MccError(f"waited {_START_TIMEOUT_S:g} s for {what}; see {logs}")
            time.sleep(0.05)

    def watch(self, duration_s: float) -> None:
        """Let everything run ``duration_s`` s; ``MccError`` if a process dies meanwhile."""
        end = time.monotonic() + duration_s
        while (left := end - time.monotonic()) > 0:
            self._check_alive()
            time.sleep(min(left, 0.1))

    def close(self) -> None:
        """Stop every process still running, last started first."""
        for proc in reversed(self.procs):
            if not proc._file.closed:
                proc.stop()


def _csv_rows(path: Path) -> int:
    try:
        with path.open() as f:
            return max(sum(1 for _ in f) - 1, 0)
    except FileNotFoundError:
        return 0


def _bulk_mb_s(output: str) -> float | None:
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            stats = json.loads(line)
            return round(stats["bytes"] / stats["seconds"] / 1e6, 1) if stats["seconds"] else 0.0
    return None


# -- bus load (python -m mcc.bench.c2loop bulk-source|bulk-sink) --------------------------------


@contextlib.contextmanager
def _bulk_bus(domain_id: int, tag: str, name: str) -> Iterator[tuple[Any, threading.Event]]:
    from mcc.bus import Bus, Transport

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with Bus(domain_id, transport=Transport.loopback(tag), name=name, monitor_qos=False) as bus:
        yield bus, stop


def run_bulk_source(
    *, domain_id: int, tag: str, size_bytes: int = BULK_SIZE_BYTES, max_s: float = 3600.0
) -> int:
    """Publish ``size_bytes`` PerfSamples on ``BULK_TOPIC`` as fast as possible until SIGTERM
    (or ``max_s`` s)."""
    from cyclonedds.core import DDSException

    from mcc.types import PerfSample

    with _bulk_bus(domain_id, tag, "c2-bulk-source") as (bus, stop):
        writer = bus.writer(BULK_TOPIC, type=PerfSample, profile="perf_reliable", validate=False)
        while writer.matched() < 1 and not stop.wait(0.01):
            pass  # the sink is not there yet
        sample = PerfSample(writer_id="bulk", seq=0, send_ns=0, payload=bytes(size_bytes))
        end = time.monotonic() + max_s
        while not stop.is_set() and time.monotonic() < end:
            sample.seq += 1
            sample.send_ns = time.time_ns()
            with contextlib.suppress(DDSException):  # flow control: blocked past 100 ms
                writer.write(sample)
    return 0


def run_bulk_sink(*, domain_id: int, tag: str, max_s: float = 3600.0) -> int:
    """Take ``BULK_TOPIC`` samples until SIGTERM (or ``max_s`` s); print ``flowing`` at the
    first, then a JSON line with the samples, bytes and seconds between the first and last."""
    from mcc.types import PerfSample

    samples = size = 0
    first_ns = last_ns = 0
    with _bulk_bus(domain_id, tag, "c2-bulk-sink") as (bus, stop):
        reader = bus.reader(BULK_TOPIC, type=PerfSample, profile="perf_reliable")
        end = time.monotonic() + max_s
        while not stop.is_set() and time.monotonic() < end:
            taken = reader.take_wait(256, timeout_s=0.2)
            if not taken:
                continue
            last_ns = time.monotonic_ns()
            if not samples:
                first_ns = last_ns
                print(_READY, flush=True)
            samples += len(taken)
            size += sum(len(s.payload) for s in taken)
    seconds = (last_ns - first_ns) / 1e9
    print(json.dumps({"samples": samples, "bytes": size, "seconds": seconds}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcc.bench.c2loop")
    parser.add_argument("role", choices=["bulk-source", "bulk-sink"])
    parser.add_argument("--domain", type=int, required=True)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--size", type=int, default=BULK_SIZE_BYTES, help="bytes per sample")
    parser.add_argument("--max-s", type=float, default=3600.0, help="stop after this long")
    args = parser.parse_args(argv)
    if args.role == "bulk-source":
        return run_bulk_source(
            domain_id=args.domain, tag=args.tag, size_bytes=args.size, max_s=args.max_s
        )
    return run_bulk_sink(domain_id=args.domain, tag=args.tag, max_s=args.max_s)


if __name__ == "__main__":
    sys.exit(main())
