"""The registry of missions running here: records are the user's, read field by field."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mcc.bus.transport import Transport
from mcc.errors import OrchestratorError
from mcc.orchestrate import Supervisor, registry
from mcc.orchestrate.client import open_client
from tests.conftest import run_cli

APP = "mcc.orchestrate.probe:idle"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh MCC home with an empty registry; this process has no transport of its own."""
    monkeypatch.setenv("MCC_HOME", str(tmp_path / "home"))
    for name in ("MCC_TRANSPORT", "CYCLONEDDS_URI", "MCC_DISCOVERY_TAG"):
        monkeypatch.delenv(name, raising=False)
    (registry.home() / "active").mkdir(mode=0o700)
    return tmp_path / "home"


def plant(home: Path, name: str, record: Any, *, mode: int = 0o600) -> Path:
    """A record as anyone who can write the file would put it there."""
    path = home / "active" / f"{name}.json"
    if isinstance(record, bytes):
        path.write_bytes(record)
    else:
        path.write_text(record if isinstance(record, str) else json.dumps(record))
    path.chmod(mode)
    return path


def good(name: str = "m", **fields: Any) -> dict[str, Any]:
    return {
        "mission": name,
        "domain": 7,
        "pid": os.getpid(),
        "run_dir": "/runs/m",
        "backend": "local",
        **fields,
    }


def trace_to(victim: Path) -> Transport:
    """The transport of the attack: Cyclone's tracing pointed at a file of the victim's."""
    return Transport(
        extra_xml=f"<Tracing><Verbosity>finest</Verbosity><OutputFile>{victim}</OutputFile>"
        "</Tracing>"
    )


def test_a_planted_record_cannot_point_cyclone_at_a_file(
    home: Path, tmp_path: Path, domain_id: int
) -> None:
    victim = tmp_path / "precious.txt"
    victim.write_text("precious\n")
    evil = trace_to(victim).apply_to_env({})["MCC_TRANSPORT"]
    path = plant(home, "planted", good("planted", domain=domain_id, env={"MCC_TRANSPORT": evil}))
    env = {k: v for k, v in os.environ.items() if k not in ("MCC_TRANSPORT", "CYCLONEDDS_URI")}
    proc = run_cli(["status", "--mission", "planted", "--timeout", "1"], env=env, check=False)
    assert proc.returncode == 2, proc.stderr
    assert f"the registry record {path}: transport.extra_xml = " in proc.stderr
    assert "raw Cyclone XML is never taken from a record" in proc.stderr
    assert f"remove it (rm {path}) unless you wrote it" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert victim.read_text() == "precious\n"  # not clobbered by a trace


@pytest.mark.parametrize(
    ("fields", "refusal"),
    [
        ({"transport": {"extra_xml": "<Tracing/>"}}, "transport.extra_xml = '<Tracing/>'"),
        ({"env": {"LD_PRELOAD": "/tmp/x.so"}}, "carries only MCC_DISCOVERY_TAG and MCC_TRANSPORT"),
        ({"env": {"MCC_TRANSPORT": "{not json"}}, "env.MCC_TRANSPORT = '{not json'"),
        ({"transport": {"interface": 'lo"/><Tracing'}}, "Transport.interface"),
        ({"transport": {"kind": "udp", "verbosity": "finest"}}, "transport = ['verbosity']"),
        ({"transport": {"peers": "10.0.0.7"}}, "Transport.peers"),
        ({"transport": ["udp"]}, "an object of Transport fields"),
        ({"discovery_tag": "a tag<x>"}, "discovery_tag = 'a tag<x>'"),
        ({"domain": "7"}, "domain = '7' is refused (a DDS domain id from 0 to 232)"),
        ({"domain": 500}, "domain = 500"),
        ({"pid": True}, "pid = True"),
        ({"pid": -1}, "pid = -1"),
        ({"run_dir": "runs/m"}, "run_dir = 'runs/m' is refused (an absolute path)"),
        ({"run_dir": "/runs/\u0000m"}, "run_dir"),
        ({"backend": "rm -rf"}, "backend = 'rm -rf' is refused (a backend's name"),
        ({"keystore": "keys"}, "keystore = 'keys'"),
        ({"mission": "other"}, "the record of 'm' names its own mission"),
        ({"extra": 1}, "the fields = ['extra']"),
    ],
)
def test_hostile_records_are_refused_naming_the_field(
    home: Path, fields: dict[str, Any], refusal: str
) -> None:
    path = plant(home, "m", good(**fields))
    saved = dict(os.environ)
    with pytest.raises(OrchestratorError) as refused, open_client(mission="m", timeout_s=0.1):
        pass
    assert f"the registry record {path}" in str(refused.value)
    assert refusal in str(refused.value)
    assert dict(os.environ) == saved


@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        ("{not json", "is not JSON"),
        ("[1, 2]", "a JSON object"),
        (" " * (registry.MAX_RECORD_BYTES + 1), "is over 65536 bytes"),
        (b"\xff\xfe{}", "is not UTF-8 text"),
    ],
)
def test_records_that_are_not_records_are_refused(
    home: Path, text: str | bytes, refusal: str
) -> None:
    plant(home, "m", text)
    with pytest.raises(OrchestratorError, match=refusal):
        registry.find("m")


def test_records_others_may_write_are_refused(home: Path) -> None:
    path = plant(home, "m", good(), mode=0o666)
    with pytest.raises(OrchestratorError) as refused:
        registry.find("m")
    assert f"the registry record {path} is writable by its group and others" in str(refused.value)
    assert registry.active() == []  # refused, and left for its owner to look at
    assert path.exists()


def test_records_of_another_user_or_through_a_link_are_refused(home: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(good()))
    (home / "active" / "m.json").symlink_to(elsewhere)
    with pytest.raises(OrchestratorError, match="symbolic link"):
        registry.find("m")
    (home / "active" / "m.json").unlink()
    if os.geteuid() != 0:
        pytest.skip("making a file of another user's needs root")
    path = plant(home, "m", good())
    os.chown(path, 65534, 65534)
    with pytest.raises(OrchestratorError, match=f"{path} belongs to uid 65534, not to you"):
        registry.find("m")


def test_a_record_whose_pid_is_another_users_process_is_stale(home: Path) -> None:
    if os.geteuid() == 0:  # a process of someone else's: what the supervisor's pid became
        other = subprocess.Popen(["sleep", "30"], user=65534, group=65534)
    else:
        other = None
    try:
        path = plant(home, "m", good(pid=other.pid if other else 1))
        assert registry.active() == []
        assert not path.exists()
    finally:
        if other is not None:
            other.kill()
            other.wait()


def test_the_client_takes_the_records_transport_not_its_environment(
    home: Path, domain_id: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    transport = Transport(multicast=False, peers=("127.0.0.1",), interface="lo")
    fields = {k: v for k, v in dataclasses.asdict(transport).items() if k != "extra_xml"}
    plant(home, "m", good(domain=domain_id, transport=fields, discovery_tag="rec-tag"))
    saved = dict(os.environ)
    with open_client(mission="m", timeout_s=0.1) as client:
        assert client.bus.domain_id == domain_id
        assert client.bus.transport == dataclasses.replace(transport, discovery_tag="rec-tag")
    assert dict(os.environ) == saved  # nothing of the record went into the environment
    # this process's own settings come first, as for any bus it opens
    own = Transport(multicast=False, peers=("127.0.0.1",), interface="lo", discovery_tag="a")
    monkeypatch.setenv("MCC_TRANSPORT", own.apply_to_env({})["MCC_TRANSPORT"])
    monkeypatch.setenv("MCC_DISCOVERY_TAG", "own-tag")
    with open_client(mission="m", timeout_s=0.1) as client:
        assert client.bus.transport == dataclasses.replace(own, discovery_tag="own-tag")


def test_a_supervisor_records_its_transport_without_raw_xml(
    run_supervisor: Callable[..., Supervisor],
    bus_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base = Transport.from_env()
    with_xml = dataclasses.replace(
        base, extra_xml="<Discovery><SPDPInterval>1s</SPDPInterval></Discovery>"
    )
    monkeypatch.setenv("MCC_TRANSPORT", with_xml.apply_to_env({})["MCC_TRANSPORT"])
    run_supervisor(
        f"""
mission: recorded
domain: {{domain}}
security: none
systems:
  worker: {{app: "{APP}"}}
"""
    )
    record = registry.find("recorded")
    assert record.transport == base  # every field but the XML
    assert record.discovery_tag == bus_env["MCC_DISCOVERY_TAG"]
    text = (tmp_path / "home" / "active" / "recorded.json").read_text()
    assert "SPDPInterval" not in text and "extra_xml" not in text
    assert record.env == {
        "MCC_DISCOVERY_TAG": bus_env["MCC_DISCOVERY_TAG"],
        "MCC_TRANSPORT": base.apply_to_env({})["MCC_TRANSPORT"],
    }
