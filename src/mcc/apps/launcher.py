"""The ``launcher`` app (one instance per weapon) and the weapon models shared with ``tewa``.

A launcher publishes its ``WeaponStatus`` (every ``--status-period-s`` and on every change) and
obeys the ``EngagementOrder`` samples addressed to its ``weapon_id`` (status ``ORDER_ISSUED``):

1. it takes the order's track from its latest ``Track`` sample, extrapolated to now;
2. it flies an interceptor to the predicted intercept point: straight line, constant speed, time
   of flight ``t`` the first root of ``|p + v t - w| = s t`` (target at ``p`` with velocity
   ``v``, weapon at ``w``, interceptor speed ``s``); an order it cannot fly (not ready, no
   rounds, no intercept inside the range band, unknown or deleted track) is answered at once
   with ``ORDER_ABORTED``;
3. it answers on ``EngagementOutcome`` (TEWA alone may write ``EngagementOrder``):
   ``ORDER_IN_FLIGHT`` at launch and, at intercept time, draws the outcome with its
   seeded RNG: each of the order's rounds kills with the single-shot pk of the `PkModel` at the
   intercept range; ``ORDER_KILL`` if one does, ``ORDER_MISS`` otherwise. The outcome keeps the
   order's ``order_id``, ``track_id``, ``issue_ns`` and ``origin_ns``; ``pk`` is the launcher's
   own single-shot pk. The ``truth`` app kills the target nearest the track of an
   ``ORDER_KILL`` (``mcc.apps.radar``);
4. it reloads: ``WEAPON_RELOADING`` for ``reload_s`` after each engagement, or for
   ``magazine_reload_s`` (then full again) after its last round; without a magazine reload an
   empty launcher goes ``WEAPON_OFFLINE``.

One engagement at a time per launcher (one fire-control channel): ``WEAPON_ENGAGING`` from launch
to intercept. On SIGTERM it aborts the engagement in flight (``ORDER_ABORTED``, so TEWA
re-engages the track) and publishes ``WEAPON_OFFLINE``.

**Never twice for one order, across restarts too.** The launcher keeps a durable record
(`mcc.apps.statefile`: ``RUN_DIR/state/SYSTEM-INDEX.json``, written atomically) of every order
it answered (the newest ``MAX_ANSWERED``) and of its weapon: rounds, state, the engagement in
flight. The record is on disk **before** the answer is published, so an order is fired at most
once even if the process dies between the two. A launcher restarted under the same identity
(``kill -9``, then the supervisor's restart) reads it back: an order it already answered is
never flown again (the orders TEWA's writer keeps are replayed to the new reader), its magazine
is as it was, and the engagement that was in flight is still flown: its outcome is drawn at
the intercept time (at once when that passed while it was down). A record that cannot be read
is counted, logged once, set aside, and the launcher starts full (`mcc.apps.statefile`).

Weapons come from a YAML file (the scenario schema has none), ``scenarios/weapons-sam-toc.yaml``
by default, whose header documents the schema (`load_weapons`). The engagement logic is the
`Launcher` class, which needs no DDS.

    MCC_CONFIG='{"weapons": "scenarios/weapons-sam-toc.yaml", "weapon": "sam-1"}' \\
        python -m mcc.orchestrate.runtime mcc.apps.launcher:launcher

Pk model (`PkModel`): ``pk = base_pk × range_factor(r) × class_factor(class)`` with ``r`` the
range from the weapon to the intercept point; ``range_factor`` is 0 outside
``[min_range_m, max_range_m]``, 1 up to ``optimal_range_fraction × max_range_m`` and falls
linearly to ``edge_factor`` at ``max_range_m`` (the interceptor arrives slower and with less
energy to manoeuvre); ``class_factor`` is a table over ``TargetClass`` (small, low, agile or
ballistic targets are harder to kill).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from cyclonedds.core import WaitSet
from cyclonedds.util import duration
from pydantic import Field

from mcc.apps.launcher_weapons import (
    DEFAULT_CLASS_FACTORS,
    DEFAULT_WEAPONS,
    PkModel,
    Weapons,
    WeaponsFile,
    WeaponSpec,
    intercept_time_s,
    load_weapons,
    parse_weapons,
)
from mcc.apps.statefile import open_state
from mcc.bus import Linger
from mcc.errors import MccError
from mcc.orchestrate.appconfig import AppConfig, Positive, app_config
from mcc.orchestrate.appspec import app
from mcc.orchestrate.runtime import AppContext
from mcc.security.mission import Topics
from mcc.types import (
    EngagementOrder,
    OrderStatus,
    TargetClass,
    Track,
    TrackStatus,
    WeaponState,
    WeaponStatus,
)

__all__ = [
    "DEFAULT_CLASS_FACTORS",
    "DEFAULT_WEAPONS",
    "Intercept",
    "Launcher",
    "PkModel",
    "Reply",
    "WeaponSpec",
    "Weapons",
    "intercept_time_s",
    "launcher",
    "load_weapons",
    "parse_weapons",
]

#: Orders whose answer the launcher's record keeps (the newest): older ones are past
#: ``--max-order-age-s`` long before, so they are refused by age anyway.
MAX_ANSWERED = 4096
#: Tracks the launcher keeps (the newest sample of each; a deleted track goes), order ids it
#: remembers having taken (the oldest are forgotten: they are past the order age by then).
MAX_TRACKS = 10_000
MAX_SEEN = 16_384
#: How long an answer's ``EngagementOutcome`` instance stays registered after its last write
#: (the engagement in flight stays as long as it flies): long past the order age and a
#: restarted reader's return, short enough that a raid that never stops holds a few dozen.
OUTCOME_LINGER_S = 60.0


# -- the launcher (no DDS) -----------------------------------------------------------------


@dataclass(frozen=True)
class Intercept:
    """A planned intercept: time of flight, where, how far from the weapon, single-shot pk."""

    time_of_flight_s: float
    point_m: tuple[float, float, float]
    range_m: float
    pk: float


@dataclass(frozen=True)
class Reply:
    """What a launcher answers to an order: the sample to publish and, for an abort, why."""

    order: EngagementOrder
    reason: str = ""


@dataclass(frozen=True)
class _Engagement:
    order: EngagementOrder
    rounds: int
    pk: float
    launch_ns: int
    intercept_ns: int


class Launcher:
    """One launcher's engagement logic on explicit times (Unix ns), without DDS.

    States: ``WEAPON_READY`` → (an order) ``WEAPON_ENGAGING`` → (intercept) ``WEAPON_RELOADING``
    → ``WEAPON_READY``; empty with no magazine reload → ``WEAPON_OFFLINE``; `shutdown` →
    ``WEAPON_OFFLINE``. Kills are drawn from ``rng`` (a Generator or a seed).
    """

    def __init__(
        self,
        spec: WeaponSpec,
        *,
        pk_model: PkModel | None = None,
        rng: np.random.Generator | int | None = None,
        now_ns: int = 0,
    ) -> None:
        self.spec = spec
        self.pk_model = pk_model or PkModel()
        self.rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        self.state = WeaponState.WEAPON_READY
        self.rounds_ready = spec.rounds
        self.updated_ns = now_ns
        self.engagement: _Engagement | None = None
        self._ready_at_ns: int | None = None
        self._refill = False

    # -- queries ---------------------------------------------------------------------------
    @property
    def engaged_track_id(self) -> int:
        return self.engagement.order.track_id if self.engagement is not None else 0

    def status(self) -> WeaponStatus:
        """The ``WeaponStatus`` sample of the launcher as it is now."""
        x, y, z = self.spec.position_m
        return WeaponStatus(
            weapon_id=self.spec.id,
            state=self.state,
            rounds_ready=self.rounds_ready,
            rounds_total=self.spec.rounds,
            x_m=x,
            y_m=y,
            z_m=z,
            min_range_m=self.spec.min_range_m,
            max_range_m=self.spec.max_range_m,
            engaged_track_id=self.engaged_track_id,
            update_ns=self.updated_ns,
        )

    def next_event_ns(self) -> int | None:
        """When `advance` next has something to do (an intercept, a reload done); None: idle."""
        if self.engagement is not None:
            return self.engagement.intercept_ns
        return self._ready_at_ns

    def plan_intercept(self, track: Track, now_ns: int) -> Intercept | None:
        """The intercept of ``track`` (extrapolated to ``now_ns``) if fired now; None if the
        interceptor cannot catch it."""
        age_s = (now_ns - track.update_ns) * 1e-9 if track.update_ns else 0.0
        vel = np.array([track.vx_mps, track.vy_mps, track.vz_mps])
        pos = np.array([track.x_m, track.y_m, track.z_m]) + max(age_s, 0.0) * vel
        tof = float(
            intercept_time_s(self.spec.position_m, self.spec.interceptor_speed_mps, pos, vel)[0, 0]
        )
        if not math.isfinite(tof):
            return None
        point = pos + vel * tof
        range_m = float(np.linalg.norm(point - np.asarray(self.spec.position_m)))
        pk = float(
            self.pk_model.pk(
                self.spec.base_pk,
                range_m,
                min_range_m=self.spec.min_range_m,
                max_range_m=self.spec.max_range_m,
                classification=int(TargetClass(track.classification).value),
            )
        )
        return Intercept(tof, (float(point[0]), float(point[1]), float(point[2])), range_m, pk)

    # -- transitions -----------------------------------------------------------------------
    def engage(self, order: EngagementOrder, track: Track | None, now_ns: int) -> Reply:
        """Fly ``order`` at ``track`` now: ``ORDER_IN_FLIGHT``, or ``ORDER_ABORTED`` and why.

        Call `advance` first: an intercept or a reload due by ``now_ns`` is played there.
        """
        if order.weapon_id != self.spec.id:
            return self._abort(order, f"order is for weapon {order.weapon_id!r}")
        if self.state != WeaponState.WEAPON_READY:
            return self._abort(order, f"weapon is {WeaponState(self.state).name}")
        if track is None:
            return self._abort(order, f"track {order.track_id} unknown")
        if track.status == TrackStatus.TRACK_DELETED:
            return self._abort(order, f"track {order.track_id} deleted")
        plan = self.plan_intercept(track, now_ns)
        if plan is None:
            return self._abort(order, "the interceptor cannot catch the target")
        if not self.spec.min_range_m <= plan.range_m <= self.spec.max_range_m:
            return self._abort(
                order,
                f"intercept at {plan.range_m:.0f} m is outside "
                f"{self.spec.min_range_m:.0f}..{self.spec.max_range_m:.0f} m",
            )
        rounds = min(max(int(order.rounds), 1), self.rounds_ready)
        self.rounds_ready -= rounds
        intercept_ns = now_ns + int(round(plan.time_of_flight_s * 1e9))
        self.engagement = _Engagement(order, rounds, plan.pk, now_ns, intercept_ns)
        self._set(WeaponState.WEAPON_ENGAGING, now_ns)
        return Reply(self._answer(order, OrderStatus.ORDER_IN_FLIGHT, rounds, plan.pk))

    def advance(self, now_ns: int) -> list[EngagementOrder]:
        """Play every event due by ``now_ns``; the outcomes (``ORDER_KILL``/``ORDER_MISS``)."""
        out = []
        while True:
            eng = self.engagement
            if eng is not None and now_ns >= eng.intercept_ns:
                # Each round is an independent shot at the same pk.
                killed = bool((self.rng.random(eng.rounds) < eng.pk).any())
                status = OrderStatus.ORDER_KILL if killed else OrderStatus.ORDER_MISS
                out.append(self._answer(eng.order, status, eng.rounds, eng.pk))
                self.engagement = None
                self._reload(eng.intercept_ns)
            elif self._ready_at_ns is not None and now_ns >= self._ready_at_ns:
                if self._refill:
                    self.rounds_ready = self.spec.rounds
                self._set(WeaponState.WEAPON_READY, self._ready_at_ns)
                self._ready_at_ns, self._refill = None, False
            else:
                return out

    def shutdown(self, now_ns: int) -> list[EngagementOrder]:
        """Go offline; the engagement in flight, if any, is answered ``ORDER_ABORTED``."""
        out = []
        if self.engagement is not None:
            eng = self.engagement
            out.append(self._answer(eng.order, OrderStatus.ORDER_ABORTED, eng.rounds, eng.pk))
            self.engagement = None
        self._ready_at_ns = None
        self._set(WeaponState.WEAPON_OFFLINE, now_ns)
        return out

    def _reload(self, at_ns: int) -> None:
        if self.rounds_ready > 0:
            delay_s: float | None = self.spec.reload_s
        else:
            delay_s, self._refill = self.spec.magazine_reload_s, True
        if delay_s is None:
            self._set(WeaponState.WEAPON_OFFLINE, at_ns)  # out of rounds, no reload
            return
        self._ready_at_ns = at_ns + int(round(delay_s * 1e9))
        self._set(WeaponState.WEAPON_RELOADING, at_ns)

    def _set(self, state: WeaponState, at_ns: int) -> None:
        self.state = state
        self.updated_ns = at_ns

    # -- the durable record ----------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """What a restarted launcher needs to go on: rounds, state, the engagement in flight."""
        eng = self.engagement
        return {
            "weapon_id": self.spec.id,
            "state": int(self.state.value),
            "rounds_ready": self.rounds_ready,
            "updated_ns": self.updated_ns,
            "ready_at_ns": self._ready_at_ns,
            "refill": self._refill,
            "engagement": None
            if eng is None
            else {
                "order": _order_doc(eng.order),
                "rounds": eng.rounds,
                "pk": eng.pk,
                "launch_ns": eng.launch_ns,
                "intercept_ns": eng.intercept_ns,
            },
        }

    def restore(self, doc: dict[str, Any]) -> None:
        """Take a `snapshot` back; ``MccError`` (nothing changed) when it does not fit."""
        try:
            if doc["weapon_id"] != self.spec.id:
                raise MccError(f"the record is weapon {str(doc['weapon_id'])[:40]!r}'s")
            state = WeaponState(_int(doc["state"]))
            rounds = _int(doc["rounds_ready"])
            if rounds > self.spec.rounds:
                raise MccError(f"{rounds} rounds ready, the weapon holds {self.spec.rounds}")
            ready_at = doc["ready_at_ns"]
            ready_at_ns = None if ready_at is None else _int(ready_at)
            refill = doc["refill"]
            if not isinstance(refill, bool):
                raise MccError("refill is not true or false")
            engagement = None
            if (e := doc["engagement"]) is not None:
                pk = float(e["pk"])
                if not 0.0 <= pk <= 1.0:
                    raise MccError(f"engagement pk {pk} outside [0, 1]")
                engagement = _Engagement(
                    _order_from(e["order"]),
                    _int(e["rounds"]),
                    pk,
                    _int(e["launch_ns"]),
                    _int(e["intercept_ns"]),
                )
            updated_ns = _int(doc["updated_ns"])
        except (KeyError, TypeError, ValueError) as exc:
            raise MccError(f"launcher record: {type(exc).__name__}: {exc}") from None
        self.state, self.rounds_ready, self.updated_ns = state, rounds, updated_ns
        self._ready_at_ns, self._refill, self.engagement = ready_at_ns, refill, engagement

    def _answer(
        self, order: EngagementOrder, status: OrderStatus, rounds: int, pk: float
    ) -> EngagementOrder:
        return EngagementOrder(
            order_id=order.order_id,
            weapon_id=self.spec.id,
            track_id=order.track_id,
            pk=float(pk),
            rounds=rounds,
            issue_ns=order.issue_ns,
            origin_ns=order.origin_ns,
            status=status,
        )

    def _abort(self, order: EngagementOrder, reason: str) -> Reply:
        return Reply(self._answer(order, OrderStatus.ORDER_ABORTED, 0, order.pk), reason)


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63:
        raise ValueError(f"{str(value)[:40]!r} is not a count or a time")
    return value


def _order_doc(order: EngagementOrder) -> dict[str, Any]:
    return {
        "order_id": int(order.order_id),
        "weapon_id": order.weapon_id,
        "track_id": int(order.track_id),
        "pk": float(order.pk),
        "rounds": int(order.rounds),
        "issue_ns": int(order.issue_ns),
        "origin_ns": int(order.origin_ns),
    }


def _order_from(doc: dict[str, Any]) -> EngagementOrder:
    if not isinstance(doc["weapon_id"], str):
        raise ValueError("weapon_id is not a string")
    order_id, track_id = _int(doc["order_id"]), _int(doc["track_id"])
    if order_id >= 2**32 or track_id >= 2**32:
        raise ValueError("order or track id over 32 bits")
    return EngagementOrder(
        order_id=order_id,
        weapon_id=doc["weapon_id"][:256],
        track_id=track_id,
        pk=float(doc["pk"]),
        rounds=_int(doc["rounds"]),
        issue_ns=_int(doc["issue_ns"]),
        origin_ns=_int(doc["origin_ns"]),
        status=OrderStatus.ORDER_IN_FLIGHT,
    )


# -- the app -------------------------------------------------------------------------------


class LauncherConfig(AppConfig):
    """A launcher's ``config:`` block (every field optional)."""

    weapons: WeaponsFile = Field(
        default=Path(DEFAULT_WEAPONS), description="weapons YAML file (specs, Pk model)"
    )
    weapon: str | None = Field(
        default=None, description="weapon id (default: the file's weapon number index)"
    )
    seed: int | None = Field(
        default=None, description="seed of the kill draws (default: file seed and weapon id)"
    )
    status_period_s: Positive = Field(default=1.0, description="WeaponStatus period, s")
    max_order_age_s: Positive = Field(
        default=5.0, description="older orders (e.g. replayed to a restart) are ignored, s"
    )
    track_wait_s: Positive = Field(
        default=1.0, description="how long an order waits for its track to be heard of, s"
    )
    state: Path | None = Field(
        default=None, description="durable record (default RUN_DIR/state/SYSTEM-INDEX.json)"
    )


@app(
    topics=Topics(
        publish=("EngagementOutcome", "WeaponStatus"), subscribe=("EngagementOrder", "Track")
    ),
    config=LauncherConfig,
)
def launcher(ctx: AppContext) -> int:
    """Run one launcher until stopped.

    Settings: `LauncherConfig` (``ctx.config``).
    """
    try:
        opts = app_config(ctx, LauncherConfig)
        weapons = load_weapons(opts.weapons)
        if opts.weapon is None:
            spec = weapons.weapons[ctx.identity.index % len(weapons.weapons)]
        else:
            spec = weapons.weapon(opts.weapon)
    except MccError as exc:
        print(f"mcc: error: {exc}", file=sys.stderr)
        return 2
    rng = weapons.rng(spec.id) if opts.seed is None else np.random.default_rng(opts.seed)
    unit = Launcher(spec, pk_model=weapons.pk_model, rng=rng, now_ns=time.time_ns())
    _LauncherApp(ctx, unit, opts).run()
    return 0


class _LauncherApp:
    """The bus side of a `Launcher`: orders and tracks in, status and answers out."""

    def __init__(self, ctx: AppContext, unit: Launcher, opts: LauncherConfig) -> None:
        self.ctx = ctx
        self.unit = unit
        self.status_period_ns = int(opts.status_period_s * 1e9)
        self.max_order_age_ns = int(opts.max_order_age_s * 1e9)
        self.track_wait_ns = int(opts.track_wait_s * 1e9)
        self.status_writer = ctx.bus.writer("WeaponStatus")
        self.order_writer = ctx.bus.writer("EngagementOutcome")
        self.outcomes = Linger(
            self.order_writer,
            OUTCOME_LINGER_S,
            lambda order_id: EngagementOrder(order_id=order_id),
            keep=self._in_flight,
        )
        self.orders = ctx.bus.reader("EngagementOrder")
        self.tracks_reader = ctx.bus.reader("Track")
        self.waitset = WaitSet(ctx.bus.participant)
        self.waitset.attach(self.orders.condition)
        self.waitset.attach(self.tracks_reader.condition)
        self.tracks: dict[int, Track] = {}
        self.pending: dict[int, tuple[EngagementOrder, int]] = {}  # order id → (order, since)
        self.seen: dict[int, None] = {}  # order ids taken, oldest first (bounded: MAX_SEEN)
        self.tracks_dropped = 0
        self.last_status: tuple[Any, ...] | None = None
        self.next_status_ns = 0
        # order id → the status answered (IN_FLIGHT: fired, ABORTED), oldest first: durable.
        self.answered: dict[int, int] = {}
        self.replayed = 0  # orders refused because the record says they were answered
        ident = ctx.identity
        self.record = open_state(
            opts.state, run_dir=ctx.run_dir, system=ident.system, index=ident.index, kind="launcher"
        )
        self._restore()

    def _restore(self) -> None:
        doc = self.record.load()
        if doc is None:
            return
        try:
            answered = doc["answered"]
            if not isinstance(answered, list) or len(answered) > MAX_ANSWERED:
                raise MccError(f"answered is not a list of at most {MAX_ANSWERED}")
            pairs = {_int(o): OrderStatus(_int(st)) for o, st in answered}
            self.unit.restore(doc["unit"])
        except (MccError, KeyError, TypeError, ValueError) as exc:
            self.record.reject(f"{type(exc).__name__}: {exc}")
            return
        self.answered = {o: int(st.value) for o, st in pairs.items()}
        eng = self.unit.engagement
        self.ctx.log.warning(
            "launcher %s restored from %s: %d orders answered, %d/%d rounds ready, %s%s",
            self.unit.spec.id,
            self.record.path,
            len(self.answered),
            self.unit.rounds_ready,
            self.unit.spec.rounds,
            WeaponState(self.unit.state).name,
            f", order {eng.order.order_id} in flight" if eng is not None else "",
        )

    def _save(self) -> None:
        """The durable record, before anything it covers is published."""
        while len(self.answered) > MAX_ANSWERED:
            del self.answered[next(iter(self.answered))]
        self.record.save(
            {"unit": self.unit.snapshot(), "answered": [[o, s] for o, s in self.answered.items()]}
        )

    def run(self) -> None:
        spec = self.unit.spec
        self.ctx.log.info(
            "launcher %s at %s: %d rounds, %.0f..%.0f m, interceptor %.0f m/s, base pk %.2f",
            spec.id,
            spec.position_m,
            spec.rounds,
            spec.min_range_m,
            spec.max_range_m,
            spec.interceptor_speed_mps,
            spec.base_pk,
        )
        self._publish_status(time.time_ns())
        while not self.ctx.stopping:
            now_ns = time.time_ns()
            wake = [
                self.next_status_ns,
                *(s + self.track_wait_ns for _, s in self.pending.values()),
            ]
            if (event := self.unit.next_event_ns()) is not None:
                wake.append(event)
            # Capped so that a stop (a Python signal handler) is seen within 0.1 s.
            delay_s = min(max((min(wake) - now_ns) * 1e-9, 0.0), 0.1)
            if delay_s > 0:
                self.waitset.wait(duration(seconds=delay_s))
            self._take(time.time_ns())
            now_ns = time.time_ns()
            outcomes = self.unit.advance(now_ns)
            if outcomes:
                self._save()  # the engagement is over: a restart must not fly it again
            for outcome in outcomes:
                self._publish_outcome(outcome)
            self._serve_pending(now_ns)
            self._publish_status(now_ns)
            self.outcomes.expire()
        now_ns = time.time_ns()
        aborted = self.unit.shutdown(now_ns)
        self._save()
        for outcome in aborted:
            self.ctx.log.warning(
                "order %d aborted: the launcher is stopping with it in flight", outcome.order_id
            )
            self._answer(outcome)
        self._publish_status(now_ns)

    def _take(self, now_ns: int) -> None:
        for track in self.tracks_reader.take(4096):
            # Every track the tracker ever made stayed here: 10 MB a day under a steady raid.
            if track.status == TrackStatus.TRACK_DELETED:
                self.tracks.pop(track.track_id, None)
            elif track.track_id in self.tracks or len(self.tracks) < MAX_TRACKS:
                self.tracks[track.track_id] = track
            else:
                self.tracks_dropped += 1
                if self.tracks_dropped == 1:
                    self.ctx.log.warning(
                        "track %d past the %d tracks kept: dropped; further ones are counted",
                        track.track_id,
                        MAX_TRACKS,
                    )
        for order in self.orders.take(1024):
            if order.weapon_id != self.unit.spec.id or order.status != OrderStatus.ORDER_ISSUED:
                continue  # another weapon's, or an answer (ours included)
            self.ctx.heartbeat.count_in()
            if order.order_id in self.seen:
                continue
            self.seen[order.order_id] = None
            while len(self.seen) > MAX_SEEN:
                del self.seen[next(iter(self.seen))]
            if order.order_id in self.answered:
                self.replayed += 1
                self.ctx.log.info(
                    "order %d ignored: answered %s before a restart",
                    order.order_id,
                    OrderStatus(self.answered[order.order_id]).name,
                )
                continue
            if order.issue_ns and now_ns - order.issue_ns > self.max_order_age_ns:
                self.ctx.log.info("order %d ignored: issued too long ago", order.order_id)
                continue
            self.pending[order.order_id] = (order, now_ns)

    def _serve_pending(self, now_ns: int) -> None:
        for order_id, (order, since_ns) in list(self.pending.items()):
            track = self.tracks.get(order.track_id)
            if track is None and now_ns - since_ns < self.track_wait_ns:
                continue  # the track may not have reached us yet
            del self.pending[order_id]
            reply = self.unit.engage(order, track, now_ns)
            # On disk before it is published (before the interceptor leaves, for a launch).
            self.answered[order_id] = int(OrderStatus(reply.order.status).value)
            self._save()
            self._answer(reply.order)
            self.ctx.heartbeat.count_out()
            if reply.reason:
                self.ctx.log.warning("order %d aborted: %s", order_id, reply.reason)
            else:
                eng = self.unit.engagement
                assert eng is not None
                self.ctx.log.info(
                    "order %d: %d round(s) at track %d, pk %.2f, intercept in %.2f s",
                    order_id,
                    eng.rounds,
                    order.track_id,
                    eng.pk,
                    (eng.intercept_ns - now_ns) * 1e-9,
                )
                if order.origin_ns:
                    self.ctx.heartbeat.record_latency_ns(now_ns - order.origin_ns)

    def _answer(self, outcome: EngagementOrder) -> None:
        self.order_writer.write(outcome)
        self.outcomes.wrote(outcome.order_id)

    def _in_flight(self, order_id: int) -> bool:
        eng = self.unit.engagement
        return eng is not None and eng.order.order_id == order_id

    def _publish_outcome(self, outcome: EngagementOrder) -> None:
        self._answer(outcome)
        self.ctx.heartbeat.count_out()
        self.ctx.log.info(
            "order %d: %s (track %d, pk %.2f, %d round(s))",
            outcome.order_id,
            OrderStatus(outcome.status).name,
            outcome.track_id,
            outcome.pk,
            outcome.rounds,
        )

    def _publish_status(self, now_ns: int) -> None:
        unit = self.unit
        key = (unit.state, unit.rounds_ready, unit.engaged_track_id)
        if key == self.last_status and now_ns < self.next_status_ns:
            return
        status = unit.status()
        status.update_ns = now_ns
        self.status_writer.write(status)
        self.ctx.heartbeat.count_out()
        self.ctx.heartbeat.message = (
            f"{WeaponState(unit.state).name} {unit.rounds_ready}/{unit.spec.rounds}"
        )
        self.last_status = key
        self.next_status_ns = now_ns + self.status_period_ns
