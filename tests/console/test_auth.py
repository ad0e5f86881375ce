"""Operator accounts, password hashes, sessions and the audit log; `mcc console adduser`."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from mcc.console import ROLES, AuditLog, AuthError, SessionStore, UserStore, read_audit
from mcc.console.auth import hash_password, verify_password
from mcc.console.commands import resolve_domain
from mcc.errors import OrchestratorError
from tests.conftest import REPO, run_cli


def test_passwords_are_salted_scrypt_hashes() -> None:
    first, second = hash_password("correct horse"), hash_password("correct horse")
    assert first.startswith("scrypt$16384$8$1$") and first != second  # salted
    assert verify_password("correct horse", first) and verify_password("correct horse", second)
    assert not verify_password("correct horsE", first)
    assert not verify_password("correct horse", "md5$whatever")
    assert not verify_password("correct horse", "scrypt$broken")


def test_accounts_file_roles_and_refusals(tmp_path: Path) -> None:
    path = tmp_path / "users.json"
    store = UserStore(path)
    store.add("alice", "alice-password", "commander")
    store.add("bob", "bob-password", "observer")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert "alice-password" not in text and "scrypt$" in text
    assert store.authenticate("alice", "alice-password").may_command
    assert not store.authenticate("bob", "bob-password").may_command
    assert store.authenticate("alice", "bob-password") is None
    assert store.authenticate("mallory", "alice-password") is None
    assert [u.name for u in store.users()] == ["alice", "bob"] and ROLES == (
        "observer",
        "commander",
    )
    # Another process demotes alice: this store sees it at once.
    UserStore(path).add("alice", "alice-password", "observer")
    assert store.get("alice").role == "observer"

    with pytest.raises(AuthError, match="operator name 'Bad Name'"):
        store.add("Bad Name", "long-enough", "observer")
    with pytest.raises(AuthError, match="role 'admin': expected one of observer, commander"):
        store.add("carol", "long-enough", "admin")
    with pytest.raises(AuthError, match="has 5 characters; use at least 8"):
        store.add("carol", "short", "observer")
    path.write_text("{not json")
    with pytest.raises(AuthError, match="cannot read it"):
        UserStore(path).users()


def test_sessions_survive_a_restart_and_can_be_revoked(tmp_path: Path) -> None:
    path = tmp_path / "sessions.json"
    store = SessionStore(path)
    token = store.create("alice")
    assert len(token) >= 40 and token not in path.read_text()  # only digests are stored
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    restarted = SessionStore(path)
    assert restarted.lookup(token) == "alice"
    assert restarted.lookup("forged") is None and restarted.lookup(None) is None
    restarted.revoke(token)
    assert SessionStore(path).lookup(token) is None
    expired = SessionStore(None, ttl_s=-1.0)
    assert expired.lookup(expired.create("alice")) is None


def test_audit_log_is_json_lines(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path / "audit.jsonl")
    audit.record(who="alice", role="commander", action="phase", target="x", result="ok", status=200)
    audit.record(who="anonymous", role="", action="stop", result="refused", status=401)
    with pytest.raises(ValueError, match="result 'maybe'"):
        audit.record(who="a", role="", action="x", result="maybe", status=200)
    audit.close()
    entries = read_audit(tmp_path / "audit.jsonl")
    assert [(e["who"], e["action"], e["result"], e["status"]) for e in entries] == [
        ("alice", "phase", "ok", 200),
        ("anonymous", "stop", "refused", 401),
    ]
    assert entries[0]["time"].endswith("Z") and entries[0]["time_ns"] > 0


def test_adduser_command_and_console_without_accounts(
    tmp_path: Path, bus_env: dict[str, str]
) -> None:
    users = tmp_path / "users.json"
    # `python -m mcc.console` is `mcc console` (the latter is run below, through run_cli)
    args = ["adduser", "dana", "--role", "commander", "--users", str(users), "--password-stdin"]
    proc = subprocess.run(
        [sys.executable, "-m", "mcc.console", *args],
        input="dana-password\n",
        capture_output=True,
        text=True,
        cwd=REPO,
        env=bus_env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"operator 'dana' (commander) saved in {users}" in proc.stdout
    assert UserStore(users).authenticate("dana", "dana-password") is not None
    assert "dana-password" not in json.dumps(json.loads(users.read_text()))

    empty = tmp_path / "nobody.json"
    failed = run_cli(
        ["console", "--domain", bus_env["MCC_DOMAIN"], "--users", str(empty)],
        env=bus_env,
        check=False,
    )
    assert failed.returncode == 2, failed.stderr
    assert f"no operator account in {empty}" in failed.stderr
    assert "mcc console adduser NAME --role commander" in failed.stderr


def test_console_finds_the_mission_it_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCC_HOME", str(tmp_path))
    for name in ("MCC_DOMAIN", "MCC_DISCOVERY_TAG"):  # unset here, restored after the test
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    with pytest.raises(OrchestratorError, match="no mission is running here"):
        resolve_domain(domain=None, mission=None)
    assert resolve_domain(domain=None, mission=None, manifest=("sam-toc", 10))[:2] == (
        10,
        "sam-toc",
    )
    (tmp_path / "active").mkdir()
    record = {
        "mission": "sam-toc",
        "domain": 42,
        "pid": os.getpid(),
        "run_dir": "/r",
        "backend": "local",
        "env": {"MCC_DISCOVERY_TAG": "demo-7"},
    }
    (tmp_path / "active" / "sam-toc.json").write_text(json.dumps(record))
    joined = resolve_domain(domain=None, mission="sam-toc")
    assert joined[:2] == (42, "sam-toc")
    assert joined.transport is not None and joined.transport.discovery_tag == "demo-7"
    assert "MCC_DISCOVERY_TAG" not in os.environ  # passed on, never set in this process
    tagged = resolve_domain(domain=None, mission="sam-toc", tag="mine")
    assert tagged.transport is not None and tagged.transport.discovery_tag == "mine"
    assert resolve_domain(domain=None, mission=None)[:2] == (42, "sam-toc")
    assert resolve_domain(domain=None, mission=None, manifest=("sam-toc", 10))[:2] == (
        42,
        "sam-toc",
    )
    assert resolve_domain(domain=7, mission=None, manifest=("sam-toc", 10))[:2] == (7, "sam-toc")
    with pytest.raises(OrchestratorError, match="mission 'c2' is not running here"):
        resolve_domain(domain=None, mission="c2")
