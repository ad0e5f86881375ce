"""No split brain: the active supervisor on host a is cut off the network; the standby on host b
still hears the mission's instances (host c) and takes over; the node agent fences the old
active, which stops commanding and leaves. The instances never restart."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcc.bus import Transport
from mcc.netlab import LAB_IFACE, NetLab, pick_subnet
from mcc.orchestrate.agent import AgentPaths
from tests.conftest import REPO, wait_for
from tests.netns.conftest import require_netns

APP = "mcc.orchestrate.probe:idle"
MANIFEST = """\
mission: split
domain: {domain}
systems:
  radar: {{app: "{app}", resources: {{cpus: 0.1}}}}
clusters:
  w: {{app: "{app}", size: 2, max: 4, resources: {{cpus: 0.1}}}}
"""
IDS = {"split/radar/0", "split/w/0", "split/w/1"}


@pytest.fixture
def lab() -> Iterator[NetLab]:
    require_netns()
    netlab = NetLab(["a", "b", "c"], name=f"sp{os.getpid() % 10000}", subnet=pick_subnet())
    try:
        yield netlab.up()
    finally:
        netlab.down()


def test_a_partitioned_active_supervisor_is_fenced_and_the_standby_takes_over(
    lab: NetLab, tmp_path: Path, domain_id: int
) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("MCC_DISCOVERY_TAG", "CYCLONEDDS_URI", "MCC_TRANSPORT")
    }
    env.update(Transport(kind="udp", multicast=True, interface=LAB_IFACE).apply_to_env({}))
    env.update({"MCC_HOME": str(home), "MCC_AGENT_ORPHAN_S": "30", "PYTHONPATH": str(REPO)})
    manifest = tmp_path / "split.yaml"
    manifest.write_text(MANIFEST.format(domain=domain_id, app=APP))
    paths = AgentPaths.for_mission(home, "split", domain_id)
    (home / "agents").mkdir(mode=0o700)
    agent_argv = paths.argv(orphan_s=30)
    with paths.log.open("w") as agent_log:  # the node agent lives on host c, with the instances
        subprocess.run(
            lab.exec_argv("c", agent_argv),
            env={**env, "MCC_AGENT_SOCKET": str(paths.socket)},
            stdout=agent_log,
            stderr=subprocess.STDOUT,
            check=True,
            timeout=60,
        )
    wait_for(paths.socket.exists, 30, "the node agent on host c")

    def status() -> dict[str, Any] | None:
        argv = [sys.executable, "-m", "mcc.cli", "status", "--json", "--timeout", "3"]
        proc = subprocess.run(
            lab.exec_argv("b", argv), env=env, capture_output=True, text=True, timeout=60
        )
        return json.loads(proc.stdout) if proc.returncode == 0 else None

    logs: list[Any] = []

    def up(host: str, name: str) -> subprocess.Popen[str]:
        out = (tmp_path / f"{name}.log").open("w")
        logs.append(out)
        return lab.popen(
            host,
            [sys.executable, "-m", "mcc.cli", "up", str(manifest), "--quiet"],
            env=env,
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )

    procs: list[subprocess.Popen[str]] = []
    try:
        first = up("a", "first")
        procs.append(first)

        def running() -> dict[str, int] | None:
            st = status()
            if st is None:
                return None
            live = {i["id"]: i["pid"] for i in st["instances"] if i["state"] == "running"}
            return live if set(live) == IDS else None

        before = wait_for(running, 90, "the mission running")
        standby = up("b", "standby")
        procs.append(standby)
        roles = ["active", "standby"]
        wait_for(
            lambda: (st := status()) and [s["role"] for s in st["supervisors"]] == roles,
            60,
            "a standby",
        )
        cut = time.monotonic()
        lab.partition("a")
        st = wait_for(
            lambda: (s := status()) and s["supervisors"][0]["pid"] == standby.pid and s,
            30,
            "the standby active",
        )
        took = time.monotonic() - cut
        assert first.wait(30) == 0  # fenced by the agent: it leaves, stopping nothing
        assert "fenced" in (tmp_path / "first.log").read_text()
        lab.heal("a")
        after = wait_for(running, 30, "the mission still running")
        assert after == before, (before, after)  # the same processes: nothing restarted
        assert all(i["restarts"] == 0 for i in st["instances"])
        assert took < 15.0, took
        down = subprocess.run(
            lab.exec_argv("b", [sys.executable, "-m", "mcc.cli", "down"]),
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert down.stdout.strip() == "mcc down: stopped", down.stderr
        assert standby.wait(30) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for out in logs:
            out.close()
        if paths.state.exists():  # the agent, and whatever it still owns
            record = json.loads(paths.state.read_text())
            for pid in [record.get("agent_pid", 0), *(i["pid"] for i in record["instances"])]:
                if pid:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, 9)
