"""The truth and radar apps as real processes on the bus: rates, payloads, kills, clean stops."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mcc.apps.radar import default_epoch_ns, radar, truth
from mcc.apps.scenario import Detections, TruthState, load_scenario
from mcc.bus import Bus, HeartbeatPublisher
from mcc.orchestrate.runtime import AppContext, Identity
from mcc.settings import Settings
from mcc.types import EngagementOrder, OrderStatus, Track
from tests.apps.configs import configured
from tests.conftest import REPO, app_instance, stop_app, wait_for

pytestmark = pytest.mark.slow

SMALL = "scenarios/small.yaml"


def test_truth_and_radar_processes(bus_env: dict[str, str], domain_id: int, tmp_path: Path) -> None:
    scenario = load_scenario(REPO / SMALL)
    model = scenario.radars[0]
    with Bus(domain_id) as bus:
        truths = bus.reader("Truth")
        batches = bus.reader("DetectionBatch")
        with (
            app_instance(
                "mcc.apps.radar:truth",
                env=configured(bus_env, scenario=SMALL, rate_hz=20),
                system="sim",
                logs=tmp_path,
            ) as sim,
            app_instance(
                "mcc.apps.radar:radar",
                env=configured(bus_env, scenario=SMALL),
                system="radar",
                logs=tmp_path,
            ) as rad,
        ):
            got: list[tuple[float, object]] = []
            truth_msgs = []
            deadline = time.monotonic() + 25
            while len(got) < 6 and time.monotonic() < deadline:
                for batch in batches.take_wait(16, timeout_s=0.5):
                    got.append((time.monotonic(), batch))
                truth_msgs.extend(truths.take(256))
                # Count only scans made once the simulation was publishing.
                if not truth_msgs:
                    got.clear()
            assert len(got) >= 6, (tmp_path / "radar.log").read_text()
            truth_msgs.extend(truths.take(256))

            # Kill target 1: a track at its position and a kill order naming that track.
            state = TruthState.from_msg(truth_msgs[-1])
            i = int(np.flatnonzero(state.ids == 1)[0])
            (x, y, z), (vx, vy, vz) = state.positions_m[i], state.velocities_mps[i]
            tracks, orders = bus.writer("Track"), bus.writer("EngagementOutcome")
            tracks.write(
                Track(
                    track_id=42,
                    x_m=x,
                    y_m=y,
                    z_m=z,
                    vx_mps=vx,
                    vy_mps=vy,
                    vz_mps=vz,
                    update_ns=truth_msgs[-1].time_ns,
                )
            )
            orders.write(
                EngagementOrder(
                    order_id=7,
                    weapon_id="sam-1",
                    track_id=42,
                    pk=0.9,
                    rounds=1,
                    status=OrderStatus.ORDER_KILL,
                )
            )
            after = None
            deadline = time.monotonic() + 10
            while after is None and time.monotonic() < deadline:
                for msg in truths.take_wait(64, timeout_s=0.5):
                    if msg.count == 2:
                        after = msg
            assert after is not None, (tmp_path / "sim.log").read_text()
            assert 1 not in TruthState.from_msg(after).ids.tolist()

            stop_app(rad, tmp_path, "radar")
            stop_app(sim, tmp_path, "sim")

    # Truth: the scenario's three targets, 20 per second.
    assert {m.scenario_id for m in truth_msgs} == {"small"}
    assert {m.count for m in truth_msgs} == {3}
    steps = np.diff(sorted(m.time_ns for m in truth_msgs))
    assert np.median(steps) == 50_000_000

    # Radar: one batch per 0.5 s scan, on time, with its sensor's id and position.
    msgs = [b for _, b in got]
    assert {b.sensor_id for b in msgs} == {model.id}
    assert (msgs[0].sensor_x_m, msgs[0].sensor_y_m, msgs[0].sensor_z_m) == model.position_m
    assert np.all(np.diff([b.scan_id for b in msgs]) == 1)
    assert np.all(np.diff([b.origin_ns for b in msgs]) == 500_000_000)
    assert all(0 <= b.publish_ns - b.origin_ns < 200_000_000 for b in msgs)
    received = [t for t, _ in got]
    assert (received[-1] - received[0]) / (len(received) - 1) == pytest.approx(0.5, abs=0.1)

    # Detections: consistent arrays, and each target seen near where the truth says it is.
    by_time = sorted(truth_msgs, key=lambda m: m.time_ns)
    matched = trials = 0
    for batch in msgs:
        dets = Detections.from_msg(batch)
        assert dets.count == batch.count and dets.positions_m.shape == (batch.count, 3)
        ground = dets.range_m * np.cos(dets.elevation_rad)
        np.testing.assert_allclose(dets.x_m, batch.sensor_x_m + ground * np.sin(dets.azimuth_rad))
        np.testing.assert_allclose(
            dets.z_m, batch.sensor_z_m + dets.range_m * np.sin(dets.elevation_rad)
        )
        truth = _truth_at(by_time, batch.origin_ns)
        for p in truth.positions_m:
            trials += 1
            if dets.count and np.min(np.linalg.norm(dets.positions_m - p, axis=1)) < 400:
                matched += 1
    assert matched >= 0.8 * trials, (matched, trials)

    summary = json.loads((tmp_path / "truth-summary.json").read_text())
    assert summary["scenario"] == "small" and summary["targets"] == 3
    assert [(k["target_id"], k["order_id"], k["track_id"]) for k in summary["kills"]] == [
        (1, 7, 42)
    ]
    assert summary["leakers"] == 0


def _truth_at(samples: list, time_ns: int) -> TruthState:
    """The truth sample nearest ``time_ns``, moved to ``time_ns`` with its velocities."""
    nearest = min(samples, key=lambda m: abs(m.time_ns - time_ns))
    state = TruthState.from_msg(nearest)
    dt = (time_ns - nearest.time_ns) * 1e-9
    return TruthState(
        time_ns * 1e-9,
        state.ids,
        state.classes,
        state.positions_m + state.velocities_mps * dt,
        state.velocities_mps,
        state.alive,
    )


def _context(bus: Bus, run_dir: Path, **config: Any) -> AppContext:
    """The app's context with its ``config:`` block as the supervisor hands it (the app checks
    it against its own model)."""
    return AppContext(
        identity=Identity("test", "radar", 0),
        args=[],
        bus=bus,
        heartbeat=HeartbeatPublisher(bus, "test/radar/0"),
        run_dir=run_dir,
        settings=Settings.from_env(configured({"MCC_SYSTEM": "radar"}, **config)),
    )


BAD_FILE = (
    "systems.radar.config.scenario: {bad}:2: duration_s: must be a number of seconds > 0, "
    "or endless (got -5) (got '{bad}')"
)


@pytest.mark.parametrize(
    ("entry", "config", "expected"),
    [
        (radar, {"scenario": "{bad}"}, BAD_FILE),
        (truth, {"scenario": "{bad}"}, BAD_FILE),
        (
            radar,
            {"scenario": SMALL, "radar": "nope"},
            "scenario 'small' has no radar 'nope'; radars: radar-1",
        ),
        (
            truth,
            {"rate_hz": 0},
            "systems.radar.config.rate_hz: Input should be greater than 0 (got 0)",
        ),
        (
            radar,
            {"truth_source": "tv"},
            "systems.radar.config.truth_source: Input should be 'bus' or 'scenario' (got 'tv')",
        ),
    ],
    ids=["radar-bad-file", "truth-bad-file", "unknown-radar", "rate-0", "unknown-source"],
)
def test_a_user_mistake_is_a_message_and_status_2(
    domain_id: int,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    entry: Callable[[AppContext], int],
    config: dict[str, Any],
    expected: str,
) -> None:
    # The app returns 2 rather than raising, so the runtime prints no traceback either.
    bad = tmp_path / "bad.yaml"
    bad.write_text("seed: 1\nduration_s: -5\n")
    config = {k: str(v).format(bad=bad) if k == "scenario" else v for k, v in config.items()}
    with Bus(domain_id) as bus:
        assert entry(_context(bus, tmp_path, **config)) == 2
    err = capsys.readouterr().err
    assert err == "mcc: error: " + expected.format(bad=bad) + "\n"


def test_radar_without_simulation_propagates_the_scenario(
    bus_env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    epoch_ns = default_epoch_ns()
    scenario = load_scenario(REPO / SMALL)
    with Bus(domain_id) as bus:
        reader = bus.reader("DetectionBatch")
        ctx = _context(bus, tmp_path, scenario=SMALL, truth_source="scenario", epoch_ns=epoch_ns)
        codes: list[int] = []
        thread = threading.Thread(target=lambda: codes.append(radar(ctx)))
        thread.start()
        try:
            msgs = reader.take_until(3, timeout_s=10)
        finally:
            ctx.stop.set()
            thread.join(5)
    assert codes == [0] and len(msgs) >= 3
    for batch in msgs:
        dets = Detections.from_msg(batch)
        truth = scenario.truth_at((batch.origin_ns - epoch_ns) * 1e-9).live()
        near = [np.min(np.linalg.norm(dets.positions_m - p, axis=1)) for p in truth.positions_m]
        assert sum(d < 400 for d in near) >= 2


# -- bounds: what a sender stamps never decides what the radar and the truth app keep -------------


def test_a_truth_stamped_in_the_future_does_not_blind_the_radar(
    bus_env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    """A Truth stamped an hour ahead was "the newest" for an hour: the radar, finding it too far
    from its clock, saw clutter only. It is dropped, and the real truth is used."""
    from mcc.apps.radar import _BusTruth

    scenario = load_scenario(REPO / SMALL)
    with Bus(domain_id) as bus, Bus(domain_id) as rogue_bus:
        source = _BusTruth(_context(bus, tmp_path), max_age_s=2.0)
        writer = rogue_bus.writer("Truth")
        assert writer.wait_for_readers(1, timeout_s=10)
        now_ns = time.time_ns()
        writer.write(scenario.truth_at(0.0).to_msg(scenario_id="x", time_ns=now_ns + 3600 * 10**9))
        writer.write(scenario.truth_at(0.0).to_msg(scenario_id="x", time_ns=now_ns))
        wait_for(lambda: source.latest(time.time_ns()).ids.size > 0, 10, "the real truth")
        assert source.future == 1 and source.newest is not None
        assert source.newest.time_ns == now_ns


def test_the_truth_app_keeps_bounded_tracks_and_bounds_a_track_s_own_clock(
    bus_env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    from mcc.apps.radar import _KillDesk

    scenario = load_scenario(REPO / SMALL)
    target = scenario.truth_at(1.0).live()
    x, y, z = (float(v) for v in target.positions_m[0])
    year_ns = 365 * 24 * 3600 * 10**9
    with Bus(domain_id) as bus, Bus(domain_id) as rogue_bus:
        desk = _KillDesk(_context(bus, tmp_path), scenario, gate_m=500.0, max_tracks=3)
        tracks = rogue_bus.writer("Track")
        orders = rogue_bus.writer("EngagementOutcome")
        assert tracks.wait_for_readers(1, timeout_s=10)
        assert orders.wait_for_readers(1, timeout_s=10)
        # Track 1 sits on the target, stamped a year ahead and flying at 1 km/s: moved along
        # its velocity by its own stamp's age, it would be nowhere near any target.
        tracks.write(
            Track(
                track_id=1, x_m=x, y_m=y, z_m=z, vx_mps=1000.0, update_ns=time.time_ns() + year_ns
            )
        )
        for track_id in range(2, 7):  # more tracks than the desk keeps
            tracks.write(Track(track_id=track_id, x_m=1e6))
        orders.write(EngagementOrder(order_id=9, track_id=1, status=OrderStatus.ORDER_KILL))
        wait_for(lambda: (desk.poll(1.0, time.time_ns()), desk.records)[1], 10, "the kill")
    assert desk.records[0]["target_id"] == int(target.ids[0])
    assert sorted(desk.tracks) == [1, 2, 3]
    assert desk.dropped == {"track past the bound of tracks kept": 3}


def test_the_truth_summary_counts_threats_and_names_friends_killed(tmp_path: Path) -> None:
    """Friends (IFF Mode 5) are not threats: ``targets`` counts the raid, ``friends`` the
    others, and a kill of a friend (fratricide) is listed in ``friends_killed``."""
    from mcc.apps.radar import _KillDesk, _write_summary

    scenario = load_scenario(REPO / "scenarios/sam-toc.yaml")
    desk = _KillDesk(_no_bus_context(), scenario, gate_m=500.0)
    live = scenario.truth_at(10.0).live()
    for order_id, target_id in enumerate((901, 3), start=1):
        x, y, z = (float(v) for v in live.positions_m[list(live.ids).index(target_id)])
        desk._kill(
            EngagementOrder(order_id=order_id, track_id=order_id),
            Track(x_m=x, y_m=y, z_m=z),
            10.0,
            0,
        )
    path = tmp_path / "truth-summary.json"
    _write_summary(path, scenario, 0, 10.0, desk)
    summary = json.loads(path.read_text())
    assert (summary["targets"], summary["friends"]) == (52, 2)
    assert summary["friends_killed"] == [901]
    assert summary["kills_total"] == 2 and [k["target_id"] for k in summary["kills"]] == [901, 3]


def test_the_truth_summary_of_a_continuous_scenario_stays_bounded(tmp_path: Path) -> None:
    """Hours of raids: the summary lists the latest kills and impacts and counts them all;
    ``targets`` counts the threats born so far."""
    from mcc.apps.radar import MAX_LISTED, _KillDesk, _write_summary

    scenario = load_scenario(REPO / "scenarios/sam-toc-continuous.yaml")
    desk = _KillDesk(_no_bus_context(), scenario, gate_m=500.0)
    for t_s in range(0, 7200, 2):
        hits = scenario.impacts(float(t_s), since_s=desk.impacts_until_s)
        desk.impacts.extend(hits)
        desk.leakers += len(hits)
        desk.impacts_until_s = float(t_s)
    path = tmp_path / "truth-summary.json"
    _write_summary(path, scenario, 0, 7198.0, desk)
    summary = json.loads(path.read_text())
    assert summary["leakers"] > MAX_LISTED == len(summary["impacts"])
    assert summary["targets"] > 2000 and summary["friends"] > 100


def _no_bus_context() -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(
        bus=SimpleNamespace(reader=lambda topic: None), log=logging.getLogger("test")
    )
