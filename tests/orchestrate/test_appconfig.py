"""App ``config:`` blocks: checked against the app's config model at `mcc validate` and `mcc up`
(``file:line: systems.NAME.config.FIELD: …``, exit 2), handed to each instance as the typed
``ctx.config``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from mcc.errors import ManifestError, MccError
from mcc.orchestrate import Supervisor, parse_manifest
from mcc.orchestrate.appconfig import parse_config
from mcc.orchestrate.appspec import app_problems
from mcc.orchestrate.runtime import _config_of
from mcc.settings import Settings
from tests.conftest import REPO, wait_for
from tests.orchestrate.config_app import ProbeConfig

APP = "tests.orchestrate.config_app:main"


def _manifest(tmp_path: Path, config: str, app: str = APP) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(
        f"""mission: cfg
domain: 3
systems:
  probe:
    app: {app}
    config:
{config}
"""
    )
    return path


def test_validate_names_each_bad_field_with_its_line(tmp_path: Path) -> None:
    path = _manifest(
        tmp_path,
        "      rate_hz: -1\n      names: [a, b]\n      speed: 3\n"
        f"      notes: {tmp_path / 'missing.txt'}\n",
    )
    problems = app_problems(path)
    assert (
        problems[0]
        == f"{path}:7: systems.probe.config.rate_hz: Input should be greater than 0 (got -1)"
    )
    assert problems[1].startswith(f"{path}:10: systems.probe.config.notes: [Errno 2]")
    assert (
        problems[2]
        == f"{path}:9: systems.probe.config.speed: Extra inputs are not permitted (got 3)"
    )
    assert len(problems) == 3
    proc = subprocess.run(
        [sys.executable, "-m", "mcc.cli", "validate", str(path)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[:3] == problems
    up = subprocess.run(
        [sys.executable, "-m", "mcc.cli", "up", str(path), "--duration", "1"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert up.returncode == 2 and problems[0] in up.stderr, up.stderr


def test_a_block_for_an_app_without_config_or_for_a_command_is_refused(tmp_path: Path) -> None:
    path = _manifest(tmp_path, "      x: 1\n", app="mcc.orchestrate.probe:idle")
    assert app_problems(path) == [
        f"{path}:6: systems.probe.config: mcc.orchestrate.probe:idle declares no config model: "
        "give its options in 'args:' (got {'x': 1})"
    ]
    with pytest.raises(ManifestError, match="'config' is for an app"):
        parse_manifest("mission: c\nsystems:\n  s: {command: [sleep, '1'], config: {a: 1}}\n")


def test_the_shipped_missions_assessor_block_is_valid() -> None:
    assert app_problems(REPO / "missions" / "sam-toc.yaml") == []


def test_the_instance_side_parses_the_block_into_the_model() -> None:
    settings = Settings.from_env(
        {"MCC_SYSTEM": "probe", "MCC_CONFIG": json.dumps({"rate_hz": 5, "names": ["a"]})}
    )
    config = _config_of(APP, settings)
    assert config == ProbeConfig(rate_hz=5.0, names=("a",))
    assert _config_of(APP, Settings.from_env({"MCC_SYSTEM": "probe"})) == ProbeConfig()
    with pytest.raises(MccError, match=r"^systems\.probe\.config\.rate_hz: Input should be"):
        parse_config(ProbeConfig, '{"rate_hz": 0}', where="systems.probe.config")
    with pytest.raises(MccError, match="declares no config model"):
        _config_of("mcc.orchestrate.probe:idle", settings)


def test_each_instance_gets_its_typed_config(run_supervisor: Callable[..., Supervisor]) -> None:
    sup = run_supervisor(
        f"""
mission: cfg
domain: {{domain}}
systems:
  probe: {{app: "{APP}", replicas: 2, config: {{rate_hz: 4, names: [x, y]}}}}
"""
    )
    for index in (0, 1):
        seen = wait_for(
            lambda i=index: (
                json.loads((sup.run_dir / f"config-{i}.json").read_text())
                if (sup.run_dir / f"config-{i}.json").exists()
                else None
            ),
            what=f"instance {index}'s config",
        )
        assert seen == {"type": "ProbeConfig", "rate_hz": 4.0, "names": ["x", "y"], "notes": None}
