"""The lab's fixtures: the wheels and images of `make images`, built once per session."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from mcc import waiting
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


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 90.0) -> Any:
    """`mcc.waiting.wait_for` once a second (a container host's files, a status over the lab's
    network): ``check()``'s first truthy value; the test fails at the deadline."""
    try:
        return waiting.wait_for(check, timeout_s, what, period_s=1.0)
    except waiting.WaitTimeoutError as exc:
        pytest.fail(str(exc))
