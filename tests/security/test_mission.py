"""A secured mission (``security: on``): identities from the manifest, operators from the
keystore, strangers ignored."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcc.bus import Bus
from mcc.observe.audit import read_audit
from mcc.types import Command
from tests.conftest import mcc_up, run_cli, running_ids, wait_for

MANIFEST = """\
mission: guarded
domain: {domain}
security: on
systems:
  radar: {{app: "mcc.orchestrate.probe:idle", replicas: 2, resources: {{cpus: 0.1}}}}
  tracker: {{app: "mcc.orchestrate.probe:idle", resources: {{cpus: 0.1}}}}
"""


@pytest.fixture
def env(tmp_path: Path, bus_env: dict[str, str]) -> dict[str, str]:
    return {**bus_env, "MCC_HOME": str(tmp_path / "home")}


@pytest.fixture
def up(env: dict[str, str], tmp_path: Path, domain_id: int) -> Iterator[subprocess.Popen[str]]:
    path = tmp_path / "guarded.yaml"
    path.write_text(MANIFEST.format(domain=domain_id))
    with mcc_up(path, env=env, log=tmp_path / "up.log") as proc:
        yield proc


@pytest.mark.slow
def test_a_secured_mission_runs_and_strangers_are_not_heard(
    up: subprocess.Popen[str], env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    everyone = {"guarded/radar/0", "guarded/radar/1", "guarded/tracker/0"}
    # Every instance authenticated with its system's identity: its heartbeats reach the
    # supervisor, which answers the operator (mcc status, with the keystore's operator).
    wait_for(lambda: running_ids(env) == everyone, 60, "every instance running")
    keystore = tmp_path / "home" / "keystores" / "guarded"
    names = {p.name for p in (keystore / "identities" / "guarded").iterdir()}
    assert names == {"supervisor", "operator", "console", "radar.0", "radar.1", "tracker.0"}
    grants = (keystore / "identities/guarded/radar.0/permissions.xml").read_text()
    assert "<topic>Heartbeat</topic>" in grants and "Command" not in grants
    # A participant without credentials on the same domain: it sees no status and its
    # `down` is never obeyed.
    with Bus(domain_id, name="stranger") as bus:
        status = bus.reader("MissionStatus")
        commands = bus.writer("Command")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            commands.write(Command(command_id=f"x{time.monotonic_ns()}", verb="down"))
            time.sleep(0.25)
        assert status.take() == [], "a stranger read the mission's status"
    assert up.poll() is None, "a stranger's `down` stopped the mission"
    assert running_ids(env) == everyone
    # Commands are in the mission's audit by identity, refused ones too; `status` is not.
    assert run_cli(["logs", "tracker"], env=env).returncode == 0
    assert run_cli(["stop", "nosuch"], env=env, check=False).returncode != 0
    (audit,) = (tmp_path / "home" / "runs").glob("guarded-*/audit.jsonl")
    entries = [(e["who"], e["action"], e["target"], e["result"]) for e in read_audit(audit)]
    assert entries == [
        ("operator", "logs", "tracker", "ok"),
        ("operator", "stop", "nosuch", "failed"),
    ]
    assert "down" in run_cli(["down"], env=env).stdout.lower() or up.wait(30) == 0
    up.wait(30)
