"""Console test helpers: operator accounts, `mcc console` as a subprocess, a real Chromium."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from mcc.console.auth import UserStore
from tests.conftest import REPO, require_tool

COMMANDER = ("cmdr", "commander-password")
OBSERVER = ("obs", "observer-password")


@pytest.fixture
def accounts(tmp_path: Path) -> Path:
    """An accounts file with a commander and an observer (see COMMANDER, OBSERVER)."""
    path = tmp_path / "console" / "users.json"
    store = UserStore(path)
    store.add(*COMMANDER, "commander")
    store.add(*OBSERVER, "observer")
    return path


def friendly_scenario(base: str | Path, out: Path) -> Path:
    """``base`` (a scenario file) with its radars interrogating IFF Mode 5 and a friendly
    fighter (target 901, ``iff: {mode5: true}``) flying through their coverage: written to
    ``out``."""
    spec = yaml.safe_load((REPO / base).read_text())
    for radar in spec["radars"]:
        radar["iff"] = {"p_reply": 0.95}
    spec["targets"].append(
        {
            "id": 901,
            "class": "aircraft",
            "position_m": [-8000, -6000, 4000],
            "motion": {"model": "constant_velocity", "velocity_mps": [120, 0, 0]},
            "iff": {"mode5": True},
        }
    )
    out.write_text(yaml.safe_dump(spec, sort_keys=False))
    return out


@dataclass
class ConsoleProcess:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    @property
    def port(self) -> int:
        return int(self.url.rstrip("/").rsplit(":", 1)[1])


@contextmanager
def console_process(
    *args: str, env: dict[str, str], log: Path, port: int = 0, ready_timeout_s: float = 60.0
) -> Iterator[ConsoleProcess]:
    """Run ``mcc console --port PORT ARGS`` (output appended to ``log``) until its ready line;
    SIGTERM it (then SIGKILL) after the block. It runs as ``python -m mcc.console``, the same
    command without importing every other sub-command of ``mcc`` (seconds on a busy host)."""
    cmd = [sys.executable, "-m", "mcc.console", "--port", str(port), *args]
    start = log.stat().st_size if log.exists() else 0
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + ready_timeout_s
        url = None
        while url is None:
            text = log.read_bytes()[start:].decode(errors="replace")
            for line in text.splitlines():
                if line.startswith("mcc console: http"):
                    url = line.split()[2]
            if url is None and (proc.poll() is not None or time.monotonic() > deadline):
                pytest.fail(f"mcc console did not start ({' '.join(cmd)}):\n{text}")
            if url is None:
                time.sleep(0.05)
        yield ConsoleProcess(proc, url, log)
    finally:
        stop_process(proc)


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@pytest.fixture
def browser() -> Iterator[Any]:
    """Debian's Chromium, headless, driven by Playwright (no browser download)."""
    executable = require_tool("chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


def open_page(browser: Any, url: str, account: tuple[str, str]) -> Any:
    """A new 1400x900 page logged in to the console at ``url`` as ``account``."""
    # bypass_csp: Playwright's wait_for_function evaluates strings, which the console's CSP
    # (script-src 'self') forbids; the page itself runs under its CSP as usual.
    context = browser.new_context(viewport={"width": 1400, "height": 900}, bypass_csp=True)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.errors = errors
    page.goto(url)
    page.wait_for_url("**/login")
    page.fill("#name", account[0])
    page.fill("#password", account[1])
    page.click("#login-submit")
    page.wait_for_function("window.mcc && window.mcc.role !== null", timeout=30_000)
    return page
