"""Hostile participants against a secured mission (the default): every attack of the security
review, tried with real DDS Security plugins and real processes; none is obeyed.

- no credentials: sees nothing, is not heard;
- a certificate of another CA, an expired certificate, a tampered permissions document:
  refused at creation or never heard;
- a valid identity of another system (a radar instance): cannot write ``EngagementOrder``,
  ``Command`` or ``CommandReply``, and writes ``DetectionBatch`` and ``Heartbeat`` only in its
  own source partition (``src/radar.0``), so readers know it is the radar's;
- the operator cannot pass for the console (commands go out in the sender's own partition, which
  is how the supervisor attributes them);
- a ``down`` written before the supervisor starts, by a writer that stays alive, is never
  replayed into it (``Command`` is volatile).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcc.bus import Bus, Transport
from mcc.bus.rpc import COMMAND_CHANNEL, principal_partition
from mcc.errors import MccError
from mcc.security import Identity, Keystore
from mcc.security.documents import Grant
from mcc.types import Command, CommandReply
from tests.conftest import mcc_up, mission_status, run_cli, running_ids, running_instances, wait_for

MANIFEST = """\
mission: guarded
domain: {domain}
systems:
  radar: {{app: "mcc.orchestrate.probe:idle", publish: [DetectionBatch], resources: {{cpus: 0.1}}}}
  tewa: {{app: "mcc.orchestrate.probe:idle", resources: {{cpus: 0.1}}}}
  rogue: {{app: "tests.security.rogue_app:main", resources: {{cpus: 0.1}}}}
"""
EVERYONE = {"guarded/radar/0", "guarded/tewa/0", "guarded/rogue/0"}


@pytest.fixture
def env(tmp_path: Path, bus_env: dict[str, str]) -> dict[str, str]:
    return {**bus_env, "MCC_HOME": str(tmp_path / "home")}


@pytest.fixture
def manifest(tmp_path: Path, domain_id: int) -> Path:
    path = tmp_path / "guarded.yaml"
    path.write_text(MANIFEST.format(domain=domain_id))
    return path


@pytest.fixture
def up(manifest: Path, env: dict[str, str], tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    with mcc_up(manifest, env=env, log=tmp_path / "up.log") as proc:
        yield proc


def _as(identity: Identity | None) -> Transport:
    base = Transport.from_env()
    if identity is None:
        return base
    return dataclasses.replace(base, extra_xml=base.extra_xml + identity.security_xml())


def _heard_or_refused(domain: int, identity: Identity | None, what: str) -> str:
    """Try to command the mission (``down`` for 3 s) and read its status as ``identity``:
    ``"refused"`` when Cyclone will not create the participant, ``"deaf"`` when it runs but
    reads nothing; the caller checks that the mission is still up."""
    try:
        bus = Bus(domain, transport=_as(identity), name=what)
    except MccError:
        return "refused"
    with bus:
        status = bus.reader("MissionStatus")
        commands = bus.writer("Command", partitions=[principal_partition(COMMAND_CHANNEL, "x")])
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            commands.write(Command(command_id=f"{what}-{time.monotonic_ns()}", verb="down"))
            time.sleep(0.25)
        assert status.take() == [], f"{what} read the mission's status"
    return "deaf"


def _tampered(keystore: Path, source: str, tmp_path: Path) -> Identity:
    """A copy of identity ``source`` whose signed permissions grant ``Command`` too (the
    signature no longer matches)."""
    folder = tmp_path / "tampered"
    shutil.copytree(keystore / "identities" / source, folder)
    signed = (folder / "permissions.p7s").read_text()
    assert "<topic>Heartbeat</topic>" in signed
    (folder / "permissions.p7s").write_text(
        signed.replace("<topic>Heartbeat</topic>", "<topic>Heartbeat</topic><topic>Command</topic>")
    )
    return Identity(source, folder, keystore)


@pytest.mark.slow
def test_hostile_participants_are_never_obeyed(
    up: subprocess.Popen[str],
    env: dict[str, str],
    domain_id: int,
    tmp_path: Path,
    manifest: Path,
) -> None:
    wait_for(lambda: running_ids(env) == EVERYONE, 60, "every instance running")
    keystore = Path(env["MCC_HOME"]) / "keystores" / "guarded"
    mission = Keystore(keystore)

    # Strangers: no credentials, another CA, an expired certificate, tampered permissions.
    other = Keystore.init(tmp_path / "other-ca", mission="guarded")
    other.write_governance((domain_id,))
    impostor = other.identity(
        "guarded/operator", (Grant(publish=("*",), subscribe=("*",)),), domains=(domain_id,)
    )
    expired = mission.identity(
        "guarded/expired", (Grant(publish=("*",), subscribe=("*",)),), domains=(domain_id,), days=0
    )
    time.sleep(1.0)  # its validity ended "now" when it was made
    outcomes = {
        "stranger": _heard_or_refused(domain_id, None, "stranger"),
        "other-ca": _heard_or_refused(domain_id, impostor, "other-ca"),
        "expired": _heard_or_refused(domain_id, expired, "expired"),
        "tampered": _heard_or_refused(
            domain_id, _tampered(keystore, "guarded/radar.0", tmp_path), "tampered"
        ),
    }
    assert up.poll() is None, f"a stranger stopped the mission: {outcomes}"
    assert running_ids(env) == EVERYONE, outcomes

    # An instance that creates a writer its system was not granted: refused, and told where
    # the system's permissions are declared.
    refusal = wait_for(lambda: next(Path(env["MCC_HOME"]).rglob("rogue-0.txt"), None), 30)
    assert re.search(
        r"DDS Security refused to publish topic 'EngagementOrder' for participant .*"
        r"declare it in the manifest \(.*guarded\.yaml:6: systems\.rogue: publish/subscribe\)",
        refusal.read_text(),
    ), refusal.read_text()

    # A valid identity of another system: the radar instance's own credentials.
    radar = mission.existing("guarded/radar.0")
    with Bus(domain_id, transport=_as(radar), name="rogue radar", source=radar.source) as bus:
        bus.writer("DetectionBatch")  # what it was granted, in its own source partition
        for topic in ("EngagementOrder", "Command", "CommandReply"):
            with pytest.raises(MccError, match=f"DDS Security refused to publish topic '{topic}'"):
                bus.writer(topic)
        # a sourced topic only as itself: not as another radar, not as no one
        for partition in ("src/radar.1", "src/*", ""):
            with pytest.raises(MccError, match="DDS Security refused to publish topic 'Detec"):
                bus.writer("DetectionBatch", partitions=[partition])
            with pytest.raises(MccError, match="DDS Security refused to publish topic 'Heart"):
                bus.writer("Heartbeat", partitions=[partition])
        assert bus.stats.security_denials == 9  # counted (/metrics), not only raised
    # The operator may command, but only as itself: not in the console's partition.
    operator = mission.existing("guarded/operator")
    with Bus(domain_id, transport=_as(operator), name="operator") as bus:
        with pytest.raises(MccError, match="DDS Security refused"):
            bus.writer("Command", partitions=[principal_partition(COMMAND_CHANNEL, "console")])
        with pytest.raises(MccError, match="DDS Security refused"):
            bus.writer("Command")  # the default partition is no one's
    assert running_ids(env) == EVERYONE

    # The keystore against the manifest: every identity present and as declared; a changed
    # declaration is a mismatch.
    checked = run_cli(["security", "check", str(keystore), str(manifest)], env=env)
    assert "guarded/rogue.0: ok" in checked.stdout and "guarded/console: ok" in checked.stdout
    changed = tmp_path / "changed.yaml"
    changed.write_text(
        manifest.read_text().replace(
            "publish: [DetectionBatch]", "publish: [DetectionBatch, Track]"
        )
    )
    mismatch = run_cli(["security", "check", str(keystore), str(changed)], env=env, check=False)
    assert mismatch.returncode == 1
    assert "guarded/radar.0: its permissions do not match the manifest" in mismatch.stderr

    # Attribution: each operator has an identity; `mcc stop --as alice` is recorded as
    # alice's and `mcc down` as the operator's, whatever client id they wrote.
    run_cli(
        ["security", "identity", str(keystore), "guarded/alice", "--operator"]
        + ["--domain", str(domain_id)],
        env=env,
    )
    run_cli(["stop", "tewa", "--as", "alice"], env=env)
    summary_events = mission_status(env)
    assert summary_events is not None and "guarded/tewa/0" not in running_instances(summary_events)
    run_cli(["down"], env=env)
    assert up.wait(30) == 0
    summary = json.loads(next((tmp_path / "home").rglob("supervisor.json")).read_text())
    commanded = [e for e in summary["events"] if e["instance"].startswith("cmd/")]
    assert {(e["instance"], e["event"]) for e in commanded} >= {
        ("cmd/alice", "stop tewa"),
        ("cmd/operator", "down "),
    }, commanded


@pytest.mark.slow
def test_a_down_left_on_the_bus_is_not_replayed_into_a_new_supervisor(
    manifest: Path, env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    """The landmine: an operator's ``down``, written with no supervisor running by a writer
    that stays alive, must not stop the mission started after it."""
    # First run: creates the keystore (the operator identity), then stops.
    with mcc_up(manifest, env=env, log=tmp_path / "first.log") as first:
        wait_for(lambda: running_ids(env) == EVERYONE, 60, "first run up")
        run_cli(["down"], env=env)
        assert first.wait(30) == 0
    operator = Keystore(Path(env["MCC_HOME"]) / "keystores" / "guarded").existing(
        "guarded/operator"
    )
    with Bus(domain_id, transport=_as(operator), name="landmine") as bus:
        mine = bus.writer("Command", partitions=[principal_partition(COMMAND_CHANNEL, "operator")])
        mine.write(Command(command_id="landmine-1", mission="guarded", verb="down"))
        replies = bus.reader("CommandReply")
        with mcc_up(manifest, env=env, log=tmp_path / "second.log") as second:
            wait_for(lambda: running_ids(env) == EVERYONE, 60, "second run up")
            time.sleep(3.0)
            assert second.poll() is None, (tmp_path / "second.log").read_text()[-2000:]
            answered: list[CommandReply] = [r for r in replies.take() if r.command_id]
            assert not any(r.command_id == "landmine-1" for r in answered)
            run_cli(["down"], env=env)
            assert second.wait(30) == 0


def test_launcher_answers_on_their_own_topic() -> None:
    """TEWA alone writes ``EngagementOrder``: the launchers' declared topics say so."""
    from mcc.orchestrate.appspec import load_app

    launcher = load_app("mcc.apps.launcher:launcher").spec.topics
    tewa = load_app("mcc.apps.tewa:tewa").spec.topics
    assert launcher is not None and tewa is not None
    assert "EngagementOrder" not in launcher.publish
    assert "EngagementOutcome" in launcher.publish
    assert "EngagementOrder" in tewa.publish
    assert "EngagementOutcome" in tewa.subscribe
