"""The C peer (interop/c, Cyclone DDS C 0.10) in a mission with the Python tracker and TEWA
(Cyclone DDS 11): its detections become tracks, its launcher receives orders."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcc.bus import Bus
from mcc.orchestrate.manifest import load_manifest
from mcc.types import TrackStatus
from tests.conftest import IN_CI, REPO, mission_transport, require_tool, run_cli

PEER = REPO / "build" / "interop" / "mcc-c-peer"
MISSION = REPO / "missions" / "interop.yaml"


@pytest.fixture(scope="module")
def c_peer() -> Path:
    """``make interop``: the C peer built from idl/mcc.idl (fails in CI, skips elsewhere)."""
    for tool in ("cmake", "idlc", "cc"):
        require_tool(tool)
    if not Path("/usr/include/dds/dds.h").exists():
        message = "Cyclone DDS C headers missing (apt-get install cyclonedds-dev)"
        pytest.fail(message) if IN_CI else pytest.skip(message)
    build = subprocess.run(
        ["make", "interop"], cwd=REPO, capture_output=True, text=True, timeout=300, check=False
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    assert os.access(PEER, os.X_OK)
    return PEER


def test_peer_refuses_bad_arguments(c_peer: Path) -> None:
    for argv, text in (
        ([], "first argument must be 'radar', 'launcher' or 'echo'"),
        (["radar", "--period-s", "fast"], "--period-s"),
        (["launcher", "--bogus"], "unknown launcher option"),
    ):
        proc = subprocess.run([str(c_peer), *argv], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2 and text in proc.stderr, proc.stderr


@pytest.fixture
def interop_mission(
    c_peer: Path, tmp_path: Path, bus_env: dict[str, str]
) -> Iterator[dict[str, object]]:
    env = {**bus_env, "MCC_HOME": str(tmp_path / "home")}
    run_dir = tmp_path / "run"
    log = (tmp_path / "up.log").open("wb")
    up = subprocess.Popen(
        [sys.executable, "-m", "mcc.cli", "up", str(MISSION), "--quiet", "--run-dir", str(run_dir)],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield {"env": env, "run_dir": run_dir, "up": up, "log": tmp_path / "up.log"}
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGTERM)
            try:
                up.wait(30)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait()
        log.close()


def test_c_radar_and_launcher_in_a_python_mission(interop_mission: dict[str, object]) -> None:
    run_dir = Path(str(interop_mission["run_dir"]))
    launcher_log = run_dir / "logs" / "launcher-c-0.log"
    domain = load_manifest(MISSION).domain
    confirmed: set[int] = set()
    orders: list[str] = []
    home = Path(str(interop_mission["env"]["MCC_HOME"]))  # type: ignore[index]
    transport = mission_transport(home, "interop", domain, subscribe=("Track",))
    with Bus(domain, transport=transport, name="interop test") as bus:
        tracks = bus.reader("Track")
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and (len(confirmed) < 3 or not orders):
            for track in tracks.take_wait(64, timeout_s=0.5):
                if track.status == TrackStatus.TRACK_CONFIRMED:
                    confirmed.add(track.track_id)
            if launcher_log.exists():
                orders = [x for x in launcher_log.read_text().splitlines() if " order " in x]
    up_log = Path(str(interop_mission["log"])).read_text()[-3000:]
    assert len(confirmed) >= 3, f"tracks {confirmed} from the C radar's 3 targets\n{up_log}"
    assert orders and "for track" in orders[0], f"the C launcher got no order\n{up_log}"
    radar_log = (run_dir / "logs" / "radar-c-0.log").read_text()
    assert "Cyclone DDS C " in radar_log
    env = interop_mission["env"]
    assert isinstance(env, dict)
    run_cli(["down", "--mission", "interop"], env=env, timeout_s=60)
    up = interop_mission["up"]
    assert isinstance(up, subprocess.Popen)
    assert up.wait(30) == 0, up_log


def test_c_radar_iff_answers_reach_python(c_peer: Path, bus_env: dict[str, str]) -> None:
    """The C radar with an interrogator (``--iff-friends 1``): each DetectionBatch written by
    Cyclone C carries one IffAnswer octet per detection, read back by Cyclone Python as the
    IDL says (the first target answers IFF_FRIEND, the others IFF_NO_REPLY); without the
    option ``iff`` stays empty, as from a peer that predates the field."""
    from mcc.types import IffAnswer
    from mcc.types.arrays import optional_field

    friend, silent = IffAnswer.IFF_FRIEND.value, IffAnswer.IFF_NO_REPLY.value
    seen: dict[str, list[list[int] | None]] = {"asked": [], "plain": []}
    with Bus(int(bus_env["MCC_DOMAIN"])) as bus:
        reader = bus.reader("DetectionBatch")
        radars = [
            subprocess.Popen(
                [str(c_peer), "radar", "--sensor-id", name, "--period-s", "0.1", *extra],
                env=bus_env,
                stdout=subprocess.DEVNULL,
            )
            for name, extra in (("asked", ["--iff-friends", "1"]), ("plain", []))
        ]
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and min(map(len, seen.values())) < 5:
                for batch in reader.take_wait(64, timeout_s=0.5):
                    iff = optional_field(batch, "iff")
                    seen[batch.sensor_id].append(None if iff is None else iff.tolist())
        finally:
            for radar in radars:
                radar.send_signal(signal.SIGTERM)
                radar.wait(10)
    assert len(seen["asked"]) >= 5 and len(seen["plain"]) >= 5, seen
    assert all(iff == [friend, silent, silent] for iff in seen["asked"]), seen["asked"]
    assert all(iff is None for iff in seen["plain"])
