"""`mcc up` in its own process, driven from another one by the bus clients."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import mcc_up, mission_transport, run_cli, wait_for

APP = "mcc.orchestrate.probe:idle"
MANIFEST = """\
mission: cli
domain: {domain}
phases: [surveillance, engagement]
systems:
  radar: {{app: "{app}", resources: {{cpus: 0.1}}}}
  launcher: {{app: "{app}", phases: [engagement], resources: {{cpus: 0.1}}}}
clusters:
  mc: {{app: "{app}", size: 1, max: 4, resources: {{cpus: 0.1}}}}
"""


@pytest.fixture
def env(tmp_path: Path, bus_env: dict[str, str]) -> dict[str, str]:
    return {**bus_env, "MCC_HOME": str(tmp_path / "home")}


@pytest.fixture
def mission_file(tmp_path: Path, domain_id: int) -> Path:
    path = tmp_path / "cli.yaml"
    path.write_text(MANIFEST.format(domain=domain_id, app=APP))
    return path


@pytest.fixture
def up(mission_file: Path, env: dict[str, str], tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    with mcc_up(mission_file, env=env, log=tmp_path / "up.log") as proc:
        yield proc


def status(env: dict[str, str]) -> dict[str, Any]:
    return dict(json.loads(run_cli(["status", "--json"], env=env).stdout))


def wait_status(env: dict[str, str], predicate: Any, timeout_s: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        proc = run_cli(["status", "--json"], env=env, check=False)
        if proc.returncode == 0:
            last = json.loads(proc.stdout)
            if predicate(last):
                return last
        time.sleep(0.2)
    pytest.fail(f"status never matched; last: {json.dumps(last, indent=1)}")


def running(st: dict[str, Any]) -> set[str]:
    return {i["id"] for i in st["instances"] if i["state"] == "running"}


@pytest.mark.slow
def test_operators_drive_a_mission_from_another_terminal(
    up: subprocess.Popen[str], env: dict[str, str], tmp_path: Path
) -> None:
    wait_status(env, lambda s: running(s) == {"cli/radar/0", "cli/mc/0"})
    table = run_cli(["status"], env=env).stdout
    assert "mission cli · phase surveillance" in table and "radar/0" in table
    assert "security: on (DDS Security" in table  # the default
    assert "cluster 'mc' → 3 workers" in run_cli(["scale", "mc", "3"], env=env).stdout
    run_cli(["phase", "engagement"], env=env)
    st = wait_status(env, lambda s: len(running(s)) == 5 and s["phase"] == "engagement")
    assert st["clusters"]["mc"]["size"] == 3
    bad = run_cli(["scale", "mc", "9"], env=env, check=False)
    assert bad.returncode == 2
    assert "cluster 'mc': size 9 is outside [min, max] = [0, 4]" in bad.stderr
    unknown = run_cli(["stop", "radr"], env=env, check=False)
    assert unknown.returncode == 2 and "'radr' is not a system of 'cli'" in unknown.stderr
    run_cli(["stop", "radar"], env=env)
    wait_status(env, lambda s: "cli/radar/0" not in {i["id"] for i in s["instances"]})
    run_cli(["start", "radar"], env=env)
    wait_status(env, lambda s: "cli/radar/0" in running(s))
    logs = run_cli(["logs", "radar"], env=env).stdout
    assert logs.count("cli/radar/0 started: mcc.orchestrate.probe:idle") == 2  # one per start
    assert run_cli(["down"], env=env).stdout.strip() == "mcc down: stopped"
    assert up.wait(20) == 0
    none = run_cli(["status"], env=env, check=False)
    assert none.returncode == 2 and "no mission is running here" in none.stderr


@pytest.mark.slow
def test_foreign_and_hostile_commands_never_silence_the_supervisor(
    up: subprocess.Popen[str], env: dict[str, str], domain_id: int
) -> None:
    """A legal XCDR1 ``Command`` (what Fast DDS 2.x and RTI Connext write) is answered; invalid
    UTF-8 is dropped and counted; ``mcc status`` answers after both."""
    from cyclonedds._clayer import ddspy_write
    from cyclonedds.core import Policy, Qos
    from cyclonedds.pub import DataWriter

    from mcc.bus import Bus
    from mcc.bus.rpc import COMMAND_CHANNEL, principal_partition
    from mcc.types import Command
    from tests.bus.test_native_core import hostile_payloads

    wait_status(env, lambda s: running(s) == {"cli/radar/0", "cli/mc/0"})
    transport = mission_transport(
        Path(env["MCC_HOME"]), "cli", domain_id, publish=("Command",), subscribe=("CommandReply",)
    )
    with Bus(domain_id, transport=transport) as bus:
        replies = bus.reader("CommandReply")
        xcdr1 = Qos(Policy.DataRepresentation(use_cdrv0_representation=True))
        foreign = DataWriter(
            bus.group([principal_partition(COMMAND_CHANNEL, "fastdds")], writer=True),
            bus.topic("Command"),
            qos=bus.endpoint_qos("command", writer=True) + xcdr1,
        )
        assert replies.wait_for_writers(1, timeout_s=20), "no supervisor reply writer matched"
        assert wait_for(lambda: foreign.get_publication_matched_status().current_count >= 1, 20)
        command = Command(command_id="foreign-1", client_id="fastdds", mission="cli", verb="status")
        for name, data in hostile_payloads(command):
            if name.startswith("utf8-"):
                assert ddspy_write(foreign._ref, data) == 0, name
        foreign.write(command)
        answered: list[Any] = []
        wait_for(
            lambda: (
                answered.extend(r for r in replies.take() if r.command_id == "foreign-1")
                or answered
            ),
            20,
            "the supervisor's answer to the XCDR1 command",
        )
    assert answered[0].ok, answered
    assert running(status(env)) == {"cli/radar/0", "cli/mc/0"}


def test_status_says_when_a_mission_is_not_secured() -> None:
    from mcc.orchestrate.commands import _status_table_text

    status = {
        "mission": "m", "phase": "p", "state": "running", "backend": "local", "domain": 1,
        "run_dir": "/r", "clusters": {}, "instances": [], "security": "none",
    }  # fmt: skip
    assert "security: NONE: this mission runs without DDS Security" in _status_table_text(status)
