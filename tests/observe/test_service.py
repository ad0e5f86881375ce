"""`supervisor_service` around a real supervisor: /metrics, READY=1 and watchdog pings on a
real notify socket, STOPPING=1 at the end."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mcc.observe.service import supervisor_service
from mcc.orchestrate import Supervisor
from tests.conftest import wait_for

MANIFEST = """
mission: served
domain: {domain}
security: none
systems:
  worker: {app: "mcc.orchestrate.probe:idle", resources: {cpus: 0.1}}
"""


def test_supervisor_service(
    run_supervisor: Callable[..., Supervisor], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify.sock"))
    sock.settimeout(30)
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify.sock"))
    monkeypatch.setenv("WATCHDOG_USEC", "200000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    sup = run_supervisor(MANIFEST)
    with supervisor_service(sup, metrics_port=0) as endpoint:
        assert endpoint is not None
        ready = sock.recv(4096).decode().splitlines()
        assert ready[0] == "READY=1" and ready[2].startswith("STATUS=mission served: phase")
        assert endpoint.url in ready[2]
        assert sock.recv(64) == b"WATCHDOG=1"

        def worker_up() -> bool:
            with urllib.request.urlopen(endpoint.url, timeout=10) as response:
                text = response.read().decode()
            families = {f.name: f for f in text_string_to_metric_families(text)}
            return any(
                s.labels["instance"] == "served/worker/0" and s.value == 1
                for s in families["mcc_instance_up"].samples
            )

        wait_for(worker_up, 60, "served/worker/0 up on /metrics")
    while (message := sock.recv(4096)) == b"WATCHDOG=1":
        pass
    sock.close()
    assert message.decode().startswith("STOPPING=1")
