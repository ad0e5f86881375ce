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

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mcc.console.limits import StateLimits
from mcc.console.state_values import (
    HELD_ORDERS,
    IDENTITY,
    IDENTITY_TABLE,
    IFF_ANSWER,
    IFF_TABLE,
    ORDER_STATUS,
    SUPERVISOR,
    SYSTEM_STATE,
    TARGET_CLASS,
    TOPICS,
    TRACK_STATUS,
    UNKNOWN_VALUE,
    WEAPON_STATE,
    NonFiniteError,
    Series,
    all_finite,
    enum_value,
    evict,
    ns_to_ms,
    percentile,
    rounded,
    strict_json,
    system_of,
)
from mcc.console.state_views import StateViews
from mcc.types import (
    AirPicture,
    DetectionBatch,
    EngagementOrder,
    Heartbeat,
    MissionStatus,
    Threat,
    Track,
    TrackStatus,
    Truth,
    WeaponStatus,
)
from mcc.types.arrays import optional_field, packed_field

log = logging.getLogger("mcc.console")

__all__ = ["TOPICS", "LiveState", "percentile"]


class LiveState(StateViews):
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
        #: Identity/IFF values shown as ``?``, by (topic, reason): ``unknown_value`` (outside
        #: the enum), ``malformed`` (an AirPicture's identity/iff arrays of another length).
        self.identity_errors: dict[tuple[str, str], int] = {}
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
        self.track_count = Series(history_s)
        self.det_to_order_ms = Series(history_s)
        self.picture_latency_ms = Series(history_s)
        self._cache: tuple[int, float, str] | None = None

    # -- bus side (the reader thread) ------------------------------------------------------

    def _touch(self, topic: str, n: int) -> None:
        self.samples[topic] += n
        self.version += 1

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

    def _unpack(
        self, msg: Any, topic: str, n: int, names: Sequence[str], detail: str = ""
    ) -> list[np.ndarray] | None:
        """The packed arrays ``names`` of ``msg``; None when they do not match its count (the
        ``n`` samples counted, ``malformed``)."""
        try:
            return [packed_field(msg, name) for name in names]
        except (ValueError, TypeError, KeyError):
            with self._lock:
                self._touch(topic, n)
                self._drop(topic, "malformed", detail=detail)
            return None

    def _named(self, names: dict[int, str], value: Any, topic: str, detail: str) -> str:
        """The name of the enum ``value`` in ``names``; ``?`` for a value it does not know
        (counted in ``identity_errors``, logged once). Call under the lock."""
        try:
            name = names.get(enum_value(value))
        except (TypeError, ValueError):
            name = None
        if name is None:
            self._identity_error(topic, "unknown_value", 1, detail)
            return UNKNOWN_VALUE
        return name

    def _picture_identities(
        self, msg: AirPicture, rows: np.ndarray, detail: str
    ) -> tuple[list[str | None], list[str | None]]:
        """The identity and IFF names of the picture's ``rows``: None where the writer has no
        such array (it predates them), ``?`` for a value outside the enum or for arrays of
        another length than ``count`` (both counted). Call under the lock."""
        out: list[list[str | None]] = []
        for name, table in (("identity", IDENTITY_TABLE), ("iff", IFF_TABLE)):
            try:
                values = optional_field(msg, name)
            except (ValueError, TypeError, KeyError):
                self._identity_error("AirPicture", "malformed", 1, f"{detail}: {name}")
                out.append([UNKNOWN_VALUE] * len(rows))
                continue
            if values is None:
                out.append([None] * len(rows))
                continue
            unknown = int(np.count_nonzero(table[values] == UNKNOWN_VALUE))
            if unknown:
                self._identity_error("AirPicture", "unknown_value", unknown, f"{detail}: {name}")
            out.append(table[values[rows]].tolist())
        return out[0], out[1]

    def on_air_pictures(self, msgs: list[AirPicture]) -> None:
        for msg in msgs:
            now_ns = time.time_ns()
            names = ("track_id", "status", "classification", "quality", "state")
            arrays = self._unpack(msg, "AirPicture", 1, names, f"tracker {msg.tracker_id!r}")
            if arrays is None:
                continue
            ids, status, cls, quality, state = arrays
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
                identity, iff = self._picture_identities(msg, rows, f"tracker {tracker!r}")
                for track_id, (x, y, z, vx, vy, vz), st, cl, q, ident, answer in zip(
                    kept_ids,
                    xyz,
                    status[rows].tolist(),
                    cls[rows].tolist(),
                    quality[rows].tolist(),
                    identity,
                    iff,
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
                        "identity": ident,
                        "iff": answer,
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
                self.track_count.add(ns_to_ms(now_ns), float(len(ids)), per_s=True)
                if msg.origin_ns:
                    self.picture_latency_ms.add(
                        ns_to_ms(now_ns), (msg.publish_ns - msg.origin_ns) / 1e6
                    )
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
                status = TRACK_STATUS.get(enum_value(msg.status), "unknown")
                if status == "deleted":
                    self._tracks.pop(msg.track_id, None)
                    continue
                values = (msg.x_m, msg.y_m, msg.z_m, msg.vx_mps, msg.vy_mps, msg.vz_mps)
                if not all_finite(*values, msg.quality):
                    self._drop("Track", "nonfinite", detail=f"track {msg.track_id}")
                    continue
                if self._ahead(msg.update_ns, now_ns):
                    self._drop("Track", "future", detail=f"track {msg.track_id}")
                    continue
                old = self._tracks.get(msg.track_id)
                if old is not None and old["t_ns"] > msg.update_ns:
                    continue  # the picture already has a newer state
                detail = f"track {msg.track_id}"
                self._tracks[msg.track_id] = {
                    "id": msg.track_id,
                    "x": rounded(msg.x_m, 2),
                    "y": rounded(msg.y_m, 2),
                    "z": rounded(msg.z_m, 2),
                    "vx": rounded(msg.vx_mps, 2),
                    "vy": rounded(msg.vy_mps, 2),
                    "vz": rounded(msg.vz_mps, 2),
                    "status": status,
                    "cls": TARGET_CLASS.get(enum_value(msg.classification), "unknown"),
                    "quality": round(msg.quality, 3),
                    "identity": self._named(IDENTITY, msg.identity, "Track", detail),
                    "iff": self._named(IFF_ANSWER, msg.iff, "Track", detail),
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
                if not all_finite(*values):
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
                    "tti_s": None if msg.time_to_impact_s < 0 else rounded(msg.time_to_impact_s),
                    "cpa_m": rounded(msg.cpa_m, 0),
                    "tcpa_s": rounded(msg.time_to_cpa_s),
                    "cls": TARGET_CLASS.get(enum_value(msg.classification), "unknown"),
                    "identity": self._named(
                        IDENTITY, msg.identity, "Threat", f"track {msg.track_id}"
                    ),
                    "witnesses": int(msg.witnesses),  # radars that see it; 0: not known
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
                if not all_finite(msg.pk):
                    self._drop("EngagementOrder", "nonfinite", detail=f"order {msg.order_id}")
                    continue
                if self._ahead(msg.issue_ns, now_ns) or self._ahead(msg.origin_ns, now_ns):
                    self._drop("EngagementOrder", "future", detail=f"order {msg.order_id}")
                    continue
                status = ORDER_STATUS.get(enum_value(msg.status), "unknown")
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
                    self.det_to_order_ms.add(ns_to_ms(now_ns), latency_ms)
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
                if not all_finite(*values):
                    self._drop("WeaponStatus", "nonfinite", detail=f"weapon {msg.weapon_id!r}")
                    continue
                weapon_id = self._text(msg.weapon_id)
                self._weapons[weapon_id] = {
                    "id": weapon_id,
                    "state": WEAPON_STATE.get(enum_value(msg.state), "unknown"),
                    "rounds_ready": msg.rounds_ready,
                    "rounds_total": msg.rounds_total,
                    "x": rounded(msg.x_m),
                    "y": rounded(msg.y_m),
                    "z": rounded(msg.z_m),
                    "min_range_m": rounded(msg.min_range_m, 0),
                    "max_range_m": rounded(msg.max_range_m, 0),
                    "track": msg.engaged_track_id,
                    "received_ns": now_ns,
                }
                self._weapons.move_to_end(weapon_id)
            self._leave_out("weapons", evict(self._weapons, self.limits.max_weapons), now_ns)

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
                if not all_finite(*figures):
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
                    "state": SYSTEM_STATE.get(enum_value(msg.state), "unknown"),
                    "host": self._text(msg.host),
                    "pid": msg.pid,
                    "device": self._text(msg.device),
                    "cpu_percent": rounded(msg.cpu_percent),
                    "rss_bytes": msg.rss_bytes,
                    "msgs_in_per_s": rounded(msg.msgs_in_per_s),
                    "msgs_out_per_s": rounded(msg.msgs_out_per_s),
                    "latency_p50_us": rounded(msg.latency_p50_us),
                    "latency_p99_us": rounded(msg.latency_p99_us),
                    "message": self._text(msg.message),
                    "time_ns": msg.time_ns,
                    "received_ns": now_ns,
                }
                self._beats.move_to_end(system_id)
                if system_of(system_id) != SUPERVISOR:  # a controller, not a system to command
                    self._seen(system_of(system_id))
            self._leave_out("heartbeats", evict(self._beats, self.limits.max_systems), now_ns)

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
                    clusters = strict_json(msg.clusters_json or "{}")
                except NonFiniteError:
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
                    "state": SYSTEM_STATE.get(enum_value(msg.state), "unknown"),
                    "domain": msg.domain_id,
                    "backend": self._text(msg.backend),
                    "run_dir": self._text(msg.run_dir),
                    "clusters": clusters,
                    "time_ns": msg.time_ns,
                    "systems": [
                        {
                            "id": self._text(s.system_id),
                            "state": SYSTEM_STATE.get(enum_value(s.state), "unknown"),
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
                    self._seen(system_of(s["id"]))

    def on_detections(self, msgs: list[DetectionBatch]) -> None:
        now_ns = time.time_ns()
        with self._lock:
            self._touch("DetectionBatch", len(msgs))
            for msg in msgs:
                if not all_finite(msg.sensor_x_m, msg.sensor_y_m, msg.sensor_z_m):
                    self._drop("DetectionBatch", "nonfinite", detail=f"sensor {msg.sensor_id!r}")
                    continue
                sensor = self._text(msg.sensor_id)
                radar = self._radars.setdefault(sensor, {"id": sensor, "scans": 0})
                radar.update(
                    x=rounded(msg.sensor_x_m),
                    y=rounded(msg.sensor_y_m),
                    z=rounded(msg.sensor_z_m),
                    detections=msg.count,
                    received_ns=now_ns,
                )
                radar["scans"] += 1
                self._radars.move_to_end(sensor)
            self._leave_out("radars", evict(self._radars, self.limits.max_radars), now_ns)

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
        arrays = self._unpack(msg, "Truth", len(msgs), ("target_id", "target_class", "x_m", "y_m"))
        if arrays is None:
            return
        ids, cls, xs, ys = arrays
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
