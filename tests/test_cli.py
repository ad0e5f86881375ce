"""The `mcc` command through subprocess, against real peers on the bus."""

from __future__ import annotations

import json
import re
from pathlib import Path

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
def test_demo_runs_over_shared_memory(bus_env: dict[str, str], tmp_path: Path) -> None:
    """``transport: shm``: the supervisor starts the host's RouDi (unless one runs), every
    process exchanges samples through iceoryx, and the picture is built as over UDP."""
    from mcc.bus import shm

    had_roudi = shm.running()
    env = {**bus_env, "MCC_HOME": str(tmp_path / "home")}
    args = ["demo", "--duration", "20", "--no-console", "--transport", "shm"]
    proc = run_cli([*args, "--domain", bus_env["MCC_DOMAIN"]], env=env, timeout_s=150)
    assert "transport shm" in " ".join(proc.stdout.split())
    (run_dir,) = (tmp_path / "home" / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["pictures"] > 10 and summary["tracks_now"] > 0, summary
    assert summary["failed"] == []
    supervisor = json.loads((run_dir / "supervisor.json").read_text())
    assert all(i["restarts"] == 0 for i in supervisor["instances"]), supervisor["instances"]
    if not had_roudi:  # ours: started for the mission, stopped after it
        assert (run_dir / "logs" / "iox-roudi.log").exists()
        assert not shm.running()


@pytest.mark.slow
def test_demo_runs_the_sam_toc_mission(bus_env: dict[str, str], tmp_path: Path) -> None:
    env = {**bus_env, "MCC_HOME": str(tmp_path / "home")}
    proc = run_cli(
        ["demo", "--duration", "25", "--domain", bus_env["MCC_DOMAIN"]], env=env, timeout_s=150
    )
    assert "SAM TOC mission summary" in proc.stdout
    assert "→ phase engagement (TEWA and launchers start)" in proc.stdout
    (run_dir,) = (tmp_path / "home" / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["pictures"] > 10 and summary["tracks_now"] > 0
    assert summary["targets_total"] == 52 and summary["failed"] == []
    assert summary["gospa_mean_m"] is not None
    # The returning CAP flight (targets 901, 902) is never engaged, never killed.
    assert "friends engaged / killed (fratricide)" in proc.stdout
    assert (summary["friends"], summary["friends_engaged"], summary["friends_killed"]) == (2, 0, 0)
    supervisor = json.loads((run_dir / "supervisor.json").read_text())
    states = {i["id"]: i["state"] for i in supervisor["instances"]}
    assert states["sam-toc/tracker/0"] == "stopped"
    assert {"sam-toc/launcher/0", "sam-toc/launcher/2", "sam-toc/tewa/0"} <= set(states)
