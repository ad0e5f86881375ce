"""No single point of failure in the control plane: `mcc up` killed with -9, a standby
supervisor, a paused (or cut off) active supervisor, a killed node agent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from mcc.orchestrate.agent import AgentPaths
from tests.conftest import mcc_up, run_cli, wait_for

APP = "mcc.orchestrate.probe:idle"
MANIFEST = """\
mission: fo
domain: {domain}
systems:
  radar: {{app: "{app}", resources: {{cpus: 0.1}}}}
  peer: {{command: [sleep, "300"], resources: {{cpus: 0.1}}}}
clusters:
  w: {{app: "{app}", size: 2, max: 4, resources: {{cpus: 0.1}}}}
"""
IDS = {"fo/radar/0", "fo/peer/0", "fo/w/0", "fo/w/1"}


@pytest.fixture
def env(tmp_path: Path, bus_env: dict[str, str]) -> dict[str, str]:
    return {**bus_env, "MCC_HOME": str(tmp_path / "home"), "MCC_AGENT_ORPHAN_S": "30"}


@pytest.fixture
def mission_file(tmp_path: Path, domain_id: int) -> Path:
    path = tmp_path / "fo.yaml"
    path.write_text(MANIFEST.format(domain=domain_id, app=APP))
    return path


def status(env: dict[str, str], timeout_s: float = 5.0) -> dict[str, Any] | None:
    proc = run_cli(["status", "--json", "--timeout", f"{timeout_s:g}"], env=env, check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def wait_status(env: dict[str, str], predicate: Any, timeout_s: float = 40.0) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        st = status(env)
        return st if st is not None and predicate(st) else None

    return dict(wait_for(check, timeout_s, "the status asked for"))


def running(st: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {i["id"]: i for i in st["instances"] if i["state"] == "running"}


def all_running(st: dict[str, Any]) -> bool:
    return set(running(st)) == IDS


def agent_pid(env: dict[str, str], domain: int) -> int:
    paths = AgentPaths.for_mission(Path(env["MCC_HOME"]), "fo", domain)
    return int(json.loads(paths.state.read_text())["agent_pid"])


def gone(pids: list[int]) -> bool:
    return not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in pids)


@pytest.fixture
def first(mission_file: Path, env: dict[str, str], tmp_path: Path) -> Iterator[Any]:
    with mcc_up(mission_file, env=env, log=tmp_path / "first.log") as proc:
        yield proc


@pytest.mark.slow
def test_kill_9_of_mcc_up_leaves_the_mission_running_and_the_next_one_adopts_it(
    first: subprocess.Popen[str],
    mission_file: Path,
    env: dict[str, str],
    tmp_path: Path,
    domain_id: int,
) -> None:
    before = running(wait_status(env, all_running))
    agent = agent_pid(env, domain_id)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    time.sleep(1.0)  # a second without any supervisor: nothing may stop
    assert all(psutil.pid_exists(i["pid"]) for i in before.values())
    with mcc_up(mission_file, env=env, log=tmp_path / "second.log") as second:
        after = running(
            wait_status(env, lambda s: all_running(s) and s["supervisors"][0]["pid"] == second.pid)
        )
        assert {k: v["pid"] for k, v in after.items()} == {k: v["pid"] for k, v in before.items()}
        assert all(i["restarts"] == 0 for i in after.values())
        assert {i["reason"] for i in after.values()} == {"adopted"}
        assert run_cli(["down"], env=env).stdout.strip() == "mcc down: stopped"
        assert second.wait(20) == 0
    pids = [i["pid"] for i in before.values()]
    wait_for(lambda: gone([*pids, agent]), 10, "every instance and the agent gone")


@pytest.mark.slow
def test_a_mission_nobody_controls_stops_itself(
    mission_file: Path, env: dict[str, str], tmp_path: Path, domain_id: int
) -> None:
    env = {**env, "MCC_AGENT_ORPHAN_S": "2"}
    with mcc_up(mission_file, env=env, log=tmp_path / "up.log") as up:
        st = wait_status(env, all_running)
        agent = agent_pid(env, domain_id)
        os.kill(up.pid, signal.SIGKILL)
        up.wait(10)
    pids = [i["pid"] for i in st["instances"]]
    wait_for(lambda: gone([*pids, agent]), 20, "the orphaned mission stopped")


@pytest.mark.slow
def test_a_standby_takes_over_within_a_second_and_restarts_nothing(
    first: subprocess.Popen[str],
    mission_file: Path,
    env: dict[str, str],
    tmp_path: Path,
    domain_id: int,
) -> None:
    wait_status(env, all_running)
    with mcc_up(mission_file, env=env, log=tmp_path / "standby.log") as standby:
        st = wait_status(
            env, lambda s: [x["role"] for x in s["supervisors"]] == ["active", "standby"]
        )
        assert st["supervisors"][0]["pid"] == first.pid
        assert st["supervisors"][1]["pid"] == standby.pid and st["supervisors"][1]["healthy"]
        run_cli(["scale", "w", "3"], env=env)  # desired state the standby must keep
        before = running(wait_status(env, lambda s: len(running(s)) == 5))
        killed = time.monotonic()
        os.kill(first.pid, signal.SIGKILL)
        answered = None
        while time.monotonic() - killed < 10:
            st2 = status(env, timeout_s=2.0)
            if st2 is not None and st2["supervisors"][0]["pid"] == standby.pid:
                answered = time.monotonic() - killed
                break
        assert answered is not None, (tmp_path / "standby.log").read_text()
        # `mcc status` is a new process (Python start and discovery): most of this figure.
        assert answered < 3.0, answered
        after = running(st2)
        assert {k: v["pid"] for k, v in after.items()} == {k: v["pid"] for k, v in before.items()}
        assert st2["clusters"]["w"]["size"] == 3
        assert all(i["restarts"] == 0 for i in after.values())
        assert run_cli(["down"], env=env).stdout.strip() == "mcc down: stopped"
        assert standby.wait(20) == 0
    log = (tmp_path / "standby.log").read_text()
    assert "standing by" in log and "adopted 5 running instances" in log


@pytest.mark.slow
def test_a_paused_active_supervisor_is_fenced_when_it_comes_back(
    first: subprocess.Popen[str],
    mission_file: Path,
    env: dict[str, str],
    tmp_path: Path,
) -> None:
    """The old active supervisor is frozen (a GC pause, a VM stall, or cut off): its standby
    hears the instances but not it, claims, and the node agent fences the old one, which can
    then no longer start or kill anything and leaves."""
    wait_status(env, all_running)
    with mcc_up(mission_file, env=env, log=tmp_path / "standby.log") as standby:
        wait_status(env, lambda s: len(s["supervisors"]) == 2)
        before = running(wait_status(env, all_running))
        os.kill(first.pid, signal.SIGSTOP)
        try:
            st = wait_status(env, lambda s: s["supervisors"][0]["pid"] == standby.pid, 20)
        finally:
            os.kill(first.pid, signal.SIGCONT)
        assert first.wait(20) == 0  # fenced: it leaves, stopping nothing
        assert "fenced" in (tmp_path / "first.log").read_text()
        st = wait_status(env, all_running)
        assert {k: v["pid"] for k, v in running(st).items()} == {
            k: v["pid"] for k, v in before.items()
        }
        assert "claiming" in (tmp_path / "standby.log").read_text()
        run_cli(["down"], env=env)
        assert standby.wait(20) == 0


@pytest.mark.slow
def test_the_node_agent_killed_is_replaced_and_keeps_every_instance(
    first: subprocess.Popen[str], env: dict[str, str], domain_id: int
) -> None:
    before = running(wait_status(env, all_running))
    old = agent_pid(env, domain_id)
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: agent_pid(env, domain_id) != old, 20, "a new node agent")
    # the foreign command dies with its agent (it has no watchdog) and is restarted; the
    # apps are adopted by the new agent, same pids
    st = wait_status(env, lambda s: all_running(s) and running(s)["fo/peer/0"]["restarts"] == 1)
    after = running(st)
    for instance_id in ("fo/radar/0", "fo/w/0", "fo/w/1"):
        assert after[instance_id]["pid"] == before[instance_id]["pid"]
        assert after[instance_id]["restarts"] == 0
    # the new agent still controls them: a kill through the supervisor restarts one
    run_cli(["restart", "radar"], env=env)
    wait_status(env, lambda s: running(s).get("fo/radar/0", {}).get("restarts") == 1)
