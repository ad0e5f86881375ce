"""Shared test fixtures: a fresh DDS domain and discovery tag per test, tool requirements."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() == "true"

_domain_counter = iter(range(1, 200))


def require_tool(name: str) -> str:
    """The path of system tool ``name``; a missing tool fails the test in CI, skips it elsewhere."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (.ci/run installs it: see README)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture
def domain_id(worker_id_offset: int) -> int:
    """A DDS domain id no other test in this session uses."""
    return (next(_domain_counter) + worker_id_offset) % 230 + 1


@pytest.fixture
def worker_id_offset() -> int:
    return (os.getpid() * 7) % 100


@pytest.fixture
def bus_env(domain_id: int, request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """Environment for child processes: same domain, a discovery tag unique to this test."""
    from mcc.bus.transport import Transport

    tag = re.sub(r"[^A-Za-z0-9_.-]", "_", f"test-{os.getpid()}-{request.node.name}")[:60]
    overrides = Transport.loopback(tag).apply_to_env({})
    overrides.update(MCC_DOMAIN=str(domain_id), MCC_DISCOVERY_TAG=tag)
    saved = {k: os.environ.get(k) for k in overrides}
    os.environ.update(overrides)  # buses opened by the test itself use them too
    yield {**os.environ}
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def run_cli(args: Sequence[str], *, env: dict[str, str], timeout_s: float = 60.0,
            check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``mcc ARGS`` in a subprocess; on timeout or failure show what it printed."""
    cmd = [sys.executable, "-m", "mcc.cli", *args]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(cmd)} timed out after {timeout_s} s\nstdout:\n{exc.stdout}\n"
                    f"stderr:\n{exc.stderr}")
    if check and proc.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {proc.returncode}\nstdout:\n{proc.stdout}\n"
                    f"stderr:\n{proc.stderr}")
    return proc
