"""The `mcc` console script (`mcc.extras:main`): a missing extra is named, JSON logs on request."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mcc.extras import EXTRA_OF, missing_extra


def test_every_extra_module_maps_to_a_declared_extra() -> None:
    import tomllib

    from tests.conftest import REPO

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert set(EXTRA_OF.values()) <= set(declared)
    hint = missing_extra(ModuleNotFoundError("No module named 'stonesoup'", name="stonesoup.types"))
    assert hint == (
        "this command needs 'stonesoup', from the extra 'bench': pip install 'mcc[bench]'"
    )
    assert missing_extra(ModuleNotFoundError("x", name="numpy")) is None  # core: a real bug


def test_a_missing_extra_is_named_not_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    import mcc.cli

    def console_without_fastapi(argv: object = None) -> int:
        raise ModuleNotFoundError("No module named 'fastapi'", name="fastapi")

    monkeypatch.setattr(mcc.cli, "main", console_without_fastapi)
    from mcc.extras import main

    assert main(["console"]) == 2


def test_json_logs_from_the_environment() -> None:
    code = (
        "import logging, sys; from mcc import extras, cli;"
        "cli.main = lambda argv=None: logging.getLogger('mcc.test').warning('hello') or 0;"
        "sys.exit(extras.main([]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "MCC_LOG_FORMAT": "json"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stderr.strip().splitlines()[-1])
    assert (record["logger"], record["message"], record["level"]) == (
        "mcc.test",
        "hello",
        "warning",
    )
