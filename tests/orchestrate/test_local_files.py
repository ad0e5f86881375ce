"""What MCC keeps on this host is the user's only: the home, the registry, run folders, logs."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from mcc.errors import OrchestratorError
from mcc.orchestrate import Supervisor, registry
from tests.conftest import run_cli, wait_for

APP = "mcc.orchestrate.probe:idle"


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_home_is_per_user_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCC_HOME")
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.chdir(tmp_path)  # not the current folder's .mcc any more
    assert registry.home() == tmp_path / "user" / ".local" / "state" / "mcc"
    assert mode(registry.home()) == 0o700
    assert not (tmp_path / ".mcc").exists()
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert registry.home() == tmp_path / "state" / "mcc"
    assert mode(tmp_path / "state" / "mcc") == 0o700
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")  # invalid by the XDG spec: ignored
    assert registry.home() == tmp_path / "user" / ".local" / "state" / "mcc"
    monkeypatch.setenv("MCC_HOME", "mine")  # MCC_HOME overrides, made absolute
    assert registry.home() == tmp_path / "mine"
    assert mode(tmp_path / "mine") == 0o700


def test_a_home_others_may_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    env = {**os.environ, "MCC_HOME": str(shared)}
    proc = run_cli(["status"], env=env, check=False)
    assert proc.returncode == 2, proc.stderr
    assert f"the MCC home {shared} is writable by its group and others (mode 0777)" in proc.stderr
    assert f"`chmod 700 {shared}` or set MCC_HOME elsewhere" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (shared / "active").exists()


def test_a_home_of_another_user_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)
        owner = 65534
    else:
        theirs, owner = Path("/"), 0  # root's
    monkeypatch.setenv("MCC_HOME", str(theirs))
    with pytest.raises(OrchestratorError) as refused:
        registry.home()
    assert f"the MCC home {theirs} belongs to uid {owner}, not to you" in str(refused.value)


def test_records_run_folders_and_logs_are_private(
    run_supervisor: Callable[..., Supervisor], tmp_path: Path
) -> None:
    home = tmp_path / "home"
    # What an earlier, careless run left: a world-readable run folder, log and record.
    (tmp_path / "run" / "logs").mkdir(parents=True)
    (tmp_path / "run").chmod(0o755)
    (tmp_path / "run" / "logs").chmod(0o755)
    old_log = tmp_path / "run" / "logs" / "worker-0.log"
    old_log.write_text("an earlier run\n")
    old_log.chmod(0o644)
    home.mkdir(mode=0o700)
    (home / "active").mkdir(mode=0o755)
    old_record = home / "active" / "private.json"
    old_record.write_text("{}")
    old_record.chmod(0o644)
    old_inode = os.stat(old_record).st_ino

    sup = run_supervisor(
        f"""
mission: private
domain: {{domain}}
security: none
systems:
  worker: {{app: "{APP}"}}
"""
    )
    wait_for(
        lambda: any(i["state"] == "running" for i in sup.status()["instances"]), what="running"
    )
    assert mode(home) == 0o700
    assert mode(home / "active") == 0o700
    record = home / "active" / "private.json"
    assert mode(record) == 0o600
    assert os.stat(record).st_ino != old_inode  # replaced whole, never rewritten in place
    assert [p.name for p in (home / "active").iterdir()] == ["private.json"]  # no temp file
    assert registry.find("private").run_dir == str((tmp_path / "run").resolve())
    assert mode(tmp_path / "run") == 0o700
    assert mode(tmp_path / "run" / "logs") == 0o700
    assert mode(old_log) == 0o600  # the instance appends to it, now the user's only
    assert old_log.read_text().startswith("an earlier run\n")
