"""systemd's notify protocol (``sd_notify(3)``) without libsystemd: readiness, status text and
the watchdog keep-alive, sent as one datagram to ``$NOTIFY_SOCKET``.

Outside systemd (no ``NOTIFY_SOCKET``) every call is a no-op returning False, so a process can
call them unconditionally. To wire a long-running process (``mcc up``'s supervisor)::

    from mcc.observe import notify

    notify.ready(status=f"mission {name}: {n} instances")   # once it serves
    keepalive = notify.start_watchdog(lambda: supervisor_is_healthy())  # Type=notify + WatchdogSec
    ...
    notify.stopping(); keepalive.stop()
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable

from mcc.settings import External, external

__all__ = ["Watchdog", "notify", "ready", "start_watchdog", "stopping", "watchdog_interval_s"]


def notify(*fields: str, env: dict[str, str] | None = None) -> bool:
    """Send ``fields`` (``"READY=1"``, ``"STATUS=…"``, ``"WATCHDOG=1"``) to systemd; True when a
    notify socket was there and took the datagram."""
    address = (external() if env is None else External.from_env(env)).notify_socket or ""
    if not address or not fields:
        return False
    if address.startswith("@"):  # an abstract socket: a leading NUL byte on the wire
        address = "\0" + address[1:]
    elif not address.startswith("/"):
        return False  # not a path nor an abstract name: not ours to guess at (vsock is not used)
    payload = "\n".join(fields).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(payload, address)
    except OSError:
        return False
    return True


def ready(*, status: str | None = None) -> bool:
    """``READY=1`` (and a status line): the unit of ``Type=notify`` is started."""
    fields = ["READY=1", f"MAINPID={os.getpid()}"]
    if status:
        fields.append(f"STATUS={status}")
    return notify(*fields)


def stopping(*, status: str | None = None) -> bool:
    """``STOPPING=1``: the process is shutting down on purpose."""
    return notify("STOPPING=1", *([f"STATUS={status}"] if status else []))


def watchdog_interval_s(env: dict[str, str] | None = None) -> float | None:
    """Half of ``$WATCHDOG_USEC`` (how often to send ``WATCHDOG=1``), or None when the unit has
    no ``WatchdogSec=`` or the watchdog is meant for another process (``$WATCHDOG_PID``)."""
    source = external() if env is None else External.from_env(env)
    try:
        usec = int(source.watchdog_usec if source.watchdog_usec is not None else "0")
        pid = int(source.watchdog_pid if source.watchdog_pid is not None else os.getpid())
    except ValueError:
        return None
    if usec <= 0 or pid != os.getpid():
        return None
    return usec / 2e6


class Watchdog:
    """A daemon thread that sends ``WATCHDOG=1`` every ``interval_s`` while ``healthy()`` is
    True; when it turns False the pings stop and systemd restarts the unit after
    ``WatchdogSec``."""

    def __init__(self, healthy: Callable[[], bool], *, interval_s: float) -> None:
        self.interval_s = interval_s
        self.pings = 0
        self._healthy = healthy
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mcc-watchdog", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                healthy = self._healthy()
            except Exception:  # a failing health check is unhealthy, not a dead thread
                healthy = False
            if healthy and notify("WATCHDOG=1"):
                self.pings += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval_s + 1.0)


def start_watchdog(
    healthy: Callable[[], bool], *, interval_s: float | None = None
) -> Watchdog | None:
    """A `Watchdog` at the unit's interval (`watchdog_interval_s`), or None without one."""
    interval_s = interval_s if interval_s is not None else watchdog_interval_s()
    if interval_s is None:
        return None
    return Watchdog(healthy, interval_s=interval_s)
