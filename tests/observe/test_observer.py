"""`python -m mcc.observer` on a running, secured mission: it joins as the mission's console,
and its /metrics (read by prometheus-client's parser) has every instance's state, restarts and
heartbeat figures; under systemd it says READY=1 and pings the watchdog."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import REPO, mcc_up, read_line, wait_for

MANIFEST = """
mission: observed
domain: {domain}
systems:
  worker: {{app: "mcc.orchestrate.probe:idle", replicas: 2, resources: {{cpus: 0.1}}}}
"""


def scrape(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return {f.name: f for f in text_string_to_metric_families(response.read().decode())}


def samples(families: dict[str, Any], name: str) -> dict[str, float]:
    family = families.get(name)
    if family is None:
        return {}
    return {s.labels.get("instance", ""): s.value for s in family.samples}


def test_observer_serves_a_secured_missions_metrics(
    tmp_path: Path, domain_id: int, bus_env: dict[str, str]
) -> None:
    manifest = tmp_path / "observed.yaml"
    manifest.write_text(MANIFEST.format(domain=domain_id))
    env = {**bus_env, "MCC_HOME": str(tmp_path / "home")}
    with mcc_up(manifest, env=env, log=tmp_path / "up.log"):
        active = tmp_path / "home" / "active" / "observed.json"
        wait_for(active.exists, 60, f"mcc up registering the mission ({active})")
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(str(tmp_path / "notify.sock"))
        notify.settimeout(30)
        systemd = {"NOTIFY_SOCKET": str(tmp_path / "notify.sock"), "WATCHDOG_USEC": "400000"}
        observer = subprocess.Popen(
            [sys.executable, "-m", "mcc.observer", "--mission", "observed", "--metrics-port", "0"],
            cwd=REPO,
            env={**env, **systemd},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            line = read_line(observer, 60)
            if not line.startswith("mcc observe: http://127.0.0.1:"):
                observer.kill()
                raise AssertionError(f"{line!r}\n{observer.communicate(timeout=10)[1]}")
            url = line.split()[2]
            ready = notify.recv(4096).decode().splitlines()
            assert ready[:2] == ["READY=1", f"MAINPID={observer.pid}"], ready
            assert notify.recv(64) == b"WATCHDOG=1"  # every 0.2 s: half of WatchdogSec
            ids = {"observed/worker/0", "observed/worker/1"}

            def seen() -> dict[str, Any] | None:
                families = scrape(url)
                up = {i for i, v in samples(families, "mcc_instance_up").items() if v == 1}
                beating = samples(families, "mcc_instance_messages_out_per_second").keys()
                return families if ids <= up and ids <= beating else None

            families = wait_for(seen, 60, "both workers up and beating on the observer's /metrics")
            assert samples(families, "mcc_instance_restarts") == dict.fromkeys(ids, 0)
            info = families["mcc_mission_info"].samples[0].labels
            assert (info["mission"], info["state"]) == ("observed", "running")
            assert families["mcc_topic_samples"].type == "counter"
            assert families["mcc_bus_decode_drops"].samples == []
        finally:
            observer.send_signal(signal.SIGTERM)
            _, err = observer.communicate(timeout=30)
            notify.close()
        assert observer.returncode == 0, err


def test_the_old_module_name_runs_the_observer() -> None:
    """Units that still say ``python -m mcc.observe`` get the observer (exec'd, same pid)."""
    proc = subprocess.run(
        [sys.executable, "-m", "mcc.observe", "--help"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: python -m mcc.observer")
