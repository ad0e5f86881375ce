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

**Approval mode** (config ``approval: true``, `TewaEngine.approval`): orders are proposed, not
issued. Each is published with status ``ORDER_PROPOSED`` (launchers ignore it; the console shows it)
and holds its weapon and track until an operator decides: a ``Command`` with verb ``approve`` (or
``reject``) and the order id as target, sent on the ``Command`` topic in DDS partition
`APPROVAL_PARTITION`, which TEWA answers (the supervisor, in the default partition, never sees it).
An approved order is issued (``ORDER_ISSUED``, ``issue_ns`` = the approval time); a rejected one is
``ORDER_ABORTED`` and its track is not proposed again for ``kill_assess_s``; one left undecided for
``approval_timeout_s`` is withdrawn (``ORDER_ABORTED``) and proposed again if still wanted.

**No engagement on one radar's word.** TEWA also reads ``DetectionBatch`` and engages a track
only when radars of at least ``min_sensors`` identities (default 2) have a detection near it in
their latest scan (`SensorScans`; the radar's identity is `Reader.source_of`, authenticated on
a secured bus); others are held back (``uncorroborated``) unless an operator approves them
(approval mode proposes them anyway).

**Friends are never engaged.** The ``AirPicture`` carries each track's STANAG 1241 identity,
fused by the tracker from the radars' IFF answers (`mcc.tracking.identity`). A track that is
``FRIEND`` or ``ASSUMED_FRIEND`` is kept out of the assignment (counted: ``friend_vetoes``) and
every order is checked again against its track's newest identity just before it is published
or approved (`TewaEngine.release`; stopped ones: ``friend_orders_stopped``). A track within
``friend_clearance_m`` (1500 m) of a friendly track is not engaged while it is
(``friend_clearance``): the seeker must not have the choice, and it may be the friend itself
(a new track of the wingman that has not answered IFF yet). The others rank
``HOSTILE`` > ``SUSPECT`` > ``UNKNOWN`` > ``PENDING`` > ``NEUTRAL`` before their kinematic
score, and the assignment weighs their value by identity (`mcc.apps.tewa_model`); ``Threat``
carries the identity. A picture whose identity or iff arrays are malformed is counted and
dropped. The counts go to the log and the heartbeat's ``message``.

The code: `mcc.apps.tewa_model` (inputs, outputs, identity rules), `mcc.apps.tewa_engine`
(`TewaEngine`, no DDS), this module (the bus side; the names above are re-exported here).

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

    tewa:
      app: mcc.apps.tewa:tewa
      config: {scenario: scenarios/sam-toc.yaml, weapons: scenarios/weapons-sam-toc.yaml}

Frame and units: ENU metres, m/s, seconds; times on the wire in Unix ns (idl/mcc.idl).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
from cyclonedds.core import WaitSet
from cyclonedds.util import duration
from pydantic import Field

from mcc.apps.args import DEFAULT_SCENARIO, ScenarioFile
from mcc.apps.launcher import DEFAULT_WEAPONS, load_weapons
from mcc.apps.launcher_weapons import WeaponsFile
from mcc.apps.scenario import load_scenario
from mcc.apps.sources import SourceGuard, speaker_of
from mcc.apps.statefile import StateFile, open_state
from mcc.apps.tewa_engine import TewaEngine
from mcc.apps.tewa_model import (
    POLICIES,
    Assets,
    Order,
    Picture,
    PlanEvaluation,
    Policy,
    SensorScans,
    TewaResult,
    TewaStatistics,
    ThreatReport,
)
from mcc.bus import Linger, Reader, Replier
from mcc.bus.rpc import APPROVAL_CHANNEL, principal_partition
from mcc.errors import MccError
from mcc.observe.audit import AUDIT_FILE, AuditLog
from mcc.orchestrate.appconfig import AppConfig, Positive, app_config
from mcc.orchestrate.appspec import app
from mcc.orchestrate.runtime import AppContext
from mcc.security.mission import Topics
from mcc.types import (
    AirPicture,
    Command,
    CommandReply,
    DetectionBatch,
    EngagementOrder,
    OrderStatus,
    Threat,
)
from mcc.types.arrays import packed_field

__all__ = [
    "APPROVAL_PARTITION",
    "Assets",
    "Order",
    "Picture",
    "PlanEvaluation",
    "TewaEngine",
    "TewaResult",
    "TewaStatistics",
    "TewaConfig",
    "ThreatReport",
    "tewa",
]

# Approval commands travel on the Command topic in the partitions of the approval channel
# (``approval/<principal>``): TEWA answers them there and the supervisor, which reads the
# ``cmd`` channel, never hears them; who approved is the partition's principal.
APPROVAL_PARTITION = principal_partition(APPROVAL_CHANNEL, "*")
#: Weapons whose launcher identity TEWA remembers (a weapons file has a few).
MAX_WEAPONS = 1024
#: How long an order's ``EngagementOrder`` instance stays registered after its last write
#: once the order holds nothing (answered, aborted): long past the launchers' order age.
ORDER_LINGER_S = 60.0


# -- the app -------------------------------------------------------------------------------


class _NotCommander(MccError):
    """An approve or reject from an identity that is not one of TEWA's ``commanders``."""


class TewaConfig(AppConfig):
    """TEWA's ``config:`` block (every field optional)."""

    scenario: ScenarioFile = Field(
        default=Path(DEFAULT_SCENARIO), description="scenario YAML: the defended assets"
    )
    weapons: WeaponsFile = Field(
        default=Path(DEFAULT_WEAPONS), description="weapons YAML: specs, Pk model"
    )
    asset_radius_m: Positive = Field(default=1000.0, description="'impact' = inside it, m")
    policy: Policy = Field(default="auto", description="weapon assignment: " + ", ".join(POLICIES))
    max_weapons_per_target: int = Field(default=2, ge=1, description="weapons on one threat")
    salvo: int = Field(default=1, ge=1, description="rounds per engagement")
    min_score: float = Field(
        default=0.1, allow_inf_nan=False, description="threats below are not engaged"
    )
    compare_period_s: Positive = Field(default=1.0, description="plan check period, s")
    mc_trials: int = Field(default=2000, ge=1, description="Monte Carlo trials per plan check")
    order_timeout_s: Positive = Field(default=3.0, description="an order unanswered, s")
    kill_assess_s: Positive = Field(default=3.0, description="kill assessment wait, s")
    weapon_timeout_s: Positive = Field(default=3.0, description="a weapon silent this long, s")
    seed: int = Field(default=0, description="Monte Carlo seed")
    approval: bool = Field(
        default=False,
        description="propose orders; issue each when a Command approves it (partition approval)",
    )
    approval_timeout_s: Positive = Field(default=30.0, description="a proposal unapproved, s")
    commanders: list[str] = Field(
        default=["operator", "console"],
        description="identities whose approve and reject count (the commander role; the "
        "console lets only its commander users approve)",
    )
    min_sensors: int = Field(
        default=2,
        ge=1,
        description="radar identities that must see a track before it is engaged without an "
        "operator's approval (1: any track)",
    )
    friend_clearance_m: float = Field(
        default=1500.0,
        ge=0,
        allow_inf_nan=False,
        description="a track this close to a friendly track is not engaged while it is (0: no "
        "clearance)",
    )
    min_flyout_fraction: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="a kill or miss reported before this fraction of the order's planned "
        "flyout is not believed (no interceptor got there)",
    )
    corroboration_gate_m: Positive = Field(
        default=500.0, description="a radar sees a track with a detection this close, m"
    )
    corroboration_age_s: Positive = Field(
        default=3.0, description="a radar's latest scan older than this corroborates nothing, s"
    )
    state: Path | None = Field(
        default=None, description="durable record (default RUN_DIR/state/SYSTEM-INDEX.json)"
    )


@app(
    topics=Topics(
        publish=("EngagementOrder", "Threat", "CommandReply"),  # replies: order approvals
        subscribe=("AirPicture", "WeaponStatus", "EngagementOutcome", "Command", "DetectionBatch"),
    ),
    config=TewaConfig,
)
def tewa(ctx: AppContext) -> int:
    """Run TEWA until stopped: ``AirPicture`` and ``WeaponStatus`` in, ``Threat`` and
    ``EngagementOrder`` out; outcomes (``EngagementOrder`` answers) in.

    Settings: `TewaConfig` (``ctx.config``).
    """
    try:
        opts = app_config(ctx, TewaConfig)
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
            min_sensors=opts.min_sensors,
            min_flyout_fraction=opts.min_flyout_fraction,
            friend_clearance_m=opts.friend_clearance_m,
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
    scans = SensorScans(gate_m=opts.corroboration_gate_m, max_age_s=opts.corroboration_age_s)
    periods_s = {radar.id: radar.scan_period_s for radar in scenario.radars}
    _TewaApp(ctx, engine, record, scans, frozenset(opts.commanders), periods_s).run()
    return 0


class _TewaApp:
    """The bus side of a `TewaEngine`."""

    def __init__(
        self,
        ctx: AppContext,
        engine: TewaEngine,
        record: StateFile,
        scans: SensorScans,
        commanders: frozenset[str] = frozenset({"operator", "console"}),
        periods_s: dict[str, float] | None = None,
    ) -> None:
        periods_s = periods_s or {}
        self.ctx = ctx
        self.commanders = commanders
        self.engine = engine
        self.record = record
        self.scans = scans
        self.witness_guard = SourceGuard(periods_s, known_only=ctx.bus.secured and bool(periods_s))
        self.witness_dropped: Counter[str] = Counter()  # scans not taken as witnesses, by why
        self._witness_lock = threading.Lock()  # scans and guard: dispatcher thread and cycles
        bus = ctx.bus
        # Who sees what: a track is engaged once radars of two identities see it. Taken as
        # they come (on the bus's dispatcher thread), not once per cycle: the topic keeps the
        # last 8 scans of all radars together, and a flood would push a genuine radar's out
        # before a cycle took them.
        self.detections = (
            bus.reader("DetectionBatch", on_data=self._on_detections)
            if engine.min_sensors > 1
            else None
        )
        self.pictures = bus.reader("AirPicture")
        self.statuses = bus.reader("WeaponStatus")
        self.answers = bus.reader("EngagementOutcome")
        self.threat_writer = bus.writer("Threat")
        self.order_writer = bus.writer("EngagementOrder")
        self.orders_out = Linger(
            self.order_writer,
            ORDER_LINGER_S,
            lambda order_id: EngagementOrder(order_id=order_id),
            keep=self.engine.holds,
        )
        self.dropped: Counter[str] = Counter()  # pictures, statuses and outcomes refused
        #: Weapon id → the launcher identity that reports it (the first to): only it may
        #: report the weapon's status and answer orders given to it.
        self.weapon_owners: dict[str, str] = {}
        self.waitset = WaitSet(bus.participant)
        for reader in (self.pictures, self.statuses, self.answers):
            self.waitset.attach(reader.condition)
        # The engine is shared with the approval replier's thread.
        self._lock = threading.Lock()
        self._replier: Replier[Command, CommandReply] | None = None
        self._audit_log: AuditLog | None = None  # RUN_DIR/audit.jsonl, opened on first use
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
            stats = self.engine.statistics()
            self.ctx.log.info(
                "tewa stops: %d cycles, %d orders issued, %d kills, friend vetoes %d, "
                "held near a friend %d, orders stopped for a friend %d, pictures dropped %d",
                stats.cycles,
                stats.issued,
                stats.kills,
                stats.friend_vetoes,
                stats.friend_clearance,
                stats.friend_orders_stopped,
                self.dropped["picture"],
            )

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
                self._order_out(rec.order.to_msg(rec.status))

    def _order_out(self, msg: EngagementOrder) -> None:
        """Publish one of our orders; its instance goes ``ORDER_LINGER_S`` after this write
        once the order holds nothing (a raid that never stops makes orders without end)."""
        self.order_writer.write(msg)
        self.orders_out.wrote(msg.order_id)

    def _save(self) -> None:
        """The durable record, before anything it covers is published."""
        self.record.save(self.engine.snapshot())

    def _on_detections(self, reader: Reader[DetectionBatch]) -> None:
        batches = reader.take(1024)
        with self._witness_lock:
            for batch in batches:
                self._witness(batch)

    def _witness(self, batch: DetectionBatch) -> None:
        """Keep a radar's latest scan as a witness of the tracks near its detections. The
        witness is the radar's identity (one, however many sensor ids it claims), held to the
        tracker's rules (`SourceGuard`: its own sensor, one writer, its scan rate), so that a
        stolen identity can neither witness for another radar nor flood the genuine radar's
        scans away; on an unsecured bus, where nothing is authenticated, its sensor id."""
        assert self.detections is not None
        speaker = speaker_of(self.detections, batch)
        if speaker is None:
            if self.ctx.bus.secured:
                return  # speaks for no identity: witnesses nothing
            source = f"sensor {batch.sensor_id[:80]}"
        else:
            now_ns = time.time_ns()
            kind, why = self.witness_guard.refusal(batch, now_ns, speaker)
            if kind:
                self.witness_dropped[kind] += 1
                if self.witness_dropped[kind] == 1:
                    self.ctx.log.warning(
                        "a scan of radar %r not taken as a witness: %s; further ones are "
                        "counted, not logged",
                        batch.sensor_id[:80],
                        why,
                    )
                return
            self.witness_guard.accept(batch, now_ns, speaker)
            source = speaker.source
        positions = np.stack(
            [np.asarray(packed_field(batch, axis), np.float64) for axis in ("x_m", "y_m", "z_m")],
            axis=1,
        )
        if not self.scans.add(source, batch.origin_ns, positions):
            self.witness_dropped["bounds"] += 1

    def _from_owner(self, weapon_id: str, source: str | None, what: str) -> bool:
        """Whether a weapon's ``what`` comes from the launcher identity that owns the weapon.
        Unsourced samples are taken on an unsecured bus only (nothing is authenticated)."""
        if source is None:
            if not self.ctx.bus.secured:
                return True
            why = f"{what} of weapon {weapon_id[:80]!r} from no identity"
        else:
            owner = self.weapon_owners.get(weapon_id)
            if owner is None and len(self.weapon_owners) < MAX_WEAPONS:
                owner = self.weapon_owners[weapon_id] = source
            if owner == source:
                return True
            why = f"{what} of weapon {weapon_id[:80]!r} from {source}, not its launcher {owner}"
        kind = f"{what} not from its launcher"
        self.dropped[kind] += 1
        if self.dropped[kind] == 1:
            self.ctx.log.warning("%s dropped; further ones are counted, not logged", why)
        return False

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
            if self._from_owner(status.weapon_id, self.statuses.source_of(status), "status"):
                engine.update_weapon(status, now_ns)
        for answer in self.answers.take(1024):
            # the weapon our order went to, not the one the answer names
            weapon = engine.order_weapon(answer.order_id) or answer.weapon_id
            if not self._from_owner(weapon, self.answers.source_of(answer), "outcome"):
                continue
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
        self.orders_out.expire()

    def _cycle(self, msg: AirPicture) -> None:
        try:
            picture = Picture.from_msg(msg)
        except MccError as exc:  # hostile or broken input: counted, first one logged
            self.dropped["picture"] += 1
            if self.dropped["picture"] == 1:
                self.ctx.log.warning(
                    "AirPicture %d of %s dropped (%s); further ones are counted, not logged",
                    msg.cycle,
                    msg.tracker_id[:80],
                    str(exc)[:200],
                )
            return
        seen_by = None
        if self.detections is not None:
            state = picture.state
            with self._witness_lock:
                seen_by = self.scans.count(state[:, 0:3], state[:, 3:6], picture.time_ns)
        result = self.engine.step(picture, time.time_ns(), seen_by)
        # The last check before anything goes out: no order names a friend.
        orders = [order for order in result.orders if self.engine.release(order)]
        if result.orders or result.withdrawn:
            self._save()  # on disk before they are published
        hb = self.ctx.heartbeat
        status = OrderStatus.ORDER_PROPOSED if self.engine.approval else OrderStatus.ORDER_ISSUED
        # Orders first: they are the hot path.
        for order in orders:
            self._order_out(order.to_msg(status))
            hb.count_out()
        for order in result.withdrawn:
            self._order_out(order.to_msg(OrderStatus.ORDER_ABORTED))
        for threat in result.threats.to_msgs(self.engine.assets.ids):
            self.threat_writer.write(threat)
            hb.count_out()
        for track_id in result.dropped:
            self.threat_writer.retire(Threat(track_id=track_id))
        if msg.origin_ns:
            hb.record_latency_ns(time.time_ns() - msg.origin_ns)
        for order in orders:
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
        stats = self.engine.statistics()
        vetoes = f"friend vetoes {stats.friend_vetoes}, stopped {stats.friend_orders_stopped}"
        if result.comparison is not None:
            hb.message = f"{vetoes}; {result.comparison.summary()}"[:200]
            self.ctx.log.info("%s", result.comparison.summary())
        elif stats.friend_vetoes and not hb.message:
            hb.message = vetoes

    def _withdraw_if_aborted(self, order_id: int) -> None:
        """A proposal ``approve`` refused because its track turned friend: publish it
        ``ORDER_ABORTED`` (consoles stop showing it as awaiting)."""
        order = self.engine.order(order_id)
        if order is not None and self.engine.order_status(order_id) == OrderStatus.ORDER_ABORTED:
            self._save()
            self._order_out(order.to_msg(OrderStatus.ORDER_ABORTED))

    def _on_command(self, command: Command) -> CommandReply:
        """An operator's decision on a proposal (on the replier's thread), recorded in the
        mission's audit (``RUN_DIR/audit.jsonl``, beside the supervisor's commands) as its
        sender's identity, with what came of it: approved, refused (not a commander) or
        failed."""
        try:
            reply = self._decide(command)
        except MccError as exc:
            refused = isinstance(exc, _NotCommander)
            self._audit(command, "refused" if refused else "failed", str(exc))
            raise
        self._audit(command, "ok", reply.message)
        return reply

    def _audit(self, command: Command, result: str, message: str) -> None:
        if command.verb == "pending" or self.ctx.settings.run_dir is None:
            return
        if self._audit_log is None:
            self._audit_log = AuditLog(self.ctx.settings.run_dir / AUDIT_FILE)
        assert self._replier is not None  # it called us
        self._audit_log.record_command(
            who=self._replier.sender(command), role="commander" if result != "refused" else "",
            verb=command.verb, target=command.target, args_json=command.args_json,
            client=command.client_id, result=result, message=message, by=str(self.ctx.identity),
        )  # fmt: skip

    def _decide(self, command: Command) -> CommandReply:
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
        assert self._replier is not None  # it called us
        sender = self._replier.sender(command)  # the writer's identity, never a field
        if sender not in self.commanders:
            self.ctx.log.warning(
                "order %d: %s by %s refused: not a commander (client %.80r)",
                order_id,
                verb,
                sender,
                command.client_id,
            )
            raise _NotCommander(f"{sender} may not {verb} engagements: not a commander of TEWA")
        with self._lock:
            now_ns = time.time_ns()
            if verb == "approve":
                try:
                    order, status = self.engine.approve(order_id, now_ns), OrderStatus.ORDER_ISSUED
                except MccError:
                    self._withdraw_if_aborted(order_id)
                    raise
            else:
                order, status = self.engine.reject(order_id, now_ns), OrderStatus.ORDER_ABORTED
            self._save()
            self._order_out(order.to_msg(status))
            self.ctx.heartbeat.count_out()
        self.ctx.log.info(  # who decided: the sender's identity, then what it says of its user
            "order %d: %s by %s (client %s) (weapon %s, track %d)",
            order_id,
            "approved" if verb == "approve" else "rejected",
            sender,
            command.client_id,
            order.weapon_id,
            order.track_id,
        )
        result = {"order_id": order_id, "status": status.name, "weapon_id": order.weapon_id}
        return CommandReply(ok=True, message=f"{verb} {order_id}", result_json=json.dumps(result))
