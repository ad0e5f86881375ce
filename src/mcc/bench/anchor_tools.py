"""The bench's child processes (``mcc.bench.anchors``, ``mcc.bench.perftest`` and the other
benches): where a tool is (`tool_path`), a child in the background for the length of a block
(`background`), one run to completion with a time limit (`run_tool`), the end of a child that
was told to stop (`reap`), and the messages that name them.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import IO, Any

from mcc.errors import MccError

__all__ = [
    "Background",
    "background",
    "describe",
    "positive_duration",
    "reap",
    "run_tool",
    "tail",
    "tool_path",
    "whole_seconds",
]

_INSTALL_HINTS = {
    "ddsperf": "apt-get install cyclonedds-tools",
    "sockperf": "apt-get install sockperf",
}
_READY_TIMEOUT_S = 10.0
_STOP_TIMEOUT_S = 5.0


def tool_path(name: str) -> str:
    """The absolute path of anchor tool `name`, or `MccError` saying how to install it."""
    path = shutil.which(name)
    if path is None:
        hint = _INSTALL_HINTS.get(name)
        how = f"install it with `{hint}`" if hint else "install it and put it on PATH"
        raise MccError(f"benchmark anchor tool {name!r} was not found on PATH; {how}")
    return path


class Background:
    """A started child process whose combined output goes to a temporary file."""

    def __init__(self, argv: list[str], proc: subprocess.Popen[bytes], log: IO[bytes]) -> None:
        self.argv = argv
        self.proc = proc
        self._log = log

    def output(self) -> str:
        """Everything the process has written so far."""
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def wait_until(self, ready: Callable[[], bool], *, what: str) -> None:
        """Poll `ready` until it holds; raise if the process exits or 10 s pass first."""
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while not ready():
            if (rc := self.proc.poll()) is not None:
                why = f"exited with status {rc} before it could {what}"
            elif time.monotonic() > deadline:
                why = f"did not {what} within {_READY_TIMEOUT_S:g} s"
            else:
                time.sleep(0.01)
                continue
            raise MccError(f"{describe(self.argv)} {why}:\n{tail(self.output())}")

    def stop(self) -> None:
        """Terminate, then kill if it lingers; always reaps the process."""
        if self.proc.poll() is None:
            self.proc.terminate()
            reap(self.proc, _STOP_TIMEOUT_S)


def reap(
    proc: subprocess.Popen[Any], timeout_s: float, *, kill_wait_s: float | None = None
) -> None:
    """Wait ``timeout_s`` for ``proc`` to end (it was told to stop), then kill it and wait
    ``kill_wait_s`` more (None: until it is gone)."""
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(kill_wait_s)


@contextmanager
def background(argv: list[str], *, env: Mapping[str, str] | None = None) -> Iterator[Background]:
    """Run `argv` for the duration of the block; it is stopped on exit, whatever happened."""
    with tempfile.TemporaryFile() as log:
        # Its own session: a Ctrl-C reaches only us, and we decide how the child ends.
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        child = Background(argv, proc, log)
        try:
            yield child
        finally:
            child.stop()


def run_tool(
    argv: list[str], *, timeout_s: float, env: Mapping[str, str] | None = None
) -> tuple[int, str]:
    """Run `argv` to completion; returns (exit status, combined output). Killed on timeout."""
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            timeout=timeout_s,
            start_new_session=True,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.output.decode(errors="replace") if isinstance(exc.output, bytes) else ""
        raise MccError(
            f"{describe(argv)} did not finish within {timeout_s:g} s:\n{tail(out)}"
        ) from None
    return done.returncode, done.stdout.decode(errors="replace")


def positive_duration(duration_s: float) -> float:
    if not (duration_s > 0 and math.isfinite(duration_s)):
        raise MccError(f"benchmark duration must be a positive number of seconds, not {duration_s}")
    return duration_s


def whole_seconds(duration_s: float) -> int:
    return max(1, math.ceil(duration_s))


def describe(argv: list[str]) -> str:
    return " ".join([os.path.basename(argv[0]), *argv[1:]])


def tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])
