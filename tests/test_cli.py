"""The `mcc` command through subprocess, against real peers on the bus."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import peer, run_cli


def test_help_is_useful_on_its_own(bus_env: dict[str, str]) -> None:
    out = run_cli(["--help"], env=bus_env).stdout
    for command in ("demo", "topic", "bench"):
        assert command in out
    assert "topics seen on the domain" in run_cli(["topic", "--help"], env=bus_env).stdout
    echo = run_cli(["topic", "echo", "--help"], env=bus_env).stdout
    assert "--count" in echo and "--domain" in echo and "--tag" in echo
    assert "ddsperf" in run_cli(["bench", "latency", "--help"], env=bus_env).stdout


@pytest.mark.slow
def test_topic_list_echo_hz_against_a_live_writer(bus_env: dict[str, str]) -> None:
    with peer("write", "--topic", "DetectionBatch", "--rate-hz", "20", env=bus_env):
        listed = json.loads(run_cli(["topic", "list", "--wait", "2", "--json"], env=bus_env).stdout)
        by_name = {t["name"]: t for t in listed}
        assert by_name["DetectionBatch"]["type_name"] == "mcc::DetectionBatch"
        assert by_name["DetectionBatch"]["writers"] >= 1
        assert by_name["DetectionBatch"]["profiles"] == ["sensor_stream"]
        assert by_name["DetectionBatch"]["qos"]["reliability"].startswith("best-effort")

        echo = run_cli(
            ["topic", "echo", "DetectionBatch", "--count", "2", "--json", "--timeout", "20"],
            env=bus_env,
        ).stdout.splitlines()
        assert len(echo) == 2
        sample = json.loads(echo[0])
        assert sample["sensor_id"] == "radar-7"
        assert sample["range_m"].startswith("float64[3]") and "-2.25" in sample["range_m"]

        hz = run_cli(
            ["topic", "hz", "DetectionBatch", "--windows", "2", "--window", "1.5"], env=bus_env
        ).stdout.splitlines()
    rates = [float(re.search(r"([\d.]+) Hz", line).group(1)) for line in hz]
    assert len(rates) == 2 and 10 < rates[-1] < 25, hz
    assert "latency from origin_ns p50" in hz[-1]


def test_unknown_topic_is_a_clear_error(bus_env: dict[str, str]) -> None:
    proc = run_cli(["topic", "echo", "Trakc", "--timeout", "1"], env=bus_env, check=False)
    assert proc.returncode == 2
    assert "unknown topic 'Trakc'" in proc.stderr and "Traceback" not in proc.stderr


def test_echo_without_writer_says_so(bus_env: dict[str, str]) -> None:
    proc = run_cli(["topic", "echo", "Track", "--timeout", "1"], env=bus_env, check=False)
    assert proc.returncode == 1 and "no sample on 'Track'" in proc.stderr


@pytest.mark.slow
def test_demo_runs_a_live_exchange(bus_env: dict[str, str]) -> None:
    proc = run_cli(
        ["demo", "--duration", "2", "--domain", bus_env["MCC_DOMAIN"]], env=bus_env, timeout_s=90
    )
    assert re.search(r"received \d+ scans", proc.stdout), proc.stdout
    assert "request/reply: 'radar-1 status" in proc.stdout
