"""`mcc bench deploy` measures a real `mcc up` and the exec anchor, and reports one shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli


@pytest.mark.slow
def test_bench_deploy_quick_row(tmp_path: Path, bus_env: dict[str, str]) -> None:
    out = tmp_path / "deploy.json"
    env = {**bus_env, "MCC_HOME": str(tmp_path / "home")}
    run_cli(
        [
            "bench",
            "deploy",
            "--workers",
            "2",
            "--backends",
            "local",
            "--failovers",
            "2",
            "--json",
            str(out),
        ],
        env=env,
        timeout_s=240,
    )
    doc = json.loads(out.read_text())
    assert doc["bench"] == "deploy" and doc["host"]["cores"] >= 1
    mcc, anchor = doc["rows"]
    assert (mcc["impl"], mcc["backend"], mcc["workers"]) == ("mcc", "local", 2)
    assert anchor["impl"] == "exec" and anchor["scale_s"] is None
    for row in (mcc, anchor):
        assert row["failovers"] == 2
        assert 0 < row["deploy_s"] < 120
        assert 0 < row["failover_p50_s"] <= row["failover_max_s"] < 60
    assert 0 < mcc["scale_s"] < 120
