"""What web clients get from the console's state (``mcc.console.state``): `StateViews`, the
snapshot of everything a page shows and its shared JSON, built under the state's lock from
what the bus side keeps.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from typing import Any

from mcc.console.limits import StateLimits
from mcc.console.state_values import (
    DROP_REASONS,
    HELD_ORDERS,
    IDENTITY_ERRORS,
    SUPERVISOR,
    THREAT_CYCLE_NS,
    Series,
    finite_only,
    ns_to_ms,
    percentile,
    round2,
    system_of,
)

log = logging.getLogger("mcc.console")


class StateViews:
    """The client side of `mcc.console.state.LiveState` (snapshots for the web clients), and
    the count of dropped samples that both sides keep."""

    # Set by `LiveState.__init__`; declared here for the views below.
    mission: str | None
    stale_s: float
    limits: StateLimits
    interceptor_speed_mps: dict[str, float]
    version: int
    samples: dict[str, int]
    dropped: dict[tuple[str, str], int]
    identity_errors: dict[tuple[str, str], int]
    snapshot_bytes: int
    pictures: int
    outcomes: dict[str, int]
    track_count: Series
    det_to_order_ms: Series
    picture_latency_ms: Series
    _lock: threading.Lock
    _tracks: dict[int, dict[str, Any]]
    _threats: dict[int, dict[str, Any]]
    _orders: OrderedDict[int, dict[str, Any]]
    _weapons: OrderedDict[str, dict[str, Any]]
    _beats: OrderedDict[str, dict[str, Any]]
    _mission: dict[str, Any] | None
    _systems_seen: set[str]
    _radars: OrderedDict[str, dict[str, Any]]
    _truth: list[dict[str, Any]]
    _last_picture: dict[str, Any] | None
    _left_out: dict[str, tuple[int, int]]
    _cache: tuple[int, float, str] | None
    _logged: set[tuple[str, str]]

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

    def _identity_error(self, topic: str, reason: str, n: int, detail: str) -> None:
        """Count ``n`` identity/IFF values of ``topic`` shown as ``?``; log the first of each
        reason (the sample itself is kept)."""
        key = (topic, reason)
        self.identity_errors[key] = self.identity_errors.get(key, 0) + n
        if key not in self._logged:
            self._logged.add(key)
            log.warning(
                "console: %s identity shown as '?': %s (%s; counted in /metrics as "
                "mcc_console_identity_errors_total; logged once)",
                topic,
                IDENTITY_ERRORS[reason],
                detail,
            )

    def snapshot(self, now_ns: int | None = None) -> dict[str, Any]:
        """Everything a console page shows, as plain JSON-able data."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        now_ms = ns_to_ms(now_ns)
        stale_ns = int(self.stale_s * 1e9)
        with self._lock:
            self._prune(now_ns, stale_ns)
            tracks = [
                {k: v for k, v in rec.items() if k not in ("t_ns", "received_ns", "tracker")}
                | {"t_ms": ns_to_ms(rec["t_ns"])}
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
                    "launched_ms": ns_to_ms(o["launched_ns"]),
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
                mission["time_ms"] = ns_to_ms(mission.pop("time_ns"))
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
            identity_errors: dict[str, dict[str, int]] = {}
            for (topic, reason), n in sorted(self.identity_errors.items()):
                identity_errors.setdefault(topic, {})[reason] = n
            identities: dict[str, int] = {}
            for t in tracks:
                key = t["identity"] or "none"
                identities[key] = identities.get(key, 0) + 1
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
                "identity_errors": identity_errors,
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
                    "identities": identities,
                    "identity_errors": sum(self.identity_errors.values()),
                    "det_to_order_p50_ms": round2(percentile((v for _, v in det), 50)),
                    "det_to_order_p99_ms": round2(percentile((v for _, v in det), 99)),
                    "picture_latency_p50_ms": round2(percentile((v for _, v in pic), 50)),
                    "picture_latency_p99_ms": round2(percentile((v for _, v in pic), 99)),
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
            text = json.dumps(finite_only(data), separators=(",", ":"), allow_nan=False)
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
            "issue_ms": ns_to_ms(o["issue_ns"]) if o["issue_ns"] else None,
            "updated_ms": ns_to_ms(o["updated_ns"]),
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
            rows[s["id"]]["since_ms"] = ns_to_ms(s["since_ns"])
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
            row["system"] = system_of(system_id)
            if row["system"] == SUPERVISOR:  # replicated supervisors: which one commands
                role = str(row.get("message", "")).split(" ", 1)[0]
                row["state"] = role if role in ("active", "standby", "fenced") else row["state"]
                row["reason"] = row.get("message", "")
            out.append(row)
        queue = [{"id": r["id"], "reason": r["reason"]} for r in out if r["state"] == "pending"]
        return out, queue
