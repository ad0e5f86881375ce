"""The latest-state store and the Prometheus exposition, fed with real IDL samples."""

from __future__ import annotations

import json
import time

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from mcc.console import LiveState
from mcc.console.metrics import ServerFigures, render
from mcc.types import (
    AirPicture,
    DetectionBatch,
    EngagementOrder,
    Heartbeat,
    MissionStatus,
    OrderStatus,
    SystemEntry,
    SystemState,
    TargetClass,
    Threat,
    Track,
    TrackStatus,
    WeaponState,
    WeaponStatus,
)
from mcc.types.arrays import pack

MS = 1_000_000
S = 1_000_000_000


def picture(now_ns: int, *tracks: tuple[int, float, float], tracker: str = "trk") -> AirPicture:
    """Confirmed aircraft at (x, y) flying east at 200 m/s."""
    n = len(tracks)
    state = np.array([[x, y, 1000.0, 200.0, 0.0, 0.0] for _, x, y in tracks]).reshape(n, 6)
    return AirPicture(
        tracker_id=tracker,
        cycle=1,
        time_ns=now_ns,
        origin_ns=now_ns - 40 * MS,
        publish_ns=now_ns - 10 * MS,
        count=n,
        track_id=pack([t[0] for t in tracks], "<u4"),
        status=pack([TrackStatus.TRACK_CONFIRMED.value] * n, "u1"),
        classification=pack([TargetClass.CLASS_AIRCRAFT.value] * n, "u1"),
        quality=pack([0.9] * n, "<f8"),
        state=pack(state, "<f8"),
        covariance=pack(np.zeros((n, 6, 6)), "<f8"),
    )


def order(order_id: int, status: OrderStatus, now_ns: int) -> EngagementOrder:
    return EngagementOrder(
        order_id=order_id,
        weapon_id="sam-1",
        track_id=7,
        pk=0.8,
        rounds=1,
        issue_ns=now_ns,
        origin_ns=now_ns - 35 * MS,
        status=status,
    )


def test_air_pictures_and_tracks_make_the_track_list() -> None:
    state = LiveState()
    now = time.time_ns()
    state.on_air_pictures([picture(now, (7, 1000.0, 2000.0), (8, -500.0, 300.0))])
    snap = state.snapshot()
    assert [(t["id"], t["x"], t["y"], t["status"], t["cls"]) for t in snap["tracks"]] == [
        (7, 1000.0, 2000.0, "confirmed", "aircraft"),
        (8, -500.0, 300.0, "confirmed", "aircraft"),
    ]
    assert snap["tracks"][0]["vx"] == 200.0 and snap["tracks"][0]["t_ms"] == now // MS
    assert snap["series"]["picture_latency_ms"][0][1] == 30.0  # publish - origin
    # The next picture of the same tracker no longer has track 8; a Track sample older than
    # the picture does not move track 7 back; a deleted Track goes.
    state.on_air_pictures([picture(now + 500 * MS, (7, 1100.0, 2000.0))])
    state.on_tracks([Track(track_id=7, x_m=0.0, update_ns=now, status=TrackStatus.TRACK_CONFIRMED)])
    assert [(t["id"], t["x"]) for t in state.snapshot()["tracks"]] == [(7, 1100.0)]
    state.on_tracks([Track(track_id=7, status=TrackStatus.TRACK_DELETED, update_ns=now + MS)])
    assert state.snapshot()["tracks"] == []
    assert state.samples["AirPicture"] == 2 and state.samples["Track"] == 2


def test_threats_orders_interceptors_and_latency() -> None:
    state = LiveState(interceptor_speed_mps={"sam-1": 1200.0})
    now = time.time_ns()
    state.on_threats(
        [
            Threat(
                track_id=9, rank=2, score=0.4, asset_id="base", time_to_impact_s=-1.0, update_ns=now
            ),
            Threat(
                track_id=7,
                rank=1,
                score=0.8,
                asset_id="base",
                time_to_impact_s=42.5,
                cpa_m=12.0,
                update_ns=now,
            ),
        ]
    )
    state.on_orders([order(5, OrderStatus.ORDER_PROPOSED, now)])
    snap = state.snapshot()
    assert [(t["track_id"], t["rank"], t["tti_s"]) for t in snap["threats"]] == [
        (7, 1, 42.5),
        (9, 2, None),  # -1 on the wire: never
    ]
    assert snap["threats"][0]["weapon"] == "sam-1" and snap["threats"][0]["order_status"] == (
        "proposed"
    )
    assert snap["series"]["det_to_order_ms"] == []  # a proposal is not an engagement yet
    state.on_orders([order(5, OrderStatus.ORDER_ISSUED, now + 2_000 * MS)])
    state.on_orders([order(5, OrderStatus.ORDER_IN_FLIGHT, now + 2_000 * MS)])
    snap = state.snapshot()
    assert snap["orders"][0]["latency_ms"] == 35.0 and snap["orders"][0]["status"] == "in_flight"
    assert [(i["order"], i["weapon"], i["speed_mps"]) for i in snap["interceptors"]] == [
        (5, "sam-1", 1200.0)
    ]
    state.on_orders([order(5, OrderStatus.ORDER_KILL, now + 2_000 * MS)] * 2)
    snap = state.snapshot()
    assert snap["stats"]["kills"] == 1 and snap["interceptors"] == []
    assert snap["threats"][0]["weapon"] is None
    assert snap["stats"]["det_to_order_p50_ms"] == 35.0


def test_health_merges_the_supervisor_and_the_heartbeats() -> None:
    state = LiveState(mission="m")
    now = time.time_ns()
    entries = [
        SystemEntry(
            system_id="m/tracker/0",
            state=SystemState.SYSTEM_RUNNING,
            pid=100,
            host="h1",
            restarts=2,
            since_ns=now,
        ),
        SystemEntry(
            system_id="m/launcher/0",
            state=SystemState.SYSTEM_PENDING,
            reason="queued (1): needs 1 CPU",
            since_ns=now,
        ),
    ]
    state.on_mission(
        [
            MissionStatus(mission="other", phase="x", time_ns=now),
            MissionStatus(
                mission="m",
                phase="engagement",
                state=SystemState.SYSTEM_STARTING,
                systems=entries,
                time_ns=now,
                backend="local",
                clusters_json=json.dumps({"mc": {"size": 2, "min": 1, "max": 4}}),
            ),
        ]
    )
    beat = {
        "host": "h1",
        "state": SystemState.SYSTEM_RUNNING,
        "cpu_percent": 12.5,
        "rss_bytes": 50 << 20,
        "latency_p50_us": 800.0,
        "latency_p99_us": 2500.0,
    }
    state.on_heartbeats(
        [
            Heartbeat(system_id="m/tracker/0", pid=100, msgs_in_per_s=20.0, time_ns=now, **beat),
            # the last word of the process it replaced, arriving late
            Heartbeat(system_id="m/tracker/0", pid=99, cpu_percent=99.0, time_ns=now - 5 * S),
            Heartbeat(system_id="lab/probe/0", pid=7, host="h2", state=SystemState.SYSTEM_RUNNING),
        ]
    )
    snap = state.snapshot()
    assert (
        snap["mission"]["phase"] == "engagement" and snap["mission"]["clusters"]["mc"]["max"] == 4
    )
    rows = {r["id"]: r for r in snap["health"]}
    assert set(rows) == {"m/tracker/0", "m/launcher/0", "lab/probe/0"}
    tracker = rows["m/tracker/0"]
    assert (tracker["state"], tracker["restarts"], tracker["cpu_percent"]) == ("running", 2, 12.5)
    assert tracker["latency_p99_us"] == 2500.0 and tracker["msgs_in_per_s"] == 20.0
    assert tracker["beat_age_ms"] is not None and tracker["system"] == "tracker"
    assert rows["m/launcher/0"]["beat_age_ms"] is None
    assert snap["queue"] == [{"id": "m/launcher/0", "reason": "queued (1): needs 1 CPU"}]
    assert snap["systems_seen"] == ["launcher", "probe", "tracker"]


def test_weapons_radars_and_pruning_of_stale_state() -> None:
    state = LiveState(stale_s=10.0)
    now = time.time_ns()
    state.on_weapons(
        [
            WeaponStatus(
                weapon_id="sam-1",
                state=WeaponState.WEAPON_READY,
                rounds_ready=3,
                rounds_total=6,
                max_range_m=20000.0,
            )
        ]
    )
    state.on_detections([DetectionBatch(sensor_id="search", sensor_x_m=1000.0, count=0)] * 2)
    state.on_air_pictures([picture(now, (7, 0.0, 0.0))])
    state.on_threats([Threat(track_id=7, rank=1, score=0.5, update_ns=now)])
    snap = state.snapshot()
    assert [(w["id"], w["state"], w["rounds_ready"]) for w in snap["weapons"]] == [
        ("sam-1", "ready", 3)
    ]
    assert [(r["id"], r["x"], r["scans"]) for r in snap["radars"]] == [("search", 1000.0, 2)]
    later = state.snapshot(now + 11_000_000_000)  # nothing heard for 11 s
    assert later["tracks"] == [] and later["threats"] == [] and later["weapons"] == []


def test_snapshot_json_is_built_once_per_change() -> None:
    state = LiveState()
    version, text = state.snapshot_json()
    assert state.snapshot_json() == (version, text)
    assert state.snapshot_json()[1] is text  # shared, not rebuilt
    state.on_air_pictures([picture(time.time_ns(), (1, 0.0, 0.0))])
    new_version, new_text = state.snapshot_json()
    assert new_version > version and json.loads(new_text)["stats"]["tracks"] == 1


def test_metrics_are_prometheus_text() -> None:
    state = LiveState()
    now = time.time_ns()
    state.on_mission(
        [
            MissionStatus(
                mission="m",
                phase="surveillance",
                state=SystemState.SYSTEM_RUNNING,
                time_ns=now,
                backend="local",
                systems=[
                    SystemEntry(system_id="m/radar/0", state=SystemState.SYSTEM_RUNNING, pid=5)
                ],
            )
        ]
    )
    state.on_heartbeats(
        [
            Heartbeat(
                system_id="m/radar/0",
                pid=5,
                host="h",
                cpu_percent=3.5,
                latency_p50_us=1500.0,
                latency_p99_us=4000.0,
            )
        ]
    )
    state.on_air_pictures([picture(now, (1, 0.0, 0.0), (2, 5.0, 5.0))])
    state.on_orders(
        [order(1, OrderStatus.ORDER_ISSUED, now), order(2, OrderStatus.ORDER_KILL, now)]
    )
    figures = ServerFigures(
        clients=2,
        updates_sent=40,
        commands={"ok": 3, "refused": 1},
        bus_to_client_ms=[20.0, 40.0, 60.0],
    )
    text = render(state.snapshot(), state.samples, figures)
    families = {f.name: f for f in text_string_to_metric_families(text)}

    def value(name: str, **labels: str) -> float:
        for sample in (s for f in families.values() for s in f.samples if s.name == name):
            if all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
        raise AssertionError(f"no sample {name} {labels} in\n{text}")

    assert families["mcc_mission_info"].samples[0].labels["phase"] == "surveillance"
    assert value("mcc_instance_up", instance="m/radar/0") == 1
    assert value("mcc_instance_cpu_percent", instance="m/radar/0") == 3.5
    assert value("mcc_instance_latency_p99_seconds", instance="m/radar/0") == 0.004
    assert value("mcc_tracks") == 2
    assert families["mcc_engagement_outcomes"].type == "counter"
    assert value("mcc_engagement_outcomes_total", outcome="kill") == 1
    assert value("mcc_detection_to_order_latency_seconds", quantile="0.5") == 0.035
    assert value("mcc_detection_to_order_latency_seconds_count") == 2
    assert value("mcc_console_bus_to_client_seconds", quantile="0.5") == 0.04
    assert value("mcc_console_commands_total", result="refused") == 1
    assert value("mcc_console_bus_samples_total", topic="AirPicture") == 1
    assert value("mcc_console_clients") == 2
