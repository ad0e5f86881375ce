"""The console's latest-state store: bus samples in (reader thread), snapshots out (web clients).

The bus side only updates dictionaries under a short lock and bumps ``version``; it never waits
for a browser. Each web client's sender task asks for `LiveState.snapshot_json` at most
``update_hz`` times a second; the JSON is built once per version (and at least once a second,
so ages and pruning move on while the bus is silent) and shared by every client.

Positions are ENU metres, speeds m/s, times in the snapshot are Unix milliseconds (``*_ms``)
or durations in the unit their name says.

What the bus says is hostile until checked (docs/console.md, "Hostile input"): non-finite
numbers and timestamps far in the future are dropped where they come in, expiry uses receive
time, every collection is bounded (`mcc.console.limits.StateLimits`) and the JSON for the
browsers is strict (never ``NaN``).
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mcc.console.limits import StateLimits
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

log = logging.getLogger("mcc.console")

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
#: TEWA re-publishes every threat each cycle: a threat not heard again within this long of
#: the newest one (receive time) is gone.
THREAT_CYCLE_NS = 2_000_000_000
DROP_REASONS = {
    "nonfinite": "a number is NaN or infinite",
    "future": "stamped more than {skew_s:g} s ahead of this host's clock",
    "malformed": "its packed arrays do not match its count",
    "oversized": "a field is larger than the console takes",
}


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

    Hostile input is normal input: a sample with a non-finite number, or stamped more than
    ``limits.max_future_skew_s`` ahead of this host's clock, is dropped, counted (``dropped``,
    by topic and reason) and logged once. Expiry and the choice of what to show use receive
    time, never a sender's clock; what is over a bound of ``limits`` is left out and counted
    (``left_out`` in the snapshot).

    Args:
        mission: only this mission's ``MissionStatus`` (None: any).
        history_s: length of the chart series.
        stale_s: tracks, threats, weapons and heartbeats not heard for this long are dropped.
        interceptor_speed_mps: per weapon id, to draw interceptors in flight.
        limits: what is kept and shown (`StateLimits`).
    """

    def __init__(
        self,
        *,
        mission: str | None = None,
        history_s: float = 120.0,
        stale_s: float = 10.0,
        interceptor_speed_mps: Mapping[str, float] | None = None,
        limits: StateLimits | None = None,
    ) -> None:
        self.mission = mission
        self.stale_s = stale_s
        self.limits = limits or StateLimits()
        self.interceptor_speed_mps = dict(interceptor_speed_mps or {})
        self._lock = threading.Lock()
        self.version = 0
        self.samples: dict[str, int] = dict.fromkeys(TOPICS, 0)
        #: Samples dropped, by (topic, reason): ``nonfinite``, ``future``, ``malformed``,
        #: ``oversized``; topic ``snapshot`` counts the last guard of `snapshot_json`.
        self.dropped: dict[tuple[str, str], int] = {}
        #: Items left out by a bound, in all (tracks, threats, orders, weapons, ...).
        self.left_out_total: dict[str, int] = {}
        self.snapshot_bytes = 0
        self.pictures = 0
        self.outcomes = {"kill": 0, "miss": 0, "aborted": 0}
        self._tracks: dict[int, dict[str, Any]] = {}
        self._threats: dict[int, dict[str, Any]] = {}
        self._orders: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self._weapons: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._beats: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._mission: dict[str, Any] | None = None
        self._systems_seen: set[str] = set()
        self._radars: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._truth: list[dict[str, Any]] = []
        self._last_picture: dict[str, Any] | None = None
        self._left_out: dict[str, tuple[int, int]] = {}  # kind → (count, receive time ns)
        self._logged: set[tuple[str, str]] = set()
        self.track_count = _Series(history_s)
        self.det_to_order_ms = _Series(history_s)
        self.picture_latency_ms = _Series(history_s)
        self._cache: tuple[int, float, str] | None = None

    # -- bus side (the reader thread) ------------------------------------------------------

    def _touch(self, topic: str, n: int) -> None:
        self.samples[topic] += n
        self.version += 1

    def _drop(self, topic: str, reason: str, n: int = 1, detail: str = "") -> None:
        """Count ``n`` dropped samples of ``topic``; log the first of each reason."""
        key = (topic, reason)
        self.dropped[key] = self.dropped.get(key, 0) + n
        if key not in self._logged:
            self._logged.add(key)
            why = DROP_REASONS[reason].format(skew_s=self.limits.max_future_skew_s)
            log.warning(
                "console: dropped %s sample(s): %s%s (counted in /metrics as "
                "mcc_console_samples_dropped_total; logged once)",
                topic,
                why,
                f" ({detail})" if detail else "",
            )

    def _leave_out(self, kind: str, n: int, now_ns: int) -> None:
        """``n`` items of ``kind`` over a bound at ``now_ns`` (0: none; the page shows it)."""
        self._left_out[kind] = (n, now_ns)
        if n:
            self.left_out_total[kind] = self.left_out_total.get(kind, 0) + n

    def _ahead(self, stamp_ns: int, now_ns: int) -> bool:
        """Whether a sender's ``stamp_ns`` is further in the future than the skew allows."""
        return stamp_ns - now_ns > self.limits.max_future_skew_s * 1e9

    def _text(self, value: str) -> str:
        n = self.limits.max_text_chars
        return value if len(value) <= n else value[: n - 1] + "…"

    def on_air_pictures(self, msgs: list[AirPicture]) -> None:
        for msg in msgs:
            now_ns = time.time_ns()
            try:
                ids = packed_field(msg, "track_id")
                status = packed_field(msg, "status")
                cls = packed_field(msg, "classification")
                quality = packed_field(msg, "quality")
                state = packed_field(msg, "state")
            except (ValueError, TypeError, KeyError):
                with self._lock:
                    self._touch("AirPicture", 1)
                    self._drop("AirPicture", "malformed", detail=f"tracker {msg.tracker_id!r}")
                continue
            if self._ahead(msg.time_ns, now_ns) or self._ahead(msg.publish_ns, now_ns):
                with self._lock:
                    self._touch("AirPicture", 1)
                    self._drop("AirPicture", "future", detail=f"tracker {msg.tracker_id!r}")
                continue
            finite = np.isfinite(state).all(axis=1) & np.isfinite(quality)
            rows = np.flatnonzero(finite)
            tracker = self._text(msg.tracker_id)
            with self._lock:
                self._touch("AirPicture", 1)
                self.pictures += 1
                if len(rows) < len(ids):
                    self._drop("AirPicture", "nonfinite", detail=f"tracker {tracker!r}")
                cut = 0
                if len(rows) > self.limits.max_tracks:
                    # The most relevant: with a threat, then confirmed, then the best quality.
                    threat = np.isin(ids[rows], np.fromiter(self._threats, np.int64))
                    confirmed = status[rows] == TrackStatus.TRACK_CONFIRMED.value
                    rank = np.lexsort((-quality[rows], ~confirmed, ~threat))
                    cut = len(rows) - self.limits.max_tracks
                    rows = np.sort(rows[rank[: self.limits.max_tracks]])
                kept_ids = ids[rows].tolist()
                xyz = state[rows].round(2).tolist()
                for track_id, (x, y, z, vx, vy, vz), st, cl, q in zip(
                    kept_ids,
                    xyz,
                    status[rows].tolist(),
                    cls[rows].tolist(),
                    quality[rows].tolist(),
                    strict=True,
                ):
                    self._tracks[track_id] = {
                        "id": track_id,
                        "x": x,
                        "y": y,
                        "z": z,
                        "vx": vx,
                        "vy": vy,
                        "vz": vz,
                        "status": TRACK_STATUS.get(st, "unknown"),
                        "cls": TARGET_CLASS.get(cl, "unknown"),
                        "quality": round(q, 3),
                        "t_ns": msg.time_ns,
                        "received_ns": now_ns,
                        "tracker": tracker,
                    }
                kept = set(kept_ids)
                for track_id in [
                    t
                    for t, rec in self._tracks.items()
                    if rec["tracker"] == tracker and t not in kept
                ]:
                    del self._tracks[track_id]
                self._leave_out("tracks", cut + self._trim_tracks(), now_ns)
                self.track_count.add(_ms(now_ns), float(len(ids)), per_s=True)
                if msg.origin_ns:
                    self.picture_latency_ms.add(_ms(now_ns), (msg.publish_ns - msg.origin_ns) / 1e6)
                self._last_picture = {
                    "tracker": tracker,
                    "cycle": msg.cycle,
                    "publish_ns": msg.publish_ns,
                    "received_ns": now_ns,
                }

    def on_tracks(self, msgs: list[Track]) -> None:
        now_ns = time.time_ns()
        with self._lock:
            self._touch("Track", len(msgs))
            for msg in msgs:
                status = TRACK_STATUS.get(_value(msg.status), "unknown")
                if status == "deleted":
                    self._tracks.pop(msg.track_id, None)
                    continue
                values = (msg.x_m, msg.y_m, msg.z_m, msg.vx_mps, msg.vy_mps, msg.vz_mps)
                if not _finite(*values, msg.quality):
                    self._drop("Track", "nonfinite", detail=f"track {msg.track_id}")
                    continue
                if self._ahead(msg.update_ns, now_ns):
                    self._drop("Track", "future", detail=f"track {msg.track_id}")
                    continue
                old = self._tracks.get(msg.track_id)
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
                    "received_ns": now_ns,
                    "tracker": self._text(msg.tracker_id),
                }
            trimmed = self._trim_tracks()
            if trimmed:
                self._leave_out("tracks", trimmed, now_ns)

    def _trim_tracks(self) -> int:
        """Keep the ``max_tracks`` most relevant tracks; the number removed."""
        over = len(self._tracks) - self.limits.max_tracks
        if over <= 0:
            return 0
        threats = self._threats
        ranked = sorted(
            self._tracks.values(),
            key=lambda r: (r["id"] in threats, r["status"] == "confirmed", r["received_ns"]),
        )
        for rec in ranked[:over]:
            del self._tracks[rec["id"]]
        return over

    def on_threats(self, msgs: list[Threat]) -> None:
        now_ns = time.time_ns()
        with self._lock:
            self._touch("Threat", len(msgs))
            for msg in msgs:
                values = (msg.score, msg.time_to_impact_s, msg.cpa_m, msg.time_to_cpa_s)
                if not _finite(*values):
                    self._drop("Threat", "nonfinite", detail=f"track {msg.track_id}")
                    continue
                if self._ahead(msg.update_ns, now_ns):
                    self._drop("Threat", "future", detail=f"track {msg.track_id}")
                    continue
                self._threats[msg.track_id] = {
                    "track_id": msg.track_id,
                    "rank": msg.rank,
                    "score": round(msg.score, 3),
                    "asset": self._text(msg.asset_id),
                    "tti_s": None if msg.time_to_impact_s < 0 else _round(msg.time_to_impact_s),
                    "cpa_m": _round(msg.cpa_m, 0),
                    "tcpa_s": _round(msg.time_to_cpa_s),
                    "cls": TARGET_CLASS.get(_value(msg.classification), "unknown"),
                    "t_ns": msg.update_ns,
                    "received_ns": now_ns,
                }
            over = len(self._threats) - self.limits.max_threats
            if over > 0:  # the best ranked, newest first, stay
                ranked = sorted(
                    self._threats.values(), key=lambda t: (t["rank"], -t["received_ns"])
                )
                for rec in ranked[self.limits.max_threats :]:
                    del self._threats[rec["track_id"]]
            self._leave_out("threats", max(over, 0), now_ns)

    def on_orders(self, msgs: list[EngagementOrder]) -> None:
        now_ns = time.time_ns()
        with self._lock:
            self._touch("EngagementOrder", len(msgs))
            for msg in msgs:
                if not _finite(msg.pk):
                    self._drop("EngagementOrder", "nonfinite", detail=f"order {msg.order_id}")
                    continue
                if self._ahead(msg.issue_ns, now_ns) or self._ahead(msg.origin_ns, now_ns):
                    self._drop("EngagementOrder", "future", detail=f"order {msg.order_id}")
                    continue
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
                    self._trim_orders(now_ns)
                previous = rec["status"]
                rec.update(
                    weapon=self._text(msg.weapon_id),
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
                    self.det_to_order_ms.add(_ms(now_ns), latency_ms)
                if status == "in_flight" and rec["launched_ns"] is None:
                    rec["launched_ns"] = now_ns
                if status != previous and status in self.outcomes:
                    self.outcomes[status] += 1

    def _trim_orders(self, now_ns: int) -> None:
        """Keep ``max_orders``: the oldest finished order goes first, then the oldest."""
        if len(self._orders) <= self.limits.max_orders:
            return
        gone = next(
            (k for k, o in self._orders.items() if o["status"] not in HELD_ORDERS),
            next(iter(self._orders)),
        )
        del self._orders[gone]
        self.left_out_total["orders"] = self.left_out_total.get("orders", 0) + 1

    def on_weapons(self, msgs: list[WeaponStatus]) -> None:
        now_ns = time.time_ns()
        with self._lock:
            self._touch("WeaponStatus", len(msgs))
            for msg in msgs:
                values = (msg.x_m, msg.y_m, msg.z_m, msg.min_range_m, msg.max_range_m)
                if not _finite(*values):
                    self._drop("WeaponStatus", "nonfinite", detail=f"weapon {msg.weapon_id!r}")
                    continue
                weapon_id = self._text(msg.weapon_id)
                self._weapons[weapon_id] = {
                    "id": weapon_id,
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
                self._weapons.move_to_end(weapon_id)
            self._leave_out("weapons", _evict(self._weapons, self.limits.max_weapons), now_ns)

    def on_heartbeats(self, msgs: list[Heartbeat]) -> None:
        now_ns = time.time_ns()
        with self._lock:
            self._touch("Heartbeat", len(msgs))
            for msg in msgs:
                figures = (
                    msg.cpu_percent,
                    msg.msgs_in_per_s,
                    msg.msgs_out_per_s,
                    msg.latency_p50_us,
                    msg.latency_p99_us,
                )
                if not _finite(*figures):
                    self._drop("Heartbeat", "nonfinite", detail=f"system {msg.system_id!r}")
                    continue
                if self._ahead(msg.time_ns, now_ns):
                    self._drop("Heartbeat", "future", detail=f"system {msg.system_id!r}")
                    continue
                system_id = self._text(msg.system_id)
                old = self._beats.get(system_id)
                if old is not None and old["pid"] != msg.pid and old["time_ns"] > msg.time_ns:
                    continue  # a late word of the process this instance replaced
                self._beats[system_id] = {
                    "state": SYSTEM_STATE.get(_value(msg.state), "unknown"),
                    "host": self._text(msg.host),
                    "pid": msg.pid,
                    "device": self._text(msg.device),
                    "cpu_percent": _round(msg.cpu_percent),
                    "rss_bytes": msg.rss_bytes,
                    "msgs_in_per_s": _round(msg.msgs_in_per_s),
                    "msgs_out_per_s": _round(msg.msgs_out_per_s),
                    "latency_p50_us": _round(msg.latency_p50_us),
                    "latency_p99_us": _round(msg.latency_p99_us),
                    "message": self._text(msg.message),
                    "time_ns": msg.time_ns,
                    "received_ns": now_ns,
                }
                self._beats.move_to_end(system_id)
                if _system_of(system_id) != SUPERVISOR:  # a controller, not a system to command
                    self._seen(_system_of(system_id))
            self._leave_out("heartbeats", _evict(self._beats, self.limits.max_systems), now_ns)

    def _seen(self, system: str) -> None:
        if system not in self._systems_seen and len(self._systems_seen) < self.limits.max_systems:
            self._systems_seen.add(system)

    def on_mission(self, msgs: list[MissionStatus]) -> None:
        now_ns = time.time_ns()
        with self._lock:
            self._touch("MissionStatus", len(msgs))
            for msg in msgs:
                if self.mission is not None and msg.mission != self.mission:
                    continue
                if self._ahead(msg.time_ns, now_ns):
                    self._drop("MissionStatus", "future", detail=f"mission {msg.mission!r}")
                    continue
                if self._mission is not None and msg.time_ns < self._mission["time_ns"]:
                    continue
                if len(msg.clusters_json) > self.limits.max_clusters_json_bytes:
                    self._drop("MissionStatus", "oversized", detail="clusters_json")
                    continue
                try:
                    clusters = _strict_json(msg.clusters_json or "{}")
                except _NonFinite:
                    self._drop("MissionStatus", "nonfinite", detail="clusters_json")
                    continue
                except ValueError:
                    clusters = {}
                if not isinstance(clusters, dict):
                    clusters = {}
                systems = msg.systems[: self.limits.max_systems]
                self._leave_out("systems", len(msg.systems) - len(systems), now_ns)
                self._mission = {
                    "name": self._text(msg.mission),
                    "phase": self._text(msg.phase),
                    "state": SYSTEM_STATE.get(_value(msg.state), "unknown"),
                    "domain": msg.domain_id,
                    "backend": self._text(msg.backend),
                    "run_dir": self._text(msg.run_dir),
                    "clusters": clusters,
                    "time_ns": msg.time_ns,
                    "systems": [
                        {
                            "id": self._text(s.system_id),
                            "state": SYSTEM_STATE.get(_value(s.state), "unknown"),
                            "pid": s.pid,
                            "restarts": s.restarts,
                            "host": self._text(s.host),
                            "device": self._text(s.device),
                            "node": self._text(s.node),
                            "cpus": self._text(s.cpus),
                            "reason": self._text(s.reason),
                            "since_ns": s.since_ns,
                        }
                        for s in systems
                    ],
                }
                for s in self._mission["systems"]:
                    self._seen(_system_of(s["id"]))

    def on_detections(self, msgs: list[DetectionBatch]) -> None:
        now_ns = time.time_ns()
        with self._lock:
            self._touch("DetectionBatch", len(msgs))
            for msg in msgs:
                if not _finite(msg.sensor_x_m, msg.sensor_y_m, msg.sensor_z_m):
                    self._drop("DetectionBatch", "nonfinite", detail=f"sensor {msg.sensor_id!r}")
                    continue
                sensor = self._text(msg.sensor_id)
                radar = self._radars.setdefault(sensor, {"id": sensor, "scans": 0})
                radar.update(
                    x=_round(msg.sensor_x_m),
                    y=_round(msg.sensor_y_m),
                    z=_round(msg.sensor_z_m),
                    detections=msg.count,
                    received_ns=now_ns,
                )
                radar["scans"] += 1
                self._radars.move_to_end(sensor)
            self._leave_out("radars", _evict(self._radars, self.limits.max_radars), now_ns)

    def on_truth(self, msgs: list[Truth]) -> None:
        now_ns = time.time_ns()
        timely = [m for m in msgs if not self._ahead(m.time_ns, now_ns)]
        if not timely:
            with self._lock:
                self._touch("Truth", len(msgs))
                if msgs:
                    self._drop("Truth", "future", len(msgs))
            return
        msg = max(timely, key=lambda m: m.time_ns)
        try:
            ids = packed_field(msg, "target_id")
            cls = packed_field(msg, "target_class")
            xs = packed_field(msg, "x_m")
            ys = packed_field(msg, "y_m")
        except (ValueError, TypeError, KeyError):
            with self._lock:
                self._touch("Truth", len(msgs))
                self._drop("Truth", "malformed")
            return
        rows = np.flatnonzero(np.isfinite(xs) & np.isfinite(ys))
        shown = rows[: self.limits.max_truth]
        truth = [
            {"id": i, "cls": TARGET_CLASS.get(c, "unknown"), "x": x, "y": y}
            for i, c, x, y in zip(
                ids[shown].tolist(),
                cls[shown].tolist(),
                xs[shown].round(1).tolist(),
                ys[shown].round(1).tolist(),
                strict=True,
            )
        ]
        with self._lock:
            self._touch("Truth", len(msgs))
            if len(msgs) > len(timely):
                self._drop("Truth", "future", len(msgs) - len(timely))
            if len(rows) < len(ids):
                self._drop("Truth", "nonfinite")
            self._leave_out("truth", len(rows) - len(shown), now_ns)
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
                {k: v for k, v in rec.items() if k not in ("t_ns", "received_ns", "tracker")}
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
            newest_first = list(reversed(self._orders.values()))
            shown = [o for o in newest_first if o["status"] in HELD_ORDERS]
            shown += [o for o in newest_first if o["status"] not in HELD_ORDERS]
            shown = shown[: self.limits.max_orders_shown]
            shown.sort(key=lambda o: o["first_ns"], reverse=True)
            orders = [self._order_view(o) for o in shown]
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
            left_out = {
                kind: n
                for kind, (n, at_ns) in self._left_out.items()
                if n and now_ns - at_ns <= stale_ns
            }
            if len(self._orders) > len(orders):
                left_out["orders"] = len(self._orders) - len(orders)
            dropped: dict[str, dict[str, int]] = {}
            for (topic, reason), n in sorted(self.dropped.items()):
                dropped.setdefault(topic, {})[reason] = n
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
                "left_out": left_out,
                "dropped": dropped,
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
                    "dropped": sum(self.dropped.values()),
                    "det_to_order_p50_ms": _r(percentile((v for _, v in det), 50)),
                    "det_to_order_p99_ms": _r(percentile((v for _, v in det), 99)),
                    "picture_latency_p50_ms": _r(percentile((v for _, v in pic), 50)),
                    "picture_latency_p99_ms": _r(percentile((v for _, v in pic), 99)),
                },
            }
        return snapshot

    def snapshot_json(self, *, max_age_s: float = 1.0) -> tuple[int, str]:
        """``(version, JSON text)`` of a snapshot, rebuilt when the state changed or the cached
        one is older than ``max_age_s``; shared by every client. The text is strict JSON (no
        NaN or Infinity, which a browser's ``JSON.parse`` refuses): a non-finite number that
        got this far is sent as null, counted and logged once."""
        now = time.monotonic()
        cache = self._cache
        if cache is not None and cache[0] == self.version and now - cache[1] < max_age_s:
            return cache[0], cache[2]
        version = self.version
        data = {"type": "state", **self.snapshot()}
        try:
            text = json.dumps(data, separators=(",", ":"), allow_nan=False)
        except ValueError:
            with self._lock:
                self._drop("snapshot", "nonfinite")
            text = json.dumps(_finite_only(data), separators=(",", ":"), allow_nan=False)
        self._cache = (version, now, text)
        self.snapshot_bytes = len(text)
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
        """Forget what was not heard for ``stale_ns`` (receive time, never a sender's)."""
        for track_id in [
            k for k, t in self._tracks.items() if now_ns - t["received_ns"] > stale_ns
        ]:
            del self._tracks[track_id]
        for k in [k for k, t in self._threats.items() if now_ns - t["received_ns"] > stale_ns]:
            del self._threats[k]
        if self._threats:  # TEWA re-publishes every threat each cycle: older ones are gone
            newest = max(t["received_ns"] for t in self._threats.values())
            for k in [
                k for k, t in self._threats.items() if newest - t["received_ns"] > THREAT_CYCLE_NS
            ]:
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
            if row["system"] == SUPERVISOR:  # replicated supervisors: which one commands
                role = str(row.get("message", "")).split(" ", 1)[0]
                row["state"] = role if role in ("active", "standby", "fenced") else row["state"]
                row["reason"] = row.get("message", "")
            out.append(row)
        queue = [{"id": r["id"], "reason": r["reason"]} for r in out if r["state"] == "pending"]
        return out, queue


#: The system part of a supervisor's heartbeat id (``MISSION/supervisor/PID``).
SUPERVISOR = "supervisor"


def _system_of(system_id: str) -> str:
    parts = system_id.split("/")
    return parts[1] if len(parts) == 3 else system_id


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _finite(*values: float) -> bool:
    return all(math.isfinite(v) for v in values)


class _NonFinite(ValueError):
    """A JSON text with NaN, Infinity or a number too large for a double."""


def _refuse_constant(name: str) -> Any:
    raise _NonFinite(name)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NonFinite(text)
    return value


def _strict_json(text: str) -> Any:
    """``text`` parsed as strict JSON: ``_NonFinite`` for NaN, Infinity or 1e999, which
    Python's parser accepts and a browser's refuses."""
    return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)


def _finite_only(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (the last guard of the JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite_only(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_only(v) for v in value]
    return value


def _evict(items: OrderedDict[str, Any], keep: int) -> int:
    """Remove the least recently heard of ``items`` beyond ``keep``; the number removed."""
    over = max(len(items) - keep, 0)
    for _ in range(over):
        items.popitem(last=False)
    return over
