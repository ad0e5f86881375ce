"""The host's iceoryx daemon (RouDi), which the shared-memory transport (``kind="shm"``) needs.

Cyclone's ``psmx_iox`` exchange moves samples between the processes of one host through
iceoryx shared memory; every such process registers with the host's RouDi at start-up. One RouDi
serves a host: a supervisor whose mission runs on ``shm`` starts one when none runs (`ensure`)
and watches it, ``mcc shm`` runs one in the foreground (e.g. as a host service when several
missions share a host). The daemon is ``iox-roudi`` from MCC's Cyclone build.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import subprocess
import time
from pathlib import Path

import mcc.bus._native as _native
from mcc.errors import TransportError

log = logging.getLogger("mcc.bus.shm")

#: iceoryx 2.95's defaults: resource prefix ``iox1``, domain 0. RouDi holds an flock on this file
#: while it runs and removes it when it stops.
_PREFIX = "iox1_0_"
LOCK_FILE = Path(f"/tmp/{_PREFIX}i_roudi.lock")
SOCKET = Path(f"/tmp/{_PREFIX}i_roudi")


def roudi_path() -> Path:
    """``iox-roudi`` of the Cyclone build the bus links (``.venv/cyclone/bin``)."""
    return Path(_native.LIBRARY).resolve().parent.parent / "bin" / "iox-roudi"


def running() -> bool:
    """Whether a RouDi runs on this host (its lock file is held)."""
    try:
        fd = os.open(LOCK_FILE, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


class RouDi:
    """A RouDi process started by this one (`ensure` returns None when another one runs)."""

    def __init__(self, proc: subprocess.Popen[bytes], log_path: Path | None) -> None:
        self.proc = proc
        self.log_path = log_path
        self.restarts = 0

    @classmethod
    def start(cls, *, log_path: Path | None = None, timeout_s: float = 15.0) -> RouDi:
        """Start RouDi in its own session (a crash of its starter does not take it down) and
        wait until it serves; `TransportError` if it does not."""
        exe = roudi_path()
        if not exe.exists():
            raise TransportError(
                f"no {exe}: the shared-memory transport needs MCC's Cyclone build with iceoryx "
                "(run `make`, native/build-cyclone.sh)"
            )
        out = log_path.open("ab") if log_path is not None else subprocess.DEVNULL
        try:
            proc = subprocess.Popen(
                [str(exe), "--log-level", "warning"],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            if log_path is not None:
                out.close()  # type: ignore[union-attr]
        deadline = time.monotonic() + timeout_s
        while not (running() and SOCKET.exists()):
            if proc.poll() is not None:
                said = log_path.read_text(errors="replace")[-2000:] if log_path else ""
                raise TransportError(f"iox-roudi exited {proc.returncode} at start-up\n{said}")
            if time.monotonic() > deadline:
                proc.kill()
                raise TransportError(f"iox-roudi did not serve within {timeout_s:g} s")
            time.sleep(0.02)
        log.info("started iox-roudi (pid %d) for the shared-memory transport", proc.pid)
        return cls(proc, log_path)

    @classmethod
    def ensure(cls, *, log_path: Path | None = None) -> RouDi | None:
        """Start RouDi unless one runs on this host already (then None: not ours to watch)."""
        if running():
            return None
        return cls.start(log_path=log_path)

    def watch(self) -> bool:
        """Start it again if it died (True then); call it periodically."""
        if self.proc.poll() is None:
            return False
        log.error("iox-roudi exited %s; starting it again", self.proc.returncode)
        self.proc = RouDi.start(log_path=self.log_path).proc
        self.restarts += 1
        return True

    def stop(self) -> None:
        """Stop it and remove its shared memory and sockets.

        Killed, not asked: a RouDi that shuts down gracefully sends SIGTERM to every process
        still registered with it, and an iceoryx runtime stays registered for the life of its
        process (the supervisor's own, a console's) after its participants are gone.
        """
        if self.proc.poll() is None:
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
        if not running():
            for stale in (*Path("/dev/shm").glob(f"{_PREFIX}*"), *Path("/tmp").glob(f"{_PREFIX}*")):
                with contextlib.suppress(OSError):
                    stale.unlink()
