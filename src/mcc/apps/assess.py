"""Mission assessment: how good the air picture is and how the engagement went, from the bus.

``assessor(ctx)`` is a system of simulated missions (it needs ``Truth``). It listens to
``Truth``, ``AirPicture``, ``Threat``, ``EngagementOrder`` and ``WeaponStatus`` and keeps:

- GOSPA (c, p = 2, α = 2) of every air picture against the truth at the picture's time
  (the latest ``Truth`` moved to that time with its velocities), with its localisation,
  missed and false parts;
- air-picture latency (``publish_ns − origin_ns``) and detection→engagement-order latency
  (``issue_ns − origin_ns`` of each issued order: from the radar seeing the target to the
  order leaving TEWA);
- orders issued, kills, misses, threats seen; and the impacts (leakers) from the truth app's
  ``truth-summary.json`` at the end.

It rewrites ``<run_dir>/summary.json`` every ``--every-s`` seconds and at the end, so a
console or `make demo` can follow a mission without joining the bus.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mcc.apps.metrics import gospa
from mcc.apps.scenario import TruthState
from mcc.orchestrate.runtime import AppContext
from mcc.security.mission import Topics
from mcc.types import AirPicture, EngagementOrder, OrderStatus, TrackStatus, Truth
from mcc.types.arrays import packed_field

BUS_TOPICS = {
    "assessor": Topics(
        subscribe=(
            "AirPicture", "EngagementOrder", "EngagementOutcome", "Threat", "Truth", "WeaponStatus"
        )  # fmt: skip
    )
}

LIVE_TRACKS = (TrackStatus.TRACK_CONFIRMED.value, TrackStatus.TRACK_COASTING.value)


@dataclass
class Assessment:
    """Running figures of one mission (no DDS: fed with samples, read as a dict)."""

    cutoff_m: float = 1000.0
    truth: Truth | None = None
    gospa_m: list[float] = field(default_factory=list)
    gospa_parts: list[tuple[float, float, float]] = field(default_factory=list)
    tracks: list[int] = field(default_factory=list)
    targets: list[int] = field(default_factory=list)
    picture_latency_ms: list[float] = field(default_factory=list)
    order_latency_ms: list[float] = field(default_factory=list)
    orders: dict[int, int] = field(default_factory=dict)  # order id → latest status value
    threats: set[int] = field(default_factory=set)
    weapons: dict[str, dict[str, Any]] = field(default_factory=dict)
    started_ns: int = field(default_factory=time.time_ns)

    def on_truth(self, msg: Truth) -> None:
        if self.truth is None or msg.time_ns >= self.truth.time_ns:
            self.truth = msg

    def on_picture(self, msg: AirPicture) -> None:
        self.picture_latency_ms.append((msg.publish_ns - msg.origin_ns) / 1e6)
        if self.truth is None:
            return
        truth = TruthState.from_msg(self.truth)
        dt_s = (msg.time_ns - self.truth.time_ns) / 1e9
        truth_xyz = truth.positions_m + dt_s * truth.velocities_mps
        states = np.asarray(packed_field(msg, "state")).reshape(-1, 6)
        status = np.asarray(packed_field(msg, "status"))
        estimates = states[np.isin(status, LIVE_TRACKS), :3]
        result = gospa(truth_xyz, estimates, c=self.cutoff_m, p=2, alpha=2)
        self.gospa_m.append(float(result.distance))
        self.gospa_parts.append((result.localisation, result.missed, result.false))
        self.tracks.append(len(estimates))
        self.targets.append(len(truth_xyz))

    def on_order(self, msg: EngagementOrder) -> None:
        first = msg.order_id not in self.orders
        self.orders[msg.order_id] = msg.status.value
        if first and msg.origin_ns and msg.issue_ns:
            self.order_latency_ms.append((msg.issue_ns - msg.origin_ns) / 1e6)

    def summary(self, *, truth_summary: dict[str, Any] | None = None) -> dict[str, Any]:
        statuses = list(self.orders.values())
        kills = statuses.count(OrderStatus.ORDER_KILL.value)
        misses = statuses.count(OrderStatus.ORDER_MISS.value)
        out: dict[str, Any] = {
            "elapsed_s": round((time.time_ns() - self.started_ns) / 1e9, 1),
            "pictures": len(self.gospa_m),
            "tracks_now": self.tracks[-1] if self.tracks else 0,
            "targets_now": self.targets[-1] if self.targets else 0,
            "gospa_cutoff_m": self.cutoff_m,
            "gospa_mean_m": _mean(self.gospa_m),
            "gospa_localisation_mean": _mean([p[0] for p in self.gospa_parts]),
            "gospa_missed_mean": _mean([p[1] for p in self.gospa_parts]),
            "gospa_false_mean": _mean([p[2] for p in self.gospa_parts]),
            "picture_latency_ms": _percentiles(self.picture_latency_ms),
            "threats_seen": len(self.threats),
            "orders": len(self.orders),
            "kills": kills,
            "misses": misses,
            "detection_to_order_ms": _percentiles(self.order_latency_ms),
            "weapons": self.weapons,
        }
        if truth_summary is not None:
            out["leakers"] = len(truth_summary.get("impacts", []))
            out["targets_killed"] = len(truth_summary.get("kills", []))
            out["targets_total"] = truth_summary.get("targets")
        return out


def _mean(values: list[float]) -> float | None:
    return round(float(np.mean(values)), 2) if values else None


def _percentiles(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"count": 0, "p50": None, "p99": None, "max": None}
    p50, p99 = np.percentile(values, [50, 99])
    return {
        "count": len(values),
        "p50": round(float(p50), 2),
        "p99": round(float(p99), 2),
        "max": round(float(max(values)), 2),
    }


def assessor(ctx: AppContext) -> int:
    parser = argparse.ArgumentParser(prog="assessor", description=__doc__)
    parser.add_argument("--cutoff-m", type=float, default=1000.0, help="GOSPA c (m)")
    parser.add_argument("--every-s", type=float, default=1.0, help="summary.json refresh (s)")
    parser.add_argument("--out", type=Path, help="default <run_dir>/summary.json")
    opts = parser.parse_args(ctx.args)
    out = opts.out or ctx.run_dir / "summary.json"
    state = Assessment(cutoff_m=opts.cutoff_m)
    bus = ctx.bus
    truth = bus.reader("Truth")
    pictures = bus.reader("AirPicture")
    orders = bus.reader("EngagementOrder")
    outcomes = bus.reader("EngagementOutcome")
    threats = bus.reader("Threat")
    weapons = bus.reader("WeaponStatus")
    last_write = 0.0
    while not ctx.wait(0.05):
        for msg in truth.take(64):
            state.on_truth(msg)
        for msg in pictures.take(64):
            state.on_picture(msg)
            ctx.heartbeat.count_in()
        for msg in orders.take(1024):
            state.on_order(msg)
        for msg in outcomes.take(1024):
            state.on_order(msg)
        for threat in threats.take(1024):
            state.threats.add(threat.track_id)
        for ws in weapons.take(256):
            state.weapons[ws.weapon_id] = {
                "state": ws.state.name.removeprefix("WEAPON_").lower(),
                "rounds_ready": ws.rounds_ready,
            }
        if time.monotonic() - last_write >= opts.every_s:
            last_write = time.monotonic()
            _write(out, state.summary(truth_summary=_truth_summary(ctx.run_dir)))
    _write(out, state.summary(truth_summary=_truth_summary(ctx.run_dir)))
    return 0


def _truth_summary(run_dir: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads((run_dir / "truth-summary.json").read_text()))
    except (OSError, ValueError):
        return None


def _write(path: Path, summary: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(summary, indent=2))
    tmp.replace(path)
