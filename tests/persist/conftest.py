"""Helpers for the persistence tests: a service replica and a writer, as real processes."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import REPO, read_line


@contextmanager
def _process(
    args: list[str], env: dict[str, str], *, log: Path, expect: str
) -> Iterator[subprocess.Popen[str]]:
    """Run ``python ARGS`` (stderr to ``log``) once its first line contains ``expect``."""
    with log.open("a") as err:
        proc = subprocess.Popen(
            [sys.executable, *args],
            cwd=REPO,
            env={**env, "PYTHONFAULTHANDLER": "1"},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    try:
        line = read_line(proc, 60)
        if expect not in line:
            proc.kill()
            proc.wait(5)
            pytest.fail(f"{args} did not start: {line!r}\n{log.read_text()}")
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.stdin.close()
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        proc.stdin.close()
        proc.stdout.close()


@contextmanager
def replica(store: Path, name: str, env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """``mcc persist serve --store STORE --replica NAME``, once it printed its ready line.

    Run as ``python -m mcc.persist`` (the same command without the other sub-commands'
    imports, seconds less per start); ``test_service`` runs ``mcc persist`` itself too. Its
    log is ``STORE.log``.
    """
    args = ["-m", "mcc.persist", "serve", "--store", str(store), "--replica", name]
    log = store.with_name(store.name + ".log")
    with _process(args, {**env, "MCC_LOG_LEVEL": "DEBUG"}, log=log, expect="ready") as proc:
        yield proc


@contextmanager
def writer(*args: str, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[str]]:
    """``tests/persist/peer.py ARGS`` once every sample is stored (``write_stored`` returned)."""
    with _process(["-m", "tests.persist.peer", *args], env, log=log, expect="ready") as proc:
        line = read_line(proc, 60)
        assert line.strip() == "stored", f"{line!r}\n{log.read_text()}"
        yield proc


def kill9(proc: subprocess.Popen[str]) -> None:
    """SIGKILL: no clean-up of any kind in the process."""
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
