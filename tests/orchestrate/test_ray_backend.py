"""The Ray backend on a simulated 3-node Ray cluster (``ray.cluster_utils.Cluster``).

Nodes ``a`` (head), ``b`` and ``c`` carry the custom resources ``node:a``/``node:b``/``node:c``
(their human names) and ``b``, ``c`` also ``pool``; the GCS health check is tuned so a dead
node is noticed in about a second. Instances are a small Python script that records its pid,
host and identity (one JSON line per start) and sleeps until SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import pytest

from mcc.errors import OrchestratorError
from mcc.orchestrate.backends.base import ExitEvent, LaunchSpec
from mcc.orchestrate.backends.ray import RayBackend
from mcc.settings import env_name
from tests.conftest import IN_CI
from tests.conftest import wait_for as wait_until

try:
    import ray
    from ray.cluster_utils import Cluster
except ImportError:  # the 'ray' extra; CI installs it (dev), so there it fails
    if IN_CI:
        raise
    pytest.skip("Ray is not installed: pip install 'mcc[ray]'", allow_module_level=True)

pytestmark = pytest.mark.slow

HEALTH_CHECK = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 300,
    "health_check_timeout_ms": 500,
    "health_check_failure_threshold": 3,
}

SCRIPT = """\
import json, os, signal, socket, sys, time

def on_term(signum, frame):
    with open(sys.argv[1] + ".term", "a") as f:
        f.write(os.environ["MCC_INSTANCE_ID"] + "\\n")
    sys.exit(int(os.environ.get("TERM_CODE", "0")))

if os.environ.get("IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, on_term)
record = {
    "pid": os.getpid(),
    "host": socket.gethostname(),
    "identity": os.environ["MCC_INSTANCE_ID"],
    "index": os.environ["MCC_INDEX"],
    "cpus": sorted(os.sched_getaffinity(0)),
    "nice": os.getpriority(os.PRIO_PROCESS, 0),
}
run_dir = os.environ.get("MCC_RUN_DIR")
if run_dir:  # a state file, as a launcher keeps one: the pids that ran before this one
    name = "%s-%s.json" % (os.environ["MCC_SYSTEM"], os.environ["MCC_INDEX"])
    state = os.path.join(run_dir, "state", name)
    try:
        record["state_found"] = json.load(open(state))
    except FileNotFoundError:
        record["state_found"] = None
    os.makedirs(os.path.dirname(state), exist_ok=True)
    pids = (record["state_found"] or {}).get("pids", []) + [os.getpid()]
    with open(state + ".tmp", "w") as f:
        json.dump({"pids": pids}, f)
    os.replace(state + ".tmp", state)
folder = os.environ.get("MCC_IDENTITY_DIR")
if folder:
    record["identity_dir"] = [folder, oct(os.stat(folder).st_mode & 0o777)]
    record["identity_files"] = {
        name: [oct(os.stat(os.path.join(folder, name)).st_mode & 0o777),
               open(os.path.join(folder, name)).read()]
        for name in sorted(os.listdir(folder))
    }
with open(sys.argv[1], "a") as f:
    f.write(json.dumps(record) + "\\n")
print("started", record["identity"], flush=True)
if "EXIT_CODE" in os.environ:
    sys.exit(int(os.environ["EXIT_CODE"]))
while True:
    time.sleep(0.1)
"""


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    return wait_until(check, timeout_s, what)


def gone(pid: int) -> bool:
    """The process is dead (a zombie waiting for a reaper counts as dead)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def contains(path: Path, text: str) -> bool:
    return path.exists() and text in path.read_text()


def records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    started = time.monotonic()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 2,
            "resources": {"node:a": 1},
            "include_dashboard": False,
            "_system_config": HEALTH_CHECK,
        },
    )
    cluster.add_node(num_cpus=2, resources={"node:b": 1, "pool": 1})
    cluster.add_node(num_cpus=2, resources={"node:c": 1, "pool": 1})
    cluster.wait_for_nodes()
    print(f"\nray cluster of 3 nodes up in {time.monotonic() - started:.1f} s")
    yield cluster
    cluster.shutdown()


class Launcher:
    """Builds specs for the test script and remembers every pid that ran."""

    def __init__(self, backend: RayBackend, tmp_path: Path) -> None:
        self.backend = backend
        self.tmp_path = tmp_path
        self.script = tmp_path / "instance.py"
        self.script.write_text(SCRIPT)
        self.pids: list[int] = []  # every process that ran, checked after close()

    def spec(self, system: str, index: int = 0, **overrides: Any) -> LaunchSpec:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "MCC_MISSION": "test",
            "MCC_SYSTEM": system,
            "MCC_INDEX": str(index),
            "MCC_INSTANCE_ID": f"test/{system}/{index}",
            **overrides.pop("env", {}),
        }
        out = self.tmp_path / f"{system}-{index}.jsonl"
        fields: dict[str, Any] = {
            "instance_id": f"test/{system}/{index}",
            "system": system,
            "index": index,
            "argv": (sys.executable, str(self.script), str(out)),
            "env": env,
            "log_path": str(self.tmp_path / "logs" / f"{system}-{index}.log"),
            "cpus": 0.5,
        }
        fields.update(overrides)
        return LaunchSpec(**fields)

    def out(self, spec: LaunchSpec) -> Path:
        return Path(spec.argv[2])

    def start(self, spec: LaunchSpec) -> dict[str, Any]:
        """Start and wait for the instance's own record; check it agrees with ``where``.

        (An instance that exits at once may be gone from ``where`` already.)
        """
        running = self.backend.start(spec)
        self.pids.append(running.pid)
        record = wait_for(
            f"{spec.instance_id} to record its start",
            lambda: next((r for r in records(self.out(spec)) if r["pid"] == running.pid), None),
        )
        assert record["identity"] == spec.instance_id
        where = self.backend.where(spec.instance_id)
        if "EXIT_CODE" not in spec.env:
            assert where is not None and where.pid == running.pid
        return {**record, "node": running.node}


@pytest.fixture
def launcher(cluster: Cluster, tmp_path: Path) -> Iterator[Launcher]:
    """An open backend on the cluster; after the test, close() must leave no process behind."""
    started = time.monotonic()
    backend = RayBackend(address=cluster.address, namespace="mcc-test", start_timeout_s=20.0)
    backend.open()
    print(f"\nray backend connected in {time.monotonic() - started:.1f} s")
    launcher = Launcher(backend, tmp_path)
    yield launcher
    backend.close(grace_s=2.0)
    assert not ray.is_initialized()
    survivors = [pid for pid in launcher.pids if not gone(pid)]
    assert not survivors, f"instance processes left behind by close(): {survivors}"


@pytest.fixture
def backend(launcher: Launcher) -> RayBackend:
    return launcher.backend


def test_without_an_address_it_starts_its_own_ray(tmp_path: Path) -> None:
    """The default of `mcc up --backend ray`: a private Ray instance, gone after close()."""
    started = time.monotonic()
    backend = RayBackend(namespace="mcc-local", num_cpus=2, system_config=HEALTH_CHECK)
    backend.open()
    print(f"\nlocal ray instance up in {time.monotonic() - started:.1f} s")
    try:
        (name,) = backend.capacity()  # one node, named by its address
        launcher = Launcher(backend, tmp_path)
        record = launcher.start(launcher.spec("radar"))
        assert record["node"] == name
        backend.stop("test/radar/0", grace_s=5.0)
        assert exit_of(backend, "test/radar/0").returncode == 0
    finally:
        backend.close()
    assert not ray.is_initialized()
    assert gone(record["pid"])


def exit_of(backend: RayBackend, instance_id: str, timeout_s: float = 20.0) -> ExitEvent:
    seen: list[ExitEvent] = []

    def check() -> ExitEvent | None:
        seen.extend(backend.poll())
        return next((e for e in seen if e.instance_id == instance_id), None)

    event: ExitEvent = wait_for(f"the exit of {instance_id}", check, timeout_s)
    return event


def test_instances_run_with_their_identity_on_their_labelled_nodes(
    backend: RayBackend, launcher: Launcher
) -> None:
    assert backend.capacity() == {"a": 2.0, "b": 2.0, "c": 2.0}
    for index, node in enumerate("abca"):  # a label places, it does not count: two on a
        spec = launcher.spec("radar", index, labels={f"node:{node}": 1})
        record = launcher.start(spec)
        assert record["node"] == node
        assert record["index"] == str(index)
        wait_for("the log line", partial(contains, Path(spec.log_path), "started"))
        assert backend.tail(spec.instance_id) == [f"started {spec.instance_id}"]
    with pytest.raises(OrchestratorError, match="no Ray node offers"):
        backend.start(launcher.spec("sonar", labels={"node:nowhere": 1}))
    with pytest.raises(OrchestratorError, match="already running"):
        backend.start(launcher.spec("radar", 0, labels={"node:a": 1}))
    with pytest.raises(OrchestratorError, match="cannot run"):
        backend.start(launcher.spec("broken", argv=("/nonexistent/program",)))
    assert backend.warnings() == []


def test_exit_is_reported_with_its_code_and_the_identity_restarts(
    backend: RayBackend, launcher: Launcher
) -> None:
    spec = launcher.spec("tewa", env={"EXIT_CODE": "3"})
    first = launcher.start(spec)
    event = exit_of(backend, spec.instance_id)
    assert (event.pid, event.returncode) == (first["pid"], 3)
    assert backend.where(spec.instance_id) is None
    # the supervisor restarts it with the same spec: same name, a new actor
    again = launcher.start(launcher.spec("tewa", env={"EXIT_CODE": "0"}))
    assert again["identity"] == spec.instance_id and again["pid"] != first["pid"]
    assert exit_of(backend, spec.instance_id).returncode == 0


def test_an_instance_gets_its_identity_on_its_node_and_it_leaves_with_it(
    backend: RayBackend, launcher: Launcher
) -> None:
    """A secured mission's instance on another node: its identity travels with the actor
    (never in argv or the environment), is written 0600 into a 0700 folder of that node for as
    long as it runs, and is removed when it exits."""
    identity = {"cert.pem": b"CERT of test/radar/7", "key.pem": b"KEY of test/radar/7"}
    spec = launcher.spec(
        "radar", 7, labels={"node:b": 1}, identity=identity, env={"EXIT_CODE": "0"}
    )
    assert "KEY of" not in repr(spec) and not any("KEY of" in v for v in spec.env.values())
    record = launcher.start(spec)
    assert record["node"] == "b"
    folder, mode = record["identity_dir"]
    assert mode == "0o700" and Path(folder).name.startswith("test.radar.7.")
    assert record["identity_files"] == {
        "cert.pem": ["0o600", "CERT of test/radar/7"],
        "key.pem": ["0o600", "KEY of test/radar/7"],
    }
    assert exit_of(backend, spec.instance_id).returncode == 0
    wait_for("the identity folder removed", lambda: not Path(folder).exists())


def test_stop_is_graceful_and_kill_is_not(backend: RayBackend, launcher: Launcher) -> None:
    core = min(os.sched_getaffinity(0))
    gentle = launcher.spec("tracker", env={"TERM_CODE": "0"}, priority="high", cpu_set=(core,))
    stubborn = launcher.spec("launcher", env={"IGNORE_TERM": "1"})
    record = launcher.start(gentle)
    assert record["cpus"] == [core]
    refused = [w.message for w in backend.warnings()]  # nice -10 needs CAP_SYS_NICE
    if record["nice"] != -10:
        assert record["nice"] == 0 and "high priority (nice -10) not permitted" in refused[0]
    launcher.start(stubborn)
    backend.stop(gentle.instance_id, grace_s=5.0)
    assert exit_of(backend, gentle.instance_id).returncode == 0
    term_file = Path(str(launcher.out(gentle)) + ".term")
    assert term_file.read_text().split() == [gentle.instance_id]
    started = time.monotonic()
    backend.stop(stubborn.instance_id, grace_s=0.5)  # ignores SIGTERM: SIGKILL after 0.5 s
    assert exit_of(backend, stubborn.instance_id).returncode == -9
    assert time.monotonic() - started >= 0.5
    killed = launcher.start(launcher.spec("launcher", 1))
    backend.kill("test/launcher/1")
    assert exit_of(backend, "test/launcher/1").returncode == -9
    assert gone(killed["pid"])
    # cores this node lacks are reported, not fatal
    launcher.start(launcher.spec("pinned", cpu_set=(0, 4096)))
    warnings = wait_for("a pinning warning", backend.warnings)
    assert "cores [4096] are not on Ray node" in warnings[0].message


def test_virtual_clusters_are_placement_groups(backend: RayBackend, launcher: Launcher) -> None:
    from ray.util import placement_group_table

    def cluster_spec(name: str, index: int, placement: str) -> LaunchSpec:
        return launcher.spec(
            name,
            index,
            placement_group=name,
            placement=placement,
            cpus=1.0,
            env={env_name("cluster_size"): "2"},
        )

    spread = [launcher.start(cluster_spec("workers", i, "spread")) for i in range(2)]
    assert spread[0]["node"] != spread[1]["node"]
    packed = [launcher.start(cluster_spec("montecarlo", i, "pack")) for i in range(2)]
    assert packed[0]["node"] == packed[1]["node"]
    # scale-up beyond the group's bundles: another group with the same strategy
    launcher.start(cluster_spec("montecarlo", 2, "pack"))
    groups = {g["name"]: g for g in placement_group_table().values() if g["state"] == "CREATED"}
    assert {name: g["strategy"] for name, g in groups.items()} == {
        "mcc-test/workers/0": "SPREAD",
        "mcc-test/montecarlo/0": "PACK",
        "mcc-test/montecarlo/1": "PACK",
    }
    for index in range(2):
        backend.stop(f"test/workers/{index}", grace_s=2.0)
        exit_of(backend, f"test/workers/{index}")
    # all its instances gone: the group is removed
    workers = [g for g in placement_group_table().values() if g["name"] == "mcc-test/workers/0"]
    assert [g["state"] for g in workers] == ["REMOVED"]


def test_node_loss_moves_instances_with_their_identity(
    cluster: Cluster, backend: RayBackend, launcher: Launcher
) -> None:
    """Kill a worker node (raylet and workers, no grace): Ray restarts its actors elsewhere,
    with the state file their instance kept (carried in Ray's GCS: here the lost node's copy
    is deleted first, as its disk is lost with it). A kill sent to an instance of the lost
    node (the supervisor's, for its silence) is for that process only: the moved ones live
    on. (On the container lab Ray retried such a kill on the restarted actor, which killed the
    instance it had just moved: the SAM TOC test of tests/lab/test_ray_lab.py; here the kill
    does not reach the new actor either way.)"""
    from ray.experimental import internal_kv

    run_dir = launcher.tmp_path / "run"
    movers = [
        launcher.spec("hpc", i, labels={"pool": 1}, env={"MCC_RUN_DIR": str(run_dir)})
        for i in range(2)
    ]
    first = {spec.instance_id: launcher.start(spec) for spec in movers}
    stayer = launcher.start(launcher.spec("persist", labels={"node:a": 1}))
    victim_name = first[movers[0].instance_id]["node"]
    victim = next(
        node for node in cluster.worker_nodes if backend.node_name(node.node_id) == victim_name
    )
    lost = [spec for spec in movers if first[spec.instance_id]["node"] == victim_name]
    pinned = launcher.spec("sensor", labels={f"node:{victim_name}": 1})
    launcher.start(pinned)
    for spec in lost:
        key = f"mcc-state:{run_dir}:{spec.instance_id}".encode()
        wait_for(f"{spec.instance_id}'s state", partial(internal_kv._internal_kv_get, key))
        (run_dir / "state" / f"hpc-{spec.index}.json").unlink()
    killed_at = time.monotonic()
    cluster.remove_node(victim, allow_graceful=False)
    for spec in lost:
        backend.kill(spec.instance_id)  # as the supervisor does once it hears it no more
        pid = first[spec.instance_id]["pid"]
        wait_for(f"pid {pid} to die with its node", partial(gone, pid), 5.0)
    died_s = time.monotonic() - killed_at

    def moved(spec: LaunchSpec) -> dict[str, Any] | None:
        where = backend.where(spec.instance_id)
        if where is None or where.pid == first[spec.instance_id]["pid"]:
            return None
        record = next((r for r in records(launcher.out(spec)) if r["pid"] == where.pid), None)
        return {**record, "node": where.node} if record else None

    events: list[ExitEvent] = []

    def back(spec: LaunchSpec) -> dict[str, Any] | None:
        events.extend(backend.poll())
        return moved(spec)

    for spec in lost:
        record = wait_for(f"{spec.instance_id} back on a surviving node", partial(back, spec))
        launcher.pids.append(record["pid"])
        assert record["identity"] == spec.instance_id
        assert record["state_found"] == {"pids": [first[spec.instance_id]["pid"]]}  # carried
        assert record["node"] not in (victim_name, "a")  # only b and c have "pool"
    failover_s = time.monotonic() - killed_at
    print(
        f"\nnode {victim_name} lost: its {len(lost)} instance(s) dead in {died_s:.2f} s, "
        f"back with the same identity in {failover_s:.2f} s"
    )
    time.sleep(2.0)  # long enough for a kill retried on the restarted actors to land
    events.extend(backend.poll())
    for spec in lost:
        assert psutil.pid_exists(backend.where(spec.instance_id).pid)  # type: ignore[union-attr]
    # an instance pinned to the lost node cannot move: an exit, so the supervisor decides
    if not any(e.instance_id == pinned.instance_id for e in events):
        events.append(exit_of(backend, pinned.instance_id, 10.0))
    assert [(e.instance_id, e.returncode) for e in events] == [(pinned.instance_id, -9)]
    assert any("lost and no other node offers" in w.message for w in backend.warnings())
    assert backend.where(stayer["identity"]).pid == stayer["pid"]  # type: ignore[union-attr]
    assert victim_name not in backend.capacity()
    # the moved actor is a working one: a stop reaches the new process
    backend.stop(lost[0].instance_id, grace_s=5.0)
    assert exit_of(backend, lost[0].instance_id).returncode == 0


def test_the_supervisor_fails_over_a_lost_node_and_status_shows_where(
    cluster: Cluster,
    tmp_path: Path,
    domain_id: int,
    bus_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`mcc up --backend ray` on three nodes: lose one, its instances come back elsewhere with
    the same identity, heartbeating on the bus, and `mcc status` says where they run now."""
    from mcc.orchestrate import Supervisor, parse_manifest
    from tests.conftest import run_cli

    monkeypatch.setenv("MCC_HOME", str(tmp_path / "home"))
    spare = cluster.add_node(num_cpus=2, resources={"node:d": 1, "pool": 1})
    cluster.wait_for_nodes()
    mission = parse_manifest(
        f"""
mission: rayfo
domain: {domain_id}
clusters:
  w:
    app: mcc.orchestrate.probe:idle
    size: 4
    placement: spread
    resources: {{cpus: 0.25}}
    restart: always
    health: {{timeout_s: 15, startup_s: 60}}   # longer than Ray's node-loss detection
"""
    )
    backend = RayBackend(address=cluster.address, namespace="mcc-rayfo", start_timeout_s=30.0)
    supervisor = Supervisor(mission, backend=backend, run_dir=tmp_path / "run")
    with supervisor:

        def running() -> dict[str, dict[str, Any]]:
            return {i["id"]: i for i in supervisor.status()["instances"] if i["state"] == "running"}

        first = wait_for("4 workers heartbeating", lambda: len(r := running()) == 4 and r, 90)
        on_spare = [i for i in first.values() if i["node"] == "d"]
        if not on_spare:  # spread put none on the spare node: move one there by hand
            pytest.skip("Ray's SPREAD placed no worker on the spare node")
        killed_at = time.monotonic()
        cluster.remove_node(spare, allow_graceful=False)

        def replaced() -> dict[str, dict[str, Any]] | None:
            now = running()
            moved = {
                i["id"]: now[i["id"]]
                for i in on_spare
                if i["id"] in now
                and now[i["id"]]["pid"] != i["pid"]
                and now[i["id"]]["node"] != "d"
            }
            return moved if len(moved) == len(on_spare) else None

        moved = wait_for("the lost node's workers back elsewhere", replaced, 60)
        failover_s = time.monotonic() - killed_at
        print(
            f"\nsupervisor on ray: {len(moved)} worker(s) of lost node d back in {failover_s:.1f} s"
        )
        status = json.loads(run_cli(["status", "--json"], env={**os.environ}).stdout)
        where = {i["id"]: i["node"] for i in status["instances"]}
        for instance_id, inst in moved.items():
            assert where[instance_id] == inst["node"] != "d"
        assert status["backend"] == "ray"
        assert any(e.startswith("moved to") for _, _, e in supervisor.events)


class RayMission:
    """`mcc up --backend ray` of a small mission on the test cluster, in processes of its own."""

    def __init__(self, cluster: Cluster, tmp_path: Path, domain_id: int, env: dict[str, str]):
        self.tmp_path = tmp_path
        self.manifest = tmp_path / "rayha.yaml"
        self.manifest.write_text(
            f"""
mission: rayha
domain: {domain_id}
clusters:
  w:
    app: mcc.orchestrate.probe:idle
    size: 2
    max: 4
    resources: {{cpus: 0.25}}
"""
        )
        self.env = {**env, "MCC_HOME": str(tmp_path / "home"), "MCC_AGENT_ORPHAN_S": "30"}
        self.argv = [sys.executable, "-m", "mcc.cli", "up", str(self.manifest), "--backend"]
        self.argv += ["ray", "--address", cluster.address, "--quiet"]
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.logs: list[Any] = []

    def up(self, name: str) -> subprocess.Popen[str]:
        out = (self.tmp_path / f"{name}.log").open("w")
        self.logs.append(out)
        proc = subprocess.Popen(
            self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT, text=True
        )
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.tmp_path / f"{name}.log").read_text()

    def status(self, timeout_s: float = 5.0) -> dict[str, Any] | None:
        from tests.conftest import run_cli

        args = ["status", "--json", "--timeout", f"{timeout_s:g}"]
        proc = run_cli(args, env=self.env, check=False)
        return json.loads(proc.stdout) if proc.returncode == 0 else None

    def wait(self, predicate: Callable[[dict[str, Any]], bool], timeout_s: float = 90.0) -> Any:
        return wait_for(
            "the status asked for",
            lambda: (st := self.status()) is not None and predicate(st) and st,
            timeout_s,
        )

    def cli(self, *args: str) -> str:
        from tests.conftest import run_cli

        return run_cli(list(args), env=self.env).stdout.strip()

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for out in self.logs:
            out.close()

    def no_actor_left(self) -> None:
        ray.init(address=self.argv[-2], namespace="mcc-rayha", log_to_driver=False)
        try:
            wait_until(
                lambda: (
                    not [
                        a
                        for a in ray.util.list_named_actors(all_namespaces=True)
                        if a["namespace"] == "mcc-rayha"
                    ]
                ),
                20,
                "no actor of the mission left",
            )
            groups = ray.util.placement_group_table().values()
            left = [g["name"] for g in groups if g["state"] != "REMOVED"]
            assert not [name for name in left if name.startswith("mcc-rayha/")], left
        finally:
            ray.shutdown()


def running_of(st: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {i["id"]: i for i in st["instances"] if i["state"] == "running"}


@pytest.fixture
def ray_mission(
    cluster: Cluster, tmp_path: Path, domain_id: int, bus_env: dict[str, str]
) -> Iterator[RayMission]:
    mission = RayMission(cluster, tmp_path, domain_id, bus_env)
    yield mission
    mission.close()


def test_a_standby_supervisor_adopts_the_instances_without_restarting_any(
    ray_mission: RayMission,
) -> None:
    """Two `mcc up --backend ray` of one mission: the second stands by; kill -9 of the active
    one leaves its (detached) instance actors running, and the standby adopts them within about
    the lease (0.8 s), restarting none, keeping the scaled size; `mcc down` through it stops
    everything, the mission's leader actor included."""
    m = ray_mission
    first = m.up("first")
    m.wait(lambda s: len(running_of(s)) == 2)
    standby = m.up("standby")
    st = m.wait(lambda s: [x["role"] for x in s["supervisors"]] == ["active", "standby"])
    assert st["supervisors"][0]["pid"] == first.pid
    m.cli("scale", "w", "3")  # desired state the standby must keep
    before = running_of(m.wait(lambda s: len(running_of(s)) == 3))
    killed = time.monotonic()
    first.kill()
    first.wait(10)
    answered = None
    while time.monotonic() - killed < 15:
        st2 = m.status(timeout_s=2.0)
        if st2 is not None and st2["supervisors"][0]["pid"] == standby.pid:
            answered = time.monotonic() - killed
            break
    assert answered is not None, m.log("standby")
    print(f"\nray standby commanding {answered:.2f} s after kill -9 of the active")
    assert answered < 5.0, answered  # the lease (0.8 s), then `mcc status` (a new process)
    after = running_of(st2)
    assert {k: v["pid"] for k, v in after.items()} == {k: v["pid"] for k, v in before.items()}
    assert all(i["restarts"] == 0 for i in after.values())
    assert st2["clusters"]["w"]["size"] == 3
    assert m.cli("down") == "mcc down: stopped"
    assert standby.wait(30) == 0
    log = m.log("standby")
    assert "stands by" in log and "adopted 3 running instances" in log, log
    assert "Traceback" not in log, log
    m.no_actor_left()
    pids = [i["pid"] for i in before.values()]
    wait_until(lambda: all(gone(p) for p in pids), 20, "every instance gone")


def test_a_paused_active_supervisor_is_fenced_when_it_comes_back(ray_mission: RayMission) -> None:
    """The active supervisor frozen (SIGSTOP: a GC pause, a VM stall) past its lease: the
    standby takes over; the old one, resumed, learns at its next renewal that it is fenced
    and leaves, stopping nothing, and the instance actors would refuse its signals."""
    m = ray_mission
    first = m.up("first")
    m.wait(lambda s: len(running_of(s)) == 2)
    standby = m.up("standby")
    before = running_of(
        m.wait(lambda s: [x["role"] for x in s["supervisors"]] == ["active", "standby"])
    )
    os.kill(first.pid, signal.SIGSTOP)
    try:
        m.wait(lambda s: s["supervisors"][0]["pid"] == standby.pid, 30)
    finally:
        os.kill(first.pid, signal.SIGCONT)
    assert first.wait(30) == 0  # fenced: it leaves, stopping nothing
    assert "fenced" in m.log("first"), m.log("first")
    st = m.wait(lambda s: len(running_of(s)) == 2)
    assert {k: v["pid"] for k, v in running_of(st).items()} == {
        k: v["pid"] for k, v in before.items()
    }
    # the old epoch's signals are refused by the actors themselves
    ray.init(address=m.argv[-2], namespace="mcc-rayha", log_to_driver=False)
    try:
        actor = ray.get_actor("rayha/w/0", namespace="mcc-rayha")
        assert ray.get(actor.kill.remote(1), timeout=20) is False
        assert ray.get(actor.info.remote(), timeout=20)["exited"] is False
    finally:
        ray.shutdown()
    assert m.cli("down") == "mcc down: stopped"
    assert standby.wait(30) == 0
    m.no_actor_left()


def test_a_mission_nobody_controls_stops_itself(ray_mission: RayMission) -> None:
    """kill -9 of the only supervisor: the detached instances run on, and once nobody renewed
    the lease for MCC_AGENT_ORPHAN_S the mission's leader stops them and itself."""
    m = ray_mission
    m.env["MCC_AGENT_ORPHAN_S"] = "4"
    first = m.up("first")
    st = m.wait(lambda s: len(running_of(s)) == 2)
    pids = [i["pid"] for i in running_of(st).values()]
    first.kill()
    first.wait(10)
    time.sleep(1.5)  # no supervisor, well within the orphan time: nothing stops
    assert not any(gone(p) for p in pids)
    wait_until(lambda: all(gone(p) for p in pids), 30, "the orphaned instances stopped")
    m.no_actor_left()
