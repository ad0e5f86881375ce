"""sd_notify over a real datagram socket, as systemd listens for it."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcc.observe import notify


@pytest.fixture
def listener(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = tmp_path / "notify.sock"
    sock.bind(str(path))
    sock.settimeout(5.0)
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    yield sock
    sock.close()


def _fields(sock: socket.socket) -> dict[str, str]:
    data = sock.recv(4096).decode()
    return dict(line.split("=", 1) for line in data.splitlines())


def test_ready_sends_ready_mainpid_and_status(listener: socket.socket) -> None:
    assert notify.ready(status="mission sam-toc: 9 instances")
    assert _fields(listener) == {
        "READY": "1",
        "MAINPID": str(os.getpid()),
        "STATUS": "mission sam-toc: 9 instances",
    }
    assert notify.stopping()
    assert _fields(listener) == {"STOPPING": "1"}


def test_abstract_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"mcc-notify-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5.0)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert notify.notify("WATCHDOG=1")
        assert sock.recv(64) == b"WATCHDOG=1"


def test_without_systemd_every_call_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert notify.ready() is False
    assert notify.notify("WATCHDOG=1", env={"NOTIFY_SOCKET": "vsock:2:999"}) is False
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    assert notify.start_watchdog(lambda: True) is None  # no WatchdogSec: no thread


def test_watchdog_interval_is_half_the_units() -> None:
    pid = str(os.getpid())
    assert notify.watchdog_interval_s({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": pid}) == 15.0
    assert notify.watchdog_interval_s({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}) is None
    assert notify.watchdog_interval_s({}) is None
    assert notify.watchdog_interval_s({"WATCHDOG_USEC": "x"}) is None


def test_watchdog_pings_only_while_healthy(listener: socket.socket) -> None:
    healthy = True
    dog = notify.start_watchdog(lambda: healthy, interval_s=0.02)
    assert dog is not None
    try:
        assert listener.recv(64) == b"WATCHDOG=1"
        healthy = False
        deadline = time.monotonic() + 5.0
        pings = dog.pings
        time.sleep(0.1)  # a few intervals, all of them unhealthy
        while time.monotonic() < deadline and dog.pings != pings:
            pings = dog.pings
            time.sleep(0.1)
        assert dog.pings == pings  # no ping once the check fails
    finally:
        dog.stop()
