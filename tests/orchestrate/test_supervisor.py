"""The supervisor on the local backend: real processes, real bus, real signals."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from mcc.orchestrate import Supervisor
from tests.conftest import wait_for

APP = "mcc.orchestrate.probe:idle"


def instances(supervisor: Supervisor, state: str | None = None) -> dict[str, dict[str, Any]]:
    return {
        i["id"]: i for i in supervisor.status()["instances"] if state is None or i["state"] == state
    }


def report(supervisor: Supervisor, system: str, index: int = 0) -> dict[str, Any] | None:
    path = supervisor.run_dir / f"report-{system}-{index}.json"
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def test_restart_keeps_identity(run_supervisor: Callable[..., Supervisor]) -> None:
    sup = run_supervisor(
        f"""
mission: ident
domain: {{domain}}
systems:
  tracker: {{app: "{APP}", args: [--report], restart: always}}
"""
    )
    first = wait_for(lambda: report(sup, "tracker"), what="the first report")
    wait_for(lambda: instances(sup, "running"), what="running")
    os.kill(first["pid"], signal.SIGKILL)
    second = wait_for(
        lambda: (r := report(sup, "tracker")) and r["pid"] != first["pid"] and r,
        what="the replacement's report",
    )
    assert second["id"] == first["id"] == "ident/tracker/0"
    assert second["env"]["MCC_INSTANCE_ID"] == "ident/tracker/0"
    assert not psutil.pid_exists(first["pid"])
    replaced = wait_for(lambda: instances(sup, "running").get("ident/tracker/0"))
    assert replaced["restarts"] == 1 and replaced["pid"] == second["pid"]
    assert "SIGKILL" in replaced["reason"] or replaced["reason"] == ""
    exits = [e for _, i, e in sup.events if i == "ident/tracker/0" and e.startswith("exit")]
    assert exits == ["exit -9"]


def test_pinning_priority_and_memory_limit_are_applied(
    run_supervisor: Callable[..., Supervisor],
) -> None:
    cores = sorted(os.sched_getaffinity(0))
    sup = run_supervisor(
        f"""
mission: pin
domain: {{domain}}
systems:
  tracker:
    app: "{APP}"
    args: [--report]
    pin: true
    priority: high
    resources: {{cpus: 1, memory_mb: 2048}}
  c2:
    app: "{APP}"
    priority: realtime
    resources: {{cpus: 0.1}}
"""
    )
    inst = wait_for(lambda: instances(sup, "running").get("pin/tracker/0"))
    c2 = wait_for(lambda: instances(sup, "running").get("pin/c2/0"))
    if os.sched_getscheduler(c2["pid"]) != os.SCHED_FIFO:  # not permitted here: said so
        assert "realtime priority (SCHED_FIFO 50) not permitted" in c2["reason"]
    else:
        assert os.sched_getparam(c2["pid"]).sched_priority == 50
    pid = inst["pid"]
    allowed = _proc_status(pid)["Cpus_allowed_list"]
    assert inst["cpus"] == str(cores[0]) == allowed  # read back from /proc
    nice = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])
    assert nice == -10
    limits = Path(f"/proc/{pid}/limits").read_text()
    data_line = next(line for line in limits.splitlines() if line.startswith("Max data size"))
    assert str(2048 * 2**20) in data_line


def _proc_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, v in (line.split(":", 1) for line in lines)}


def test_phase_change_starts_and_stops_systems(run_supervisor: Callable[..., Supervisor]) -> None:
    sup = run_supervisor(
        f"""
mission: phases
domain: {{domain}}
phases: [surveillance, engagement]
systems:
  radar: {{app: "{APP}", resources: {{cpus: 0.1}}}}
  launcher: {{app: "{APP}", phases: [engagement], replicas: 2, resources: {{cpus: 0.1}}}}
"""
    )
    wait_for(lambda: "phases/radar/0" in instances(sup, "running"))
    assert not any("launcher" in i for i in instances(sup))
    sup.set_phase("engagement")
    running = wait_for(
        lambda: (r := instances(sup, "running")) and len(r) == 3 and r, what="launchers"
    )
    launcher_pids = [i["pid"] for k, i in running.items() if "launcher" in k]
    sup.set_phase("surveillance")
    wait_for(lambda: set(instances(sup)) == {"phases/radar/0"}, what="launchers stopped")
    wait_for(lambda: not any(psutil.pid_exists(p) for p in launcher_pids), what="pids gone")
    assert sup.status()["phase"] == "surveillance"


def test_scale_up_and_down(run_supervisor: Callable[..., Supervisor]) -> None:
    sup = run_supervisor(
        f"""
mission: scale
domain: {{domain}}
clusters:
  mc: {{app: "{APP}", size: 2, max: 6, resources: {{cpus: 0.1}}}}
"""
    )
    wait_for(lambda: len(instances(sup, "running")) == 2)
    sup.scale("mc", 5)
    running = wait_for(lambda: (r := instances(sup, "running")) and len(r) == 5 and r)
    sup.scale("mc", 1)
    wait_for(lambda: list(instances(sup)) == ["scale/mc/0"], what="scale down to mc/0")
    gone = [i["pid"] for k, i in running.items() if k != "scale/mc/0"]
    wait_for(lambda: not any(psutil.pid_exists(p) for p in gone), what="removed workers gone")
    with pytest.raises(Exception, match=r"size 7 is outside \[min, max\] = \[0, 6\]"):
        sup.scale("mc", 7)


def test_requests_beyond_the_pool_wait_in_the_queue(
    run_supervisor: Callable[..., Supervisor],
) -> None:
    sup = run_supervisor(
        f"""
mission: queue
domain: {{domain}}
nodes: [{{name: box, cpus: 1.0}}]
systems:
  hog: {{app: "{APP}", resources: {{cpus: 0.8}}}}
  huge: {{app: "{APP}", resources: {{cpus: 4}}}}
clusters:
  mc: {{app: "{APP}", size: 2, resources: {{cpus: 0.4}}}}
"""
    )
    wait_for(lambda: "queue/hog/0" in instances(sup, "running"))
    pending = wait_for(lambda: (p := instances(sup, "pending")) and len(p) == 2 and p)
    assert pending["queue/mc/0"]["reason"].startswith("queued (1): needs 0.4 CPU; free")
    assert pending["queue/mc/1"]["reason"].startswith("queued (2)")
    failed = instances(sup, "failed")["queue/huge/0"]
    assert failed["reason"] == "cannot be placed: needs 4 CPUs; the largest node has 1"
    sup.stop_system("hog")  # frees 0.8 CPU: both workers start
    wait_for(lambda: {"queue/mc/0", "queue/mc/1"} <= set(instances(sup, "running")))


def test_a_silent_instance_is_killed_and_restarted(
    run_supervisor: Callable[..., Supervisor],
) -> None:
    sup = run_supervisor(
        f"""
mission: silent
domain: {{domain}}
systems:
  frozen:
    app: "{APP}"
    args: [--freeze-after, "0.5"]
    restart: {{policy: always, backoff_s: 0.1}}
    health: {{timeout_s: 1.0}}
"""
    )
    first = wait_for(lambda: instances(sup, "running").get("silent/frozen/0"))
    wait_for(lambda: _state(first["pid"]) == "stopped", what="the probe to freeze")
    replaced = wait_for(
        lambda: (i := instances(sup).get("silent/frozen/0")) and i["restarts"] >= 1 and i,
        what="a restart",
    )
    kills = [e for _, _, e in sup.events if e.startswith("kill: silent for")]
    assert kills, sup.events
    wait_for(lambda: not psutil.pid_exists(first["pid"]), what="the frozen process gone")
    assert replaced["id"] == "silent/frozen/0"


def _state(pid: int) -> str:
    try:
        return str(psutil.Process(pid).status())
    except psutil.NoSuchProcess:
        return "gone"


def test_commands_run_and_close_leaves_no_orphans(
    run_supervisor: Callable[..., Supervisor],
) -> None:
    sup = run_supervisor(
        f"""
mission: clean
domain: {{domain}}
systems:
  sleeper: {{command: [sleep, "300"], replicas: 2, resources: {{cpus: 0.1}}}}
  app: {{app: "{APP}", resources: {{cpus: 0.1}}}}
  stubborn:
    command: [sh, -c, "trap '' TERM; sleep 300 & wait"]
    resources: {{cpus: 0.1}}
stop_grace_s: 1.0
"""
    )
    running = wait_for(lambda: (r := instances(sup, "running")) and len(r) == 4 and r)
    pids = [i["pid"] for i in running.values()]
    children = [c.pid for p in pids for c in psutil.Process(p).children(recursive=True)]
    zygote = psutil.Process(pids[0]).ppid()
    sup.close()
    for pid in [*pids, *children, zygote]:
        assert not psutil.pid_exists(pid) or _state(pid) == "zombie", pid
    final = sup.status()
    assert final["state"] == "stopped"
    assert {i["state"] for i in final["instances"]} == {"stopped"}
    summary = json.loads((sup.run_dir / "supervisor.json").read_text())
    assert summary["state"] == "stopped" and summary["events"]


def test_the_fork_server_imports_the_missions_apps_before_it_forks_them(
    run_supervisor: Callable[..., Supervisor], tmp_path: Path
) -> None:
    """A local mission's agent imports its apps once, before forking instances: a restarted
    instance does not import its app again (a farm worker's replacement started sooner)."""
    sup = run_supervisor(
        "mission: preload\ndomain: {domain}\nsystems:\n"
        "  probe: {app: 'tests.orchestrate.preload_app:main', replicas: 2, restart: never}\n"
    )
    run = tmp_path / "run"
    seen = [
        wait_for(lambda i=i: (run / f"imported-{i}").exists() and (run / f"imported-{i}"), 60.0)
        for i in (0, 1)
    ]
    imported_by = set()
    for path in seen:
        by, pid, parent = map(int, path.read_text().split())
        assert by != pid and by == parent  # in the fork server, not in the instance
        imported_by.add(by)
    assert len(imported_by) == 1
    assert sup.instances["preload/probe/0"].pid
