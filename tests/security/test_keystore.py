"""DDS Security from a keystore: real Cyclone security plugins, real processes, hostile peers."""

from __future__ import annotations

import json
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509

from mcc.security import Grant, Keystore, SecurityError
from tests.conftest import REPO, run_cli

PEER = r"""
import json, os, sys, time
from mcc.bus import Bus, Transport
from mcc.errors import MccError
from mcc.security import Keystore
from mcc.types import DetectionBatch
role, keystore, ident, topic, seconds = sys.argv[1:6]
extra = Keystore(keystore).existing(ident).security_xml() if ident != "-" else ""
if ident.startswith("stolen"):  # a thief does not load our revocation list
    import re
    extra = re.sub("<CRL>.*?</CRL>", "", extra)
base = Transport.from_env()
import dataclasses
t = dataclasses.replace(base, extra_xml=extra)
with Bus(int(os.environ["MCC_DOMAIN"]), transport=t, name=ident) as bus:
    try:
        endpoint = bus.writer(topic) if role == "pub" else bus.reader(topic)
    except MccError as exc:
        print(json.dumps({"refused": str(exc)}))
        sys.exit(0)
    print("ready", flush=True)
    end = time.monotonic() + float(seconds)
    if role == "pub":
        n = 0
        while time.monotonic() < end:
            endpoint.write(DetectionBatch(sensor_id=ident, scan_id=n))
            n += 1
            time.sleep(0.02)
        print(json.dumps({"sent": n}))
    else:
        got = endpoint.take_until(10**6, timeout_s=float(seconds))
        print(json.dumps({"got": len(got), "from": sorted({s.sensor_id for s in got})}))
"""


@pytest.fixture
def keystore(tmp_path: Path, domain_id: int) -> Keystore:
    ks = Keystore.init(tmp_path / "keystore", mission="test")
    ks.write_governance((domain_id,))
    ks.identity("radar", (Grant(publish=("DetectionBatch",)),), domains=(domain_id,))
    ks.identity("tracker", (Grant(subscribe=("DetectionBatch",)),), domains=(domain_id,))
    return ks


def _start(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", PEER, *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _result(proc: subprocess.Popen[str], timeout_s: float = 60) -> dict[str, object]:
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"peer hung\n{out}\n{err}")
    assert proc.returncode == 0, f"{out}\n{err}"
    return dict(json.loads(out.strip().splitlines()[-1]))


def test_keystore_layout_and_private_files(keystore: Keystore) -> None:
    root = keystore.path
    for key in (root / "ca/identity_ca.key", root / "ca/permissions_ca.key"):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE((root / "ca").stat().st_mode) == 0o700
    radar = keystore.existing("radar")
    assert stat.S_IMODE((radar.folder / "key.pem").stat().st_mode) == 0o600
    assert keystore.check("radar") == []
    permissions = (radar.folder / "permissions.xml").read_text()
    assert (
        "<topic>DetectionBatch</topic>" in permissions and "<default>DENY</default>" in permissions
    )
    governance = (root / "governance.xml").read_text()
    assert "<allow_unauthenticated_participants>false" in governance
    assert "<data_protection_kind>ENCRYPT</data_protection_kind>" in governance
    assert (root / "governance.p7s").read_text().startswith("MIME-Version: 1.0")


def test_keystore_errors_say_what_to_do(tmp_path: Path, keystore: Keystore) -> None:
    with pytest.raises(SecurityError, match="mcc security init"):
        Keystore(tmp_path / "nowhere")
    with pytest.raises(SecurityError, match="already"):
        Keystore.init(keystore.path)
    assert "no cert.pem" in keystore.check("nobody")[0]
    other = Keystore.init(tmp_path / "other")
    other.identity("radar", (Grant(publish=("DetectionBatch",)),), domains=(1,))
    foreign = other.path / "identities" / "radar" / "cert.pem"
    (keystore.path / "identities" / "radar" / "cert.pem").write_bytes(foreign.read_bytes())
    assert any("not issued by" in p for p in keystore.check("radar"))


@pytest.mark.parametrize("name", ["M/*", "M/al?ce", "M/[ab]", "../x", "M/../../x", "M/a/b", ""])
def test_an_identity_name_is_never_a_pattern_or_a_path(keystore: Keystore, name: str) -> None:
    """The last part becomes a partition (``cmd/NAME``, ``src/NAME``) that permissions match
    as a pattern, and the name a folder of the keystore."""
    grants = (Grant(publish=("Command",)),)
    with pytest.raises(SecurityError, match="identity name"):
        keystore.identity(name, grants, domains=(1,))
    with pytest.raises(SecurityError, match="identity name"):
        keystore.existing(name)


def test_the_cli_refuses_a_wildcard_operator(tmp_path: Path, bus_env: dict[str, str]) -> None:
    ks = str(tmp_path / "ks")
    run_cli(["security", "init", ks, "--domain", "7"], env=bus_env)
    bad = run_cli(
        ["security", "identity", ks, "M/*", "--operator", "--domain", "7"],
        env=bus_env,
        check=False,
    )
    assert bad.returncode == 2 and "no wildcards" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "ks" / "identities" / "M").exists()


def test_cli_makes_and_checks_a_keystore(tmp_path: Path, bus_env: dict[str, str]) -> None:
    ks = str(tmp_path / "ks")
    run_cli(["security", "init", ks, "--domain", "7"], env=bus_env)
    run_cli(
        ["security", "identity", ks, "radar", "--domain", "7", "--publish", "DetectionBatch"],
        env=bus_env,
    )
    assert "radar: ok" in run_cli(["security", "check", ks, "radar"], env=bus_env).stdout
    bad = run_cli(["security", "check", ks, "ghost"], env=bus_env, check=False)
    assert bad.returncode == 1 and "ghost" in bad.stderr
    again = run_cli(["security", "init", ks, "--domain", "7"], env=bus_env, check=False)
    assert again.returncode == 2 and "already" in again.stderr and "Traceback" not in again.stderr


@pytest.mark.slow
def test_only_authenticated_permitted_participants_are_heard(
    keystore: Keystore, bus_env: dict[str, str], tmp_path: Path
) -> None:
    """A secured radar reaches a secured tracker; an unsecured eavesdropper hears nothing of
    it; an unsecured rogue writer is never heard by the tracker; an identity of another CA is
    not admitted either."""
    ks = str(keystore.path)
    other = Keystore.init(tmp_path / "other-ca")
    other.write_governance((int(bus_env["MCC_DOMAIN"]),))
    other.identity(
        "radar", (Grant(publish=("DetectionBatch",)),), domains=(int(bus_env["MCC_DOMAIN"]),)
    )
    procs = {
        "radar": _start(bus_env, "pub", ks, "radar", "DetectionBatch", "8"),
        "rogue": _start(bus_env, "pub", ks, "-", "DetectionBatch", "8"),
        "impostor": _start(bus_env, "pub", str(other.path), "radar", "DetectionBatch", "8"),
        "tracker": _start(bus_env, "sub", ks, "tracker", "DetectionBatch", "6"),
        "eavesdropper": _start(bus_env, "sub", ks, "-", "DetectionBatch", "6"),
    }
    results = {name: _result(proc) for name, proc in procs.items()}
    tracker, eavesdropper = results["tracker"], results["eavesdropper"]
    assert tracker["got"] > 20 and tracker["from"] == ["radar"], results
    assert "-" not in tracker["from"]
    assert eavesdropper["from"] in ([], ["-"]), results  # the rogue's own samples at most


def test_a_replaced_identity_is_refused_by_participants_created_after_it(
    keystore: Keystore, bus_env: dict[str, str], tmp_path: Path
) -> None:
    """Replacing an identity (an instance's restart does) revokes its old certificate: a
    participant created afterwards refuses a copy of the old credentials. One created before
    still accepts it: Cyclone reads the revocation list only when a participant is created."""
    ks, domain = str(keystore.path), int(bus_env["MCC_DOMAIN"])
    radar = keystore.path / "identities" / "radar"
    old_serial = x509.load_pem_x509_certificate((radar / "cert.pem").read_bytes()).serial_number
    shutil.copytree(radar, keystore.path / "identities" / "stolen")  # copied off its host
    earlier = _start(bus_env, "sub", ks, "tracker", "DetectionBatch", "14")
    assert earlier.stdout is not None and earlier.stdout.readline().strip() == "ready"
    grants = (Grant(publish=("DetectionBatch",)),)
    keystore.identity("radar", grants, domains=(domain,), revoke_replaced=True)
    assert old_serial in keystore.revoked()
    assert any("revoked" in p for p in keystore.check("stolen"))
    assert keystore.check("radar") == []
    procs = {
        "radar": _start(bus_env, "pub", ks, "radar", "DetectionBatch", "8"),
        "stolen": _start(bus_env, "pub", ks, "stolen", "DetectionBatch", "8"),
        "tracker": _start(bus_env, "sub", ks, "tracker", "DetectionBatch", "6"),
    }
    results = {name: _result(proc) for name, proc in procs.items()}
    assert results["tracker"]["from"] == ["radar"], results
    assert results["stolen"]["sent"] > 50  # it was on the bus all along
    assert set(_result(earlier)["from"]) == {"radar", "stolen"}  # the limit, measured


def test_an_identity_cannot_write_a_topic_it_was_not_granted(
    keystore: Keystore, bus_env: dict[str, str]
) -> None:
    ks = str(keystore.path)
    result = _result(_start(bus_env, "pub", ks, "radar", "EngagementOrder", "1"))
    assert "DDS Security refused to publish topic 'EngagementOrder'" in str(result["refused"])
    result = _result(_start(bus_env, "sub", ks, "radar", "DetectionBatch", "1"))
    assert "refused to subscribe to topic 'DetectionBatch'" in str(result["refused"])


def test_protection_per_topic_with_commands_and_orders_always_encrypted(tmp_path: Path) -> None:
    from mcc.errors import ManifestError
    from mcc.orchestrate import parse_manifest
    from mcc.security.documents import ALWAYS_ENCRYPTED, governance_xml

    xml = governance_xml((7,), protect="SIGN", topics={"DetectionBatch": "SIGN"})
    rules = re.findall(
        r"<topic_expression>(.*?)</topic_expression>.*?<data_protection_kind>(\w+)<", xml, re.S
    )
    # First match wins: the named topics before "*", orders and commands encrypted.
    assert rules[0] == ("DetectionBatch", "SIGN") and rules[-1] == ("*", "SIGN")
    assert {t: k for t, k in rules if t in ALWAYS_ENCRYPTED} == dict.fromkeys(
        ALWAYS_ENCRYPTED, "ENCRYPT"
    )
    base = "mission: m\nsystems:\n  a: {app: 'mcc.orchestrate.probe:idle'}\n"
    mission = parse_manifest(base + "protection: {'*': sign, Track: encrypt}\n")
    assert mission.protection == {"*": "sign", "Track": "encrypt"}
    with pytest.raises(ManifestError, match=r"protection\.EngagementOrder: EngagementOrder is "):
        parse_manifest(base + "protection: {EngagementOrder: sign}\n")
    with pytest.raises(ManifestError, match=r"protection\.Track"):
        parse_manifest(base + "protection: {Track: none}\n")


def test_an_instance_identity_generation_grows_even_when_the_clock_steps_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Readers drop an older generation of a principal once they heard a newer one: a restart
    after the host's clock stepped back must still issue a larger generation."""
    import time as clock

    from mcc.bus.topics import split_source
    from mcc.security.mission import Topics, instance_identity

    Keystore.init(tmp_path / "ks", mission="m").write_governance((7,))
    topics = Topics(publish=("DetectionBatch",))

    def issue() -> int:
        made = instance_identity(
            tmp_path / "ks", mission="m", domain=7, system="radar", index=0, topics=topics
        )
        assert made.source is not None
        found = split_source(made.source)
        assert found is not None and found[0] == "radar.0"
        return found[1]

    first = issue()
    monkeypatch.setattr(clock, "time_ns", lambda: (first - 3_600_000_000) * 1000)  # an hour back
    assert issue() == first + 1
