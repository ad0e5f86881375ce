"""The TEWA engine: threat evaluation, weapon assignment, the plan comparison and the
shoot-look-shoot bookkeeping on explicit times (Unix ns) and plain arrays, with no DDS
(`mcc.apps.tewa` is its bus side and describes the cycle).

Friends are never engaged: a track whose identity is ``FRIEND`` or ``ASSUMED_FRIEND``
(`FRIENDLY`) is kept out of the assignment (counted: ``friend_vetoes``), and every order is
checked once more against the newest identity of its track just before it goes out
(`TewaEngine.release`; stopped ones counted: ``friend_orders_stopped``).
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from mcc.apps.launcher import PkModel, WeaponSpec, intercept_time_s
from mcc.apps.tewa_model import (
    DONE,
    F64,
    FRIENDLY,
    HELD,
    I64,
    IDENTITY_WEIGHT,
    POLICIES,
    RANK_TIER,
    THREATS,
    Assets,
    Order,
    OrderRecord,
    Picture,
    PlanEvaluation,
    Policy,
    TewaResult,
    TewaStatistics,
    ThreatReport,
    WeaponSeen,
    log,
)
from mcc.compute.montecarlo import EngagementPlan, MonteCarloResult, compare_plans, simulate_raid
from mcc.compute.threat import evaluate_threats
from mcc.compute.wta import WTAResult, wta_greedy, wta_hungarian
from mcc.errors import MccError
from mcc.types import EngagementOrder, Identity, OrderStatus, TargetClass, WeaponState, WeaponStatus

__all__ = ["TewaEngine"]


#: Order records kept: every one that holds a weapon or track, and the newest finished ones.
MAX_ORDERS_KEPT = 1024


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
        min_sensors: a track is engaged only when at least this many radar identities see it
            (``seen_by`` of `step`); with ``approval`` an uncorroborated track is still
            proposed, since an operator decides. 1: any track.
        min_flyout_fraction: a kill or miss reported before this fraction of the order's
            planned flyout is not believed (0, the default here: any time; the app's is 0.5).
        friend_clearance_m: a track this close to a friendly track (``FRIEND`` or
            ``ASSUMED_FRIEND``) is not engaged while it is (counted: ``friend_clearance``): an
            interceptor's seeker must not have the choice, and a track that close to a friend
            may be the friend itself (the wingman of a pair whose new track has not answered
            IFF yet). 0: no clearance (the default here; the app's is 1500 m).
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
    min_sensors: int = 1
    min_flyout_fraction: float = 0.0
    friend_clearance_m: float = 0.0

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise MccError(f"policy={self.policy!r}: expected one of {', '.join(POLICIES)}")
        if min(self.max_weapons_per_target, self.salvo, self.mc_trials, self.min_sensors) < 1:
            raise MccError("max_weapons_per_target, salvo, mc_trials and min_sensors must be >= 1")
        if not self.approval_timeout_s > 0:
            raise MccError(f"approval_timeout_s={self.approval_timeout_s!r}: must be > 0 seconds")
        self._rng = np.random.default_rng(self.seed)
        self._seen_by: dict[int, int] | None = None
        self._weapons: dict[str, WeaponSeen] = {}
        self._orders: dict[int, OrderRecord] = {}
        self._killed_ns: dict[int, int] = {}
        self._rejected_ns: dict[int, int] = {}  # track id -> when its proposal was rejected
        self._reported: set[int] = set()
        self._identity: dict[int, int] = {}  # track id -> Identity value, newest picture
        self._next_id = self.first_order_id % 2**32 or 1
        self._choice: str = "hungarian" if self.policy == "auto" else self.policy
        self._last_compare_ns: int | None = None
        self._counts: Counter[str] = Counter()
        self.last_comparison: PlanEvaluation | None = None

    # -- inputs ----------------------------------------------------------------------------
    def update_weapon(self, status: WeaponStatus, now_ns: int) -> None:
        """The latest ``WeaponStatus`` of a weapon, received at ``now_ns``."""
        self._weapons[status.weapon_id] = WeaponSeen(status, now_ns)

    def order_weapon(self, order_id: int) -> str | None:
        """The weapon our order ``order_id`` went to; None when it is not ours."""
        rec = self._orders.get(order_id)
        return None if rec is None else rec.order.weapon_id

    def on_order(self, order: EngagementOrder, now_ns: int) -> OrderStatus | None:
        """An ``EngagementOrder`` sample from the bus; the new status of one of our orders, or
        None when the sample changes nothing (not ours, our own ``ORDER_ISSUED``, a repeat)."""
        rec = self._orders.get(order.order_id)
        status = OrderStatus(order.status)
        if rec is None or status == rec.status or rec.status in DONE:
            return None
        if status == OrderStatus.ORDER_IN_FLIGHT and rec.status == OrderStatus.ORDER_ISSUED:
            rec.status = status
            return status
        if status not in DONE:
            return None
        if status in (OrderStatus.ORDER_KILL, OrderStatus.ORDER_MISS) and self._too_early(
            rec.order, now_ns
        ):
            return None
        rec.status = status  # an answer to an order given up still counts
        if status == OrderStatus.ORDER_KILL:
            self._counts["kills"] += 1
            self._killed_ns[rec.order.track_id] = now_ns
        elif status == OrderStatus.ORDER_MISS:
            self._counts["misses"] += 1
        else:
            self._counts["aborted"] += 1
        return status

    # -- one cycle -------------------------------------------------------------------------
    def step(
        self, picture: Picture, now_ns: int, seen_by: npt.NDArray[np.int64] | None = None
    ) -> TewaResult:
        """Evaluate ``picture`` at ``now_ns``, assign the free weapons, issue orders.
        ``seen_by``: per track of the picture, how many radars corroborate it (None: not
        known, every track counts as corroborated)."""
        self._counts["cycles"] += 1
        self._seen_by = (
            None
            if seen_by is None
            else dict(zip(picture.track_id.tolist(), seen_by.tolist(), strict=True))
        )
        self._identity = dict(
            zip(picture.track_id.tolist(), picture.identity.tolist(), strict=True)  # type: ignore[union-attr]
        )
        withdrawn = self._expire(now_ns)
        threats, pos, vel = self._evaluate(picture, now_ns)
        if seen_by is not None:  # the witnesses of each threat, for its Threat sample
            keep = np.isin(picture.status, THREATS)
            threats = dataclasses.replace(threats, witnesses=seen_by[keep].astype(np.int64))
        current = {int(t) for t in threats.track_id}
        dropped = tuple(sorted(self._reported - current))
        self._reported = current
        orders, comparison, policy = self._assign(threats, pos, vel, picture.origin_ns, now_ns)
        self._forget_finished()
        return TewaResult(threats, orders, comparison, dropped, policy, withdrawn)

    def _forget_finished(self) -> None:
        """Past ``MAX_ORDERS_KEPT`` records, forget the oldest that hold nothing (answered, or
        given up): under raids that never stop every order stayed, and each cycle went over all
        of them. A late answer to one forgotten is not counted."""
        excess = len(self._orders) - MAX_ORDERS_KEPT
        if excess <= 0:
            return
        for order_id in [i for i, rec in self._orders.items() if not rec.held][:excess]:
            del self._orders[order_id]

    def evaluate(self, picture: Picture, now_ns: int | None = None) -> ThreatReport:
        """The threat evaluation of ``picture`` (tracks moved to ``now_ns``), nothing else."""
        return self._evaluate(picture, picture.time_ns if now_ns is None else now_ns)[0]

    def _evaluate(self, picture: Picture, now_ns: int) -> tuple[ThreatReport, F64, F64]:
        keep = np.isin(picture.status, THREATS)
        state = picture.state[keep]
        dt_s = max(now_ns - picture.time_ns, 0) * 1e-9
        vel = state[:, 3:6]
        pos = state[:, 0:3] + vel * dt_s
        cls = picture.classification[keep]
        identity = picture.identity[keep]  # type: ignore[index]
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
        # Identity first (hostile > suspect > unknown > pending > neutral > friends), then
        # the kinematic rank: rank 1 is the most threatening.
        order = np.lexsort((a.rank, -RANK_TIER[identity]))
        rank = np.empty_like(a.rank)
        rank[order] = np.arange(1, order.size + 1)
        report = ThreatReport(
            time_ns=picture.time_ns,
            origin_ns=picture.origin_ns,
            track_id=picture.track_id[keep].astype(np.int64),
            classification=cls,
            asset_idx=a.asset_idx,
            score=a.score,
            rank=rank,
            time_to_impact_s=tti,
            cpa_m=cpa,
            time_to_cpa_s=tcpa,
            speed_mps=a.speed_mps,
            course_rad=np.mod(np.arctan2(vel[:, 0], vel[:, 1]), 2 * np.pi),
            off_axis_rad=np.arccos(np.clip(hcos, -1.0, 1.0)),
            identity=identity,
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
        wanted = free & (threats.score >= self.min_score)
        identity = threats.identity_values()
        friend = np.isin(identity, FRIENDLY)  # the hard rule: never a friend
        self._veto(threats.track_id[wanted & friend], identity[wanted & friend])
        candidates = wanted & ~friend
        if self.friend_clearance_m > 0 and friend.any() and candidates.any():
            to_friend = np.linalg.norm(pos[candidates][:, None, :] - pos[friend][None], axis=2)
            close = np.zeros_like(candidates)
            close[candidates] = to_friend.min(axis=1) <= self.friend_clearance_m
            self._near_friend(threats.track_id[close])
            candidates &= ~close
        if self.min_sensors > 1 and self._seen_by is not None and not self.approval:
            seen = self._seen_by
            lone = np.array(
                [seen.get(int(t), 0) < self.min_sensors for t in threats.track_id], dtype=bool
            )  # typed: a picture without threats made a float array, and TEWA crashed
            self._uncorroborated(threats.track_id[candidates & lone])
            candidates &= ~lone
        idx = np.flatnonzero(candidates)
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
        value = threats.score[idx] * IDENTITY_WEIGHT[identity[idx]]
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
                record = OrderRecord(order, OrderStatus.ORDER_PROPOSED, due_ns)
                self._counts["proposed"] += 1
            else:
                due_ns = now_ns + int((order.time_of_flight_s + self.order_timeout_s) * 1e9)
                record = OrderRecord(order, OrderStatus.ORDER_ISSUED, due_ns)
                self._counts["issued"] += 1
            self._orders[order.order_id] = record
            orders.append(order)
        return tuple(orders), comparison, self._choice

    def _too_early(self, order: Order, now_ns: int) -> bool:
        """A kill or miss before ``min_flyout_fraction`` of the order's planned flyout: no
        interceptor got there, so it is not believed (counted, the first logged)."""
        earliest_ns = order.issue_ns + int(self.min_flyout_fraction * order.time_of_flight_s * 1e9)
        if now_ns >= earliest_ns:
            return False
        if not self._counts["implausible_outcomes"]:
            log.warning(
                "order %d: an outcome %.2f s after the order, flyout %.1f s: not believed; "
                "further ones are counted (implausible_outcomes)",
                order.order_id,
                (now_ns - order.issue_ns) / 1e9,
                order.time_of_flight_s,
            )
        self._counts["implausible_outcomes"] += 1
        return True

    def _hold(self, count: str, track_ids: I64, why: str) -> None:
        """Count the threats held back for ``count`` (per track and cycle); log the first,
        ``why`` being what is said of its track."""
        if not track_ids.size:
            return
        if not self._counts[count]:
            log.warning(
                "track %d %s; further ones are counted (%s, per track and cycle)",
                int(track_ids[0]),
                why,
                count,
            )
        self._counts[count] += int(track_ids.size)

    def _uncorroborated(self, track_ids: I64) -> None:
        """Threats held back for want of a second radar."""
        self._hold(
            "uncorroborated",
            track_ids,
            f"is seen by fewer than {self.min_sensors} radars: not engaged without an "
            "operator's approval",
        )

    def _near_friend(self, track_ids: I64) -> None:
        """Threats held back within the friend clearance."""
        self._hold(
            "friend_clearance",
            track_ids,
            f"is within {self.friend_clearance_m:g} m of a friend: not engaged while it is",
        )

    def _veto(self, track_ids: I64, identity: Any) -> None:
        """Friends kept out of the assignment."""
        if track_ids.size:
            name = Identity(int(identity[0])).name
            self._hold("friend_vetoes", track_ids, f"is {name}: a friend is never engaged")

    def is_friend(self, track_id: int) -> bool:
        """The newest picture's identity of ``track_id`` is ``FRIEND`` or ``ASSUMED_FRIEND``."""
        return self._identity.get(int(track_id), 0) in FRIENDLY

    def release(self, order: Order) -> bool:
        """The last check before ``order`` goes out: False (the order is aborted and counted
        in ``friend_orders_stopped``) when its track is now a friend."""
        if not self.is_friend(order.track_id):
            return True
        rec = self._orders.get(order.order_id)
        if rec is not None:
            rec.status = OrderStatus.ORDER_ABORTED
        self._counts["friend_orders_stopped"] += 1
        log.warning(
            "order %d (weapon %s): track %d is a friend now; stopped, never sent",
            order.order_id,
            order.weapon_id,
            order.track_id,
        )
        return False

    def _ready_weapons(self, now_ns: int) -> list[WeaponSeen]:
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
        self._counts["comparisons"] += 1
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
                self._counts["withdrawn"] += 1
                withdrawn.append(rec.order)
            elif rec.active and now_ns > rec.due_ns:
                log.warning(
                    "order %d (weapon %s, track %d): no outcome; given up",
                    rec.order.order_id,
                    rec.order.weapon_id,
                    rec.order.track_id,
                )
                rec.given_up = True
                self._counts["expired"] += 1
        return tuple(withdrawn)

    # -- approval --------------------------------------------------------------------------
    def approve(self, order_id: int, now_ns: int) -> Order:
        """Issue the proposed order ``order_id`` now; the order to publish ``ORDER_ISSUED``.
        ``MccError`` (the proposal is aborted) when its track has become a friend since."""
        rec = self._proposal(order_id)
        if not self.release(rec.order):
            raise MccError(
                f"order {order_id}: track {rec.order.track_id} is identified as a friend now; "
                "the proposal is aborted"
            )
        order = dataclasses.replace(rec.order, issue_ns=now_ns)
        rec.order = order
        rec.status = OrderStatus.ORDER_ISSUED
        rec.due_ns = now_ns + int((order.time_of_flight_s + self.order_timeout_s) * 1e9)
        self._counts["issued"] += 1
        return order

    def reject(self, order_id: int, now_ns: int) -> Order:
        """Drop the proposed order ``order_id`` (publish it ``ORDER_ABORTED``); its track is not
        proposed again for ``kill_assess_s``."""
        rec = self._proposal(order_id)
        rec.status = OrderStatus.ORDER_ABORTED
        self._rejected_ns[rec.order.track_id] = now_ns
        self._counts["rejected"] += 1
        return rec.order

    def pending_approval(self) -> list[Order]:
        """Proposed orders awaiting a decision, oldest first."""
        return [r.order for r in self._orders.values() if r.status == OrderStatus.ORDER_PROPOSED]

    def _proposal(self, order_id: int) -> OrderRecord:
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

    def restore(self, doc: Mapping[str, object]) -> list[OrderRecord]:
        """Take a `snapshot` back (the orders it holds stay held); the restored records.
        ``MccError`` (nothing changed) when the document does not fit."""
        try:
            next_id = _u32(doc["next_order_id"])
            records = []
            for o in _items(doc["orders"], 100_000):
                if not isinstance(o, dict):
                    raise ValueError("an order is not an object")
                status = OrderStatus(_u63(o["status"]))
                if status not in HELD:
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
                records.append(OrderRecord(order, status, _u63(o["due_ns"])))
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

    def order(self, order_id: int) -> Order | None:
        """The order ``order_id`` this TEWA holds (any status), or None."""
        rec = self._orders.get(order_id)
        return rec.order if rec is not None else None

    def holds(self, order_id: int) -> bool:
        """Whether order ``order_id`` still holds a weapon or a threat (proposed, issued, in
        flight): its ``EngagementOrder`` instance stays registered while it does."""
        rec = self._orders.get(order_id)
        return rec is not None and rec.held

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
        in_flight = sum(r.active for r in self._orders.values())
        awaiting = sum(r.status == OrderStatus.ORDER_PROPOSED for r in self._orders.values())
        return TewaStatistics(**self._counts, in_flight=in_flight, awaiting_approval=awaiting)


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
