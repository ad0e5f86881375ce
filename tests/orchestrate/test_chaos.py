"""`mcc chaos kill` finds and checks the process to kill on this host; the bus never names it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from mcc.bus import Bus, Replier
from mcc.bus.rpc import COMMAND_CHANNEL
from mcc.errors import OrchestratorError
from mcc.orchestrate import Supervisor, registry
from mcc.orchestrate.chaos import instance_processes, kill_instances
from mcc.orchestrate.client import ControlClient
from mcc.types import Command, CommandReply
from tests.conftest import run_cli, wait_for

APP = "mcc.orchestrate.probe:idle"
MANIFEST = f"""
mission: chaos
domain: {{domain}}
security: none
systems:
  worker: {{app: "{APP}", restart: always, replicas: 2, resources: {{cpus: 0.1}}}}
  other: {{app: "{APP}", restart: always, resources: {{cpus: 0.1}}}}
"""


def running(sup: Supervisor) -> dict[str, dict[str, Any]]:
    return {i["id"]: i for i in sup.status()["instances"] if i["state"] == "running"}


@contextmanager
def bystander(**env: str) -> Iterator[subprocess.Popen[bytes]]:
    """A process of this user's, leader of its own group, that the mission never started."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_chaos_kill_never_takes_a_pid_from_the_bus(
    run_supervisor: Callable[..., Supervisor], domain_id: int
) -> None:
    sup = run_supervisor(MANIFEST)
    live = wait_for(lambda: (r := running(sup)) and len(r) == 3 and r, what="3 instances")
    record = registry.find("chaos")
    # The victim even claims the identity: the instance's variables and its log as stdout.
    log = Path(record.run_dir) / "logs" / "worker-0.log"
    claim = {"MCC_INSTANCE_ID": "chaos/worker/0", "MCC_RUN_DIR": record.run_dir}
    with log.open("ab") as forged_stdout, bystander(**claim) as victim:
        forged = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(120)"],
            env={**os.environ, **claim},
            stdout=forged_stdout,
            start_new_session=True,
        )
        # The attack: the supervisor's replier silenced, a rogue one answers `status` with
        # the pid of a process group it chose.
        sup._replier.stop()
        rogue_status = {"instances": [{"id": "chaos/worker/0", "pid": victim.pid}]}

        def answer(command: Command) -> CommandReply:
            return CommandReply(ok=True, result_json=json.dumps(rogue_status))

        with Bus(domain_id, name="rogue") as bus:
            rogue = Replier[Command, CommandReply](
                bus, answer, replier_id="supervisor:chaos", channel=COMMAND_CHANNEL
            ).start()
            try:
                client = ControlClient(bus, "chaos", timeout_s=5)
                assert client.status() == rogue_status  # what the bus now says
                client.close()
                out = run_cli(["chaos", "kill", "worker/0"], env={**os.environ}).stdout
            finally:
                rogue.stop()
        real = live["chaos/worker/0"]["pid"]
        assert out == f"mcc chaos: killed chaos/worker/0 (pid {real})\n"
        assert victim.poll() is None and forged.poll() is None  # neither touched
        forged.kill()
        forged.wait()
    wait_for(  # a replacement that missed its first heartbeat is replaced again after 15 s
        lambda: (i := running(sup).get("chaos/worker/0")) and i["pid"] != real and i,
        timeout_s=45,
        what="the killed worker restarted",
    )
    assert running(sup)["chaos/worker/1"]["pid"] == live["chaos/worker/1"]["pid"]


def test_kill_finds_instances_by_system_and_index(
    run_supervisor: Callable[..., Supervisor],
) -> None:
    sup = run_supervisor(MANIFEST)
    live = wait_for(lambda: (r := running(sup)) and len(r) == 3 and r, what="3 instances")
    record = registry.find("chaos")
    found = {i: p.pid for i, p in instance_processes(record)}
    assert found == {i: inst["pid"] for i, inst in live.items()}
    killed = kill_instances(record, ["worker"])
    assert killed == [(f"chaos/worker/{n}", live[f"chaos/worker/{n}"]["pid"]) for n in (0, 1)]
    assert running(sup).get("chaos/other/0", {}).get("pid") == live["chaos/other/0"]["pid"]


@pytest.mark.parametrize(
    ("target", "refusal"),
    [
        ("../worker", "'../worker' is not an instance: give SYSTEM or SYSTEM/INDEX"),
        ("worker/-1", "'worker/-1' is not an instance"),
        ("worker/0/1", "'worker/0/1' is not an instance"),
        ("", "'' is not an instance"),
        ("ghost/0", "no running instance of mission 'chaos' on this host matches 'ghost/0'"),
    ],
)
def test_bad_kill_targets_are_refused_by_name(
    run_supervisor: Callable[..., Supervisor], target: str, refusal: str
) -> None:
    sup = run_supervisor(MANIFEST)
    live = wait_for(lambda: (r := running(sup)) and len(r) == 3 and r, what="3 instances")
    with pytest.raises(OrchestratorError, match=re.escape(refusal)):
        kill_instances(registry.find("chaos"), ["other", target])
    assert running(sup)["chaos/other/0"]["pid"] == live["chaos/other/0"]["pid"]  # none killed


def test_chaos_kill_says_what_is_wrong_without_a_traceback(
    run_supervisor: Callable[..., Supervisor],
) -> None:
    sup = run_supervisor(MANIFEST)
    wait_for(lambda: len(running(sup)) == 3, what="3 instances")
    proc = run_cli(["chaos", "kill", "worker/x"], env={**os.environ}, check=False)
    assert proc.returncode == 2
    assert "'worker/x' is not an instance: give SYSTEM or SYSTEM/INDEX" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_other_backends_instances_are_known_by_their_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCC_HOME", str(tmp_path / "home"))
    run_dir = str(tmp_path / "run")
    record = {
        "mission": "far",
        "domain": 7,
        "pid": os.getpid(),
        "run_dir": run_dir,
        "backend": "ray",
    }
    folder = registry.private_dir(registry.home() / "active")
    registry.write_private(folder / "far.json", json.dumps(record))
    mine = {"MCC_INSTANCE_ID": "far/sim/3", "MCC_RUN_DIR": run_dir}
    with (
        bystander(**mine) as instance,
        bystander(MCC_INSTANCE_ID="far/sim/3", MCC_RUN_DIR=str(tmp_path / "old-run")) as stale,
        bystander(MCC_INSTANCE_ID="near/sim/3", MCC_RUN_DIR=run_dir) as foreign,
    ):
        found = registry.find("far")
        assert [(i, p.pid) for i, p in instance_processes(found)] == [("far/sim/3", instance.pid)]
        assert kill_instances(found, ["sim/3"]) == [("far/sim/3", instance.pid)]
        assert instance.wait(10) == -9
        assert stale.poll() is None and foreign.poll() is None
        with pytest.raises(OrchestratorError, match="its instances on other hosts are out of"):
            kill_instances(found, ["sim/3"])
