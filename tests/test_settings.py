"""`mcc.settings`: every MCC_* variable the code reads is declared once, typed, documented in
docs/operations.md, and a bad value is one line naming the variable (exit 2 at the command line);
so is every variable of another program that MCC reads, and one of those that does not parse is
unset."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from mcc.settings import (
    External,
    Settings,
    SettingsError,
    child_env,
    current,
    env_name,
    environ,
    external,
    markdown_table,
)

ROOT = Path(__file__).resolve().parents[1]


def test_every_variable_the_code_names_is_a_setting() -> None:
    named = set()
    for path in (ROOT / "src" / "mcc").rglob("*.py"):
        # quoted names: what Python reads (a foreign peer's own variables are keyword arguments)
        named.update(re.findall(r"[\"'](MCC_[A-Z_]+)[\"']", path.read_text(encoding="utf-8")))
    declared = {env_name(name) for name in Settings.model_fields}
    assert named - declared == set()


@pytest.mark.parametrize(("marker", "model"), [("settings", Settings), ("external", External)])
def test_the_operations_table_is_the_model(marker: str, model: type[Settings | External]) -> None:
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    documented = text.split(f"<!-- {marker} table: begin -->\n")[1].split(f"<!-- {marker}")[0]
    assert documented == markdown_table(model)


def test_values_are_typed_and_defaults_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCC_HOME", "/not/this/one")  # a given mapping is all that is read
    settings = Settings.from_env(
        {"MCC_DOMAIN": "7", "MCC_PARTITIONS": "a, b,", "MCC_LOG_LEVEL": "debug", "MCC_TAG": "x"}
    )
    assert settings.domain == 7
    assert settings.partitions == ("a", "b")
    assert settings.log_level == "DEBUG"
    assert settings.heartbeat_period_s == 1.0
    assert settings.home is None
    assert Settings.from_env({"MCC_DISCOVERY_TAG": ""}).discovery_tag is None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MCC_DOMAIN": "300"}, "MCC_DOMAIN: Input should be less than or equal to 232"),
        ({"MCC_INDEX": "two"}, "MCC_INDEX: Input should be a valid integer"),
        ({"MCC_LOG_FORMAT": "xml"}, "MCC_LOG_FORMAT: Input should be 'text' or 'json' (got 'xml')"),
        ({"MCC_DEVICE": "gpu"}, "MCC_DEVICE: String should match pattern"),
    ],
)
def test_a_bad_value_names_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(env)
    assert str(caught.value).startswith(message)


def test_the_process_environment_is_read_through_pydantic_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MCC_DOMAIN", "12")
    monkeypatch.setenv("MCC_ZYGOTE_PRELOAD", "json,csv")
    assert Settings() == Settings.from_env() == current()
    assert current().domain == 12
    assert current().zygote_preload == ("json", "csv")
    monkeypatch.setenv("MCC_DOMAIN", "13")
    assert current().domain == 13


def test_child_env_sets_validates_and_unsets() -> None:
    base = {"PATH": "/bin", "MCC_CLUSTER": "old"}
    env = child_env(base, mission="m", index=2, cluster=None, heartbeat_period_s=0.5)
    assert env == {
        "PATH": "/bin",
        "MCC_MISSION": "m",
        "MCC_INDEX": "2",
        "MCC_HEARTBEAT_PERIOD_S": "0.5",
    }
    assert Settings.from_env(env).index == 2
    with pytest.raises(SettingsError, match="MCC_INDEX"):
        child_env(base, index=-1)
    with pytest.raises(SettingsError, match="not a setting"):
        child_env(base, nonsense=1)


def test_a_bad_value_stops_the_command_line_with_status_2() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mcc.cli", "validate", "missions/sam-toc.yaml"],
        cwd=ROOT,
        env={**child_env(), "MCC_DOMAIN": "999"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "MCC_DOMAIN: Input should be less than or equal to 232 (got '999')" in proc.stderr


def test_external_variables_are_typed_and_never_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    given = External.from_env(
        {"COLUMNS": "120", "XDG_STATE_HOME": "/var/state", "CUDA_VISIBLE_DEVICES": "", "X": "1"}
    )
    assert given.columns == 120
    assert given.xdg_state_home == Path("/var/state")
    assert given.cuda_visible_devices == ""  # set and empty: no GPU, unlike unset
    assert given.notify_socket is None
    odd = External.from_env({"COLUMNS": "wide", "XDG_STATE_HOME": "relative", "PIP_CERT": ""})
    assert (odd.columns, odd.xdg_state_home, odd.pip_cert) == (None, None, None)
    monkeypatch.setenv("COLUMNS", "99")
    assert external().columns == 99
    monkeypatch.setenv("COLUMNS", "98")
    assert external().columns == 98


def test_environ_is_a_copy_for_a_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCC_TEST_COPY", "1")
    env = environ()
    env["MCC_TEST_COPY"] = "2"
    assert environ()["MCC_TEST_COPY"] == "1"
    assert child_env() == environ()
