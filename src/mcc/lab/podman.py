"""podman as this project runs it: the one place that holds its flags and configuration.

    python -m mcc.lab podman ARGS...    # podman ARGS..., with the settings below

On hosts whose cgroups crun refuses (this project's build sandbox among them), podman runs
containers with ``--runtime runc --cgroup-manager cgroupfs`` and a ``containers.conf`` that sets
no default ulimits (podman's defaults are refused there too). Both work on an ordinary host as
well, so every podman command of MCC (``make images``, the container lab) goes through
:func:`podman`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from mcc.errors import MccError
from mcc.settings import child_env

__all__ = ["FLAGS", "PodmanError", "available", "command", "environment", "podman"]

#: Global flags before every podman subcommand.
FLAGS = ("--runtime", "runc", "--cgroup-manager", "cgroupfs")
#: The containers.conf that podman reads (``CONTAINERS_CONF``).
CONTAINERS_CONF = "[containers]\ndefault_ulimits = []\n"
#: The Debian packages that podman needs here (native/system-packages.sh installs them).
PACKAGES = "podman runc netavark aardvark-dns mmdebstrap"


class PodmanError(MccError):
    """A podman command failed, or podman is missing: the message says why and what to do."""


def _conf_file() -> Path:
    path = Path(tempfile.gettempdir()) / f"mcc-containers-{os.getuid()}.conf"
    if not path.is_file() or path.read_text() != CONTAINERS_CONF:
        tmp = path.with_suffix(f".{os.getpid()}")
        tmp.write_text(CONTAINERS_CONF)
        tmp.replace(path)
    return path


def environment() -> dict[str, str]:
    """This process's environment with podman's configuration file."""
    return {**child_env(), "CONTAINERS_CONF": str(_conf_file())}


def available() -> str | None:
    """None when podman and runc are installed, else the reason and the fix."""
    missing = [tool for tool in ("podman", "runc") if shutil.which(tool) is None]
    if missing:
        return (
            f"{' and '.join(missing)} not installed: run `make system` (native/system-packages.sh"
            f" installs the Debian packages {PACKAGES})"
        )
    return None


def command(args: Sequence[str]) -> list[str]:
    """The argv of ``podman ARGS`` with this project's flags."""
    return ["podman", *FLAGS, *args]


def podman(
    args: Sequence[str],
    *,
    check: bool = True,
    timeout_s: float = 120.0,
    capture: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run ``podman ARGS``; a failure (``check``), a timeout or a missing podman raises
    PodmanError with the command and what it printed."""
    reason = available()
    if reason is not None:
        raise PodmanError(reason)
    argv = command(args)
    try:
        proc = subprocess.run(
            argv,
            env=environment(),
            capture_output=capture,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise PodmanError(f"{' '.join(argv)} did not finish in {timeout_s:g} s") from exc
    if check and proc.returncode != 0:
        tail = "\n".join((proc.stdout or "").splitlines()[-20:] + (proc.stderr or "").splitlines())
        raise PodmanError(f"{' '.join(argv)} failed (exit {proc.returncode}):\n{tail.strip()}")
    return proc


def main(argv: Sequence[str]) -> NoReturn:
    """``python -m mcc.lab podman ARGS``: exec podman with the flags and configuration."""
    reason = available()
    if reason is not None:
        print(f"mcc.lab.podman: {reason}", file=sys.stderr)
        raise SystemExit(2)
    os.execvpe("podman", command(argv), environment())
