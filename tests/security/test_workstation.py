"""An operator at another host: an identity exported from the mission's keystore, imported
on a workstation (its own ``$MCC_HOME``, no keystore there), then ``mcc status|logs --domain``
reach the secured mission as that operator; without an identity the client says at once why
nobody answers, and a damaged identity file is refused."""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcc.observe.audit import read_audit
from tests.conftest import mcc_up, run_cli, running_ids, wait_for

MANIFEST = """\
mission: far
domain: {domain}
security: on
systems:
  tracker: {{app: "mcc.orchestrate.probe:idle", resources: {{cpus: 0.1}}}}
"""


@pytest.fixture
def up(tmp_path: Path, bus_env: dict[str, str], domain_id: int) -> Iterator[dict[str, str]]:
    env = {**bus_env, "MCC_HOME": str(tmp_path / "toc")}
    path = tmp_path / "far.yaml"
    path.write_text(MANIFEST.format(domain=domain_id))
    with mcc_up(path, env=env, log=tmp_path / "up.log"):
        wait_for(lambda: running_ids(env) == {"far/tracker/0"}, 60, "the mission running")
        yield env


@pytest.mark.slow
def test_an_operator_commands_from_a_workstation(
    up: dict[str, str], tmp_path: Path, bus_env: dict[str, str], domain_id: int
) -> None:
    keystore = Path(up["MCC_HOME"]) / "keystores" / "far"
    made = run_cli(
        ["security", "identity", str(keystore), "far/alice", "--domain", str(domain_id),
         "--operator"],
        env=up,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    bundle = tmp_path / "alice.mcc-identity"
    run_cli(["security", "export", str(keystore), "far/alice", "--out", str(bundle)], env=up)
    assert stat.S_IMODE(os.stat(bundle).st_mode) == 0o600
    text = bundle.read_text()
    for ca_key in (keystore / "ca").glob("*.key"):  # no CA key ever leaves the keystore
        body = "".join(ca_key.read_text().splitlines()[1:-1])
        assert body[40:] not in text.replace("\\n", "")  # past the common ASN.1 header

    # The workstation: its own MCC_HOME, no keystore, no registry of missions.
    desk = {**bus_env, "MCC_HOME": str(tmp_path / "desk")}
    started = time.monotonic()
    refused = run_cli(["status", "--domain", str(domain_id)], env=desk, check=False)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "is secured" in refused.stderr and "mcc security import" in refused.stderr
    assert time.monotonic() - started < 15  # at once, not the command timeout per try

    imported = run_cli(["security", "import", str(bundle)], env=desk)
    assert "far/alice installed" in imported.stdout
    folder = tmp_path / "desk" / "imported" / "far"
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    key = folder / "identities" / "far" / "alice" / "key.pem"
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    status = run_cli(["status", "--domain", str(domain_id), "--json"], env=desk)
    assert "far/tracker/0" in {i["id"] for i in json.loads(status.stdout)["instances"]}
    assert run_cli(["logs", "tracker", "--domain", str(domain_id)], env=desk).returncode == 0

    # The same file used once, without installing it, from a third host.
    other = {**bus_env, "MCC_HOME": str(tmp_path / "laptop")}
    once = run_cli(
        ["logs", "tracker", "--domain", str(domain_id), "--identity", str(bundle)], env=other
    )
    assert once.returncode == 0 and not (tmp_path / "laptop" / "imported").exists()

    # Attributed to alice in the mission's audit, by the identity, not the host.
    (audit,) = (Path(up["MCC_HOME"]) / "runs").glob("far-*/audit.jsonl")
    assert [(e["who"], e["action"]) for e in read_audit(audit)] == [
        ("alice", "logs"), ("alice", "logs"),
    ]  # fmt: skip


def test_a_damaged_identity_file_is_refused(tmp_path: Path, bus_env: dict[str, str]) -> None:
    from mcc.security import Grant, Keystore
    from mcc.security.bundle import export_identity

    ks = Keystore.init(tmp_path / "ks", mission="far")
    ks.write_governance((7,))
    ks.identity("far/alice", (Grant(publish=("Command",)),), domains=(7,))
    ks.identity("far/bob", (Grant(publish=("Command",)),), domains=(7,))
    good = export_identity(ks.path, "far/alice")
    bob = export_identity(ks.path, "far/bob")
    env = {**bus_env, "MCC_HOME": str(tmp_path / "desk")}

    def swap(member: str) -> str:  # alice's bundle with one of bob's files
        files = {**good["files"], member: bob["files"][member]}  # type: ignore[dict-item]
        return json.dumps({**good, "files": files})

    cases = {
        "not json": "{oops",
        "another format": json.dumps({**good, "format": "x"}),
        "bob's key": swap("key.pem"),
        "bob's certificate": swap("cert.pem"),
        "a wildcard name": json.dumps({**good, "identity": "far/*"}),
        "huge": "x" * (2 << 20),
    }  # fmt: skip
    expected = {
        "not json": "not an identity file",
        "another format": "format: expected",
        "bob's key": "not the key of files.cert.pem",
        "bob's certificate": "not the key of files.cert.pem",
        "a wildcard name": "identity: identity name",
        "huge": "not an identity file",
    }
    for case, content in cases.items():
        path = tmp_path / f"{case}.json"
        path.write_text(content)
        done = run_cli(["security", "import", str(path)], env=env, check=False)
        assert done.returncode == 2, (case, done.stderr)
        assert expected[case] in done.stderr and "Traceback" not in done.stderr, (case, done.stderr)
        assert len(done.stderr) < 600, case
    assert not (tmp_path / "desk" / "imported").exists()


def test_an_expired_revoked_or_early_identity_is_refused(
    tmp_path: Path, bus_env: dict[str, str]
) -> None:
    """An identity whose certificate expired, one the keystore revoked since (its export
    carries the newer revocation list), and one a host with its clock 10 minutes behind reads
    (not valid yet): each refused with the reason and what to do, nothing imported."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization

    from mcc.security import Grant, Keystore
    from mcc.security.bundle import export_identity

    ks = Keystore.init(tmp_path / "ks", mission="far")
    ks.write_governance((7,))
    ks.identity("far/alice", (Grant(publish=("Command",)),), domains=(7,))
    old = export_identity(ks.path, "far/alice")
    ks.identity(
        "far/alice", (Grant(publish=("Command",)),), domains=(7,), revoke_replaced=True
    )  # reissued, the first revoked
    new = export_identity(ks.path, "far/alice")
    ca_key = serialization.load_pem_private_key(
        (ks.path / "ca" / "identity_ca.key").read_bytes(), password=None
    )
    files: dict[str, str] = new["files"]  # type: ignore[assignment]
    cert = x509.load_pem_x509_certificate(files["cert.pem"].encode())
    now = dt.datetime.now(dt.UTC)

    def resigned(start: dt.datetime, end: dt.datetime) -> str:
        """alice's certificate, same key and names, valid from ``start`` to ``end``."""
        built = (
            x509.CertificateBuilder()
            .subject_name(cert.subject)
            .issuer_name(cert.issuer)
            .public_key(cert.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
        )
        return built.public_bytes(serialization.Encoding.PEM).decode()

    day, later = dt.timedelta(days=1), dt.timedelta(minutes=10)
    cases = {
        "expired": {**files, "cert.pem": resigned(now - 30 * day, now - day)},
        "early": {**files, "cert.pem": resigned(now + later, now + day)},
        "revoked": {**old["files"], "identity_ca.crl": files["identity_ca.crl"]},  # type: ignore[dict-item]
    }  # fmt: skip
    expected = {
        "expired": "set this host's clock right",
        "early": "export the identity again",
        "revoked": "revoked by the identity CA",
    }
    env = {**bus_env, "MCC_HOME": str(tmp_path / "desk")}
    for case, content in cases.items():
        path = tmp_path / f"{case}.mcc-identity"
        path.write_text(json.dumps({**new, "files": content}))
        done = run_cli(["security", "import", str(path)], env=env, check=False)
        assert done.returncode == 2, (case, done.stderr)
        assert expected[case] in done.stderr and "Traceback" not in done.stderr, (case, done.stderr)
        assert "files.cert.pem" in done.stderr, (case, done.stderr)
    assert not (tmp_path / "desk" / "imported").exists()
    path = tmp_path / "fresh.mcc-identity"  # the same export untouched: taken
    path.write_text(json.dumps(new))
    run_cli(["security", "import", str(path)], env=env)
