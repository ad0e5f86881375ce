"""The lab's fixtures: the wheels and images of `make images`, built once per session."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from mcc.lab import images
from tests.conftest import REPO


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> list[images.Built]:
    """Fresh wheels (about 10 s), and the images rebuilt only when the wheels changed (base
    image about 45 s once, each of deploy/'s about 75 s)."""
    dist = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [sys.executable, REPO / "native" / "build-wheels.py", REPO / ".venv" / "cyclone", dist],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    made = images.build_images(dist, REPO)
    for item in made:
        took = f"built in {item.seconds:.0f} s" if item.seconds else "up to date"
        print(f"{item.image}: {item.size_bytes / 1e6:.0f} MB, {took}")
    return made


def wait_for(what: str, check, timeout_s: float = 90.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(1)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
