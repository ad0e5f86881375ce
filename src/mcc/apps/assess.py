"""Mission assessment: how good the air picture is and how the engagement went, from the bus.

``assessor(ctx)`` is a system of simulated missions (it needs ``Truth``). It listens to
``Truth``, ``AirPicture``, ``Threat``, ``EngagementOrder`` and ``WeaponStatus`` and keeps:

- GOSPA (c, p = 2, α = 2) of every air picture against the truth at the picture's time
  (the latest ``Truth`` moved to that time with its velocities), with its localisation,
  missed and false parts, and per second of scenario time (``gospa_by_scenario_s``: the
  mission's epoch is the scenario's start) so two runs compare over the same seconds;
- air-picture latency (``publish_ns − origin_ns``) and detection→engagement-order latency
  (``issue_ns − origin_ns`` of each issued order: from the radar seeing the target to the
  order leaving TEWA);
- orders issued, kills, misses, threats seen; and the impacts (leakers) from the truth app's
  ``truth-summary.json`` at the end;
- fratricide: with the mission's scenario (``config: {scenario: ...}``, its IFF Mode 5
  friends), every order that went out (issued, in flight, kill or miss) against a track on a
  friendly truth target (GOSPA's one-to-one pairing of tracks and targets, within the
  cut-off, puts the track on a friend) is counted in ``friends_engaged`` and listed in
  ``friend_orders``; ``friends_killed`` comes from ``truth-summary.json``. Without the
  scenario ``friends_engaged`` is null (not known), never 0.

It rewrites ``<run_dir>/summary.json`` every ``every_s`` seconds and at the end, so a
console or `make demo` can follow a mission without joining the bus. Its settings are the
system's ``config:`` block (`AssessorConfig`).

Bounds: the figures are over the last ``MAX_KEPT`` pictures and orders, in arrays filled at
start (`Recent`), the latest ``MAX_KEYS`` orders and threats are tracked, the oldest forgotten
(the counts are over all: a mission that never ends keeps its figures), at most 1024 weapons,
and a picture of
more than ``MAX_PICTURE_TRACKS`` tracks is not scored. On the bus (``receive_ns`` given), a
``Truth`` or ``AirPicture`` stamped more than ``max_future_s`` ahead of the receive time, or
more than ``max_age_s`` behind it, is dropped: a truth stamped a year ahead would otherwise
stay "the newest" for a year. What is dropped is counted (``dropped``) and logged once per
reason.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import Field

from mcc.apps.args import ScenarioFile
from mcc.apps.metrics import gospa, truth_track_ids
from mcc.apps.scenario import TruthState, load_scenario
from mcc.files import write_atomic
from mcc.orchestrate.appconfig import AppConfig
from mcc.orchestrate.appspec import app
from mcc.orchestrate.runtime import AppContext
from mcc.security.mission import Topics
from mcc.types import AirPicture, EngagementOrder, OrderStatus, TrackStatus, Truth
from mcc.types.arrays import packed_field

LIVE_TRACKS = (TrackStatus.TRACK_CONFIRMED.value, TrackStatus.TRACK_COASTING.value)
#: Statuses of an order that went out to a weapon (a proposed or rejected one did not).
ENGAGED = tuple(
    s.value
    for s in (
        OrderStatus.ORDER_ISSUED,
        OrderStatus.ORDER_IN_FLIGHT,
        OrderStatus.ORDER_KILL,
        OrderStatus.ORDER_MISS,
    )
)
#: Orders against friends listed in the summary (all of them are counted).
MAX_FRIEND_ORDERS_LISTED = 100
#: Values kept for the figures (the last ones), keys tracked, tracks of a scored picture.
MAX_KEPT = 100_000
MAX_KEYS = 100_000
MAX_PICTURE_TRACKS = 20_000
#: Seconds of scenario time the per-second GOSPA keeps (the latest ones).
MAX_SECONDS_KEPT = 600

log = logging.getLogger("mcc.apps.assess")


class AssessorConfig(AppConfig):
    """The assessor's ``config:`` block in a manifest (every field optional)."""

    cutoff_m: float = Field(default=1000.0, gt=0, description="GOSPA cut-off c, metres")
    every_s: float = Field(default=1.0, gt=0, le=3600, description="summary.json refresh, s")
    out: Path | None = Field(default=None, description="summary file; <run_dir>/summary.json")
    scenario: ScenarioFile | None = Field(
        default=None,
        description="the mission's scenario: its IFF Mode 5 friends, to count orders against "
        "them (fratricide); omitted: friends_engaged is not known (null)",
    )


class Recent:
    """The latest ``size`` values (rows of ``width``), in one array filled at creation: a deque
    of floats grew by ~32 bytes a value (~140 a tuple) for hours until full, this does not."""

    def __init__(self, size: int = MAX_KEPT, width: int | None = None) -> None:
        shape = (size,) if width is None else (size, width)
        self._a = np.full(shape, np.nan)  # every page touched now: the RSS does not creep
        self._n = 0

    def append(self, value: Any) -> None:
        self._a[self._n % len(self._a)] = value
        self._n += 1

    def __len__(self) -> int:
        return min(self._n, len(self._a))

    def values(self) -> npt.NDArray[np.float64]:
        """The kept values, oldest first."""
        if self._n <= len(self._a):
            return self._a[: self._n]
        return np.roll(self._a, -(self._n % len(self._a)), axis=0)

    def __getitem__(self, index: int) -> Any:
        return self.values()[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values().tolist())


def _recent() -> Recent:
    return Recent()


def _recent3() -> Recent:
    return Recent(width=3)


@dataclass
class Assessment:
    """Running figures of one mission (no DDS: fed with samples, read as a dict).

    ``receive_ns`` (the ``on_*`` methods): when the sample arrived, on this process's clock;
    with it, samples stamped too far from it are dropped (None: samples replayed from a
    recording, taken as they are).
    """

    cutoff_m: float = 1000.0
    max_future_s: float = 2.0
    max_age_s: float = 300.0
    max_keys: int = MAX_KEYS  # orders, threats tracked
    truth: Truth | None = None
    gospa_m: Recent = field(default_factory=_recent)
    gospa_parts: Recent = field(default_factory=_recent3)  # localisation, missed, false
    tracks: Recent = field(default_factory=_recent)
    targets: Recent = field(default_factory=_recent)
    picture_latency_ms: Recent = field(default_factory=_recent)
    order_latency_ms: Recent = field(default_factory=_recent)
    pictures: int = 0  # pictures scored, all of them
    #: Order id → latest status value, and threat track ids, the latest ``max_keys`` of each
    #: (the oldest are forgotten: a mission that runs for days keeps counting); the counts
    #: below are over all of them.
    orders: dict[int, int] = field(default_factory=dict)
    threats: dict[int, None] = field(default_factory=dict)
    order_counts: Counter[str] = field(default_factory=Counter)  # orders, kills, misses
    threats_seen: int = 0
    weapons: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Target ids of the scenario's IFF Mode 5 friends (None: not known, fratricide not counted).
    friend_ids: frozenset[int] | None = None
    #: Track id → the friendly truth target it is on, at the latest scored picture.
    on_friend: dict[int, int] = field(default_factory=dict)
    #: Order id → friendly truth target of every order that went out against a friend.
    friend_orders: dict[int, int] = field(default_factory=dict)
    dropped: Counter[str] = field(default_factory=Counter)
    started_ns: int = field(default_factory=time.time_ns)
    #: The scenario's start (Unix ns; the mission's epoch): with it, GOSPA is also kept per
    #: second of scenario time, so two runs of one scenario compare over the same seconds.
    epoch_ns: int | None = None
    #: Whole scenario second → (sum, count) of the GOSPA of the pictures stamped in it.
    gospa_seconds: dict[int, tuple[float, int]] = field(default_factory=dict)

    def _drop(self, reason: str, detail: str) -> None:
        self.dropped[reason] += 1
        if self.dropped[reason] == 1:
            log.warning("%s dropped (%s); further ones are counted, not logged", reason, detail)

    def _stamped_ok(self, what: str, stamp_ns: int, receive_ns: int | None) -> bool:
        if receive_ns is None:
            return True
        if stamp_ns - receive_ns > self.max_future_s * 1e9:
            self._drop(f"{what} stamped in the future", f"{(stamp_ns - receive_ns) / 1e9:.3g} s")
            return False
        if receive_ns - stamp_ns > self.max_age_s * 1e9:
            self._drop(f"{what} stamped long ago", f"{(receive_ns - stamp_ns) / 1e9:.3g} s")
            return False
        return True

    def on_truth(self, msg: Truth, receive_ns: int | None = None) -> None:
        if not self._stamped_ok("truth", msg.time_ns, receive_ns):
            return
        if self.truth is None or msg.time_ns >= self.truth.time_ns:
            self.truth = msg

    def on_picture(self, msg: AirPicture, receive_ns: int | None = None) -> None:
        if not self._stamped_ok("picture", msg.time_ns, receive_ns):
            return
        if msg.count > MAX_PICTURE_TRACKS:
            self._drop("picture of too many tracks", f"{msg.count} > {MAX_PICTURE_TRACKS}")
            return
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
        self.pictures += 1
        self.gospa_m.append(float(result.distance))
        if self.epoch_ns is not None:
            self._per_second((msg.time_ns - self.epoch_ns) // 1_000_000_000, result.distance)
        self.gospa_parts.append((result.localisation, result.missed, result.false))
        self.tracks.append(len(estimates))
        self.targets.append(len(truth_xyz))
        if self.friend_ids:
            live = np.isin(status, LIVE_TRACKS)
            track_ids = np.asarray(packed_field(msg, "track_id"))[live]
            self._tracks_on_friends(track_ids, estimates, truth.ids, truth_xyz)

    def _tracks_on_friends(
        self,
        track_ids: np.ndarray,
        estimates: np.ndarray,
        target_ids: np.ndarray,
        truth_xyz: np.ndarray,
    ) -> None:
        """Remember which tracks are on a friendly target: one-to-one, as GOSPA pairs them
        (optimal assignment within the cut-off), not the nearest target. A hostile overtaking a
        friend 300 m away has its own track; its estimate may be nearer the friend for a scan,
        yet the pairing keeps it on the hostile while the friend has a track of its own.

        Bounded by the neighbourhood of the few friends, not a tracks × targets matrix of a big
        raid: the tracks within the cut-off of a friend, the targets within the cut-off of
        those tracks, and the tracks that compete for those targets."""
        self.on_friend = {}
        friendly = np.isin(target_ids, np.fromiter(self.friend_ids or (), np.int64))
        if not friendly.any() or not len(estimates):
            return
        c = self.cutoff_m

        def within(points: np.ndarray, of: np.ndarray) -> np.ndarray:
            d = np.linalg.norm(points[:, None, :] - of[None], axis=2)
            return np.flatnonzero(d.min(axis=1) <= c)

        near = within(estimates, truth_xyz[friendly])[: self.max_keys]
        if not len(near):
            return
        targets = within(truth_xyz, estimates[near])
        tracks = within(estimates, truth_xyz[targets])[: self.max_keys]
        assigned = truth_track_ids(
            truth_xyz[targets], estimates[tracks], tracks, max_distance_m=c
        )  # per target: the row of its track in ``estimates``, -1 for none
        for target, row in zip(targets, assigned, strict=True):
            if row >= 0 and friendly[target]:
                self.on_friend[int(track_ids[row])] = int(target_ids[target])

    def on_order(self, msg: EngagementOrder) -> None:
        first = msg.order_id not in self.orders
        if first:
            self.order_counts["orders"] += 1
            if len(self.orders) >= self.max_keys:
                del self.orders[next(iter(self.orders))]  # the oldest order is forgotten
                self.order_counts["forgotten"] += 1
        previous = self.orders.get(msg.order_id)
        status = msg.status.value
        if status != previous:
            for value, sign in ((previous, -1), (status, 1)):
                if value == OrderStatus.ORDER_KILL.value:
                    self.order_counts["kills"] += sign
                elif value == OrderStatus.ORDER_MISS.value:
                    self.order_counts["misses"] += sign
        self.orders[msg.order_id] = status
        target = self.on_friend.get(msg.track_id)
        if target is not None and msg.status.value in ENGAGED and previous not in ENGAGED:
            self.friend_orders[msg.order_id] = target
            log.warning(
                "fratricide: order %d (weapon %s) against track %d, on friendly target %d",
                msg.order_id,
                msg.weapon_id,
                msg.track_id,
                target,
            )
        if first and msg.origin_ns and msg.issue_ns:
            self.order_latency_ms.append((msg.issue_ns - msg.origin_ns) / 1e6)

    def _per_second(self, second: int, distance: float) -> None:
        total, count = self.gospa_seconds.get(second, (0.0, 0))
        if count == 0 and len(self.gospa_seconds) >= MAX_SECONDS_KEPT:
            del self.gospa_seconds[min(self.gospa_seconds)]  # the oldest second goes
        self.gospa_seconds[second] = (total + float(distance), count + 1)

    def on_threat(self, track_id: int) -> None:
        if track_id in self.threats:
            return
        self.threats_seen += 1
        if len(self.threats) >= self.max_keys:
            del self.threats[next(iter(self.threats))]  # the oldest threat is forgotten
        self.threats[track_id] = None

    def on_weapon(self, weapon_id: str, state: dict[str, Any]) -> None:
        if weapon_id not in self.weapons and len(self.weapons) >= 1024:
            self._drop("weapon past the bound of weapons tracked", weapon_id[:80])
            return
        self.weapons[weapon_id] = state

    def summary(self, *, truth_summary: dict[str, Any] | None = None) -> dict[str, Any]:
        kills, misses = self.order_counts["kills"], self.order_counts["misses"]
        out: dict[str, Any] = {
            "elapsed_s": round((time.time_ns() - self.started_ns) / 1e9, 1),
            "pictures": self.pictures,
            "tracks_now": int(self.tracks[-1]) if len(self.tracks) else 0,
            "targets_now": int(self.targets[-1]) if len(self.targets) else 0,
            "gospa_cutoff_m": self.cutoff_m,
            "gospa_mean_m": _mean(self.gospa_m.values()),
            "gospa_localisation_mean": _mean(self.gospa_parts.values()[:, 0]),
            "gospa_missed_mean": _mean(self.gospa_parts.values()[:, 1]),
            "gospa_false_mean": _mean(self.gospa_parts.values()[:, 2]),
            "gospa_by_scenario_s": {
                str(second): round(total / count, 2)
                for second, (total, count) in sorted(self.gospa_seconds.items())
            },
            "picture_latency_ms": _percentiles(self.picture_latency_ms),
            "threats_seen": self.threats_seen,
            "orders": self.order_counts["orders"],
            "kills": kills,
            "misses": misses,
            "detection_to_order_ms": _percentiles(self.order_latency_ms),
            "weapons": self.weapons,
            "dropped": dict(self.dropped),
            "friends": None if self.friend_ids is None else len(self.friend_ids),
            "friends_engaged": None if self.friend_ids is None else len(self.friend_orders),
            "friend_orders": [
                {"order": order, "target": target}
                for order, target in sorted(self.friend_orders.items())[:MAX_FRIEND_ORDERS_LISTED]
            ],
            "friends_killed": None,
        }
        if truth_summary is not None:
            # counts (a continuous scenario lists only the latest kills and impacts)
            out["leakers"] = truth_summary.get("leakers", len(truth_summary.get("impacts", [])))
            out["targets_killed"] = truth_summary.get(
                "kills_total", len(truth_summary.get("kills", []))
            )
            out["targets_total"] = truth_summary.get("targets")
            if "friends_killed" in truth_summary:  # a truth app that knows IFF
                out["friends_killed"] = len(truth_summary["friends_killed"])
                out["friends"] = truth_summary.get("friends", out["friends"])
        return out


def _mean(values: Iterable[float]) -> float | None:
    kept = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, float)
    return round(float(np.mean(kept)), 2) if kept.size else None


def _percentiles(recent: Recent) -> dict[str, float | int | None]:
    values = recent.values()
    if not len(values):
        return {"count": 0, "p50": None, "p99": None, "max": None}
    p50, p99 = np.percentile(values, [50, 99])
    return {
        "count": len(values),
        "p50": round(float(p50), 2),
        "p99": round(float(p99), 2),
        "max": round(float(values.max()), 2),
    }


@app(
    topics=Topics(
        subscribe=(
            "AirPicture",
            "EngagementOrder",
            "EngagementOutcome",
            "Threat",
            "Truth",
            "WeaponStatus",
        )  # fmt: skip
    ),
    config=AssessorConfig,
)
def assessor(ctx: AppContext) -> int:
    opts: AssessorConfig = ctx.config or AssessorConfig()
    out = opts.out or ctx.run_dir / "summary.json"
    state = Assessment(
        cutoff_m=opts.cutoff_m,
        friend_ids=_friends(opts.scenario),
        epoch_ns=ctx.settings.epoch_ns,
    )
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
            state.on_truth(msg, time.time_ns())
        for msg in pictures.take(64):
            state.on_picture(msg, time.time_ns())
            ctx.heartbeat.count_in()
        for msg in orders.take(1024):
            state.on_order(msg)
        for msg in outcomes.take(1024):
            state.on_order(msg)
        for threat in threats.take(1024):
            state.on_threat(threat.track_id)
        for ws in weapons.take(256):
            state.on_weapon(
                ws.weapon_id,
                {
                    "state": ws.state.name.removeprefix("WEAPON_").lower(),
                    "rounds_ready": ws.rounds_ready,
                },
            )
        if time.monotonic() - last_write >= opts.every_s:
            last_write = time.monotonic()
            _write(out, state.summary(truth_summary=_truth_summary(ctx.run_dir)))
    _write(out, state.summary(truth_summary=_truth_summary(ctx.run_dir)))
    return 0


def _friends(scenario: Path | None) -> frozenset[int] | None:
    """Target ids of ``scenario``'s IFF Mode 5 friends (None without a scenario)."""
    if scenario is None:
        return None
    spec = load_scenario(scenario)
    return frozenset(int(i) for i in spec.ids[spec.mode5])


def _truth_summary(run_dir: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads((run_dir / "truth-summary.json").read_text()))
    except (OSError, ValueError):
        return None


def _write(path: Path, summary: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(summary, indent=2))
