"""The latest-state store and the Prometheus exposition, fed with real IDL samples."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mcc.console import LiveState
from mcc.console.limits import StateLimits
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
                witnesses=1,
            ),
        ]
    )
    state.on_orders([order(5, OrderStatus.ORDER_PROPOSED, now)])
    snap = state.snapshot()
    assert [(t["track_id"], t["rank"], t["tti_s"], t["witnesses"]) for t in snap["threats"]] == [
        (7, 1, 42.5, 1),  # one radar sees it (TEWA engages it only with an approval)
        (9, 2, None, 0),  # -1 on the wire: never; 0 radars: not known
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


def test_the_health_table_shows_which_supervisor_is_active_and_the_standby() -> None:
    state = LiveState(stale_s=10.0)
    now = time.time_ns()
    running, starting = SystemState.SYSTEM_RUNNING, SystemState.SYSTEM_STARTING
    state.on_heartbeats(
        [
            Heartbeat(system_id="m/supervisor/11", pid=11, state=running, time_ns=now,
                      message="active epoch 3"),
            Heartbeat(system_id="m/supervisor/12", pid=12, state=starting, time_ns=now,
                      message="standby epoch 3"),
        ]
    )  # fmt: skip
    rows = {r["id"]: r for r in state.snapshot()["health"]}
    assert rows["m/supervisor/11"]["state"] == "active"
    assert rows["m/supervisor/12"]["state"] == "standby"
    assert rows["m/supervisor/12"]["reason"] == "standby epoch 3"
    assert rows["m/supervisor/12"]["beat_age_ms"] is not None


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
    # One family with the observer's: restarts are a counter, per instance, system and host.
    assert families["mcc_instance_restarts"].type == "counter"
    assert value("mcc_instance_restarts_total", instance="m/radar/0", system="radar") == 0
    assert value("mcc_tracks") == 2
    assert families["mcc_engagement_outcomes"].type == "counter"
    assert value("mcc_engagement_outcomes_total", outcome="kill") == 1
    assert value("mcc_detection_to_order_latency_seconds", quantile="0.5") == 0.035
    assert value("mcc_detection_to_order_latency_seconds_count") == 2
    assert value("mcc_console_bus_to_client_seconds", quantile="0.5") == 0.04
    assert value("mcc_console_commands_total", result="refused") == 1
    assert value("mcc_console_bus_samples_total", topic="AirPicture") == 1
    assert value("mcc_console_clients") == 2


# -- hostile input: the findings of the security review --------------------------------------


def _strict(text: str) -> dict:
    """``text`` parsed as a browser's JSON.parse would: NaN and Infinity are errors."""

    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_non_finite_samples_are_dropped_counted_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Before: one NaN put "NaN" into every update; the browsers' JSON.parse refused them all
    # while the link indicator stayed "live" (the picture froze for good).
    nan, inf = float("nan"), float("inf")
    state = LiveState(mission="m")
    now = time.time_ns()
    state.on_air_pictures([picture(now, (1, 0.0, 0.0), (2, nan, 5.0), (3, 7.0, inf))])
    bad_track = Track(track_id=4, x_m=inf, update_ns=now, status=TrackStatus.TRACK_CONFIRMED)
    state.on_tracks([bad_track, bad_track])
    state.on_threats([Threat(track_id=1, rank=1, score=nan, update_ns=now)])
    state.on_weapons([WeaponStatus(weapon_id="sam-1", max_range_m=inf)])
    state.on_heartbeats([Heartbeat(system_id="m/radar/0", pid=5, cpu_percent=nan, time_ns=now)])
    state.on_detections([DetectionBatch(sensor_id="search", sensor_x_m=nan)])
    bad_order = order(5, OrderStatus.ORDER_ISSUED, now)
    bad_order.pk = nan
    state.on_orders([bad_order])
    # Python's JSON parser takes NaN and 1e999 (inf); the console does not.
    for clusters in ('{"mc": {"size": NaN}}', '{"mc": {"size": 1e999}}'):
        state.on_mission([MissionStatus(mission="m", time_ns=now, clusters_json=clusters)])
    version, text = state.snapshot_json()
    snap = _strict(text)
    assert [t["id"] for t in snap["tracks"]] == [1]
    assert snap["threats"] == snap["weapons"] == snap["radars"] == snap["orders"] == []
    assert snap["health"] == [] and snap["mission"] is None
    assert state.dropped == {
        ("AirPicture", "nonfinite"): 1,
        ("Track", "nonfinite"): 2,
        ("Threat", "nonfinite"): 1,
        ("WeaponStatus", "nonfinite"): 1,
        ("Heartbeat", "nonfinite"): 1,
        ("DetectionBatch", "nonfinite"): 1,
        ("EngagementOrder", "nonfinite"): 1,
        ("MissionStatus", "nonfinite"): 2,
    }
    assert snap["dropped"]["Track"] == {"nonfinite": 2} and snap["stats"]["dropped"] == 10
    logged = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(logged) == 8  # once per topic and reason, not once per sample
    assert any("Track sample(s): a number is NaN or infinite" in m for m in logged)
    # The feed goes on: good samples after bad ones show.
    state.on_tracks([Track(track_id=4, x_m=3.0, update_ns=now, status=TrackStatus.TRACK_CONFIRMED)])
    assert [t["id"] for t in _strict(state.snapshot_json()[1])["tracks"]] == [1, 4]
    text = render(state.snapshot(), state.samples, ServerFigures(), dropped=state.dropped)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    dropped = {
        (s.labels["topic"], s.labels["reason"]): s.value
        for s in families["mcc_console_samples_dropped"].samples
    }
    assert dropped[("MissionStatus", "nonfinite")] == 2


def test_the_json_for_browsers_is_strict_whatever_gets_through() -> None:
    # A non-finite number from elsewhere (here a layout file's interceptor speed) is the last
    # guard's business: null in the update, counted, never NaN or Infinity.
    state = LiveState(interceptor_speed_mps={"sam-1": float("inf")})
    now = time.time_ns()
    state.on_orders([order(5, OrderStatus.ORDER_IN_FLIGHT, now)])
    snap = _strict(state.snapshot_json()[1])
    assert snap["interceptors"][0]["speed_mps"] is None
    assert state.dropped == {("snapshot", "nonfinite"): 1}


def test_a_sender_clock_decides_nothing() -> None:
    state = LiveState(mission="m", stale_s=10.0)
    now = time.time_ns()
    decade = now + 10 * 365 * 86_400 * S
    # Before: a Threat stamped ten years ahead made every real threat "older than the newest
    # by more than 2 s" (hidden), and a MissionStatus from the future froze the status.
    state.on_threats([Threat(track_id=7, rank=2, score=0.8, update_ns=now)])
    state.on_threats([Threat(track_id=666, rank=1, score=0.99, update_ns=decade)])
    state.on_mission([MissionStatus(mission="m", phase="fake", time_ns=decade)])
    state.on_mission([MissionStatus(mission="m", phase="surveillance", time_ns=now)])
    state.on_mission([MissionStatus(mission="m", phase="engagement", time_ns=now + MS)])
    state.on_tracks([Track(track_id=9, x_m=1.0, update_ns=decade)])
    state.on_tracks([Track(track_id=9, x_m=2.0, update_ns=now, status=TrackStatus.TRACK_CONFIRMED)])
    state.on_heartbeats([Heartbeat(system_id="m/tewa/0", pid=1, time_ns=decade)])
    state.on_orders([order(3, OrderStatus.ORDER_ISSUED, decade)])
    snap = state.snapshot()
    assert [t["track_id"] for t in snap["threats"]] == [7]
    assert snap["mission"]["phase"] == "engagement"
    assert [(t["id"], t["x"]) for t in snap["tracks"]] == [(9, 2.0)]
    assert snap["health"] == [] and snap["orders"] == []
    assert state.dropped == {
        ("Threat", "future"): 1,
        ("MissionStatus", "future"): 1,
        ("Track", "future"): 1,
        ("Heartbeat", "future"): 1,
        ("EngagementOrder", "future"): 1,
    }
    # Within the allowed skew (5 s), a stamp is taken but decides neither expiry nor which
    # threats are current: both are receive time.
    state = LiveState(stale_s=10.0)
    ahead = now + 4 * S
    state.on_threats([Threat(track_id=1, rank=1, update_ns=ahead), Threat(track_id=2, rank=2)])
    state.on_tracks([Track(track_id=5, update_ns=ahead, status=TrackStatus.TRACK_CONFIRMED)])
    state.on_air_pictures([picture(ahead, (6, 0.0, 0.0), tracker="other")])
    assert [t["track_id"] for t in state.snapshot()["threats"]] == [1, 2]
    later = state.snapshot(time.time_ns() + 11 * S)  # heard 11 s ago, stamped 7 s ago
    assert later["tracks"] == [] and later["threats"] == []


def _big_picture(now_ns: int, n: int) -> AirPicture:
    """``n`` tracks; the odd ids tentative, quality rising with the id."""
    ids = np.arange(1, n + 1)
    status = np.where(ids % 2, TrackStatus.TRACK_TENTATIVE.value, TrackStatus.TRACK_CONFIRMED.value)
    state = np.zeros((n, 6))
    state[:, 0] = ids * 10.0
    return AirPicture(
        tracker_id="trk",
        cycle=1,
        time_ns=now_ns,
        origin_ns=now_ns - 40 * MS,
        publish_ns=now_ns - 10 * MS,
        count=n,
        track_id=pack(ids, "<u4"),
        status=pack(status, "u1"),
        classification=pack([TargetClass.CLASS_AIRCRAFT.value] * n, "u1"),
        quality=pack(ids / n, "<f8"),
        state=pack(state, "<f8"),
        covariance=pack(np.zeros((n, 6, 6)), "<f8"),
    )


def test_a_huge_picture_is_bounded_and_says_what_it_left_out() -> None:
    # Before: one 20 000-track picture made every update 3.5 MB, for good.
    state = LiveState()
    now = time.time_ns()
    state.on_threats([Threat(track_id=19_999, rank=1, score=0.9, update_ns=now)])  # tentative
    state.on_air_pictures([_big_picture(now, 20_000)])
    _, text = state.snapshot_json()
    snap = _strict(text)
    assert len(text) < 250_000 and state.snapshot_bytes == len(text)
    assert snap["stats"]["tracks"] == 1000 and snap["left_out"] == {"tracks": 19_000}
    ids = {t["id"] for t in snap["tracks"]}
    assert 19_999 in ids  # the threat first
    others = ids - {19_999}
    assert all(i % 2 == 0 for i in others) and min(others) == 20_000 - 2 * 998  # confirmed, best
    assert state.left_out_total == {"tracks": 19_000}
    # The next, normal picture is shown whole; nothing is left out any more.
    state.on_air_pictures([picture(time.time_ns(), (1, 0.0, 0.0), (2, 5.0, 5.0))])
    snap = state.snapshot()
    assert [t["id"] for t in snap["tracks"]] == [1, 2] and snap["left_out"] == {}


def test_every_collection_is_bounded() -> None:
    state = LiveState(limits=StateLimits(max_threats=5, max_systems=20, max_weapons=3))
    now = time.time_ns()
    state.on_threats([Threat(track_id=i, rank=i, update_ns=now) for i in range(1, 50)])
    # A flood of orders: the one awaiting the commander's decision stays in sight.
    state.on_orders([order(1, OrderStatus.ORDER_PROPOSED, now)])
    state.on_orders([order(i, OrderStatus.ORDER_KILL, now) for i in range(2, 500)])
    beats = [Heartbeat(system_id=f"m/s{i}/0", pid=i, message="x" * 1_000_000) for i in range(99)]
    state.on_heartbeats(beats)
    state.on_weapons([WeaponStatus(weapon_id=f"w{i}") for i in range(10)])
    snap = state.snapshot()
    assert [t["track_id"] for t in snap["threats"]] == [1, 2, 3, 4, 5]
    assert len(state._orders) == 300 and len(snap["orders"]) == 60
    assert 1 in [o["id"] for o in snap["orders"]]
    assert len(snap["health"]) == 20 and len(snap["systems_seen"]) == 20
    assert max(len(r["message"]) for r in snap["health"]) == 200
    assert [w["id"] for w in snap["weapons"]] == ["w7", "w8", "w9"]
    assert snap["left_out"] == {"threats": 44, "orders": 240, "heartbeats": 79, "weapons": 7}
    assert len(state.snapshot_json()[1]) < 100_000
