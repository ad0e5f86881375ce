"""Launchers: run a primes or stream job on DDS (a mission under the supervisor) or on MPI.

>>> result = run_primes("dds", n=10**8, workers=3)          # missions/hpc-primes.yaml
>>> result.count, result.largest, result.runtime_s, result.launch_s
>>> run_primes("dds", n=10**8, workers=3, kill=KillPlan(worker=1, at_fraction=0.4))
>>> run_stream("mpi", size_bytes=2**30, chunk_bytes=2**20).mb_per_s

DDS jobs run as real processes: the launcher loads the mission manifest, sets the job's
parameters, and runs it under an in-process ``Supervisor`` on the local backend, so a killed
worker is replaced by the orchestrator's restart policy under the same identity. MPI jobs run
under the ``mpiexec`` of the ``mpich`` wheel. ``launch_s`` is measured by the launcher (from
its start to the job's first work item), ``runtime_s`` by the job itself (``mcc.hpc.base``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcc.bus import Bus, Reader, Transport
from mcc.bus.transport import TransportKind
from mcc.hpc.base import CONTROL_ID, HpcError, JobResult, read_result
from mcc.hpc.farm_protocol import MAX_N, MAX_WORKERS, result_path
from mcc.hpc.mpi import TCP_ENV, find_mpiexec
from mcc.hpc.stream import bulk_transport, check_stream_sizes
from mcc.orchestrate.manifest import Cluster, Mission, System, load_manifest
from mcc.orchestrate.supervisor import open_mission
from mcc.resources import data_root
from mcc.security.mission import Topics
from mcc.settings import child_env, current
from mcc.types import Checkpoint, WorkResult

__all__ = [
    "IMPLS",
    "MISSIONS",
    "KillPlan",
    "primes_mission",
    "run_primes",
    "run_stream",
    "stream_mission",
]

MISSIONS = data_root() / "missions"
PRIMES_MISSION = MISSIONS / "hpc-primes.yaml"
IMPLS = ("dds", "mpi", "mpi-tcp")
_STATUS_EVERY_S = 0.5  # how often a job's launcher asks the supervisor for the instances' states


@dataclass(frozen=True)
class KillPlan:
    """``kill -9`` worker ``worker`` (its index) once ``at_fraction`` of the results are in.

    ``mid_item`` (DDS): wait, after that, until the victim's latest two checkpoints were taken
    inside an item, so the kill interrupts work in progress (what a checkpoint is for) and the
    persistence service holds a mid-item checkpoint to resume from.
    ``system="master"`` (DDS) kills master ``worker`` instead (its index; 0: the one leading
    the job): a standby or the master restarted takes the job over from its journal.
    """

    worker: int = 0
    at_fraction: float = 0.4
    mid_item: bool = True
    system: str = "worker"

    def __post_init__(self) -> None:
        if self.system not in ("worker", "master"):
            raise HpcError(f"kill system = {self.system!r}: kill a 'worker' or the 'master'")
        if not 0.0 <= self.at_fraction < 1.0:
            raise HpcError(f"kill at_fraction = {self.at_fraction}: use a fraction in [0, 1)")
        if self.worker < 0:
            raise HpcError(f"kill worker = {self.worker}: a worker index is >= 0")

    def threshold(self, items: int) -> int:
        return max(1, math.ceil(self.at_fraction * items)) if self.at_fraction > 0 else 0


def _check(n: int | None, workers: int, impl: str) -> None:
    if impl not in IMPLS:
        raise HpcError(f"backend {impl!r}: use one of {', '.join(IMPLS)}")
    if workers < 1:
        raise HpcError(f"workers = {workers}: give at least 1 worker")
    if n is not None and n < 2:
        raise HpcError(f"n = {n}: search [1, n] with n >= 2")
    if impl == "dds" and (workers > MAX_WORKERS or (n is not None and n > MAX_N)):
        raise HpcError(
            f"n = {n}, workers = {workers}: a DDS job searches at most n = {MAX_N} with at "
            f"most {MAX_WORKERS} workers"
        )


# -- environment -------------------------------------------------------------------------------


def _job_transport(*, bulk: bool = False) -> Transport:
    """The transport of a job's processes, handed to its supervisor (never set in
    ``os.environ``): this process's (``MCC_TRANSPORT``), else loopback, with this process's
    discovery tag, else one of the job's own; a stream's adds the bulk settings."""
    settings = current()
    tag = settings.discovery_tag or f"mcc-hpc-{os.getpid()}"
    base = Transport.from_env() if settings.transport else Transport.loopback(tag)
    base = dataclasses.replace(base, discovery_tag=tag)
    return bulk_transport(base) if bulk else base


# -- DDS: missions under the supervisor -------------------------------------------------------


def primes_mission(
    *,
    n: int,
    workers: int,
    job_id: str,
    items: int | None = None,
    mode: str = "strided",
    persist: bool = True,
    checkpoint_interval_s: float | None = None,
    domain: int | None = None,
    manifest: Path = PRIMES_MISSION,
) -> Mission:
    """The primes mission (``missions/hpc-primes.yaml``) set up for one job.

    ``persist=False`` drops the persistence service: workers then do not ask for their
    checkpoint, and a replacement restarts its interrupted item from the beginning.
    """
    mission = load_manifest(manifest)
    for name in ("master", "worker"):
        if name not in mission.all_systems():
            raise HpcError(f"{manifest}: a primes mission needs a system {name!r}")
    master = mission.systems["master"]
    master_config: dict[str, Any] = {
        **(master.config or {}),
        **{"n": n, "workers": workers, "mode": mode, "job": job_id},
        **({"items": items} if items else {}),
    }
    worker = mission.all_systems()["worker"]
    worker_config: dict[str, Any] = {**(worker.config or {}), "job": job_id}
    if checkpoint_interval_s is not None:
        worker_config["checkpoint_interval_s"] = checkpoint_interval_s
    if not persist:
        worker_config["restore_timeout_s"] = 0
        master_config["journal_timeout_s"] = 0  # no journal: no failover, no wait for it
    systems: dict[str, System] = {}
    for name, system in mission.systems.items():
        if name == "persist" and not persist:
            continue
        after = [a for a in system.after if persist or a != "persist"]
        update: dict[str, Any] = {"after": after}
        if name == "master":
            update["config"] = master_config
        systems[name] = system.model_copy(update=update)
    clusters: dict[str, Cluster] = {}
    for name, cluster in mission.clusters.items():
        after = [a for a in cluster.after if persist or a != "persist"]
        update = {"after": after}
        if name == "worker":
            update.update(config=worker_config, size=workers, min=0, max=max(cluster.max, workers))
        clusters[name] = cluster.model_copy(update=update)
    if "worker" in mission.systems:
        systems["worker"] = mission.systems["worker"].model_copy(
            update={"config": worker_config, "replicas": workers}
        )
    return mission.model_copy(
        update={
            "systems": systems,
            "clusters": clusters,
            "domain": mission.domain if domain is None else domain,
        }
    )


def stream_mission(
    *,
    size_bytes: int,
    chunk_bytes: int,
    job_id: str,
    domain: int | None = None,
    security: str = "on",
) -> Mission:
    """Two nodes: ``source`` streams to ``echo`` and checks what comes back; ``security`` as a
    manifest's (``on``, the default: signed and encrypted)."""
    from mcc.orchestrate.manifest import parse_manifest

    return parse_manifest(
        f"""
mission: hpc-stream
domain: {21 if domain is None else domain}
security: {security}
systems:
  echo:
    app: "mcc.hpc.stream:echo"
    config: {{job: "{job_id}", expect_bytes: {size_bytes}}}
    resources: {{cpus: 0.5}}
    restart: never
    health: {{timeout_s: 30}}   # a GiB copied in and out of NumPy can hold the GIL a while
  source:
    app: "mcc.hpc.stream:source"
    config: {{job: "{job_id}", bytes: {size_bytes}, chunk: {chunk_bytes}}}
    resources: {{cpus: 0.5}}
    restart: never
    health: {{timeout_s: 30}}
""",
        source="<hpc-stream>",
    )


class _JobWatch:
    """A job's results and checkpoints as seen from the launcher's own bus (for a kill plan)."""

    def __init__(self, bus: Bus, job_id: str) -> None:
        self.job_id = job_id
        self.items: set[int] = set()
        # worker id → how many of its latest checkpoints in a row were taken inside an item
        self.in_item: dict[str, int] = {}
        self._results: Reader[WorkResult] = bus.reader("WorkResult", on_data=self._on_results)
        self._checkpoints: Reader[Checkpoint] = bus.reader(
            "Checkpoint", history=False, on_data=self._on_checkpoints
        )

    def _on_results(self, reader: Reader[WorkResult]) -> None:
        for sample in reader.take():
            if sample.job_id == self.job_id and sample.item_id != CONTROL_ID:
                self.items.add(int(sample.item_id))

    def _on_checkpoints(self, reader: Reader[Checkpoint]) -> None:
        for cp in reader.take():
            if cp.job_id == self.job_id:
                run = self.in_item.get(cp.worker_id, 0)
                self.in_item[cp.worker_id] = run + 1 if cp.state else 0

    def ready_to_kill(self, kill: KillPlan, items: int, victim: str) -> bool:
        if len(self.items) < kill.threshold(items):
            return False
        mid_item = kill.mid_item and kill.system == "worker"
        # Two in a row: the one before the newest was written a checkpoint interval ago, so the
        # persistence service has it even when the newest is still on its way when we kill.
        return not mid_item or self.in_item.get(victim, 0) >= 2


def _run_mission(
    mission: Mission,
    *,
    job_id: str,
    run_dir: Path,
    result_system: str,
    transport: Transport,
    kill: KillPlan | None = None,
    items: int = 0,
    timeout_s: float,
    home: Path | None = None,
) -> JobResult:
    """Run ``mission`` over ``transport`` until ``result_system`` wrote the job's result;
    apply ``kill``; ``home``: the supervisor's MCC home (default `registry.home`)."""
    path = result_path(run_dir, job_id)
    kill_info: dict[str, Any] = {}
    start_ns = time.time_ns()
    supervisor = open_mission(
        mission,
        run_dir=run_dir,
        watch=Topics(subscribe=("WorkResult", "Checkpoint")) if kill is not None else None,
        transport=transport,
        home=home,
    )
    with contextlib.ExitStack() as stack:
        stack.enter_context(supervisor)
        # On the supervisor's bus (one identity per domain and process); the workers it just
        # started have not produced anything yet.
        watch = _JobWatch(supervisor.bus, job_id) if kill is not None else None
        deadline = time.monotonic() + timeout_s
        next_status = 0.0
        while (result := read_result(path)) is None:
            # A kill to time needs the instances' states at every look; otherwise they only tell
            # a failed job apart: asked twice a second (the status is built under the
            # supervisor's lock, on the cores the job runs on).
            if watch is not None or time.monotonic() >= next_status:
                next_status = time.monotonic() + _STATUS_EVERY_S
                status = {i["id"]: i for i in supervisor.status()["instances"]}
                ended = status.get(f"{mission.mission}/{result_system}/0")
                if ended is not None and ended["state"] in ("failed", "stopped"):
                    result = read_result(path)  # written just before it exited
                    if result is not None:
                        break
                    log = run_dir / "logs" / f"{result_system}-0.log"
                    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
                    raise HpcError(
                        f"{mission.mission}: {result_system} {ended['state']} "
                        f"({ended['reason']}) without a result; its log ({log}) ends:\n{tail}"
                    )
                victim = f"{mission.mission}/{kill.system}/{kill.worker}" if kill else ""
                if (
                    watch is not None
                    and kill is not None
                    and not kill_info
                    and watch.ready_to_kill(kill, items, victim)
                ):
                    kill_info = _kill_worker(mission, status, kill, len(watch.items))
            if time.monotonic() > deadline:
                raise HpcError(
                    f"{mission.mission}: no result within {timeout_s:g} s; run folder {run_dir}"
                )
            time.sleep(0.005 if watch is not None and not kill_info else 0.05)
        restarts = {
            i["id"]: i["restarts"] for i in supervisor.status()["instances"] if i["restarts"]
        }
    first_ns = int(result.extra.get("first_item_ns", 0))
    result.launch_s = (first_ns - start_ns) / 1e9 if first_ns else None
    result.extra.update(run_dir=str(run_dir), restarts=restarts)
    if kill_info:
        result.extra["kill"] = kill_info
        hellos = [r for r in result.replacements if r.get("old_pid") == kill_info["pid"]]
        if hellos:
            kill_info["replacement_s"] = (hellos[0]["hello_ns"] - kill_info["kill_ns"]) / 1e9
        takeovers = result.extra.get("journal", {}).get("takeovers", [])
        if kill is not None and kill.system == "master" and takeovers:
            # kill → the successor's claim of the job (it re-issues at once)
            kill_info["replacement_s"] = (takeovers[0]["claim_ns"] - kill_info["kill_ns"]) / 1e9
    return result


def _kill_worker(
    mission: Mission, status: dict[str, Any], kill: KillPlan, results_in: int
) -> dict[str, Any]:
    victim = status.get(f"{mission.mission}/{kill.system}/{kill.worker}")
    # "starting" too: a loaded supervisor may not have seen the first heartbeat of a worker
    # that is already computing (a short job could end before it says "running").
    if victim is None or not victim["pid"] or victim["state"] not in ("starting", "running"):
        return {}
    kill_ns = time.time_ns()
    os.kill(victim["pid"], signal.SIGKILL)
    return {
        "worker": victim["id"],
        "pid": victim["pid"],
        "kill_ns": kill_ns,
        "results_in": results_in,
    }


def _run_dir(run_dir: Path | None, stack: contextlib.ExitStack, prefix: str) -> Path:
    if run_dir is not None:
        return Path(run_dir)
    return Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))


# -- entry points ------------------------------------------------------------------------------


def run_primes(
    impl: str,
    *,
    n: int,
    workers: int,
    items: int | None = None,
    mode: str = "strided",
    kill: KillPlan | None = None,
    persist: bool = True,
    checkpoint_interval_s: float | None = None,
    run_dir: Path | None = None,
    domain: int | None = None,
    timeout_s: float = 900.0,
    home: Path | None = None,
) -> JobResult:
    """Count the primes in [1, ``n``] with ``workers`` workers on ``impl`` (dds | mpi | mpi-tcp).

    ``kill`` kills a worker mid-run: on DDS the orchestrator replaces it and the job goes on;
    on MPI the job aborts and is run again from the start (MPI has no replacement), and
    ``lost_items`` counts the results thrown away. ``home``: the MCC home of the job's
    supervisor and node agent (default `mcc.orchestrate.registry.home`).
    """
    _check(n, workers, impl)
    n_items = items if items else 8 * workers
    if impl != "dds":
        return _run_mpi_primes(
            impl, n=n, workers=workers, items=n_items, kill=kill, timeout_s=timeout_s
        )
    job_id = f"primes-{os.getpid()}-{time.time_ns()}"
    with contextlib.ExitStack() as stack:
        folder = _run_dir(run_dir, stack, "mcc-hpc-primes-")
        mission = primes_mission(
            n=n,
            workers=workers,
            job_id=job_id,
            items=n_items,
            mode=mode,
            persist=persist,
            checkpoint_interval_s=checkpoint_interval_s,
            domain=domain,
        )
        return _run_mission(
            mission,
            job_id=job_id,
            run_dir=folder,
            result_system="master",
            transport=_job_transport(),
            kill=kill,
            items=n_items,
            timeout_s=timeout_s,
            home=home,
        )


def run_stream(
    impl: str,
    *,
    size_bytes: int,
    chunk_bytes: int,
    run_dir: Path | None = None,
    domain: int | None = None,
    timeout_s: float = 900.0,
    kind: TransportKind = "udp",
    home: Path | None = None,
    security: str = "on",
) -> JobResult:
    """Send ``size_bytes`` in ``chunk_bytes`` chunks to another process and back, checked;
    ``kind`` is the DDS transport between them (``shm``: iceoryx shared memory); ``home``: as
    `run_primes`'s; ``security``: the mission's (``none`` for the cost of DDS Security)."""
    _check(None, 1, impl)
    if size_bytes < 1 or chunk_bytes < 1:
        raise HpcError(f"stream: size {size_bytes} B and chunk {chunk_bytes} B must be >= 1")
    if impl != "dds":
        return _run_mpi_stream(
            impl, size_bytes=size_bytes, chunk_bytes=chunk_bytes, timeout_s=timeout_s
        )
    check_stream_sizes(size_bytes, chunk_bytes)
    job_id = f"stream-{os.getpid()}-{time.time_ns()}"
    with contextlib.ExitStack() as stack:
        folder = _run_dir(run_dir, stack, "mcc-hpc-stream-")
        mission = stream_mission(
            size_bytes=size_bytes,
            chunk_bytes=chunk_bytes,
            job_id=job_id,
            domain=domain,
            security=security,
        )
        return _run_mission(
            mission,
            job_id=job_id,
            run_dir=folder,
            result_system="source",
            transport=dataclasses.replace(_job_transport(bulk=True), kind=kind),
            timeout_s=timeout_s,
            home=home,
        )


# -- MPI -------------------------------------------------------------------------------------------


def _mpi_command(
    impl: str, workers: int, app_args: list[str], out: Path
) -> tuple[list[str], dict[str, str]]:
    command = [
        find_mpiexec(),
        "-n",
        str(workers + 1),
        sys.executable,
        "-m",
        "mcc.hpc.mpi",
        *app_args,
        "--out",
        str(out),
        "--impl",
        impl,
    ]
    env = {**child_env(), **(TCP_ENV if impl == "mpi-tcp" else {})}
    return command, env


def _mpi_once(
    impl: str,
    workers: int,
    app_args: list[str],
    *,
    timeout_s: float,
    kill: KillPlan | None = None,
    items: int = 0,
) -> tuple[JobResult | None, dict[str, Any]]:
    """One ``mpiexec`` run; with ``kill``, kill a worker rank mid-run (the job then aborts)."""
    with tempfile.TemporaryDirectory(prefix="mcc-hpc-mpi-") as tmp:
        out = Path(tmp) / "result.json"
        progress = ["--progress", "--pid-dir", tmp] if kill else []
        command, env = _mpi_command(impl, workers, app_args + progress, out)
        start_ns = time.time_ns()
        log: list[str] = []
        info: dict[str, Any] = {"start_ns": start_ns}
        proc = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        timer = threading.Timer(timeout_s, proc.kill)
        timer.start()
        try:
            assert proc.stdout is not None
            results = 0
            for line in proc.stdout:
                log.append(line)
                parts = line.split()
                if kill is None or len(parts) != 3 or parts[0] != "mcc-mpi":
                    continue
                if parts[1] == "first":
                    info["first_item_ns"] = int(parts[2])
                    continue
                results += 1
                if "kill_ns" not in info and results >= kill.threshold(items):
                    rank = 1 + kill.worker % workers
                    pid = int((Path(tmp) / f"rank-{rank}.pid").read_text())
                    info.update(kill_ns=time.time_ns(), pid=pid, results_in=results)
                    os.kill(pid, signal.SIGKILL)
            code = proc.wait()
        finally:
            timer.cancel()
            if proc.stdout is not None:
                proc.stdout.close()
        info.update(returncode=code, end_ns=time.time_ns())
        result = read_result(out) if code == 0 else None
        if result is None and "kill_ns" not in info:
            raise HpcError(
                f"{' '.join(command)} exited {code} without a result:\n{''.join(log)[-3000:]}"
            )
        if result is not None:
            first_ns = int(result.extra.get("first_item_ns", 0))
            result.launch_s = (first_ns - start_ns) / 1e9 if first_ns else None
        return result, info


def _run_mpi_primes(
    impl: str, *, n: int, workers: int, items: int, kill: KillPlan | None, timeout_s: float
) -> JobResult:
    app_args = ["primes", "--n", str(n), "--items", str(items)]
    result, info = _mpi_once(impl, workers, app_args, timeout_s=timeout_s, kill=kill, items=items)
    if kill is None:
        assert result is not None
        return result
    # The job aborted with the killed rank: run it again from the start, as MPI must.
    rerun, _ = _mpi_once(impl, workers, app_args, timeout_s=timeout_s)
    assert rerun is not None
    if "kill_ns" not in info:
        raise HpcError(f"{impl}: the job ended before a worker could be killed ({info})")
    # From the first item of the aborted run to the last result of the rerun.
    first_ns = int(info.get("first_item_ns", info["start_ns"]))
    rerun.runtime_s = (int(rerun.extra["last_result_ns"]) - first_ns) / 1e9
    rerun.reissued_items = items  # the whole job again
    rerun.extra["kill"] = {
        "pid": info["pid"],
        "kill_ns": info["kill_ns"],
        "results_in": info["results_in"],
        "aborted_returncode": info["returncode"],
        "results_thrown_away": info["results_in"],
        "replacement_s": (rerun.extra["first_item_ns"] - info["kill_ns"]) / 1e9,
    }
    return rerun


def _run_mpi_stream(impl: str, *, size_bytes: int, chunk_bytes: int, timeout_s: float) -> JobResult:
    app_args = ["stream", "--bytes", str(size_bytes), "--chunk", str(chunk_bytes)]
    result, _ = _mpi_once(impl, 1, app_args, timeout_s=timeout_s)
    assert result is not None
    return result
