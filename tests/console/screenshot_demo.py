"""Screenshot of the console during `mcc demo` → docs/console.png (and the console's figures).

    .venv/bin/python -m tests.console.screenshot_demo [--out docs/console.png] [--at-s 32]

Runs the demo (its own MCC_HOME and domain), logs in with the one-time commander password it
prints, waits until ``--at-s`` seconds into the demo with interceptors in flight if it can,
saves a 1400x900 screenshot and prints the console's CPU use and its /metrics latency lines.
Needs Debian's Chromium (/usr/bin/chromium); downloads nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _wait_for(path: Path, pattern: str, timeout_s: float) -> re.Match[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = re.search(pattern, path.read_text(errors="replace"))
        if found:
            return found
        time.sleep(0.2)
    raise SystemExit(
        f"no {pattern!r} in the demo's output after {timeout_s} s:\n{path.read_text()}"
    )


def _console_cpu_percent(demo_pid: int, window_s: float = 3.0) -> float:
    """CPU use of the demo's console process (100 = one core) over ``window_s``."""
    import psutil

    (console,) = [
        p for p in psutil.Process(demo_pid).children() if "mcc.console" in " ".join(p.cmdline())
    ]
    console.cpu_percent()
    time.sleep(window_s)
    return float(console.cpu_percent())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "docs" / "console.png"))
    parser.add_argument("--at-s", type=float, default=32.0, help="demo time of the screenshot")
    parser.add_argument("--domain", type=int, default=211)
    opts = parser.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("chromium is not installed: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as home:
        out = Path(home) / "demo.out"
        env = {**os.environ, "MCC_HOME": home, "COLUMNS": "200"}
        cmd = [sys.executable, "-m", "mcc.cli", "demo", "--duration", str(opts.at_s + 20)]
        cmd += ["--domain", str(opts.domain)]
        with out.open("wb") as sink:
            demo = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT)
        started = time.monotonic()
        try:
            url = _wait_for(out, r"console: (http://\S+)", 90).group(1)
            password = _wait_for(out, r"password (\S+)", 10).group(1)
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=chromium, headless=True)
                context = browser.new_context(
                    viewport={"width": 1400, "height": 900}, bypass_csp=True
                )
                page = context.new_page()
                page.goto(url)
                page.fill("#name", "commander")
                page.fill("#password", password)
                page.click("#login-submit")
                page.wait_for_function("window.mcc && mcc.state && mcc.state.tracks.length > 5")
                while time.monotonic() - started < opts.at_s:
                    time.sleep(0.25)
                page.wait_for_function("mcc.state.interceptors.length > 0", timeout=15_000)
                page.screenshot(path=opts.out)
                print(f"console CPU with one browser: {_console_cpu_percent(demo.pid):.0f} %")
                browser.close()
            with urllib.request.urlopen(f"{url}metrics", timeout=10) as response:
                text = response.read().decode()
            for line in text.splitlines():
                if "latency_seconds{" in line or "bus_to_client_seconds{" in line:
                    print(line)
                if line.startswith("mcc_console_updates_sent_total"):
                    print(line)
            print(f"screenshot: {opts.out}")
        finally:
            demo.send_signal(signal.SIGINT)
            demo.wait(60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
