"""``mcc bench deploy``: how fast a virtual cluster comes up, scales, and recovers from a crash.

For each backend and cluster size the bench runs the real ``mcc up`` in its own process and
watches the supervisor's ``MissionStatus`` on the bus. Times come from the supervisor's own
state-change stamps (an instance is *running* at its first heartbeat):

- ``deploy_s``: ``mcc up`` started → every worker has sent its first heartbeat;
- ``scale_s``: ``scale 0 → N`` asked → every new worker has sent its first heartbeat;
- ``failover_*_s``: ``kill -9`` of a worker → its replacement's first heartbeat.

The anchor ``exec`` starts each worker as a fresh ``python -m mcc.orchestrate.runtime``
(what a supervisor without a fork server does) and restarts a killed one the same way.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcc.bench import report
from mcc.bench.anchor_tools import reap
from mcc.bus import Bus, Transport
from mcc.bus.transport import ScratchDomains
from mcc.errors import MccError
from mcc.orchestrate.client import ControlClient
from mcc.orchestrate.runtime import RUNTIME_ARGV
from mcc.settings import child_env, environ
from mcc.types import Heartbeat, MissionStatus, SystemState
from mcc.waiting import WaitTimeoutError, wait_for

COLUMNS = (
    "impl",
    "backend",
    "workers",
    "deploy_s",
    "scale_s",
    "failover_p50_s",
    "failover_p99_s",
    "failover_max_s",
    "failovers",
    "error",
)
PROBE = "mcc.orchestrate.probe:idle"
# Unsecured, like its anchor (plain exec of the same workers): the bench measures what the
# orchestrator adds to starting and failing over processes, not the DDS Security handshake.
MANIFEST = """\
mission: deploy{workers}
domain: {domain}
security: none
clusters:
  w:
    app: {probe}
    size: {workers}
    max: {max}
    resources: {{cpus: 0.05}}
    restart: {{policy: always, max_restarts: 1000, stable_s: 0.2}}  # no crash-loop backoff
    health: {{startup_s: 300}}  # measure slow starts, do not kill them
"""


def add_parser(bench_subparsers: Any) -> None:
    parser = report.add_bench_parser(
        bench_subparsers,
        "deploy",
        help="virtual-cluster deploy, scale and failover times (local, ray, exec anchor)",
        description="Time from `mcc up` (and `mcc scale`) until every worker of a virtual "
        "cluster has sent its first heartbeat, and from kill -9 of a worker until its "
        "replacement's first heartbeat.",
        func=cmd_deploy,
    )
    parser.add_argument("--quick", action="store_true", help="1, 8 and 32 workers, local only")
    parser.add_argument("--workers", help="comma-separated sizes (default 1,2,4,8,16,32)")
    parser.add_argument(
        "--backends", default="local,ray", help="backends to run (default %(default)s)"
    )
    parser.add_argument("--failovers", type=int, help="kills per row (default 10, quick 3)")
    parser.add_argument("--no-anchor", action="store_true", help="skip the exec anchor")


def cmd_deploy(args: argparse.Namespace) -> int:
    workers = (
        [int(w) for w in args.workers.split(",")]
        if args.workers
        else ([1, 8, 32] if args.quick else [1, 2, 4, 8, 16, 32])
    )
    backends = (
        ["local"] if args.quick and args.backends == "local,ray" else args.backends.split(",")
    )
    unknown = sorted(set(backends) - {"local", "ray"})
    if unknown:
        raise MccError(f"--backends: unknown {unknown}; choose from local, ray")
    failovers = args.failovers if args.failovers is not None else (3 if args.quick else 10)
    rows = run_deploy(
        workers=workers, backends=backends, failovers=failovers, anchor=not args.no_anchor
    )
    command = ("mcc bench deploy " + " ".join(sys.argv[3:])).strip()
    doc = report.document("deploy", rows, command=command)
    report.print_table("virtual cluster deploy / failover (s)", rows, COLUMNS)
    if args.json:
        print(f"wrote {report.write_json(doc, args.json)}")
    if args.record:
        report.record(doc, COLUMNS, notes=NOTES)
    return 0


NOTES = (
    "deploy_s: `mcc up` → every worker's first heartbeat (supervisor, fork server and bus "
    "start included); scale_s: `mcc scale w N` from 0; failover: kill -9 of a worker → its "
    "replacement's first heartbeat (median and max). `exec` starts every worker as a fresh "
    "Python process. For scale: the virtual clusters of the reference TOC papers took "
    "minutes per node (PCI attach ~90 s + VM boot ~90 s, as reported there, not measured here)."
)


def run_deploy(
    *, workers: list[int], backends: list[str], failovers: int, anchor: bool = True
) -> list[dict[str, Any]]:
    domains = ScratchDomains()
    tag = f"bench-deploy-{os.getpid()}"
    # The run's transport and tag: in the children's environment and given to our own buses,
    # never set in os.environ.
    transport = Transport.loopback(tag)
    env = child_env(transport.apply_to_env(environ()), discovery_tag=tag)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="mcc-bench-deploy-") as tmp:
        for backend in backends:
            for n in workers:
                domain = next(domains)
                try:
                    rows.append(_mcc_row(Path(tmp), backend, n, domain, failovers, env, transport))
                except MccError as exc:  # a row that cannot finish is a result too
                    rows.append(
                        {"impl": "mcc", "backend": backend, "workers": n, "error": str(exc)}
                    )
        if anchor:
            for n in workers:
                rows.append(_exec_row(Path(tmp), n, next(domains), failovers, env, transport))
    return rows


class _StatusWatch:
    """The latest ``MissionStatus`` of one mission, fed by a listener."""

    def __init__(self, bus: Bus) -> None:
        self.latest: MissionStatus | None = None
        self._reader = bus.reader("MissionStatus", on_data=self._on_data)

    def _on_data(self, reader: Any) -> None:
        for status in reader.take():
            self.latest = status

    def running(self) -> dict[str, Any]:
        systems = self.latest.systems if self.latest is not None else ()
        return {e.system_id: e for e in systems if e.state == SystemState.SYSTEM_RUNNING}


def wait_until(
    condition: Callable[[], Any], timeout_s: float, what: str, *, bench: str = "deploy"
) -> Any:
    """`mcc.waiting.wait_for` every 10 ms: ``condition()``'s first true value; ``MccError``
    naming the bench after ``timeout_s``."""
    try:
        return wait_for(condition, timeout_s, what, period_s=0.01)
    except WaitTimeoutError as exc:
        raise MccError(f"bench {bench}: {exc}") from None


def _row(
    impl: str, backend: str, n: int, deploy_s: float, scale_s: float | None, times: list[float]
) -> dict[str, Any]:
    """A table row: the deploy and scale times, the failovers' median, p99 (nearest rank: with
    20 kills, the worst but none) and max."""
    ranked = sorted(times)
    return {
        "impl": impl,
        "backend": backend,
        "workers": n,
        "deploy_s": round(deploy_s, 3),
        "scale_s": None if scale_s is None else round(scale_s, 3),
        "failover_p50_s": round(statistics.median(times), 3) if times else None,
        "failover_p99_s": round(ranked[min(len(ranked) - 1, int(0.99 * len(ranked)))], 3)
        if times
        else None,
        "failover_max_s": round(max(times), 3) if times else None,
        "failovers": len(times),
    }


def _mcc_row(
    tmp: Path,
    backend: str,
    n: int,
    domain: int,
    failovers: int,
    env: dict[str, str],
    transport: Transport,
) -> dict[str, Any]:
    manifest = tmp / f"deploy-{backend}-{n}.yaml"
    manifest.write_text(MANIFEST.format(workers=n, domain=domain, probe=PROBE, max=max(n, 1)))
    mission = f"deploy{n}"
    run_env = child_env(env, home=tmp / f"home-{backend}-{n}")
    with Bus(domain, transport=transport, name="mcc bench deploy") as bus:  # tagged transport
        watch = _StatusWatch(bus)
        client = ControlClient(bus, mission, timeout_s=10.0)
        start_ns = time.time_ns()
        log = (tmp / f"up-{backend}-{n}.log").open("w")
        up = subprocess.Popen(
            [sys.executable, "-m", "mcc.cli", "up", str(manifest), "--backend", backend, "--quiet"],
            env=run_env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        timeout_s = 60.0 + 2.0 * n + (60.0 if backend == "ray" else 0.0)

        def all_running(what: str) -> int:
            """Every worker running: when the last one sent its first heartbeat (ns)."""
            found = wait_until(
                lambda: (r := watch.running()) and len(r) == n and r, timeout_s, what
            )
            return max(e.since_ns for e in found.values())

        try:
            deploy_s = (all_running(f"{n} workers") - start_ns) / 1e9
            client.scale("w", 0)
            wait_until(
                lambda: watch.latest is not None and not watch.latest.systems, 60, "scale to 0"
            )
            scale_ns = time.time_ns()
            client.scale("w", n)
            scale_s = (all_running("scale up") - scale_ns) / 1e9
            times = [_failover(watch, f"{mission}/w/{k % n}") for k in range(failovers)]
            client.down(wait_s=30.0)
            up.wait(30)
        finally:
            if up.poll() is None:
                up.send_signal(signal.SIGINT)
                reap(up, 20)
            log.close()
            client.close()
    return _row("mcc", backend, n, deploy_s, scale_s, times)


def _failover(watch: _StatusWatch, instance_id: str) -> float:
    entry = wait_until(lambda: watch.running().get(instance_id), 30, f"{instance_id} running")
    time.sleep(0.25)  # past restart.stable_s: each kill measures a first restart, not a backoff
    kill_ns = time.time_ns()
    os.kill(entry.pid, signal.SIGKILL)
    replaced = wait_until(
        lambda: (e := watch.running().get(instance_id)) and e.pid != entry.pid and e,
        30,
        f"{instance_id} replaced",
    )
    return float((replaced.since_ns - kill_ns) / 1e9)


def _exec_row(
    tmp: Path, n: int, domain: int, failovers: int, env: dict[str, str], transport: Transport
) -> dict[str, Any]:
    """Anchor: a fresh Python process per worker, restarted by exec after a kill."""
    first_beat: dict[tuple[str, int], int] = {}

    def on_data(reader: Any) -> None:
        now = time.time_ns()
        for hb in reader.take():
            first_beat.setdefault((hb.system_id, hb.pid), now)

    def spawn(index: int) -> subprocess.Popen[bytes]:
        worker_env = child_env(
            env, mission="exec", system="w", index=index, domain=domain, run_dir=tmp
        )
        return subprocess.Popen(
            [*RUNTIME_ARGV, PROBE],
            env=worker_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    procs: list[subprocess.Popen[bytes]] = []
    with Bus(domain, transport=transport, name="mcc bench deploy exec") as bus:
        reader = bus.reader("Heartbeat", type=Heartbeat, on_data=on_data)
        try:
            start_ns = time.time_ns()
            procs = [spawn(i) for i in range(n)]
            wait_until(lambda: len(first_beat) >= n, 60.0 + 2.0 * n, f"{n} exec workers")
            deploy_s = (max(first_beat.values()) - start_ns) / 1e9
            times = []
            for _ in range(failovers):
                victim = procs[0]
                kill_ns = time.time_ns()
                victim.kill()
                victim.wait()
                procs[0] = spawn(0)
                key = ("exec/w/0", procs[0].pid)
                wait_until(lambda k=key: k in first_beat, 30, "exec replacement")  # type: ignore[misc]
                times.append((first_beat[key] - kill_ns) / 1e9)
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                reap(proc, 10)
            del reader
    return _row("exec", "-", n, deploy_s, None, times)
