"""The C2 loop: aircraft model and path follower (pure Python), plant + elaborator on the bus."""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest

from mcc.apps.c2loop import (
    AircraftLimits,
    AircraftState,
    Guidance,
    PathFollower,
    PointMassAircraft,
    Racetrack,
    rtt_csv_path,
    simulate,
    summarize_rtts,
    summary_path,
)
from tests.apps.configs import configured
from tests.conftest import REPO

# -- the aircraft model --------------------------------------------------------------------------


def _turn_closed_form(s0: AircraftState, omega: float, t: float) -> tuple[float, float, float]:
    """Position and heading after ``t`` s of a constant-speed turn at ``omega`` rad/s."""
    psi = s0.heading_rad + omega * t
    r = s0.speed_mps / omega
    x = s0.x_m + r * (math.cos(s0.heading_rad) - math.cos(psi))
    y = s0.y_m + r * (math.sin(psi) - math.sin(s0.heading_rad))
    return x, y, psi % (2 * math.pi)


@pytest.mark.parametrize("omega", [0.05, -0.1, 0.15])
@pytest.mark.parametrize("dt_s", [0.02, 0.5])
def test_constant_turn_matches_closed_form(omega: float, dt_s: float) -> None:
    s0 = AircraftState(x_m=100.0, y_m=-200.0, z_m=3000.0, heading_rad=0.7, speed_mps=180.0)
    aircraft = PointMassAircraft(s0)
    aircraft.command(Guidance(heading_rate_rps=omega))
    steps = round(30.0 / dt_s)
    for _ in range(steps):
        aircraft.step(dt_s)
    x, y, psi = _turn_closed_form(s0, omega, steps * dt_s)
    s = aircraft.state
    assert s.x_m == pytest.approx(x, abs=1e-6)
    assert s.y_m == pytest.approx(y, abs=1e-6)
    assert math.cos(s.heading_rad - psi) == pytest.approx(1.0, abs=1e-12)
    assert s.speed_mps == 180.0 and s.z_m == 3000.0


def test_full_circle_returns_to_start_with_radius_v_over_omega() -> None:
    s0 = AircraftState(speed_mps=150.0, heading_rad=0.0)
    aircraft = PointMassAircraft(s0)
    aircraft.command(Guidance(heading_rate_rps=0.1))
    states = [aircraft.step(0.01) for _ in range(round(2 * math.pi / 0.1 / 0.01))]
    # clockwise from heading north: the centre is due east, at V/ω = 1500 m
    assert max(abs(math.hypot(s.x_m - 1500.0, s.y_m) - 1500.0) for s in states) < 1e-6
    assert math.hypot(states[-1].x_m, states[-1].y_m) < 1.0


def test_straight_acceleration_and_climb_are_exact() -> None:
    heading = math.radians(30)
    aircraft = PointMassAircraft(AircraftState(heading_rad=heading, speed_mps=100.0, z_m=1000.0))
    aircraft.command(Guidance(accel_mps2=2.0, climb_rate_mps=-5.0))
    for _ in range(100):
        aircraft.step(0.1)
    distance = 100.0 * 10 + 0.5 * 2.0 * 10**2
    s = aircraft.state
    assert s.x_m == pytest.approx(distance * math.sin(heading))
    assert s.y_m == pytest.approx(distance * math.cos(heading))
    assert s.speed_mps == pytest.approx(120.0)
    assert s.z_m == pytest.approx(950.0) and s.vz_mps == -5.0


def test_commands_are_clamped_to_the_limits() -> None:
    limits = AircraftLimits(
        max_turn_rate_rps=0.1, max_accel_mps2=2.0, max_climb_rate_mps=10.0, min_speed_mps=80.0
    )
    aircraft = PointMassAircraft(AircraftState(speed_mps=90.0), limits=limits)
    held = aircraft.command(Guidance(heading_rate_rps=-5.0, accel_mps2=-50.0, climb_rate_mps=99))
    assert held == Guidance(heading_rate_rps=-0.1, accel_mps2=-2.0, climb_rate_mps=10.0)
    aircraft.step(60.0)
    assert aircraft.state.speed_mps == 80.0  # never below the stall margin
    with pytest.raises(ValueError, match="dt_s"):
        aircraft.step(-1.0)


# -- the path and the controller -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("x", "y", "cross_track", "heading", "curvature"),
    [
        (-3000.0, 0.0, 0.0, 0.0, 0.0),  # on the west leg, northbound
        (-2900.0, 1000.0, 100.0, 0.0, 0.0),  # east of it: right of the path
        (3100.0, -2000.0, -100.0, math.pi, 0.0),  # east leg, southbound; east = left
        (0.0, 8000.0, 0.0, math.pi / 2, 1 / 3000),  # top of the north turn, eastbound
        (0.0, -9000.0, -1000.0, 3 * math.pi / 2, 1 / 3000),  # outside the south turn
    ],
)
def test_racetrack_reference(
    x: float, y: float, cross_track: float, heading: float, curvature: float
) -> None:
    ref = Racetrack(length_m=10_000.0, radius_m=3_000.0).reference(x, y)
    assert ref.cross_track_m == pytest.approx(cross_track, abs=1e-9)
    assert math.cos(ref.heading_rad - heading) == pytest.approx(1.0)
    assert ref.curvature_1pm == pytest.approx(curvature)


@pytest.mark.parametrize(
    "start",
    [
        AircraftState(x_m=-5000, y_m=-8000, z_m=4000, heading_rad=math.radians(45), speed_mps=140),
        AircraftState(x_m=9000, y_m=2000, z_m=6500, heading_rad=0.0, speed_mps=200),  # wrong way
        AircraftState(x_m=0, y_m=0, z_m=5000, heading_rad=math.pi / 2, speed_mps=150),  # inside
    ],
)
@pytest.mark.parametrize("delay_s", [0.0, 0.02])
def test_the_aircraft_converges_onto_the_racetrack(start: AircraftState, delay_s: float) -> None:
    follower = PathFollower(Racetrack(), altitude_m=5000.0, speed_mps=150.0)
    states = simulate(
        PointMassAircraft(start), follower, duration_s=600.0, period_s=0.02, delay_s=delay_s
    )
    last_lap = states[-5000:]  # the last 100 s
    errors = [abs(follower.path.reference(s.x_m, s.y_m).cross_track_m) for s in last_lap]
    assert max(errors) < 1.0
    assert all(abs(s.z_m - 5000.0) < 0.5 and abs(s.speed_mps - 150.0) < 0.1 for s in last_lap)
    # flown clockwise: the heading follows the path's
    for s in last_lap[::500]:
        ref = follower.path.reference(s.x_m, s.y_m)
        assert math.cos(s.heading_rad - ref.heading_rad) > 0.99


def test_summarize_rtts() -> None:
    summary = summarize_rtts([1000, 2000, 3000, 4000])
    assert summary["count"] == 4
    assert summary["avg_us"] == pytest.approx(2.5)
    assert summary["stdev_us"] == pytest.approx(math.sqrt(1.25), abs=1e-3)  # rounded to 1 ns
    assert (summary["min_us"], summary["max_us"]) == (1.0, 4.0)
    assert summarize_rtts([])["avg_us"] is None


# -- plant + elaborator over the bus -------------------------------------------------------------

RATE_HZ = 50.0


@contextmanager
def _app(
    spec: str, system: str, config: dict[str, Any], *, env: dict[str, str], run_dir: Path
) -> Iterator[subprocess.Popen[str]]:
    """Run one app instance under the runtime with its ``config:`` block; SIGTERM it (then
    kill) if still running after."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mcc.orchestrate.runtime", spec],
        cwd=REPO,
        env={
            **configured(env, **config),
            "MCC_MISSION": "c2-test",
            "MCC_SYSTEM": system,
            "MCC_INDEX": "0",
            "MCC_RUN_DIR": str(run_dir),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate(timeout=5)


def _stop(proc: subprocess.Popen[str], timeout_s: float = 15.0) -> str:
    """SIGTERM ``proc`` and wait for it; what it printed."""
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate(timeout=5)
        pytest.fail(f"{proc.args} ignored SIGTERM for {timeout_s} s:\n{out}")
    return out


def _wait_for(
    condition: Callable[[], bool], timeout_s: float, procs: list[subprocess.Popen[str]]
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        dead = [p for p in procs if p.poll() is not None]
        if dead:
            pytest.fail(f"{dead[0].args} exited {dead[0].returncode}:\n{dead[0].communicate()[0]}")
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout_s} s")
        time.sleep(0.05)


def _rows(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_plant_and_elaborator_close_the_loop(tmp_path: Path, bus_env: dict[str, str]) -> None:
    csv_path = rtt_csv_path(tmp_path, 0)
    start = time.monotonic()
    with (
        _app(
            "mcc.apps.c2loop:plant",
            "plant",
            {"rate_hz": RATE_HZ, "warmup_cycles": 5},
            env=bus_env,
            run_dir=tmp_path,
        ) as plant,
        _app(
            "mcc.apps.c2loop:elaborator",
            "elaborator",
            {"report_s": 0.5},
            env=bus_env,
            run_dir=tmp_path,
        ) as elaborator,
    ):
        _wait_for(lambda: len(_rows(csv_path)) >= 1, 60.0, [plant, elaborator])
        closed = time.monotonic()
        _wait_for(lambda: len(_rows(csv_path)) >= 2 * RATE_HZ, 30.0, [plant, elaborator])
        stopped = time.monotonic()
        plant_out = _stop(plant)
        elaborator_out = _stop(elaborator)
    assert plant.returncode == 0, plant_out
    assert elaborator.returncode == 0, elaborator_out
    assert "cross-track rms" in elaborator_out

    summary = json.loads(summary_path(tmp_path, 0).read_text())
    cycles = summary["count"] + summary["warmup_cycles"]
    # every cycle between the loop closing and the stop, at the sensor rate
    assert 0.8 * RATE_HZ * (stopped - closed) <= cycles <= RATE_HZ * (stopped - start) + 1
    assert cycles == pytest.approx(RATE_HZ * summary["duration_s"], rel=0.2, abs=3)
    assert summary["lost"] <= max(2, 0.02 * cycles)
    assert summary["unanswered_at_stop"] <= 1  # the plant waited for the answers in flight
    assert 0 < summary["min_us"] <= summary["p50_us"] <= summary["p99_us"] <= summary["max_us"]
    assert summary["max_us"] < 50_000
    rows = _rows(csv_path)
    assert len(rows) >= summary["count"]
    assert all(0 < int(r["rtt_ns"]) == int(r["applied_ns"]) - int(r["origin_ns"]) for r in rows)
    assert [int(r["seq"]) for r in rows] == sorted(int(r["seq"]) for r in rows)
    assert psutil.Process(os.getpid()).children(recursive=True) == []  # no orphans


def test_a_bad_config_fails_the_app(tmp_path: Path, bus_env: dict[str, str]) -> None:
    with _app(
        "mcc.apps.c2loop:plant", "plant", {"rate_hz": "fast"}, env=bus_env, run_dir=tmp_path
    ) as proc:
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "mcc: error: systems.plant.config.rate_hz: Input should be a valid number" in out
    with _app(
        "mcc.apps.c2loop:elaborator", "elab", {"rate_hz": 5}, env=bus_env, run_dir=tmp_path
    ) as proc:
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "systems.elab.config.rate_hz: Extra inputs are not permitted (got 5)" in out
