"""The ``tewa`` app: threat evaluation and weapon assignment (TEWA) of the SAM TOC.

Per ``AirPicture`` (one tracker cycle), `TewaEngine.step`:

1. **Threat evaluation** of every confirmed (or coasting) track against the scenario's defended
   assets (``mcc.compute.threat``: closest point of approach, time to CPA, time to impact,
   heading, speed, class) → one keyed ``Threat`` per track, ranked (rank 1 = most threatening);
   the ``Threat`` of a track that left the picture is disposed.
2. **Weapon assignment** of the threats that score at least ``min_score`` and are not engaged,
   maximising the expected threat value destroyed (``mcc.compute.wta``). The pk of weapon w
   against track t is the launchers' `PkModel` (``base_pk × range_factor × class_factor``)
   at the predicted intercept point (`intercept_time_s`); a weapon takes part when its latest
   ``WeaponStatus`` is ``WEAPON_READY`` with rounds, is fresh, and has no order of ours pending.
   Each weapon gets at most one target per cycle (a launcher flies one engagement at a time) and
   fires ``salvo`` rounds at it. Two assignments are computed: **Hungarian** (exact when each
   target takes at most one weapon) and **greedy maximum marginal return** (up to
   ``max_weapons_per_target`` weapons per target).
3. **Plan comparison** at most once per ``compare_period_s``: both assignments become
   ``EngagementPlan`` objects with shoot-look-shoot (the rounds left in the magazines are a reserve,
   fired over the look-shoot cycles that fit before the threats arrive) and are simulated with
   common random numbers (``mcc.compute.montecarlo``: raid annihilation probability, expected
   leakers). The policy with fewer expected leakers wins; when the 95 % intervals overlap, the one
   that spends fewer rounds. The winner (``policy="auto"``) assigns until the next comparison;
   the figures go to the log and to the heartbeat's ``message``. The comparison runs inside the
   cycle that triggers it, so that cycle's orders already follow the winner (measured: 2-40 ms
   for 1-50 threats at 2000 trials on a 2-core VM).
4. **Orders**: one ``EngagementOrder`` per (weapon, track) with status ``ORDER_ISSUED``, a new
   ``order_id``, the planned single-shot ``pk``, ``rounds = salvo``, ``issue_ns`` and
   ``origin_ns`` = the picture's ``origin_ns`` (detection → order latency is measured).

**Approval mode** (``--approval``, `TewaEngine.approval`): orders are proposed, not issued. Each is
published with status ``ORDER_PROPOSED`` (launchers ignore it; the console shows it) and holds its
weapon and track until an operator decides: a ``Command`` with verb ``approve`` (or ``reject``)
and the order id as target, sent on the ``Command`` topic in DDS partition `APPROVAL_PARTITION`,
which TEWA answers (the supervisor, in the default partition, never sees it). An approved order
is issued (``ORDER_ISSUED``, ``issue_ns`` = the approval time); a rejected one is
``ORDER_ABORTED`` and its track is not proposed again for ``kill_assess_s``; one left undecided
for ``approval_timeout_s`` is withdrawn (``ORDER_ABORTED``) and proposed again if still wanted.

Shoot-look-shoot: a track with an order in flight (``ORDER_ISSUED``/``ORDER_IN_FLIGHT``) is not
engaged again; after ``ORDER_MISS`` or ``ORDER_ABORTED`` it is engaged again at the next cycle;
after ``ORDER_KILL`` it is left alone for ``kill_assess_s`` (the tracker should drop it), then
engaged again if it still flies. An order that gets no outcome by its expected intercept time
plus ``order_timeout_s`` is given up (its weapon and track are free again).

**A restart does not re-issue.** TEWA keeps a durable record (`mcc.apps.statefile`:
``RUN_DIR/state/SYSTEM-INDEX.json``, written atomically) of the orders it holds (proposed,
issued or in flight, with their deadlines), the tracks left alone after a kill, and the next
order id; it is on disk **before** the orders it covers are published. An instance restarted
under the same identity (``kill -9``, then the supervisor's restart) reads it back
(`TewaEngine.restore`): the weapons and tracks of those orders stay engaged, so the same
picture brings no second order for them; the launchers' answers (``EngagementOutcome``, kept
by their writers for late readers) then settle them as before. The orders still
``ORDER_ISSUED`` are published again, same id, for a launcher that may have missed them
(a launcher never fires twice for one order id, `mcc.apps.launcher`). A record that cannot be
read is counted, logged once, set aside, and TEWA starts clean.

    python -m mcc.orchestrate.runtime mcc.apps.tewa:tewa --scenario scenarios/sam-toc.yaml \\
        --weapons scenarios/weapons-sam-toc.yaml

Frame and units: ENU metres, m/s, seconds; times on the wire in Unix ns (DESIGN.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from cyclonedds.core import WaitSet
from cyclonedds.util import duration

from mcc.apps.args import positive_float
from mcc.apps.launcher import DEFAULT_WEAPONS, PkModel, WeaponSpec, intercept_time_s, load_weapons
from mcc.apps.scenario import Scenario, load_scenario
from mcc.apps.statefile import StateFile, open_state
from mcc.bus import Replier
from mcc.bus.rpc import APPROVAL_CHANNEL, principal_partition
from mcc.compute.montecarlo import EngagementPlan, MonteCarloResult, compare_plans, simulate_raid
from mcc.compute.threat import evaluate_threats
from mcc.compute.wta import WTAResult, wta_greedy, wta_hungarian
from mcc.errors import MccError
from mcc.orchestrate.runtime import AppContext
from mcc.security.mission import Topics
from mcc.types import (
    AirPicture,
    Command,
    CommandReply,
    EngagementOrder,
    OrderStatus,
    TargetClass,
    Threat,
    TrackStatus,
    WeaponState,
    WeaponStatus,
)
from mcc.types.arrays import packed_field

#: Files its arguments name, with their loaders: `mcc validate` checks they exist and parse.
FILE_ARGS = {"--scenario": load_scenario, "--weapons": load_weapons}
BUS_TOPICS = {
    "tewa": Topics(
        publish=("EngagementOrder", "Threat", "CommandReply"),  # replies: order approvals
        subscribe=("AirPicture", "WeaponStatus", "EngagementOutcome", "Command"),
    )
}

__all__ = [
    "APPROVAL_PARTITION",
    "Assets",
    "Order",
    "Picture",
    "PlanEvaluation",
    "TewaEngine",
    "TewaResult",
    "TewaStatistics",
    "ThreatReport",
    "tewa",
]

DEFAULT_SCENARIO = "scenarios/sam-toc.yaml"
POLICIES = ("auto", "hungarian", "greedy")
Policy = Literal["auto", "hungarian", "greedy"]
_ACTIVE = (OrderStatus.ORDER_ISSUED, OrderStatus.ORDER_IN_FLIGHT)
_HELD = (OrderStatus.ORDER_PROPOSED, *_ACTIVE)  # the order's weapon and track are busy
# Approval commands travel on the Command topic in the partitions of the approval channel
# (``approval/<principal>``): TEWA answers them there and the supervisor, which reads the
# ``cmd`` channel, never hears them; who approved is the partition's principal.
APPROVAL_PARTITION = principal_partition(APPROVAL_CHANNEL, "*")
_DONE = (OrderStatus.ORDER_KILL, OrderStatus.ORDER_MISS, OrderStatus.ORDER_ABORTED)
_THREATS = (int(TrackStatus.TRACK_CONFIRMED.value), int(TrackStatus.TRACK_COASTING.value))

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
log = logging.getLogger("mcc.app.tewa")


# -- inputs --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Assets:
    """The defended assets: ids, ENU positions ``(A, 3)``, values scaled to 0..1, radii (m)."""

    ids: tuple[str, ...]
    position_m: F64
    value: F64
    radius_m: F64

    @classmethod
    def from_scenario(cls, scenario: Scenario, *, radius_m: float = 1000.0) -> Assets:
        """The scenario's assets; values divided by the largest (threat scores are 0..1)."""
        values = np.array([a.value for a in scenario.assets], dtype=np.float64)
        top = float(values.max()) if values.size else 1.0
        return cls(
            ids=tuple(a.id for a in scenario.assets),
            position_m=np.array([a.position_m for a in scenario.assets], dtype=np.float64).reshape(
                -1, 3
            ),
            value=values / top,
            radius_m=np.full(values.size, float(radius_m)),
        )


@dataclass(frozen=True)
class Picture:
    """One air picture as arrays of N tracks: ids, TrackStatus and TargetClass values, state
    ``(N, 6)`` = x y z vx vy vz; ``time_ns`` the instant it is valid for, ``origin_ns`` the
    oldest detection in it."""

    time_ns: int
    origin_ns: int
    track_id: npt.NDArray[np.uint32]
    status: npt.NDArray[np.uint8]
    classification: npt.NDArray[np.uint8]
    state: F64

    def __post_init__(self) -> None:
        n = self.track_id.shape[0]
        if self.status.shape != (n,) or self.classification.shape != (n,):
            raise MccError(f"picture: status and classification must have shape ({n},)")
        if self.state.shape != (n, 6):
            raise MccError(f"picture: state must have shape ({n}, 6), got {self.state.shape}")

    @property
    def count(self) -> int:
        return int(self.track_id.shape[0])

    @classmethod
    def from_msg(cls, msg: AirPicture) -> Picture:
        return cls(
            time_ns=msg.time_ns,
            origin_ns=msg.origin_ns,
            track_id=np.array(packed_field(msg, "track_id"), dtype=np.uint32),
            status=np.array(packed_field(msg, "status"), dtype=np.uint8),
            classification=np.array(packed_field(msg, "classification"), dtype=np.uint8),
            state=np.array(packed_field(msg, "state"), dtype=np.float64).reshape(-1, 6),
        )


# -- outputs -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ThreatReport:
    """The threat evaluation of one picture's confirmed tracks, ``(N,)`` arrays.

    ``asset_idx`` indexes `Assets` (-1 with no asset); ``time_to_impact_s`` is -1 for never;
    ``course_rad`` is the direction of flight (clockwise from north), ``off_axis_rad`` the angle
    between it and the line to the asset (0 = straight at it).
    """

    time_ns: int
    origin_ns: int
    track_id: I64
    classification: npt.NDArray[np.uint8]
    asset_idx: I64
    score: F64
    rank: I64
    time_to_impact_s: F64
    cpa_m: F64
    time_to_cpa_s: F64
    speed_mps: F64
    course_rad: F64
    off_axis_rad: F64

    @property
    def count(self) -> int:
        return int(self.track_id.shape[0])

    @property
    def time_to_go_s(self) -> F64:
        """Time to impact, or to CPA for a track that never reaches its asset."""
        return np.where(self.time_to_impact_s >= 0, self.time_to_impact_s, self.time_to_cpa_s)

    def ranked(self) -> I64:
        """Indices from the most to the least threatening."""
        return np.argsort(self.rank, kind="stable")

    def to_msgs(self, asset_ids: tuple[str, ...]) -> list[Threat]:
        """One ``Threat`` per track, most threatening first."""
        out = []
        for i in self.ranked():
            a = int(self.asset_idx[i])
            out.append(
                Threat(
                    track_id=int(self.track_id[i]),
                    asset_id=asset_ids[a] if a >= 0 else "",
                    score=float(self.score[i]),
                    rank=int(self.rank[i]),
                    time_to_impact_s=float(self.time_to_impact_s[i]),
                    cpa_m=float(self.cpa_m[i]),
                    time_to_cpa_s=float(self.time_to_cpa_s[i]),
                    classification=_target_class(int(self.classification[i])),
                    update_ns=self.time_ns,
                    origin_ns=self.origin_ns,
                )
            )
        return out


@dataclass(frozen=True)
class Order:
    """An engagement order issued by TEWA (``time_of_flight_s`` is its planned flyout)."""

    order_id: int
    weapon_id: str
    track_id: int
    pk: float
    rounds: int
    issue_ns: int
    origin_ns: int
    time_of_flight_s: float

    def to_msg(self, status: OrderStatus = OrderStatus.ORDER_ISSUED) -> EngagementOrder:
        return EngagementOrder(
            order_id=self.order_id,
            weapon_id=self.weapon_id,
            track_id=self.track_id,
            pk=self.pk,
            rounds=self.rounds,
            issue_ns=self.issue_ns,
            origin_ns=self.origin_ns,
            status=status,
        )


@dataclass(frozen=True)
class PlanEvaluation:
    """A Monte Carlo comparison of the assignment policies on one picture."""

    time_ns: int
    names: tuple[str, ...]
    annihilation_prob: tuple[float, ...]
    expected_leakers: tuple[float, ...]
    expected_rounds: tuple[float, ...]
    chosen: str
    separated: bool  # the winner's interval does not overlap the runner-up's
    threats: int
    reserve_rounds: tuple[int, ...]
    looks: int
    trials: int
    compute_ms: float

    def summary(self) -> str:
        """One line for a log or a heartbeat."""
        parts = [
            f"{name} P(annihilation) {pa:.2f} leakers {lk:.2f} rounds {rd:.1f}"
            for name, pa, lk, rd in zip(
                self.names,
                self.annihilation_prob,
                self.expected_leakers,
                self.expected_rounds,
                strict=True,
            )
        ]
        return (
            f"mc {self.threats} threats, {self.looks} look(s): {' | '.join(parts)} "
            f"-> {self.chosen} ({self.trials} trials, {self.compute_ms:.0f} ms)"
        )


@dataclass(frozen=True)
class TewaResult:
    """What one cycle produced: threats, orders to publish, the comparison if one ran, the
    tracks whose ``Threat`` is to be disposed, the policy that assigned, and the proposals
    withdrawn for want of a decision (approval mode: publish them ``ORDER_ABORTED``)."""

    threats: ThreatReport
    orders: tuple[Order, ...]
    comparison: PlanEvaluation | None
    dropped: tuple[int, ...]
    policy: str
    withdrawn: tuple[Order, ...] = ()


@dataclass(frozen=True)
class TewaStatistics:
    cycles: int
    issued: int
    in_flight: int
    kills: int
    misses: int
    aborted: int
    expired: int
    comparisons: int
    proposed: int = 0
    awaiting_approval: int = 0
    rejected: int = 0
    withdrawn: int = 0


@dataclass
class _Weapon:
    status: WeaponStatus
    received_ns: int


@dataclass
class _OrderRecord:
    order: Order
    status: OrderStatus
    due_ns: int  # give up waiting for an outcome after this
    given_up: bool = False

    @property
    def active(self) -> bool:
        return self.status in _ACTIVE and not self.given_up

    @property
    def held(self) -> bool:
        """Proposed or active: its weapon and track are not assigned again."""
        return self.status in _HELD and not self.given_up


@dataclass
class _Counters:
    cycles: int = 0
    issued: int = 0
    kills: int = 0
    misses: int = 0
    aborted: int = 0
    expired: int = 0
    comparisons: int = 0
    proposed: int = 0
    rejected: int = 0
    withdrawn: int = 0


# -- the engine (no DDS) -------------------------------------------------------------------


@dataclass
class TewaEngine:
    """Threat evaluation, weapon assignment and shoot-look-shoot bookkeeping, on explicit
    times (Unix ns) and plain arrays; see the module docstring.

    Args:
        assets: the defended assets.
        weapons: known weapon specs by id (interceptor speed, base pk, reload time); a weapon
            heard of only through ``WeaponStatus`` plans with the ``default_*`` values.
        pk_model: the launchers' Pk model.
        policy: ``auto`` (the Monte Carlo comparison picks), ``hungarian`` or ``greedy``.
        max_weapons_per_target: weapons one target may take in a cycle (greedy).
        salvo: rounds per engagement (1: shoot-look-shoot; 2: shoot-shoot-look …).
        min_score: threats scoring less (0..1) are not engaged.
        compare_period_s: at most one Monte Carlo comparison per this many seconds.
        mc_trials: Monte Carlo trials per plan. max_looks: look-shoot cycles modelled at most.
        order_timeout_s: how long after its expected intercept an order without an outcome
            is given up. kill_assess_s: how long a killed track is left alone.
        weapon_timeout_s: a weapon silent for longer is not used.
        cpa_scale_m, time_scale_s: threat score scales (`mcc.compute.threat`).
        seed: Monte Carlo seed. first_order_id: the first ``order_id`` issued.
        approval: propose orders (``ORDER_PROPOSED``) and issue them only on `approve`.
        approval_timeout_s: a proposal left undecided this long is withdrawn.
    """

    assets: Assets
    weapons: Mapping[str, WeaponSpec] = field(default_factory=dict)
    pk_model: PkModel = field(default_factory=PkModel)
    policy: Policy = "auto"
    max_weapons_per_target: int = 2
    salvo: int = 1
    min_score: float = 0.1
    compare_period_s: float = 1.0
    mc_trials: int = 2000
    max_looks: int = 3
    order_timeout_s: float = 3.0
    kill_assess_s: float = 3.0
    weapon_timeout_s: float = 3.0
    default_interceptor_speed_mps: float = 1000.0
    default_base_pk: float = 0.7
    default_reload_s: float = 2.0
    cpa_scale_m: float = 5000.0
    time_scale_s: float = 60.0
    seed: int = 0
    first_order_id: int = 1
    approval: bool = False
    approval_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise MccError(f"policy={self.policy!r}: expected one of {', '.join(POLICIES)}")
        if self.max_weapons_per_target < 1 or self.salvo < 1 or self.mc_trials < 1:
            raise MccError("max_weapons_per_target, salvo and mc_trials must be >= 1")
        if not self.approval_timeout_s > 0:
            raise MccError(f"approval_timeout_s={self.approval_timeout_s!r}: must be > 0 seconds")
        self._rng = np.random.default_rng(self.seed)
        self._weapons: dict[str, _Weapon] = {}
        self._orders: dict[int, _OrderRecord] = {}
        self._killed_ns: dict[int, int] = {}
        self._rejected_ns: dict[int, int] = {}  # track id -> when its proposal was rejected
        self._reported: set[int] = set()
        self._next_id = self.first_order_id % 2**32 or 1
        self._choice: str = "hungarian" if self.policy == "auto" else self.policy
        self._last_compare_ns: int | None = None
        self._counts = _Counters()
        self.last_comparison: PlanEvaluation | None = None

    # -- inputs ----------------------------------------------------------------------------
    def update_weapon(self, status: WeaponStatus, now_ns: int) -> None:
        """The latest ``WeaponStatus`` of a weapon, received at ``now_ns``."""
        self._weapons[status.weapon_id] = _Weapon(status, now_ns)

    def on_order(self, order: EngagementOrder, now_ns: int) -> OrderStatus | None:
        """An ``EngagementOrder`` sample from the bus; the new status of one of our orders, or
        None when the sample changes nothing (not ours, our own ``ORDER_ISSUED``, a repeat)."""
        rec = self._orders.get(order.order_id)
        status = OrderStatus(order.status)
        if rec is None or status == rec.status or rec.status in _DONE:
            return None
        if status == OrderStatus.ORDER_IN_FLIGHT and rec.status == OrderStatus.ORDER_ISSUED:
            rec.status = status
            return status
        if status not in _DONE:
            return None
        rec.status = status  # an answer to an order given up still counts
        if status == OrderStatus.ORDER_KILL:
            self._counts.kills += 1
            self._killed_ns[rec.order.track_id] = now_ns
        elif status == OrderStatus.ORDER_MISS:
            self._counts.misses += 1
        else:
            self._counts.aborted += 1
        return status

    # -- one cycle -------------------------------------------------------------------------
    def step(self, picture: Picture, now_ns: int) -> TewaResult:
        """Evaluate ``picture`` at ``now_ns``, assign the free weapons, issue orders."""
        self._counts.cycles += 1
        withdrawn = self._expire(now_ns)
        threats, pos, vel = self._evaluate(picture, now_ns)
        current = {int(t) for t in threats.track_id}
        dropped = tuple(sorted(self._reported - current))
        self._reported = current
        orders, comparison, policy = self._assign(threats, pos, vel, picture.origin_ns, now_ns)
        return TewaResult(threats, orders, comparison, dropped, policy, withdrawn)

    def evaluate(self, picture: Picture, now_ns: int | None = None) -> ThreatReport:
        """The threat evaluation of ``picture`` (tracks moved to ``now_ns``), nothing else."""
        return self._evaluate(picture, picture.time_ns if now_ns is None else now_ns)[0]

    def _evaluate(self, picture: Picture, now_ns: int) -> tuple[ThreatReport, F64, F64]:
        keep = np.isin(picture.status, _THREATS)
        state = picture.state[keep]
        dt_s = max(now_ns - picture.time_ns, 0) * 1e-9
        vel = state[:, 3:6]
        pos = state[:, 0:3] + vel * dt_s
        cls = picture.classification[keep]
        n_cls = len(TargetClass)
        a = evaluate_threats(
            pos,
            vel,
            self.assets.position_m,
            asset_radius_m=self.assets.radius_m,
            asset_value=self.assets.value,
            classification=np.where(cls < n_cls, cls, 0),
            cpa_scale_m=self.cpa_scale_m,
            time_scale_s=self.time_scale_s,
        )
        if self.assets.ids:
            pick = a.asset_idx[:, None]
            tti = np.take_along_axis(a.time_to_impact_s, pick, axis=1)[:, 0]
            cpa = np.take_along_axis(a.cpa_m, pick, axis=1)[:, 0]
            tcpa = np.take_along_axis(a.time_to_cpa_s, pick, axis=1)[:, 0]
            hcos = np.take_along_axis(a.heading_cos, pick, axis=1)[:, 0]
        else:
            tti = np.full(pos.shape[0], -1.0)
            cpa, tcpa, hcos = (np.zeros(pos.shape[0]) for _ in range(3))
        report = ThreatReport(
            time_ns=picture.time_ns,
            origin_ns=picture.origin_ns,
            track_id=picture.track_id[keep].astype(np.int64),
            classification=cls,
            asset_idx=a.asset_idx,
            score=a.score,
            rank=a.rank,
            time_to_impact_s=tti,
            cpa_m=cpa,
            time_to_cpa_s=tcpa,
            speed_mps=a.speed_mps,
            course_rad=np.mod(np.arctan2(vel[:, 0], vel[:, 1]), 2 * np.pi),
            off_axis_rad=np.arccos(np.clip(hcos, -1.0, 1.0)),
        )
        return report, pos, vel

    # -- assignment ------------------------------------------------------------------------
    def _assign(
        self, threats: ThreatReport, pos: F64, vel: F64, origin_ns: int, now_ns: int
    ) -> tuple[tuple[Order, ...], PlanEvaluation | None, str]:
        engaged = {r.order.track_id for r in self._orders.values() if r.held}
        kill_ns = int(self.kill_assess_s * 1e9)
        self._killed_ns = {t: k for t, k in self._killed_ns.items() if now_ns - k < kill_ns}
        self._rejected_ns = {t: k for t, k in self._rejected_ns.items() if now_ns - k < kill_ns}
        left_alone = engaged | self._killed_ns.keys() | self._rejected_ns.keys()
        free = np.array([int(t) not in left_alone for t in threats.track_id], dtype=bool)
        idx = np.flatnonzero(free & (threats.score >= self.min_score))
        weapons = self._ready_weapons(now_ns)
        if idx.size == 0 or not weapons:
            return (), None, self._choice

        status = [w.status for w in weapons]
        specs = [self.weapons.get(s.weapon_id) for s in status]
        wpos = np.array([[s.x_m, s.y_m, s.z_m] for s in status])
        speed = np.array(
            [sp.interceptor_speed_mps if sp else self.default_interceptor_speed_mps for sp in specs]
        )
        base = np.array([sp.base_pk if sp else self.default_base_pk for sp in specs])
        lo = np.array([s.min_range_m for s in status])
        hi = np.array([s.max_range_m for s in status])
        rounds = np.array([min(self.salvo, s.rounds_ready) for s in status], dtype=np.int64)

        tof = intercept_time_s(wpos, speed, pos[idx], vel[idx])  # (W, T)
        pk1 = self.pk_model.pk(
            base[:, None],
            speed[:, None] * tof,
            min_range_m=lo[:, None],
            max_range_m=hi[:, None],
            classification=threats.classification[idx][None, :],
        )
        pk1 = np.where(np.isfinite(tof), pk1, 0.0)
        pk_salvo = 1.0 - (1.0 - pk1) ** rounds[:, None]
        value = threats.score[idx]
        plans = {
            "hungarian": wta_hungarian(pk_salvo, value),
            "greedy": wta_greedy(
                pk_salvo, value, max_rounds_per_target=self.max_weapons_per_target
            ),
        }
        comparison = None
        period_ns = int(self.compare_period_s * 1e9)
        due = self._last_compare_ns is None or now_ns - self._last_compare_ns >= period_ns
        if due and plans["hungarian"].weapon_idx.size:
            reload_s = np.array([sp.reload_s if sp else self.default_reload_s for sp in specs])
            comparison = self._compare(plans, pk_salvo, tof, reload_s, threats, idx, now_ns)
            self._last_compare_ns = now_ns
            if self.policy == "auto":
                self._choice = comparison.chosen
        chosen = plans[self._choice]

        orders = []
        for w, t in zip(chosen.weapon_idx, chosen.target_idx, strict=True):
            order = Order(
                order_id=self._new_order_id(),
                weapon_id=status[w].weapon_id,
                track_id=int(threats.track_id[idx[t]]),
                pk=float(pk1[w, t]),
                rounds=int(rounds[w]),
                issue_ns=now_ns,
                origin_ns=origin_ns,
                time_of_flight_s=float(tof[w, t]),
            )
            if self.approval:
                due_ns = now_ns + int(self.approval_timeout_s * 1e9)
                record = _OrderRecord(order, OrderStatus.ORDER_PROPOSED, due_ns)
                self._counts.proposed += 1
            else:
                due_ns = now_ns + int((order.time_of_flight_s + self.order_timeout_s) * 1e9)
                record = _OrderRecord(order, OrderStatus.ORDER_ISSUED, due_ns)
                self._counts.issued += 1
            self._orders[order.order_id] = record
            orders.append(order)
        return tuple(orders), comparison, self._choice

    def _ready_weapons(self, now_ns: int) -> list[_Weapon]:
        busy = {r.order.weapon_id for r in self._orders.values() if r.held}
        timeout_ns = int(self.weapon_timeout_s * 1e9)
        return [
            w
            for wid, w in sorted(self._weapons.items())
            if w.status.state == WeaponState.WEAPON_READY
            and w.status.rounds_ready > 0
            and now_ns - w.received_ns <= timeout_ns
            and wid not in busy
        ]

    def _compare(
        self,
        plans: Mapping[str, WTAResult],
        pk_salvo: F64,
        tof: F64,
        reload_s: F64,
        threats: ThreatReport,
        idx: I64,
        now_ns: int,
    ) -> PlanEvaluation:
        start = time.perf_counter()
        # Engagements left in every live weapon's magazine, busy ones included: the reserve.
        timeout_ns = int(self.weapon_timeout_s * 1e9)
        magazine = sum(
            max(w.status.rounds_ready // self.salvo, 1 if w.status.rounds_ready else 0)
            for w in self._weapons.values()
            if w.status.state != WeaponState.WEAPON_OFFLINE and now_ns - w.received_ns <= timeout_ns
        )
        # Look-shoot cycles that fit before the threats arrive: flyout + reload each.
        used = plans["hungarian"].shots > 0
        cycle_s = float(np.median(tof[used])) + float(reload_s.mean())
        horizon_s = float(np.median(threats.time_to_go_s[idx]))
        looks = int(np.clip(horizon_s // max(cycle_s, 1e-3) - 1, 0, self.max_looks))
        reserve_pk = pk_salvo.max(axis=0)
        names = tuple(plans)
        engagement_plans = []
        reserves = []
        for name in names:
            shots = plans[name].shots
            reserve = max(magazine - int(shots.sum()), 0) if looks else 0
            reserves.append(reserve)
            engagement_plans.append(
                EngagementPlan.from_shots(
                    shots,
                    pk_salvo,
                    reserve_rounds=reserve,
                    reserve_pk=reserve_pk,
                    looks=max(looks, 1),
                    priority=threats.rank[idx],
                )
            )
        seed = int(self._rng.integers(2**63))
        if np.array_equal(plans[names[0]].shots, plans[names[1]].shots):
            one = simulate_raid(engagement_plans[0], trials=self.mc_trials, rng=seed)
            results: tuple[MonteCarloResult, ...] = (one, one)
            best, separated = 0, False
        else:
            cmp = compare_plans(
                engagement_plans, trials=self.mc_trials, rng=seed, objective="leakers"
            )
            results, best, separated = cmp.results, cmp.best_index, cmp.separated
        if not separated:
            # The Monte Carlo cannot tell them apart: spend fewer rounds.
            best = min(range(len(results)), key=lambda i: (results[i].expected_rounds, i))
        self._counts.comparisons += 1
        self.last_comparison = PlanEvaluation(
            time_ns=now_ns,
            names=names,
            annihilation_prob=tuple(r.annihilation_prob for r in results),
            expected_leakers=tuple(r.expected_leakers for r in results),
            expected_rounds=tuple(r.expected_rounds for r in results),
            chosen=names[best],
            separated=separated,
            threats=int(idx.size),
            reserve_rounds=tuple(reserves),
            looks=looks,
            trials=self.mc_trials,
            compute_ms=(time.perf_counter() - start) * 1e3,
        )
        return self.last_comparison

    # -- bookkeeping -----------------------------------------------------------------------
    def _expire(self, now_ns: int) -> tuple[Order, ...]:
        """Give up orders without an outcome; withdraw proposals without a decision."""
        withdrawn = []
        for rec in self._orders.values():
            if rec.status == OrderStatus.ORDER_PROPOSED and now_ns > rec.due_ns:
                log.warning(
                    "order %d (weapon %s, track %d): not approved within %g s; withdrawn",
                    rec.order.order_id,
                    rec.order.weapon_id,
                    rec.order.track_id,
                    self.approval_timeout_s,
                )
                rec.status = OrderStatus.ORDER_ABORTED
                self._counts.withdrawn += 1
                withdrawn.append(rec.order)
            elif rec.active and now_ns > rec.due_ns:
                log.warning(
                    "order %d (weapon %s, track %d): no outcome; given up",
                    rec.order.order_id,
                    rec.order.weapon_id,
                    rec.order.track_id,
                )
                rec.given_up = True
                self._counts.expired += 1
        return tuple(withdrawn)

    # -- approval --------------------------------------------------------------------------
    def approve(self, order_id: int, now_ns: int) -> Order:
        """Issue the proposed order ``order_id`` now; the order to publish ``ORDER_ISSUED``."""
        rec = self._proposal(order_id)
        order = dataclasses.replace(rec.order, issue_ns=now_ns)
        rec.order = order
        rec.status = OrderStatus.ORDER_ISSUED
        rec.due_ns = now_ns + int((order.time_of_flight_s + self.order_timeout_s) * 1e9)
        self._counts.issued += 1
        return order

    def reject(self, order_id: int, now_ns: int) -> Order:
        """Drop the proposed order ``order_id`` (publish it ``ORDER_ABORTED``); its track is not
        proposed again for ``kill_assess_s``."""
        rec = self._proposal(order_id)
        rec.status = OrderStatus.ORDER_ABORTED
        self._rejected_ns[rec.order.track_id] = now_ns
        self._counts.rejected += 1
        return rec.order

    def pending_approval(self) -> list[Order]:
        """Proposed orders awaiting a decision, oldest first."""
        return [r.order for r in self._orders.values() if r.status == OrderStatus.ORDER_PROPOSED]

    def _proposal(self, order_id: int) -> _OrderRecord:
        rec = self._orders.get(order_id)
        if rec is None or rec.status != OrderStatus.ORDER_PROPOSED:
            now = "unknown to this TEWA" if rec is None else f"status {rec.status.name}"
            pending = ", ".join(str(o.order_id) for o in self.pending_approval()) or "none"
            raise MccError(
                f"order {order_id} is not awaiting approval ({now}); awaiting: {pending}"
            )
        return rec

    # -- the durable record ------------------------------------------------------------------
    def snapshot(self) -> dict[str, object]:
        """What a restarted TEWA needs so as not to re-issue: the orders it holds, the tracks
        left alone, the next order id (plain JSON types)."""
        return {
            "next_order_id": self._next_id,
            "orders": [
                {
                    **dataclasses.asdict(rec.order),
                    "status": int(rec.status.value),
                    "due_ns": rec.due_ns,
                }
                for rec in self._orders.values()
                if rec.held
            ],
            "killed_ns": [[t, k] for t, k in self._killed_ns.items()],
            "rejected_ns": [[t, k] for t, k in self._rejected_ns.items()],
        }

    def restore(self, doc: Mapping[str, object]) -> list[_OrderRecord]:
        """Take a `snapshot` back (the orders it holds stay held); the restored records.
        ``MccError`` (nothing changed) when the document does not fit."""
        try:
            next_id = _u32(doc["next_order_id"])
            records = []
            for o in _items(doc["orders"], 100_000):
                if not isinstance(o, dict):
                    raise ValueError("an order is not an object")
                status = OrderStatus(_u63(o["status"]))
                if status not in _HELD:
                    raise ValueError(f"order status {status.name} is not held")
                if not isinstance(o["weapon_id"], str) or len(o["weapon_id"]) > 256:
                    raise ValueError("weapon_id is not a short string")
                pk, tof = float(o["pk"]), float(o["time_of_flight_s"])
                if not (0.0 <= pk <= 1.0 and np.isfinite(tof)):
                    raise ValueError(f"pk {pk} or flyout {tof} out of range")
                order = Order(
                    order_id=_u32(o["order_id"]),
                    weapon_id=o["weapon_id"],
                    track_id=_u32(o["track_id"]),
                    pk=pk,
                    rounds=_u32(o["rounds"]),
                    issue_ns=_u63(o["issue_ns"]),
                    origin_ns=_u63(o["origin_ns"]),
                    time_of_flight_s=tof,
                )
                records.append(_OrderRecord(order, status, _u63(o["due_ns"])))
            killed = {_u32(t): _u63(k) for t, k in _items(doc["killed_ns"], 100_000)}
            rejected = {_u32(t): _u63(k) for t, k in _items(doc["rejected_ns"], 100_000)}
        except (KeyError, TypeError, ValueError) as exc:
            raise MccError(f"tewa record: {type(exc).__name__}: {exc}") from None
        for rec in records:
            self._orders[rec.order.order_id] = rec
        self._killed_ns.update(killed)
        self._rejected_ns.update(rejected)
        # Past every id it used: the clock-based first id of a restart may be behind it.
        if (next_id - self._next_id) % 2**32 < 2**31:
            self._next_id = next_id or 1
        return records

    def _new_order_id(self) -> int:
        order_id = self._next_id
        self._next_id = (self._next_id + 1) % 2**32 or 1
        return order_id

    def active_orders(self) -> list[Order]:
        """Orders issued and not yet answered (or given up)."""
        return [r.order for r in self._orders.values() if r.active]

    def order_status(self, order_id: int) -> OrderStatus | None:
        rec = self._orders.get(order_id)
        return rec.status if rec is not None else None

    @property
    def next_order_id(self) -> int:
        return self._next_id

    @property
    def current_policy(self) -> str:
        return self._choice

    def statistics(self) -> TewaStatistics:
        c = self._counts
        in_flight = sum(r.active for r in self._orders.values())
        awaiting = sum(r.status == OrderStatus.ORDER_PROPOSED for r in self._orders.values())
        return TewaStatistics(
            cycles=c.cycles,
            issued=c.issued,
            in_flight=in_flight,
            kills=c.kills,
            misses=c.misses,
            aborted=c.aborted,
            expired=c.expired,
            comparisons=c.comparisons,
            proposed=c.proposed,
            awaiting_approval=awaiting,
            rejected=c.rejected,
            withdrawn=c.withdrawn,
        )


def _u63(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63:
        raise ValueError(f"{str(value)[:40]!r} is not a count or a time")
    return value


def _u32(value: object) -> int:
    number = _u63(value)
    if number >= 2**32:
        raise ValueError(f"{number} is over 32 bits")
    return number


def _items(value: object, limit: int) -> list[Any]:
    if not isinstance(value, list) or len(value) > limit:
        raise ValueError(f"not a list of at most {limit}")
    return value


def _target_class(value: int) -> TargetClass:
    try:
        return TargetClass(value)
    except ValueError:
        return TargetClass.CLASS_UNKNOWN


# -- the app -------------------------------------------------------------------------------


def tewa(ctx: AppContext) -> int:
    """Run TEWA until stopped: ``AirPicture`` and ``WeaponStatus`` in, ``Threat`` and
    ``EngagementOrder`` out; outcomes (``EngagementOrder`` answers) in.

    Args (``ctx.args``): ``--scenario FILE`` (the defended assets; default
    ``scenarios/sam-toc.yaml``), ``--weapons FILE`` (weapon specs and Pk model; default
    ``scenarios/weapons-sam-toc.yaml``), ``--asset-radius-m`` (1000: "impact" = inside it),
    ``--policy auto|hungarian|greedy`` (auto), ``--max-weapons-per-target`` (2), ``--salvo``
    (1), ``--min-score`` (0.1), ``--compare-period-s`` (1), ``--mc-trials`` (2000),
    ``--order-timeout-s`` (3), ``--kill-assess-s`` (3), ``--weapon-timeout-s`` (3), ``--seed``,
    ``--approval`` (propose orders, issue them when a ``Command`` approves them),
    ``--approval-timeout-s`` (30) and ``--state FILE`` (its durable record; default
    ``RUN_DIR/state/SYSTEM-INDEX.json``).
    """
    opts = _parser().parse_args(ctx.args)
    try:
        scenario = load_scenario(opts.scenario)
        weapons = load_weapons(opts.weapons)
        engine = TewaEngine(
            Assets.from_scenario(scenario, radius_m=opts.asset_radius_m),
            weapons=weapons.by_id(),
            pk_model=weapons.pk_model,
            policy=opts.policy,
            max_weapons_per_target=opts.max_weapons_per_target,
            salvo=opts.salvo,
            min_score=opts.min_score,
            compare_period_s=opts.compare_period_s,
            mc_trials=opts.mc_trials,
            order_timeout_s=opts.order_timeout_s,
            kill_assess_s=opts.kill_assess_s,
            weapon_timeout_s=opts.weapon_timeout_s,
            seed=opts.seed,
            # Unique across restarts in practice: a restarted TEWA starts past its old ids.
            first_order_id=(time.time_ns() // 1_000_000) % 2**31 + 1,
            approval=opts.approval,
            approval_timeout_s=opts.approval_timeout_s,
        )
    except MccError as exc:
        print(f"mcc: error: {exc}", file=sys.stderr)
        return 2
    if not scenario.assets:
        ctx.log.warning("scenario %s has no assets: nothing to defend, no threat", scenario.id)
    ctx.log.info(
        "tewa: %d assets of %s, %d known weapons, policy %s, salvo %d%s",
        len(scenario.assets),
        scenario.id,
        len(weapons.weapons),
        opts.policy,
        opts.salvo,
        f", orders await approval (partition {APPROVAL_PARTITION!r})" if opts.approval else "",
    )
    ident = ctx.identity
    record = open_state(
        opts.state, run_dir=ctx.run_dir, system=ident.system, index=ident.index, kind="tewa"
    )
    _TewaApp(ctx, engine, record).run()
    return 0


class _TewaApp:
    """The bus side of a `TewaEngine`."""

    def __init__(self, ctx: AppContext, engine: TewaEngine, record: StateFile) -> None:
        self.ctx = ctx
        self.engine = engine
        self.record = record
        bus = ctx.bus
        self.pictures = bus.reader("AirPicture")
        self.statuses = bus.reader("WeaponStatus")
        self.answers = bus.reader("EngagementOutcome")
        self.threat_writer = bus.writer("Threat")
        self.order_writer = bus.writer("EngagementOrder")
        self.waitset = WaitSet(bus.participant)
        for reader in (self.pictures, self.statuses, self.answers):
            self.waitset.attach(reader.condition)
        # The engine is shared with the approval replier's thread.
        self._lock = threading.Lock()
        self._replier: Replier[Command, CommandReply] | None = None
        if engine.approval:
            self._replier = Replier[Command, CommandReply](
                bus,
                self._on_command,
                replier_id=f"tewa:{ctx.identity.id}",
                channel=APPROVAL_CHANNEL,
            )

    def run(self) -> None:
        self._restore()
        if self._replier is not None:
            self._replier.start()
        try:
            self._run()
        finally:
            if self._replier is not None:
                self._replier.stop()

    def _restore(self) -> None:
        doc = self.record.load()
        if doc is None:
            return
        try:
            records = self.engine.restore(doc)
        except MccError as exc:
            self.record.reject(str(exc))
            return
        self.ctx.log.warning(
            "tewa restored from %s: %d orders held (%s); next order id %d",
            self.record.path,
            len(records),
            ", ".join(
                f"{r.order.order_id} {r.status.name} {r.order.weapon_id}->{r.order.track_id}"
                for r in records[:10]
            )
            or "none",
            self.engine.next_order_id,
        )
        # Same ids again, for a launcher (or console) that missed them: never fired twice.
        for rec in records:
            if rec.status in (OrderStatus.ORDER_ISSUED, OrderStatus.ORDER_PROPOSED):
                self.order_writer.write(rec.order.to_msg(rec.status))

    def _save(self) -> None:
        """The durable record, before anything it covers is published."""
        self.record.save(self.engine.snapshot())

    def _run(self) -> None:
        while not self.ctx.stopping:
            # Capped so that a stop (a Python signal handler) is seen within 0.1 s.
            self.waitset.wait(duration(seconds=0.1))
            with self._lock:
                self._process()

    def _process(self) -> None:
        """Take what arrived; run a cycle on the newest picture."""
        engine, hb = self.engine, self.ctx.heartbeat
        now_ns = time.time_ns()
        for status in self.statuses.take(256):
            hb.count_in()
            engine.update_weapon(status, now_ns)
        for answer in self.answers.take(1024):
            new = engine.on_order(answer, now_ns)
            if new is not None:
                hb.count_in()
                if new != OrderStatus.ORDER_IN_FLIGHT:
                    self.ctx.log.info(
                        "order %d (weapon %s, track %d): %s",
                        answer.order_id,
                        answer.weapon_id,
                        answer.track_id,
                        new.name,
                    )
        newest: AirPicture | None = None
        for picture in self.pictures.take(64):
            hb.count_in()
            if newest is None or picture.time_ns >= newest.time_ns:
                newest = picture  # older pictures are superseded: skip them
        if newest is not None:
            self._cycle(newest)
        self._save()  # outcomes settled orders (nothing is written when nothing changed)

    def _cycle(self, msg: AirPicture) -> None:
        result = self.engine.step(Picture.from_msg(msg), time.time_ns())
        if result.orders or result.withdrawn:
            self._save()  # on disk before they are published
        hb = self.ctx.heartbeat
        status = OrderStatus.ORDER_PROPOSED if self.engine.approval else OrderStatus.ORDER_ISSUED
        # Orders first: they are the hot path.
        for order in result.orders:
            self.order_writer.write(order.to_msg(status))
            hb.count_out()
        for order in result.withdrawn:
            self.order_writer.write(order.to_msg(OrderStatus.ORDER_ABORTED))
        for threat in result.threats.to_msgs(self.engine.assets.ids):
            self.threat_writer.write(threat)
            hb.count_out()
        for track_id in result.dropped:
            self.threat_writer.dispose(Threat(track_id=track_id))
        if msg.origin_ns:
            hb.record_latency_ns(time.time_ns() - msg.origin_ns)
        for order in result.orders:
            self.ctx.log.info(
                "order %d%s: %s -> track %d, pk %.2f, %d round(s), flyout %.1f s (%s)",
                order.order_id,
                " proposed" if self.engine.approval else "",
                order.weapon_id,
                order.track_id,
                order.pk,
                order.rounds,
                order.time_of_flight_s,
                result.policy,
            )
        if result.comparison is not None:
            hb.message = result.comparison.summary()[:200]
            self.ctx.log.info("%s", result.comparison.summary())

    def _on_command(self, command: Command) -> CommandReply:
        """An operator's decision on a proposal (on the replier's thread)."""
        mission = self.ctx.identity.mission
        if command.mission and command.mission != mission:
            raise MccError(f"this TEWA serves mission {mission!r}, not {command.mission!r}")
        verb = command.verb
        if verb == "pending":
            with self._lock:
                pending = [o.order_id for o in self.engine.pending_approval()]
            return CommandReply(ok=True, message="pending", result_json=json.dumps(pending))
        if verb not in ("approve", "reject"):
            raise MccError(
                f"unknown verb {verb!r}: TEWA answers approve, reject and pending on partition "
                f"{APPROVAL_PARTITION!r}"
            )
        try:
            order_id = int(command.target)
        except ValueError:
            raise MccError(
                f"target {command.target!r}: expected the order id to {verb} (a number)"
            ) from None
        with self._lock:
            now_ns = time.time_ns()
            if verb == "approve":
                order, status = self.engine.approve(order_id, now_ns), OrderStatus.ORDER_ISSUED
            else:
                order, status = self.engine.reject(order_id, now_ns), OrderStatus.ORDER_ABORTED
            self._save()
            self.order_writer.write(order.to_msg(status))
            self.ctx.heartbeat.count_out()
        assert self._replier is not None  # it called us
        self.ctx.log.info(  # who decided: the sender's identity, then what it says of its user
            "order %d: %s by %s (client %s) (weapon %s, track %d)",
            order_id,
            "approved" if verb == "approve" else "rejected",
            self._replier.sender(command),
            command.client_id,
            order.weapon_id,
            order.track_id,
        )
        result = {"order_id": order_id, "status": status.name, "weapon_id": order.weapon_id}
        return CommandReply(ok=True, message=f"{verb} {order_id}", result_json=json.dumps(result))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mcc.apps.tewa:tewa", description="threat evaluation and weapon assignment"
    )
    p.add_argument("--scenario", default=DEFAULT_SCENARIO, help="scenario YAML (the assets)")
    p.add_argument("--weapons", default=DEFAULT_WEAPONS, help="weapons YAML (specs, Pk model)")
    p.add_argument("--asset-radius-m", type=positive_float, default=1000.0)
    p.add_argument("--policy", choices=POLICIES, default="auto")
    p.add_argument("--max-weapons-per-target", type=_count, default=2)
    p.add_argument("--salvo", type=_count, default=1, help="rounds per engagement")
    p.add_argument("--min-score", type=float, default=0.1, help="threats below are not engaged")
    p.add_argument("--compare-period-s", type=positive_float, default=1.0)
    p.add_argument("--mc-trials", type=_count, default=2000)
    p.add_argument("--order-timeout-s", type=positive_float, default=3.0)
    p.add_argument("--kill-assess-s", type=positive_float, default=3.0)
    p.add_argument("--weapon-timeout-s", type=positive_float, default=3.0)
    p.add_argument("--seed", type=int, default=0, help="Monte Carlo seed")
    p.add_argument(
        "--approval",
        action="store_true",
        help="propose orders; issue each when a Command approves it (partition 'approval')",
    )
    p.add_argument("--approval-timeout-s", type=positive_float, default=30.0)
    p.add_argument("--state", default=None, help="durable record (default: run folder)")
    return p


def _count(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return value
