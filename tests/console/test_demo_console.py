"""The demo's console: a subprocess with a one-time commander password, stopped with the demo."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx2 as httpx
import pytest

from mcc.demo import DEFAULT_MISSION, DemoConsole


@pytest.mark.slow
def test_demo_console_serves_with_a_one_time_commander_password(
    tmp_path: Path, domain_id: int, bus_env: dict[str, str]
) -> None:
    web = DemoConsole.start(DEFAULT_MISSION, domain_id, tmp_path, port=0, env=bus_env)
    try:
        deadline = time.monotonic() + 60
        while not web.poll():
            if time.monotonic() > deadline:
                pytest.fail(f"the demo's console did not start:\n{web.log_path.read_text()}")
            time.sleep(0.1)
        assert web.url is not None, web.banner()
        assert web.url in web.banner() and web.password in web.banner()
        stored = (tmp_path / "console" / "users.json").read_text()
        assert web.password not in stored
        assert json.loads(stored)["users"]["commander"]["role"] == "commander"
        with httpx.Client(base_url=web.url) as client:
            wrong = client.post("/api/login", json={"name": "commander", "password": "x" * 16})
            assert wrong.status_code == 401
            ok = client.post("/api/login", json={"name": "commander", "password": web.password})
            assert ok.json() == {"name": "commander", "role": "commander"}
            layout = client.get("/api/layout").json()
        # The console reads the demo's manifest: phases, assets, radar coverage, weapons.
        assert layout["mission"] == "sam-toc" and layout["phases"] == ["surveillance", "engagement"]
        assert [a["id"] for a in layout["assets"]] == ["airbase", "command-post"]
        assert {r["id"]: r["max_range_m"] for r in layout["radars"]} == {
            "search": 40000.0,
            "fire-control": 25000.0,
        }
        assert [w["id"] for w in layout["weapons"]] == ["sam-1", "sam-2", "sam-3"]
    finally:
        web.stop()
    assert web.proc.returncode is not None
