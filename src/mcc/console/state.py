"""The console's latest-state store: bus samples in (reader thread), snapshots out (web clients).

The bus side only updates dictionaries under a short lock and bumps ``version``; it never waits
for a browser. Each web client's sender task asks for `LiveState.snapshot_json` at most
``update_hz`` times a second; the JSON is built once per version (and at least once a second,
so ages and pruning move on while the bus is silent) and shared by every client.

Positions are ENU metres, speeds m/s, times in the snapshot are Unix milliseconds (``*_ms``)
or durations in the unit their name says.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mcc.types import (
    AirPicture,
    DetectionBatch,
    EngagementOrder,
    Heartbeat,
    MissionStatus,
    OrderStatus,
    SystemState,
    TargetClass,
    Threat,
    Track,
    TrackStatus,
    Truth,
    WeaponState,
    WeaponStatus,
)
from mcc.types.arrays import packed_field

TOPICS = (
    "AirPicture",
    "Track",
    "Threat",
    "EngagementOrder",
    "WeaponStatus",
    "Heartbeat",
    "MissionStatus",
    "DetectionBatch",
    "Truth",
)


def _names(enum: Any, prefix: str) -> dict[int, str]:
    return {int(m.value): m.name.removeprefix(prefix).lower() for m in enum}


TRACK_STATUS = _names(TrackStatus, "TRACK_")
TARGET_CLASS = _names(TargetClass, "CLASS_")
ORDER_STATUS = _names(OrderStatus, "ORDER_")
WEAPON_STATE = _names(WeaponState, "WEAPON_")
SYSTEM_STATE = _names(SystemState, "SYSTEM_")
HELD_ORDERS = ("proposed", "issued", "in_flight")


def _value(x: Any) -> int:
    return int(getattr(x, "value", x))


def _ms(ns: int) -> int:
    return int(ns // 1_000_000)


def _round(x: float, digits: int = 1) -> float:
    return round(float(x), digits)


@dataclass
class _Series:
    """Points (Unix ms, value) of the last ``history_s``."""

    history_s: float
    maxlen: int = 2000
    points: deque[tuple[int, float]] = field(default_factory=deque)

    def add(self, t_ms: int, value: float, *, per_s: bool = False) -> None:
        if per_s and self.points and self.points[-1][0] // 1000 == t_ms // 1000:
            self.points[-1] = (t_ms, value)  # one point per second: the latest
        else:
            self.points.append((t_ms, value))
        if len(self.points) > self.maxlen:
            self.points.popleft()

    def recent(self, now_ms: int) -> list[list[float]]:
        horizon = now_ms - int(self.history_s * 1000)
        while self.points and self.points[0][0] < horizon:
            self.points.popleft()
        return [[t, round(v, 3)] for t, v in self.points]

    def values(self, now_ms: int, window_s: float) -> list[float]:
        horizon = now_ms - int(window_s * 1000)
        return [v for t, v in self.points if t >= horizon]


def percentile(values: Iterable[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) of ``values``; None when there are none."""
    data = list(values)
    return float(np.percentile(data, q)) if data else None


class LiveState:
    """The latest state of a mission as the console sees it on the bus.

    Args:
        mission: only this mission's ``MissionStatus`` (None: any).
        history_s: length of the chart series.
        stale_s: tracks, threats, weapons and heartbeats older than this are dropped.
        interceptor_speed_mps: per weapon id, to draw interceptors in flight.
    """

    def __init__(
        self,
        *,
        mission: str | None = None,
        history_s: float = 120.0,
        stale_s: float = 10.0,
        interceptor_speed_mps: Mapping[str, float] | None = None,
    ) -> None:
        self.mission = mission
        self.stale_s = stale_s
        self.interceptor_speed_mps = dict(interceptor_speed_mps or {})
        self._lock = threading.Lock()
        self.version = 0
        self.samples: dict[str, int] = dict.fromkeys(TOPICS, 0)
        self.pictures = 0
        self.outcomes = {"kill": 0, "miss": 0, "aborted": 0}
        self._tracks: dict[int, dict[str, Any]] = {}
        self._threats: dict[int, dict[str, Any]] = {}
        self._orders: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self._weapons: dict[str, dict[str, Any]] = {}
        self._beats: dict[str, dict[str, Any]] = {}
        self._mission: dict[str, Any] | None = None
        self._systems_seen: set[str] = set()
        self._radars: dict[str, dict[str, Any]] = {}
        self._truth: list[dict[str, Any]] = []
        self._last_picture: dict[str, Any] | None = None
        self.track_count = _Series(history_s)
        self.det_to_order_ms = _Series(history_s)
        self.picture_latency_ms = _Series(history_s)
        self._cache: tuple[int, float, str] | None = None

    # -- bus side (the reader thread) ------------------------------------------------------

    def _touch(self, topic: str, n: int) -> None:
        self.samples[topic] += n
        self.version += 1

    def on_air_pictures(self, msgs: list[AirPicture]) -> None:
        now_ns = time.time_ns()
        for msg in msgs:
            ids = packed_field(msg, "track_id").tolist()
            status = packed_field(msg, "status").tolist()
            cls = packed_field(msg, "classification").tolist()
            quality = packed_field(msg, "quality").tolist()
            state = packed_field(msg, "state").round(2).tolist()
            with self._lock:
                self._touch("AirPicture", 1)
                self.pictures += 1
                for i, track_id in enumerate(ids):
                    x, y, z, vx, vy, vz = state[i]
                    self._tracks[track_id] = {
                        "id": track_id,
                        "x": x,
                        "y": y,
                        "z": z,
                        "vx": vx,
                        "vy": vy,
                        "vz": vz,
                        "status": TRACK_STATUS.get(status[i], "unknown"),
                        "cls": TARGET_CLASS.get(cls[i], "unknown"),
                        "quality": round(quality[i], 3),
                        "t_ns": msg.time_ns,
                        "tracker": msg.tracker_id,
                    }
                kept = set(ids)
                for track_id in [
                    t
                    for t, rec in self._tracks.items()
                    if rec["tracker"] == msg.tracker_id and t not in kept
                ]:
                    del self._tracks[track_id]
                t_ms = _ms(msg.time_ns)
                self.track_count.add(_ms(now_ns), float(len(ids)), per_s=True)
                if msg.origin_ns:
                    self.picture_latency_ms.add(t_ms, (msg.publish_ns - msg.origin_ns) / 1e6)
                self._last_picture = {
                    "tracker": msg.tracker_id,
                    "cycle": msg.cycle,
                    "publish_ns": msg.publish_ns,
                    "received_ns": now_ns,
                }

    def on_tracks(self, msgs: list[Track]) -> None:
        with self._lock:
            self._touch("Track", len(msgs))
            for msg in msgs:
                status = TRACK_STATUS.get(_value(msg.status), "unknown")
                old = self._tracks.get(msg.track_id)
                if status == "deleted":
                    self._tracks.pop(msg.track_id, None)
                    continue
                if old is not None and old["t_ns"] > msg.update_ns:
                    continue  # the picture already has a newer state
                self._tracks[msg.track_id] = {
                    "id": msg.track_id,
                    "x": _round(msg.x_m, 2),
                    "y": _round(msg.y_m, 2),
                    "z": _round(msg.z_m, 2),
                    "vx": _round(msg.vx_mps, 2),
                    "vy": _round(msg.vy_mps, 2),
                    "vz": _round(msg.vz_mps, 2),
                    "status": status,
                    "cls": TARGET_CLASS.get(_value(msg.classification), "unknown"),
                    "quality": round(msg.quality, 3),
                    "t_ns": msg.update_ns,
                    "tracker": msg.tracker_id,
                }

    def on_threats(self, msgs: list[Threat]) -> None:
        now_ns = time.time_ns()
        with self._lock:
            self._touch("Threat", len(msgs))
            for msg in msgs:
                self._threats[msg.track_id] = {
                    "track_id": msg.track_id,
                    "rank": msg.rank,
                    "score": round(msg.score, 3),
                    "asset": msg.asset_id,
                    "tti_s": None if msg.time_to_impact_s < 0 else _round(msg.time_to_impact_s),
                    "cpa_m": _round(msg.cpa_m, 0),
                    "tcpa_s": _round(msg.time_to_cpa_s),
                    "cls": TARGET_CLASS.get(_value(msg.classification), "unknown"),
                    "t_ns": msg.update_ns,
                    "received_ns": now_ns,
                }

    def on_orders(self, msgs: list[EngagementOrder]) -> None:
        now_ns = time.time_ns()
        with self._lock:
            self._touch("EngagementOrder", len(msgs))
            for msg in msgs:
                status = ORDER_STATUS.get(_value(msg.status), "unknown")
                rec = self._orders.get(msg.order_id)
                if rec is None:
                    rec = self._orders[msg.order_id] = {
                        "id": msg.order_id,
                        "first_ns": now_ns,
                        "latency_ms": None,
                        "launched_ns": None,
                        "status": "",
                    }
                    while len(self._orders) > 300:
                        self._orders.popitem(last=False)
                previous = rec["status"]
                rec.update(
                    weapon=msg.weapon_id,
                    track=msg.track_id,
                    pk=round(msg.pk, 3),
                    rounds=msg.rounds,
                    status=status,
                    issue_ns=msg.issue_ns,
                    origin_ns=msg.origin_ns,
                    updated_ns=now_ns,
                )
                if rec["latency_ms"] is None and status != "proposed" and msg.origin_ns:
                    # Detection → engagement: from the radar seeing it to the order leaving.
                    latency_ms = round((msg.issue_ns - msg.origin_ns) / 1e6, 2)
                    rec["latency_ms"] = latency_ms
                    self.det_to_order_ms.add(_ms(msg.issue_ns), latency_ms)
                if status == "in_flight" and rec["launched_ns"] is None:
                    rec["launched_ns"] = now_ns
                if status != previous and status in self.outcomes:
                    self.outcomes[status] += 1

    def on_weapons(self, msgs: list[WeaponStatus]) -> None:
        now_ns = time.time_ns()
        with self._lock:
            self._touch("WeaponStatus", len(msgs))
            for msg in msgs:
                self._weapons[msg.weapon_id] = {
                    "id": msg.weapon_id,
                    "state": WEAPON_STATE.get(_value(msg.state), "unknown"),
                    "rounds_ready": msg.rounds_ready,
                    "rounds_total": msg.rounds_total,
                    "x": _round(msg.x_m),
                    "y": _round(msg.y_m),
                    "z": _round(msg.z_m),
                    "min_range_m": _round(msg.min_range_m, 0),
                    "max_range_m": _round(msg.max_range_m, 0),
                    "track": msg.engaged_track_id,
                    "received_ns": now_ns,
                }

    def on_heartbeats(self, msgs: list[Heartbeat]) -> None:
        now_ns = time.time_ns()
        with self._lock:
            self._touch("Heartbeat", len(msgs))
            for msg in msgs:
                old = self._beats.get(msg.system_id)
                if old is not None and old["pid"] != msg.pid and old["time_ns"] > msg.time_ns:
                    continue  # a late word of the process this instance replaced
                self._beats[msg.system_id] = {
                    "state": SYSTEM_STATE.get(_value(msg.state), "unknown"),
                    "host": msg.host,
                    "pid": msg.pid,
                    "device": msg.device,
                    "cpu_percent": _round(msg.cpu_percent),
                    "rss_bytes": msg.rss_bytes,
                    "msgs_in_per_s": _round(msg.msgs_in_per_s),
                    "msgs_out_per_s": _round(msg.msgs_out_per_s),
                    "latency_p50_us": _round(msg.latency_p50_us),
                    "latency_p99_us": _round(msg.latency_p99_us),
                    "message": msg.message,
                    "time_ns": msg.time_ns,
                    "received_ns": now_ns,
                }
                self._systems_seen.add(_system_of(msg.system_id))

    def on_mission(self, msgs: list[MissionStatus]) -> None:
        with self._lock:
            self._touch("MissionStatus", len(msgs))
            for msg in msgs:
                if self.mission is not None and msg.mission != self.mission:
                    continue
                if self._mission is not None and msg.time_ns < self._mission["time_ns"]:
                    continue
                try:
                    clusters = json.loads(msg.clusters_json or "{}")
                except ValueError:
                    clusters = {}
                self._mission = {
                    "name": msg.mission,
                    "phase": msg.phase,
                    "state": SYSTEM_STATE.get(_value(msg.state), "unknown"),
                    "domain": msg.domain_id,
                    "backend": msg.backend,
                    "run_dir": msg.run_dir,
                    "clusters": clusters,
                    "time_ns": msg.time_ns,
                    "systems": [
                        {
                            "id": s.system_id,
                            "state": SYSTEM_STATE.get(_value(s.state), "unknown"),
                            "pid": s.pid,
                            "restarts": s.restarts,
                            "host": s.host,
                            "device": s.device,
                            "node": s.node,
                            "cpus": s.cpus,
                            "reason": s.reason,
                            "since_ns": s.since_ns,
                        }
                        for s in msg.systems
                    ],
                }
                self._systems_seen.update(_system_of(s.system_id) for s in msg.systems)

    def on_detections(self, msgs: list[DetectionBatch]) -> None:
        now_ns = time.time_ns()
        with self._lock:
            self._touch("DetectionBatch", len(msgs))
            for msg in msgs:
                radar = self._radars.setdefault(msg.sensor_id, {"id": msg.sensor_id, "scans": 0})
                radar.update(
                    x=_round(msg.sensor_x_m),
                    y=_round(msg.sensor_y_m),
                    z=_round(msg.sensor_z_m),
                    detections=msg.count,
                    received_ns=now_ns,
                )
                radar["scans"] += 1

    def on_truth(self, msgs: list[Truth]) -> None:
        if not msgs:
            return
        msg = max(msgs, key=lambda m: m.time_ns)
        ids = packed_field(msg, "target_id").tolist()
        cls = packed_field(msg, "target_class").tolist()
        xs = packed_field(msg, "x_m").round(1).tolist()
        ys = packed_field(msg, "y_m").round(1).tolist()
        truth = [
            {"id": i, "cls": TARGET_CLASS.get(c, "unknown"), "x": x, "y": y}
            for i, c, x, y in zip(ids, cls, xs, ys, strict=True)
        ]
        with self._lock:
            self._touch("Truth", len(msgs))
            self._truth = truth

    # -- client side -----------------------------------------------------------------------

    def snapshot(self, now_ns: int | None = None) -> dict[str, Any]:
        """Everything a console page shows, as plain JSON-able data."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        now_ms = _ms(now_ns)
        stale_ns = int(self.stale_s * 1e9)
        with self._lock:
            self._prune(now_ns, stale_ns)
            tracks = [
                {k: v for k, v in rec.items() if k not in ("t_ns", "tracker")}
                | {"t_ms": _ms(rec["t_ns"])}
                for rec in sorted(self._tracks.values(), key=lambda r: r["id"])
            ]
            held = {o["track"]: o for o in self._orders.values() if o["status"] in HELD_ORDERS}
            threats = []
            for rec in sorted(self._threats.values(), key=lambda r: (r["rank"], r["track_id"])):
                order = held.get(rec["track_id"])
                threats.append(
                    {k: v for k, v in rec.items() if k not in ("t_ns", "received_ns")}
                    | {
                        "weapon": order["weapon"] if order else None,
                        "order_status": order["status"] if order else None,
                    }
                )
            orders = [self._order_view(o) for o in reversed(self._orders.values())][:60]
            interceptors = [
                {
                    "order": o["id"],
                    "weapon": o["weapon"],
                    "track": o["track"],
                    "launched_ms": _ms(o["launched_ns"]),
                    "speed_mps": self.interceptor_speed_mps.get(o["weapon"]),
                }
                for o in self._orders.values()
                if o["status"] == "in_flight" and o["launched_ns"] is not None
            ]
            weapons = [
                {k: v for k, v in w.items() if k != "received_ns"}
                | {"age_ms": (now_ns - w["received_ns"]) // 1_000_000}
                for w in sorted(self._weapons.values(), key=lambda w: w["id"])
            ]
            radars = [
                {k: v for k, v in r.items() if k != "received_ns"}
                | {"age_ms": (now_ns - r["received_ns"]) // 1_000_000}
                for r in sorted(self._radars.values(), key=lambda r: r["id"])
            ]
            health, queue = self._health(now_ns)
            mission = None
            if self._mission is not None:
                mission = {k: v for k, v in self._mission.items() if k != "systems"}
                mission["time_ms"] = _ms(mission.pop("time_ns"))
            det = self.det_to_order_ms.recent(now_ms)
            pic = self.picture_latency_ms.recent(now_ms)
            snapshot = {
                "now_ms": now_ms,
                "version": self.version,
                "mission": mission,
                "systems_seen": sorted(self._systems_seen),
                "tracks": tracks,
                "threats": threats,
                "orders": orders,
                "interceptors": interceptors,
                "weapons": weapons,
                "radars": radars,
                "health": health,
                "queue": queue,
                "truth": list(self._truth),
                "series": {
                    "track_count": self.track_count.recent(now_ms),
                    "det_to_order_ms": det,
                    "picture_latency_ms": pic,
                },
                "stats": {
                    "tracks": len(tracks),
                    "confirmed": sum(t["status"] == "confirmed" for t in tracks),
                    "threats": len(threats),
                    "pictures": self.pictures,
                    "orders": len(self._orders),
                    "kills": self.outcomes["kill"],
                    "misses": self.outcomes["miss"],
                    "aborted": self.outcomes["aborted"],
                    "det_to_order_p50_ms": _r(percentile((v for _, v in det), 50)),
                    "det_to_order_p99_ms": _r(percentile((v for _, v in det), 99)),
                    "picture_latency_p50_ms": _r(percentile((v for _, v in pic), 50)),
                    "picture_latency_p99_ms": _r(percentile((v for _, v in pic), 99)),
                },
            }
        return snapshot

    def snapshot_json(self, *, max_age_s: float = 1.0) -> tuple[int, str]:
        """``(version, JSON text)`` of a snapshot, rebuilt when the state changed or the cached
        one is older than ``max_age_s``; shared by every client."""
        now = time.monotonic()
        cache = self._cache
        if cache is not None and cache[0] == self.version and now - cache[1] < max_age_s:
            return cache[0], cache[2]
        version = self.version
        text = json.dumps({"type": "state", **self.snapshot()}, separators=(",", ":"))
        self._cache = (version, now, text)
        return version, text

    def latest_picture(self) -> dict[str, Any] | None:
        with self._lock:
            return dict(self._last_picture) if self._last_picture else None

    def _order_view(self, o: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": o["id"],
            "weapon": o["weapon"],
            "track": o["track"],
            "pk": o["pk"],
            "rounds": o["rounds"],
            "status": o["status"],
            "issue_ms": _ms(o["issue_ns"]) if o["issue_ns"] else None,
            "updated_ms": _ms(o["updated_ns"]),
            "latency_ms": o["latency_ms"],
        }

    def _prune(self, now_ns: int, stale_ns: int) -> None:
        for track_id in [k for k, t in self._tracks.items() if now_ns - t["t_ns"] > stale_ns]:
            del self._tracks[track_id]
        for k in [k for k, t in self._threats.items() if now_ns - t["received_ns"] > stale_ns]:
            del self._threats[k]
        if self._threats:  # TEWA re-publishes every threat each cycle: older ones are gone
            newest = max(t["t_ns"] for t in self._threats.values())
            for k in [k for k, t in self._threats.items() if newest - t["t_ns"] > 2_000_000_000]:
                del self._threats[k]
        for weapon in [k for k, w in self._weapons.items() if now_ns - w["received_ns"] > stale_ns]:
            del self._weapons[weapon]

    def _health(self, now_ns: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        rows: dict[str, dict[str, Any]] = {}
        systems = self._mission["systems"] if self._mission else []
        for s in systems:
            rows[s["id"]] = {k: v for k, v in s.items() if k != "since_ns"}
            rows[s["id"]]["since_ms"] = _ms(s["since_ns"])
        for system_id, beat in self._beats.items():
            age_ns = now_ns - beat["received_ns"]
            row = rows.get(system_id)
            if row is None:
                if age_ns > self.stale_s * 1e9 or beat["state"] in ("stopped", "failed"):
                    continue  # gone, and no supervisor lists it
                row = rows[system_id] = {
                    "id": system_id,
                    "state": beat["state"],
                    "pid": beat["pid"],
                    "restarts": 0,
                    "host": beat["host"],
                    "device": beat["device"],
                    "node": "",
                    "cpus": "",
                    "reason": "",
                    "since_ms": None,
                }
            if row.get("pid") and beat["pid"] != row["pid"]:
                continue  # a beat of the previous process of a restarted instance
            row.update(
                {k: v for k, v in beat.items() if k not in ("state", "received_ns", "time_ns")}
            )
            row["beat_age_ms"] = age_ns // 1_000_000
        out = []
        for system_id, row in rows.items():
            row.setdefault("beat_age_ms", None)
            row["system"] = _system_of(system_id)
            out.append(row)
        queue = [{"id": r["id"], "reason": r["reason"]} for r in out if r["state"] == "pending"]
        return out, queue


def _system_of(system_id: str) -> str:
    parts = system_id.split("/")
    return parts[1] if len(parts) == 3 else system_id


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
