"""TEWA: threat ranking, weapon assignment, shoot-look-shoot, the Monte Carlo plan comparison,
and the whole loop truth → (test as tracker) → tewa → launcher → truth as real processes."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from mcc.apps.launcher import Launcher, PkModel, WeaponSpec
from mcc.apps.scenario import TruthState
from mcc.apps.tewa import Assets, Picture, TewaEngine, TewaResult
from mcc.bus import Bus, Reader
from mcc.bus.rpc import APPROVAL_CHANNEL
from mcc.errors import MccError, OrchestratorError
from mcc.observe.audit import read_audit
from mcc.orchestrate.client import ControlClient
from mcc.types import (
    AirPicture,
    EngagementOrder,
    Identity,
    IffAnswer,
    OrderStatus,
    TargetClass,
    Threat,
    Track,
    TrackStatus,
    WeaponState,
    WeaponStatus,
)
from mcc.types.arrays import pack
from tests.apps.configs import configured
from tests.conftest import REPO, app_instance, stop_app, wait_for

S = 1_000_000_000
T0 = 1_700_000_000 * S
ORIGIN = T0 - 200_000_000
MISSILE, AIRCRAFT, HELO = (
    TargetClass.CLASS_CRUISE_MISSILE,
    TargetClass.CLASS_AIRCRAFT,
    TargetClass.CLASS_HELICOPTER,
)
FLAT = PkModel(class_factors=(1.0,) * len(TargetClass))
DEPOT = Assets(("depot",), np.zeros((1, 3)), np.ones(1), np.full(1, 1000.0))

Tr = tuple[int, TargetClass, tuple[float, float, float], tuple[float, float, float]]


def picture(*tracks: Tr, time_ns: int = T0, tentative: tuple[int, ...] = ()) -> Picture:
    n = len(tracks)
    status = [
        TrackStatus.TRACK_TENTATIVE if t[0] in tentative else TrackStatus.TRACK_CONFIRMED
        for t in tracks
    ]
    return Picture(
        time_ns=time_ns,
        origin_ns=time_ns - 200_000_000,
        track_id=np.array([t[0] for t in tracks], dtype=np.uint32),
        status=np.array([int(s.value) for s in status], dtype=np.uint8),
        classification=np.array([int(t[1].value) for t in tracks], dtype=np.uint8),
        state=np.array([[*t[2], *t[3]] for t in tracks], dtype=np.float64).reshape(n, 6),
    )


def weapon(
    weapon_id: str,
    position: tuple[float, float, float],
    *,
    state: WeaponState = WeaponState.WEAPON_READY,
    rounds: int = 4,
    min_range_m: float = 200.0,
    max_range_m: float = 20000.0,
) -> WeaponStatus:
    x, y, z = position
    return WeaponStatus(
        weapon_id=weapon_id,
        state=state,
        rounds_ready=rounds,
        rounds_total=4,
        x_m=x,
        y_m=y,
        z_m=z,
        min_range_m=min_range_m,
        max_range_m=max_range_m,
    )


def spec(weapon_id: str, *, base_pk: float = 0.8, speed: float = 1000.0, reload_s: float = 2.0):
    return WeaponSpec(
        id=weapon_id,
        position_m=(0.0, 0.0, 0.0),
        rounds=4,
        max_range_m=20000.0,
        interceptor_speed_mps=speed,
        base_pk=base_pk,
        reload_s=reload_s,
    )


def answer(order_id: int, status: OrderStatus) -> EngagementOrder:
    return EngagementOrder(order_id=order_id, status=status)


# -- threat evaluation ---------------------------------------------------------------------


def test_an_inbound_fast_missile_outranks_an_outbound_aircraft() -> None:
    engine = TewaEngine(DEPOT)
    pic = picture(
        (1, AIRCRAFT, (3000.0, 3000.0, 3000.0), (200.0, 200.0, 0.0)),  # near, flying away
        (2, MISSILE, (8000.0, 0.0, 50.0), (-250.0, 0.0, 0.0)),  # farther, straight at it
        (3, HELO, (20000.0, 0.0, 100.0), (-60.0, 0.0, 0.0)),  # inbound, slow and far
        (4, MISSILE, (2000.0, 0.0, 50.0), (-250.0, 0.0, 0.0)),  # tentative: not a threat yet
        tentative=(4,),
    )
    threats = engine.evaluate(pic)
    assert threats.track_id.tolist() == [1, 2, 3]
    assert dict(zip(threats.track_id.tolist(), threats.rank.tolist(), strict=True)) == {
        2: 1,
        3: 2,
        1: 3,
    }
    i = 1  # the missile
    assert threats.time_to_impact_s[i] == pytest.approx((8000 - math.sqrt(1000**2 - 50**2)) / 250)
    assert threats.cpa_m[i] == pytest.approx(50.0)
    assert threats.time_to_cpa_s[i] == pytest.approx(32.0)
    assert threats.speed_mps[i] == pytest.approx(250.0)
    assert threats.course_rad[i] == pytest.approx(1.5 * math.pi)  # due west
    assert threats.off_axis_rad[i] == pytest.approx(0.0, abs=1e-2)
    assert threats.time_to_impact_s[0] == -1.0 and threats.off_axis_rad[0] > math.pi / 2

    msgs = threats.to_msgs(DEPOT.ids)
    assert [(m.track_id, m.rank) for m in msgs] == [(2, 1), (3, 2), (1, 3)]
    assert msgs[0].asset_id == "depot" and msgs[0].classification == MISSILE
    assert msgs[0].update_ns == T0 and msgs[0].origin_ns == ORIGIN
    assert msgs[0].score > msgs[1].score > msgs[2].score >= 0


def test_picture_from_an_air_picture_message() -> None:
    state = np.arange(12, dtype=np.float64).reshape(2, 6)
    msg = AirPicture(
        tracker_id="trk",
        cycle=3,
        time_ns=T0,
        origin_ns=ORIGIN,
        publish_ns=T0,
        count=2,
        track_id=pack([5, 6], "<u4"),
        status=pack([1, 0], "u1"),
        classification=pack([2, 1], "u1"),
        quality=pack([0.9, 0.1], "<f8"),
        state=pack(state, "<f8"),
        covariance=pack(np.zeros((2, 6, 6)), "<f8"),
    )
    pic = Picture.from_msg(msg)
    assert (pic.time_ns, pic.origin_ns, pic.count) == (T0, ORIGIN, 2)
    assert pic.track_id.tolist() == [5, 6] and pic.classification.tolist() == [2, 1]
    np.testing.assert_array_equal(pic.state, state)
    with pytest.raises(MccError, match=r"state must have shape \(2, 6\)"):
        Picture(T0, T0, pic.track_id, pic.status, pic.classification, state[:, :3])


# -- weapon assignment ---------------------------------------------------------------------


TWO_THREATS = (
    (10, MISSILE, (10000.0, 0.0, 100.0), (-200.0, 0.0, 0.0)),
    (11, MISSILE, (0.0, 10500.0, 100.0), (0.0, -200.0, 0.0)),
)


def two_weapon_engine(**options: object) -> TewaEngine:
    """A long-range weapon that reaches both threats, a short-range one only the first."""
    engine = TewaEngine(
        DEPOT,
        weapons={"long": spec("long", base_pk=0.9), "short": spec("short", base_pk=0.7)},
        pk_model=FLAT,
        **options,
    )
    engine.update_weapon(weapon("long", (0.0, 0.0, 0.0), max_range_m=15000.0), T0)
    engine.update_weapon(weapon("short", (8000.0, 0.0, 0.0), max_range_m=4000.0), T0)
    return engine


def test_the_engine_assigns_the_best_weapon_per_threat() -> None:
    # Firing the best weapon at the top threat would leave the second one unengaged; the
    # optimal assignment gives the top threat to the short-range weapon.
    # max_looks=0: a static comparison (no look-shoot cycle modelled).
    engine = two_weapon_engine(first_order_id=500, max_looks=0)
    result = engine.step(picture(*TWO_THREATS), T0)
    assert result.threats.rank.tolist() == [1, 2]
    assert {o.weapon_id: o.track_id for o in result.orders} == {"short": 10, "long": 11}
    assert sorted(o.order_id for o in result.orders) == [500, 501]
    by_weapon = {o.weapon_id: o for o in result.orders}
    assert by_weapon["long"].pk == pytest.approx(0.9)  # inside the optimal range
    assert by_weapon["short"].pk == pytest.approx(0.7)
    for o in result.orders:
        assert (o.rounds, o.issue_ns, o.origin_ns) == (1, T0, ORIGIN)
        msg = o.to_msg()
        assert msg.status == OrderStatus.ORDER_ISSUED and msg.origin_ns == ORIGIN
    # Greedy (fire where the marginal return is highest) doubles up on the top threat
    # instead; the Monte Carlo sees more leakers and keeps the Hungarian plan.
    cmp = result.comparison
    assert cmp is not None and cmp.names == ("hungarian", "greedy")
    assert cmp.chosen == "hungarian" == result.policy
    assert cmp.expected_leakers[0] < cmp.expected_leakers[1]


def test_the_engine_respects_readiness_rounds_range_and_staleness() -> None:
    engine = TewaEngine(DEPOT, weapons={"ok": spec("ok")}, pk_model=FLAT, weapon_timeout_s=3.0)
    engine.update_weapon(weapon("reloading", (0, 0, 0), state=WeaponState.WEAPON_RELOADING), T0)
    engine.update_weapon(weapon("offline", (0, 0, 0), state=WeaponState.WEAPON_OFFLINE), T0)
    engine.update_weapon(weapon("empty", (0, 0, 0), rounds=0), T0)
    engine.update_weapon(weapon("silent", (0, 0, 0)), T0 - 5 * S)
    engine.update_weapon(weapon("far", (60000.0, 0.0, 0.0)), T0)
    engine.update_weapon(weapon("blind", (0, 0, 0), min_range_m=15000.0), T0)
    threat = (1, MISSILE, (8000.0, 0.0, 50.0), (-250.0, 0.0, 0.0))
    assert engine.step(picture(threat), T0).orders == ()

    engine.update_weapon(weapon("ok", (0.0, 0.0, 0.0), rounds=1), T0)
    (order,) = engine.step(picture(threat), T0).orders
    assert (order.weapon_id, order.track_id, order.rounds) == ("ok", 1, 1)
    assert order.time_of_flight_s == pytest.approx(8000 / 1250, rel=1e-4)  # 50 m up


def test_salvo_rounds_per_order() -> None:
    engine = TewaEngine(DEPOT, weapons={"a": spec("a")}, pk_model=FLAT, salvo=2)
    engine.update_weapon(weapon("a", (0.0, 0.0, 0.0), rounds=4), T0)
    (order,) = engine.step(picture((1, MISSILE, (8000.0, 0, 50), (-250.0, 0, 0))), T0).orders
    assert order.rounds == 2 and order.pk == pytest.approx(0.8)  # pk stays single-shot


def test_shoot_look_shoot_no_double_engagement_and_reengagement() -> None:
    threat = (1, MISSILE, (9000.0, 0.0, 50.0), (-250.0, 0.0, 0.0))
    engine = TewaEngine(
        DEPOT, weapons={"a": spec("a"), "b": spec("b")}, pk_model=FLAT, max_weapons_per_target=1
    )
    engine.update_weapon(weapon("a", (0.0, 0.0, 0.0)), T0)
    engine.update_weapon(weapon("b", (0.0, 1000.0, 0.0)), T0)

    def step(t_s: float) -> TewaResult:
        now = T0 + int(t_s * S)
        # Both launchers say READY: TEWA must know itself which one it gave an order.
        for w, pos in (("a", (0.0, 0.0, 0.0)), ("b", (0.0, 1000.0, 0.0))):
            engine.update_weapon(weapon(w, pos), now)
        return engine.step(picture(threat, time_ns=now), now)

    (first,) = step(0.0).orders
    # Order in flight: neither the same nor another weapon engages the track again.
    assert step(0.5).orders == ()
    assert engine.on_order(answer(first.order_id, OrderStatus.ORDER_IN_FLIGHT), T0) is not None
    assert step(1.0).orders == ()
    assert engine.statistics().in_flight == 1

    # A miss: engaged again at the next cycle.
    assert engine.on_order(answer(first.order_id, OrderStatus.ORDER_MISS), T0 + 2 * S) == (
        OrderStatus.ORDER_MISS
    )
    (second,) = step(2.0).orders
    assert second.track_id == 1 and second.order_id != first.order_id

    # A kill: left alone while the kill is assessed (3 s), engaged again if it still flies.
    engine.on_order(answer(second.order_id, OrderStatus.ORDER_KILL), T0 + 3 * S)
    assert step(3.5).orders == () and step(5.9).orders == ()
    (third,) = step(6.1).orders
    assert third.track_id == 1

    # Repeats and strangers change nothing.
    assert engine.on_order(answer(second.order_id, OrderStatus.ORDER_KILL), T0) is None
    assert engine.on_order(answer(12345, OrderStatus.ORDER_KILL), T0) is None
    stats = engine.statistics()
    assert (stats.issued, stats.kills, stats.misses, stats.in_flight) == (3, 1, 1, 1)

    # The track leaves the picture: its Threat is to be disposed.
    now = T0 + 7 * S
    result = engine.step(picture((2, MISSILE, (9000.0, 0, 50), (-250.0, 0, 0)), time_ns=now), now)
    assert result.dropped == (1,)


def test_an_order_without_outcome_is_given_up() -> None:
    threat = (1, MISSILE, (9000.0, 0.0, 50.0), (-250.0, 0.0, 0.0))
    engine = TewaEngine(DEPOT, weapons={"a": spec("a")}, pk_model=FLAT, order_timeout_s=3.0)
    engine.update_weapon(weapon("a", (0.0, 0.0, 0.0)), T0)
    (order,) = engine.step(picture(threat), T0).orders
    due = order.time_of_flight_s + 3.0
    later = T0 + int((due - 0.1) * S)
    engine.update_weapon(weapon("a", (0.0, 0.0, 0.0)), later)
    assert engine.step(picture(threat, time_ns=later), later).orders == ()
    later = T0 + int((due + 0.1) * S)
    engine.update_weapon(weapon("a", (0.0, 0.0, 0.0)), later)
    (again,) = engine.step(picture(threat, time_ns=later), later).orders
    assert again.track_id == 1 and engine.statistics().expired == 1


# -- approval mode ---------------------------------------------------------------------------


def test_approval_mode_proposes_and_issues_only_approved_orders() -> None:
    threat = (1, MISSILE, (9000.0, 0.0, 50.0), (-250.0, 0.0, 0.0))
    other = (2, MISSILE, (0.0, 9000.0, 50.0), (0.0, -250.0, 0.0))
    engine = TewaEngine(
        DEPOT,
        weapons={"a": spec("a"), "b": spec("b")},
        pk_model=FLAT,
        max_weapons_per_target=1,
        approval=True,
        approval_timeout_s=10.0,
    )

    def step(t_s: float, *tracks: Tr) -> TewaResult:
        now = T0 + int(t_s * S)
        for w, pos in (("a", (0.0, 0.0, 0.0)), ("b", (0.0, 1000.0, 0.0))):
            engine.update_weapon(weapon(w, pos), now)
        return engine.step(picture(*tracks, time_ns=now), now)

    proposals = step(0.0, threat, other).orders
    assert {o.track_id for o in proposals} == {1, 2}
    by_track = {o.track_id: o for o in proposals}
    # Proposals hold their weapons and tracks: nothing new while they wait.
    assert step(1.0, threat, other).orders == ()
    stats = engine.statistics()
    assert (stats.proposed, stats.awaiting_approval, stats.issued, stats.in_flight) == (2, 2, 0, 0)
    assert engine.pending_approval() == list(proposals)

    approved = engine.approve(by_track[1].order_id, T0 + 2 * S)
    assert approved.issue_ns == T0 + 2 * S and approved.origin_ns == ORIGIN
    assert approved.to_msg().status == OrderStatus.ORDER_ISSUED
    assert engine.order_status(approved.order_id) == OrderStatus.ORDER_ISSUED
    # The launcher's answers follow as for any issued order.
    assert engine.on_order(answer(approved.order_id, OrderStatus.ORDER_IN_FLIGHT), T0) == (
        OrderStatus.ORDER_IN_FLIGHT
    )
    with pytest.raises(MccError, match=rf"order {approved.order_id} is not awaiting approval"):
        engine.approve(approved.order_id, T0 + 2 * S)
    with pytest.raises(MccError, match="order 424242 is not awaiting approval .unknown"):
        engine.reject(424242, T0 + 2 * S)

    # Rejected: the track is left alone for kill_assess_s (3 s), then proposed again.
    rejected = engine.reject(by_track[2].order_id, T0 + 2 * S)
    assert engine.order_status(rejected.order_id) == OrderStatus.ORDER_ABORTED
    assert step(4.0, threat, other).orders == ()
    (again,) = step(5.5, threat, other).orders
    assert again.track_id == 2 and again.order_id not in {o.order_id for o in proposals}

    # Left undecided past approval_timeout_s: withdrawn, then proposed afresh.
    result = step(16.0, threat, other)
    assert [o.order_id for o in result.withdrawn] == [again.order_id]
    assert engine.order_status(again.order_id) == OrderStatus.ORDER_ABORTED
    stats = engine.statistics()
    assert (stats.issued, stats.rejected, stats.withdrawn) == (1, 1, 1)


def test_approval_timeout_must_be_positive() -> None:
    with pytest.raises(MccError, match="approval_timeout_s=0: must be > 0"):
        TewaEngine(DEPOT, approval=True, approval_timeout_s=0)


# -- the Monte Carlo comparison ------------------------------------------------------------


def imminent_engine(**options: object) -> TewaEngine:
    """Three weapons with pk 0.5 against one missile 8 s from impact: no time for a look."""
    specs = {w: spec(w, base_pk=0.5) for w in ("a", "b", "c")}
    engine = TewaEngine(
        DEPOT, weapons=specs, pk_model=FLAT, max_weapons_per_target=3, seed=1, **options
    )
    for w, pos in (("a", (0.0, 1000.0, 0.0)), ("b", (0.0, -1000.0, 0.0)), ("c", (-500.0, 0, 0))):
        engine.update_weapon(weapon(w, pos), T0)
    return engine


IMMINENT = (1, MISSILE, (3000.0, 0.0, 50.0), (-250.0, 0.0, 0.0))


def test_the_comparison_picks_the_plan_with_fewer_leakers() -> None:
    engine = imminent_engine()
    result = engine.step(picture(IMMINENT), T0)
    cmp = result.comparison
    assert cmp is not None and cmp.looks == 0 and cmp.reserve_rounds == (0, 0)
    hungarian, greedy = cmp.expected_leakers
    assert hungarian == pytest.approx(0.5, abs=0.05)  # one shot
    assert greedy == pytest.approx(0.125, abs=0.03)  # three shots
    assert cmp.chosen == "greedy" == result.policy and cmp.separated
    assert sorted(o.weapon_id for o in result.orders) == ["a", "b", "c"]
    assert {o.track_id for o in result.orders} == {1}
    assert "-> greedy" in cmp.summary()

    # A fixed policy is obeyed; the comparison is still reported.
    fixed = imminent_engine(policy="hungarian").step(picture(IMMINENT), T0)
    assert fixed.comparison is not None and fixed.comparison.chosen == "greedy"
    assert fixed.policy == "hungarian" and len(fixed.orders) == 1


def test_comparisons_are_rate_bounded() -> None:
    engine = imminent_engine(compare_period_s=1.0)
    ran = []
    for t_s in (0.0, 0.5, 0.99, 1.0, 1.5):
        now = T0 + int(t_s * S)
        for w, pos in (
            ("a", (0.0, 1000.0, 0.0)),
            ("b", (0.0, -1000.0, 0.0)),
            ("c", (-500.0, 0, 0)),
        ):
            engine.update_weapon(weapon(w, pos), now)
        result = engine.step(picture(IMMINENT, time_ns=now), now)
        ran.append(result.comparison is not None)
        for order in result.orders:  # free the weapons and the track for the next cycle
            engine.on_order(answer(order.order_id, OrderStatus.ORDER_MISS), now)
    assert ran == [True, False, False, True, False]
    assert engine.statistics().comparisons == 2


# -- the loop as real processes ------------------------------------------------------------

SMALL = "scenarios/small.yaml"
# One launcher beside the cruise missile's path (it dives onto the depot from 12 km north-east),
# pk 1 at that range, so the engagement ends in a kill.
WEAPONS = """
seed: 3
pk_model:
  class_factors: {unknown: 1, aircraft: 1, cruise_missile: 1, helicopter: 1, ballistic: 1,
                  uav: 1, decoy: 1}
weapons:
  - {id: sam-s, position_m: [8000, 8000, 0], rounds: 4, min_range_m: 100, max_range_m: 12000,
     interceptor_speed_mps: 3000, base_pk: 1.0, reload_s: 0.5, magazine_reload_s: 5}
"""
TRACK_BASE = 100  # track id = TRACK_BASE + target id


def publish_picture(bus_writers: tuple, msg, cycle: int) -> None:
    """Act as the tracker: one confirmed Track per live target and the AirPicture."""
    tracks, pictures = bus_writers
    state = TruthState.from_msg(msg)
    n = state.count
    ids = state.ids.astype(np.int64) + TRACK_BASE
    for i in range(n):
        (x, y, z), (vx, vy, vz) = state.positions_m[i], state.velocities_mps[i]
        tracks.write(
            Track(
                track_id=int(ids[i]),
                tracker_id="test",
                status=TrackStatus.TRACK_CONFIRMED,
                classification=TargetClass(int(state.classes[i])),
                x_m=x,
                y_m=y,
                z_m=z,
                vx_mps=vx,
                vy_mps=vy,
                vz_mps=vz,
                quality=1.0,
                update_ns=msg.time_ns,
                origin_ns=msg.time_ns,
            )
        )
    pictures.write(
        AirPicture(
            tracker_id="test",
            cycle=cycle,
            time_ns=msg.time_ns,
            origin_ns=msg.time_ns,
            publish_ns=time.time_ns(),
            count=n,
            track_id=pack(ids, "<u4"),
            status=pack(np.full(n, int(TrackStatus.TRACK_CONFIRMED.value)), "u1"),
            classification=pack(state.classes, "u1"),
            quality=pack(np.ones(n), "<f8"),
            state=pack(np.hstack([state.positions_m, state.velocities_mps]), "<f8"),
            covariance=pack(np.zeros((n, 6, 6)), "<f8"),
        )
    )


@pytest.mark.slow
def test_truth_tewa_and_launcher_kill_a_target(
    bus_env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    weapons = tmp_path / "weapons.yaml"
    weapons.write_text(WEAPONS)
    logs = tmp_path

    def show() -> str:
        return "\n".join(
            f"--- {name}\n{(logs / f'{name}.log').read_text()}" for name in ("sim", "tewa", "sam")
        )

    with Bus(domain_id) as bus:
        truths = bus.reader("Truth")
        answers = bus.reader("EngagementOutcome")
        statuses = bus.reader("WeaponStatus")
        threats = bus.reader("Threat")
        writers = (bus.writer("Track"), bus.writer("AirPicture"))
        with (
            app_instance(
                "mcc.apps.radar:truth",
                env=configured(bus_env, scenario=SMALL),
                system="sim",
                logs=logs,
            ) as sim,
            app_instance(
                "mcc.apps.tewa:tewa",
                # the test writes the pictures itself, no radar: nothing to corroborate them
                env=configured(bus_env, scenario=SMALL, weapons=weapons, min_sensors=1),
                system="tewa",
                logs=logs,
            ) as tewa_proc,
            app_instance(
                "mcc.apps.launcher:launcher",
                env=configured(bus_env, weapons=weapons),
                system="sam",
                logs=logs,
            ) as sam,
        ):
            origins: set[int] = set()
            seen: dict[OrderStatus, list[EngagementOrder]] = {}
            states: list[WeaponState] = []
            ranked: dict[int, int] = {}
            gone: set[int] = set()
            cycle = 0
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline and not gone:
                for msg in truths.take_wait(16, timeout_s=0.2):
                    cycle += 1
                    publish_picture(writers, msg, cycle)
                    origins.add(msg.time_ns)
                    killed = {o.track_id - TRACK_BASE for o in seen.get(OrderStatus.ORDER_KILL, [])}
                    gone |= killed - set(TruthState.from_msg(msg).ids.tolist())
                for a in answers.take(256):
                    seen.setdefault(OrderStatus(a.status), []).append(a)
                states += [s.state for s in statuses.take(256)]
                ranked.update((t.track_id, t.rank) for t in threats.take(256))
            assert gone, show()
            for proc, name in ((tewa_proc, "tewa"), (sam, "sam"), (sim, "sim")):
                stop_app(proc, logs, name)

    # The missile (target 3) was the top threat, ordered, flown and killed. The state topic
    # keeps the last sample per order, so ISSUED may be superseded before the test reads it.
    assert ranked.get(TRACK_BASE + 3) == 1, ranked
    kill = seen[OrderStatus.ORDER_KILL][0]
    assert kill.weapon_id == "sam-s" and kill.track_id == TRACK_BASE + 3
    assert kill.origin_ns in origins  # the AirPicture's origin: latency is measurable
    assert 0 < kill.issue_ns - kill.origin_ns < 2 * S
    assert WeaponState.WEAPON_ENGAGING in states
    assert gone == {3}
    summary = json.loads((logs / "truth-summary.json").read_text())
    assert [(k["target_id"], k["weapon_id"]) for k in summary["kills"]][:1] == [(3, "sam-s")]
    assert summary["friends"] == 0 and summary["friends_killed"] == []
    # Its counts at the stop: pictures without identities (PENDING) never veto.
    assert (
        ", friend vetoes 0, held near a friend 0, orders stopped for a friend 0, pictures "
        "dropped 0" in (logs / "tewa.log").read_text()
    )


@pytest.mark.slow
def test_tewa_approval_mode_waits_for_an_approve_command(
    bus_env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    weapons = tmp_path / "weapons.yaml"
    weapons.write_text(WEAPONS)
    sam = weapon("sam-s", (8000.0, 8000.0, 0.0), max_range_m=12000.0)
    target = TruthState(
        time_s=0.0,
        ids=np.array([3], dtype=np.uint32),
        classes=np.array([int(MISSILE.value)], dtype=np.uint8),
        positions_m=np.array([[11000.0, 11000.0, 50.0]]),
        velocities_mps=np.array([[-180.0, -180.0, 0.0]]),
        alive=np.ones(1, bool),
    )
    with (
        Bus(domain_id) as bus,
        app_instance(
            "mcc.apps.tewa:tewa",
            env=configured(
                bus_env, scenario=SMALL, weapons=weapons, approval=True, commanders=["alice"]
            ),
            system="tewa",
            logs=tmp_path,
        ) as proc,
    ):
        orders = bus.reader("EngagementOrder")
        status_writer = bus.writer("WeaponStatus")
        writers = (bus.writer("Track"), bus.writer("AirPicture"))
        client = ControlClient(
            bus, "test", timeout_s=10.0, principal="alice", channel=APPROVAL_CHANNEL
        )
        seen: dict[int, list[OrderStatus]] = {}

        def pump_until(done: Callable[[], bool], timeout_s: float) -> bool:
            deadline = time.monotonic() + timeout_s
            cycle = 0
            while time.monotonic() < deadline and not done():
                cycle += 1
                now = time.time_ns()
                sam.update_ns = now
                status_writer.write(sam)
                publish_picture(writers, target.to_msg(scenario_id="t", time_ns=now), cycle)
                for o in orders.take_wait(64, timeout_s=0.1):
                    seen.setdefault(o.order_id, []).append(OrderStatus(o.status))
            return done()

        def log() -> str:
            return (tmp_path / "tewa.log").read_text()

        assert pump_until(lambda: bool(seen), 40), log()
        (order_id,) = seen
        # Proposed only: still proposed a second later (no launcher would fly it).
        pump_until(lambda: False, 1.0)
        assert set(seen[order_id]) == {OrderStatus.ORDER_PROPOSED}, log()
        with pytest.raises(OrchestratorError, match="order 1 is not awaiting approval"):
            client.call("approve", "1")
        with pytest.raises(OrchestratorError, match="unknown verb 'fire'"):
            client.call("fire", str(order_id))
        assert client.call("pending") == [order_id]
        # Approving is the commander's: another principal is refused, and TEWA logs it.
        bob = ControlClient(bus, "test", timeout_s=10.0, principal="bob", channel=APPROVAL_CHANNEL)
        with pytest.raises(OrchestratorError, match="bob may not approve engagements"):
            bob.call("approve", str(order_id))
        bob.close()
        assert client.call("pending") == [order_id]
        result = client.call("approve", str(order_id), on_behalf_of="alice@console")
        assert result == {"order_id": order_id, "status": "ORDER_ISSUED", "weapon_id": "sam-s"}
        assert pump_until(lambda: OrderStatus.ORDER_ISSUED in seen[order_id], 10), seen
        client.close()
        stop_app(proc, tmp_path, "tewa")
    # Who approved: the principal of the writer's partition, not the client id it wrote.
    assert f"order {order_id}: approved by alice (client {client._requester.client_id})" in log()
    assert f"order {order_id}: approve by bob refused: not a commander" in log()
    # The mission's audit has every decision, refused ones too, by identity.
    audit = [
        (e["who"], e["action"], e["target"], e["result"], e["on_behalf_of"], e["by"])
        for e in read_audit(tmp_path / "audit.jsonl")
    ]
    assert audit == [
        ("alice", "approve", "1", "failed", "", "test/tewa/0"),
        ("alice", "fire", str(order_id), "failed", "", "test/tewa/0"),
        ("bob", "approve", str(order_id), "refused", "", "test/tewa/0"),
        ("alice", "approve", str(order_id), "ok", "alice@console", "test/tewa/0"),
    ]  # ("pending" asks, decides nothing: not recorded)


def test_launcher_outcome_reaches_the_engine_like_on_the_bus() -> None:
    # The pure classes together: TEWA's order, flown by a Launcher, answered back to TEWA.
    threat = (1, MISSILE, (9000.0, 0.0, 50.0), (-250.0, 0.0, 0.0))
    sam = WeaponSpec(
        id="a",
        position_m=(0.0, 0.0, 0.0),
        rounds=2,
        max_range_m=20000.0,
        interceptor_speed_mps=1000.0,
        base_pk=1.0,
    )
    unit = Launcher(sam, pk_model=FLAT, rng=0, now_ns=T0)
    engine = TewaEngine(DEPOT, weapons={"a": sam}, pk_model=FLAT)
    engine.update_weapon(unit.status(), T0)
    (order,) = engine.step(picture(threat), T0).orders
    x, y, z = threat[2]
    tr = Track(track_id=1, x_m=x, y_m=y, z_m=z, vx_mps=-250.0, update_ns=T0)
    reply = unit.engage(order.to_msg(), tr, T0)
    assert engine.on_order(reply.order, T0) == OrderStatus.ORDER_IN_FLIGHT
    assert unit.next_event_ns() == T0 + int(round(order.time_of_flight_s * S))
    (outcome,) = unit.advance(T0 + 10 * S)
    assert engine.on_order(outcome, T0 + 10 * S) == OrderStatus.ORDER_KILL
    assert engine.statistics().kills == 1


# -- a restart does not re-issue ------------------------------------------------------------


@contextmanager
def tewa_process(
    weapons: Path, env: dict[str, str], logs: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """``test/tewa/0`` under the runtime (run folder ``logs``: its record is
    ``logs/state/tewa-0.json``), output in ``logs/tewa.N.log``; killed after the block."""
    n = len(list(logs.glob("tewa.*.log")))
    with (logs / f"tewa.{n}.log").open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mcc.orchestrate.runtime", "mcc.apps.tewa:tewa"],
            cwd=REPO,
            # pictures from the test, no radar: nothing to corroborate them (min_sensors)
            env=configured(env, scenario=SMALL, weapons=weapons, order_timeout_s=120, min_sensors=1)
            | {"MCC_MISSION": "test", "MCC_SYSTEM": "tewa", "MCC_INDEX": "0"}
            | {"MCC_RUN_DIR": str(logs)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_tewa_killed_with_an_order_out_does_not_re_issue_it(
    bus_env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    """kill -9 of TEWA twice — with its order just issued, then with it in flight — each time
    restarted under the same identity while the picture and a READY weapon keep tempting it:
    no second order for the track while the first is out; the issued one comes back under its
    own id; after the MISS the track is engaged again, under a new id."""
    weapons = tmp_path / "weapons.yaml"
    weapons.write_text(WEAPONS)
    sam = weapon("sam-s", (8000.0, 8000.0, 0.0), max_range_m=12000.0)
    target = TruthState(
        time_s=0.0,
        ids=np.array([3], dtype=np.uint32),
        classes=np.array([int(MISSILE.value)], dtype=np.uint8),
        positions_m=np.array([[11000.0, 11000.0, 50.0]]),
        velocities_mps=np.array([[-50.0, -50.0, 0.0]]),
        alive=np.ones(1, bool),
    )
    orders_seen: list[EngagementOrder] = []
    threats_seen: list[int] = []  # one per Threat sample: TEWA ran a cycle

    def logs() -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()}" for p in sorted(tmp_path.glob("*.log")))

    with Bus(domain_id) as bus:
        order_reader = bus.reader(  # noqa: F841 (kept open for the callback)
            "EngagementOrder", on_data=lambda r: orders_seen.extend(r.take(64))
        )
        answered = threading.Event()

        def on_threats(reader: Reader[Threat]) -> None:
            threats_seen.extend(t.track_id for t in reader.take(64))
            answered.set()

        threat_reader = bus.reader("Threat", on_data=on_threats)  # noqa: F841
        status_writer = bus.writer("WeaponStatus")
        outcomes = bus.writer("EngagementOutcome")
        writers = (bus.writer("Track"), bus.writer("AirPicture"))

        def pump_until(done: Callable[[], object], timeout_s: float, what: str) -> None:
            deadline = time.monotonic() + timeout_s
            cycle = 0
            while not done():
                if time.monotonic() > deadline:
                    pytest.fail(f"no {what} in {timeout_s} s\n{logs()}")
                cycle += 1
                now = time.time_ns()
                sam.update_ns = now
                status_writer.write(sam)  # READY, always: a second order would be flown
                mark = len(threats_seen)
                publish_picture(writers, target.to_msg(scenario_id="t", time_ns=now), cycle)
                # The tracker's next picture once TEWA answered this one (or after 1 s).
                answered.clear()
                until = time.monotonic() + 1.0
                while len(threats_seen) == mark and time.monotonic() < until:
                    answered.wait(0.05)

        def cycles_after(mark: int, count: int) -> Callable[[], bool]:
            return lambda: len(threats_seen) >= mark + count

        def ids() -> set[int]:
            return {o.order_id for o in orders_seen}

        with tewa_process(weapons, bus_env, tmp_path) as first:
            pump_until(lambda: orders_seen, 60, "order")
            (x,) = ids()
            first.kill()  # with X just issued: no launcher has answered it
            first.wait(10)
        record = json.loads((tmp_path / "state" / "tewa-0.json").read_text())
        assert [o["order_id"] for o in record["orders"]] == [x]
        issued_before = len(orders_seen)
        with tewa_process(weapons, bus_env, tmp_path) as second:
            # The restarted TEWA publishes X again (same id) and runs cycles without a new one.
            pump_until(lambda: len(orders_seen) > issued_before, 60, "order X republished")
            mark = len(threats_seen)
            pump_until(cycles_after(mark, 10), 60, "10 cycles after the restart")
            assert ids() == {x}, logs()
            outcomes.write(
                EngagementOrder(
                    order_id=x, weapon_id="sam-s", track_id=103, status=OrderStatus.ORDER_IN_FLIGHT
                )
            )
            wait_for(
                lambda: (
                    json.loads((tmp_path / "state" / "tewa-0.json").read_text())["orders"][0][
                        "status"
                    ]
                    == int(OrderStatus.ORDER_IN_FLIGHT.value)
                ),
                15,
                "IN_FLIGHT in TEWA's record",
            )
            second.kill()  # with X in flight
            second.wait(10)
        with tewa_process(weapons, bus_env, tmp_path):
            mark = len(threats_seen)
            pump_until(cycles_after(mark, 10), 60, "10 cycles after the second restart")
            assert ids() == {x}, logs()
            # The launcher's outcome settles X: the track is engaged again, under a new id.
            outcomes.write(
                EngagementOrder(
                    order_id=x, weapon_id="sam-s", track_id=103, status=OrderStatus.ORDER_MISS
                )
            )
            pump_until(lambda: len(ids()) == 2, 30, "a new order after the MISS")
    (y,) = ids() - {x}
    per_id = Counter(o.order_id for o in orders_seen if o.status == OrderStatus.ORDER_ISSUED)
    assert per_id[y] == 1 and y != x
    assert {o.track_id for o in orders_seen} == {103}
    assert "tewa restored from" in logs()


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda d: d.pop("orders"), "KeyError"),
        (lambda d: d.update(orders="x"), "not a list"),
        (lambda d: d["orders"][0].update(status=int(OrderStatus.ORDER_KILL.value)), "not held"),
        (lambda d: d["orders"][0].update(pk=7.0), "out of range"),
        (lambda d: d["orders"][0].update(order_id=2**40), "over 32 bits"),
        (lambda d: d.update(killed_ns=[[1, -5]]), "not a count"),
    ],
    ids=["no-orders", "orders-not-a-list", "done-order", "pk", "id", "negative-time"],
)
def test_a_tewa_record_that_does_not_fit_changes_nothing(change, why: str) -> None:
    engine = TewaEngine(DEPOT, weapons={"a": spec("a")}, pk_model=FLAT)
    engine.update_weapon(weapon("a", (0.0, 1000.0, 0.0)), T0)
    engine.step(picture((1, MISSILE, (9000.0, 0.0, 50.0), (-250.0, 0.0, 0.0))), T0)
    doc = json.loads(json.dumps(engine.snapshot()))
    change(doc)
    fresh = TewaEngine(DEPOT, weapons={"a": spec("a")}, pk_model=FLAT)
    before = fresh.snapshot()
    with pytest.raises(MccError, match=why):
        fresh.restore(doc)
    assert fresh.snapshot() == before


def test_a_restored_engine_holds_its_orders_and_ids_move_on() -> None:
    threat = (1, MISSILE, (9000.0, 0.0, 50.0), (-250.0, 0.0, 0.0))
    engine = TewaEngine(DEPOT, weapons={"a": spec("a")}, pk_model=FLAT, first_order_id=500)
    engine.update_weapon(weapon("a", (0.0, 1000.0, 0.0)), T0)
    (order,) = engine.step(picture(threat), T0).orders
    doc = json.loads(json.dumps(engine.snapshot()))
    again = TewaEngine(DEPOT, weapons={"a": spec("a")}, pk_model=FLAT, first_order_id=1)
    (rec,) = again.restore(doc)
    assert rec.order == order and rec.status == OrderStatus.ORDER_ISSUED
    again.update_weapon(weapon("a", (0.0, 1000.0, 0.0)), T0 + S)
    assert again.step(picture(threat, time_ns=T0 + S), T0 + S).orders == ()  # still held
    assert again.on_order(answer(order.order_id, OrderStatus.ORDER_MISS), T0 + S) is not None
    (new,) = again.step(picture(threat, time_ns=T0 + 2 * S), T0 + 2 * S).orders
    assert new.order_id == order.order_id + 1  # past the ids the first one used


SLOW_WEAPON = WEAPONS.replace("interceptor_speed_mps: 3000", "interceptor_speed_mps: 1000")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_tewa_and_launcher_both_killed_mid_flight_one_launch_per_order(
    bus_env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    """The real TEWA and launcher, both killed (-9) with an interceptor in the air and
    restarted under their identities while the test keeps the picture coming: the order is
    launched once, its outcome still comes, and no second order goes to the track before it."""
    weapons = tmp_path / "weapons.yaml"
    weapons.write_text(SLOW_WEAPON)  # 4.2 km at 1000 m/s: 4 s of flight
    target = TruthState(
        time_s=0.0,
        ids=np.array([3], dtype=np.uint32),
        classes=np.array([int(MISSILE.value)], dtype=np.uint8),
        positions_m=np.array([[11000.0, 11000.0, 50.0]]),
        velocities_mps=np.array([[-50.0, -50.0, 0.0]]),
        alive=np.ones(1, bool),
    )
    answers: list[EngagementOrder] = []
    orders: list[EngagementOrder] = []

    def logs() -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()}" for p in sorted(tmp_path.glob("*.log")))

    @contextmanager
    def launcher() -> Iterator[subprocess.Popen[bytes]]:
        n = len(list(tmp_path.glob("sam.*.log")))
        with (tmp_path / f"sam.{n}.log").open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "mcc.orchestrate.runtime", "mcc.apps.launcher:launcher"],
                cwd=REPO,
                env=configured(bus_env, weapons=weapons)
                | {"MCC_MISSION": "test", "MCC_SYSTEM": "sam", "MCC_INDEX": "0"}
                | {"MCC_RUN_DIR": str(tmp_path)},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            try:
                yield proc
            finally:
                if proc.poll() is None:
                    proc.kill()
                proc.wait(10)

    with Bus(domain_id) as bus:
        answer_reader = bus.reader(  # noqa: F841 (kept open for the callback)
            "EngagementOutcome", on_data=lambda r: answers.extend(r.take(64))
        )
        order_reader = bus.reader(  # noqa: F841
            "EngagementOrder", on_data=lambda r: orders.extend(r.take(64))
        )
        writers = (bus.writer("Track"), bus.writer("AirPicture"))
        cycle = 0

        threats: list[int] = []
        answered = threading.Event()

        def on_threats(reader: Reader[Threat]) -> None:
            threats.extend(t.track_id for t in reader.take(64))
            answered.set()

        threat_reader = bus.reader("Threat", on_data=on_threats)  # noqa: F841

        def pump_until(done: Callable[[], object], timeout_s: float, what: str) -> None:
            nonlocal cycle
            deadline = time.monotonic() + timeout_s
            while not done():
                if time.monotonic() > deadline:
                    pytest.fail(f"no {what} in {timeout_s} s\n{logs()}")
                cycle += 1
                now = time.time_ns()
                mark = len(threats)
                publish_picture(writers, target.to_msg(scenario_id="t", time_ns=now), cycle)
                # The next picture once TEWA answered this one (or after 1 s).
                answered.clear()
                until = time.monotonic() + 1.0
                while len(threats) == mark and time.monotonic() < until:
                    answered.wait(0.05)

        def launched() -> list[EngagementOrder]:
            return [a for a in answers if a.status == OrderStatus.ORDER_IN_FLIGHT]

        with tewa_process(weapons, bus_env, tmp_path) as tewa_1, launcher() as sam_1:
            pump_until(launched, 60, "a launch")
            (x,) = {a.order_id for a in launched()}
            sam_1.kill()
            tewa_1.kill()
            sam_1.wait(10)
            tewa_1.wait(10)
        with tewa_process(weapons, bus_env, tmp_path), launcher():
            done = (OrderStatus.ORDER_KILL, OrderStatus.ORDER_MISS)
            pump_until(lambda: any(a.status in done for a in answers), 60, "the outcome")
            issued_before_outcome = {o.order_id for o in orders}
            pump_until(lambda: len({o.order_id for o in orders}) > 1, 60, "a re-engagement")
    launches = Counter(a.order_id for a in launched())
    assert launches[x] == 1 and set(launches.values()) == {1}, (launches, logs())
    assert issued_before_outcome == {x}, logs()
    outcomes = Counter(a.order_id for a in answers if a.status in done)
    assert outcomes[x] == 1


@pytest.mark.slow
def test_a_tewa_record_that_does_not_fit_is_set_aside_and_tewa_starts_clean(
    bus_env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    weapons = tmp_path / "weapons.yaml"
    weapons.write_text(WEAPONS)
    record = tmp_path / "state" / "tewa-0.json"
    record.parent.mkdir()
    record.write_text('{"kind": "tewa", "version": 1, "next_order_id": 7, "orders": "x"}')
    target = TruthState(
        time_s=0.0,
        ids=np.array([3], dtype=np.uint32),
        classes=np.array([int(MISSILE.value)], dtype=np.uint8),
        positions_m=np.array([[11000.0, 11000.0, 50.0]]),
        velocities_mps=np.array([[-50.0, -50.0, 0.0]]),
        alive=np.ones(1, bool),
    )
    sam = weapon("sam-s", (8000.0, 8000.0, 0.0), max_range_m=12000.0)
    orders: list[EngagementOrder] = []
    got = threading.Event()

    def on_orders(reader: Reader[EngagementOrder]) -> None:
        orders.extend(reader.take(64))
        got.set()

    with Bus(domain_id) as bus, tewa_process(weapons, bus_env, tmp_path):
        order_reader = bus.reader("EngagementOrder", on_data=on_orders)  # noqa: F841
        status_writer = bus.writer("WeaponStatus")
        writers = (bus.writer("Track"), bus.writer("AirPicture"))
        deadline = time.monotonic() + 60
        cycle = 0
        while not orders:
            assert time.monotonic() < deadline, (tmp_path / "tewa.0.log").read_text()
            cycle += 1
            now = time.time_ns()
            sam.update_ns = now
            status_writer.write(sam)
            publish_picture(writers, target.to_msg(scenario_id="t", time_ns=now), cycle)
            got.wait(0.2)  # an order, or the next picture (the tracker's cadence)
    log = (tmp_path / "tewa.0.log").read_text()
    assert "tewa state" in log and "starting clean" in log and "not a list" in log
    assert (tmp_path / "state" / "tewa-0.json.corrupt").exists()
    assert json.loads(record.read_text())["orders"][0]["order_id"] == orders[0].order_id


# -- identity: friends are never engaged -----------------------------------------------------

FRIEND, ASSUMED, HOSTILE, SUSPECT, UNKNOWN, PENDING = (
    Identity.IDENTITY_FRIEND.value,
    Identity.IDENTITY_ASSUMED_FRIEND.value,
    Identity.IDENTITY_HOSTILE.value,
    Identity.IDENTITY_SUSPECT.value,
    Identity.IDENTITY_UNKNOWN.value,
    Identity.IDENTITY_PENDING.value,
)


def with_identity(pic: Picture, *identity: int) -> Picture:
    return dataclasses.replace(pic, identity=np.array(identity, dtype=np.uint8))


def test_friends_are_never_engaged_and_the_vetoes_are_counted() -> None:
    # Two weapons, two threats straight at the depot: without identities both get an order.
    both = two_weapon_engine(max_looks=0).step(picture(*TWO_THREATS), T0)
    assert {o.track_id for o in both.orders} == {10, 11}
    for friendly in (FRIEND, ASSUMED):
        engine = two_weapon_engine(max_looks=0)
        for k in range(3):
            now = T0 + k * S
            for w, pos in (("long", (0.0, 0.0, 0.0)), ("short", (8000.0, 0.0, 0.0))):
                engine.update_weapon(weapon(w, pos, max_range_m=15000.0), now)
            pic = with_identity(picture(*TWO_THREATS, time_ns=now), friendly, HOSTILE)
            result = engine.step(pic, now)
            assert all(o.track_id == 11 for o in result.orders)  # never the friend (10)
            msgs = {m.track_id: m for m in result.threats.to_msgs(DEPOT.ids)}
            assert msgs[10].identity == Identity(friendly) and msgs[10].rank == 2
            assert msgs[11].identity == Identity.IDENTITY_HOSTILE and msgs[11].rank == 1
        stats = engine.statistics()
        assert stats.issued >= 1 and stats.friend_vetoes == 3  # one per cycle it was wanted


def test_a_threat_close_to_a_friend_is_held_while_it_is() -> None:
    """A hostile 800 m from a friend (a strike aircraft overtaking the CAP flight, or a new
    track of the wingman that has not answered IFF yet) is not engaged within the clearance;
    once apart it is. Without a clearance it is engaged at once."""
    friend = (10, AIRCRAFT, (10000.0, 0.0, 3000.0), (-200.0, 0.0, 0.0))
    close = (11, AIRCRAFT, (10000.0, 800.0, 3000.0), (-200.0, 0.0, 0.0))
    pic = with_identity(picture(friend, close), FRIEND, HOSTILE)
    held = two_weapon_engine(max_looks=0, friend_clearance_m=1500.0)
    assert held.step(pic, T0).orders == ()
    assert held.statistics().friend_clearance == 1
    apart = (11, AIRCRAFT, (10000.0, 2500.0, 3000.0), (-200.0, 0.0, 0.0))
    later = with_identity(picture(friend, apart, time_ns=T0 + S), FRIEND, HOSTILE)
    assert {o.track_id for o in held.step(later, T0 + S).orders} == {11}
    unguarded = two_weapon_engine(max_looks=0)  # the engine's default: no clearance
    assert {o.track_id for o in unguarded.step(pic, T0).orders} == {11}


def test_identity_ranks_hostile_over_suspect_unknown_pending() -> None:
    # The same kinematics four times over: the identity alone decides the order.
    tracks = [(i, MISSILE, (9000.0 + 10 * i, 0.0, 50.0), (-250.0, 0.0, 0.0)) for i in (1, 2, 3, 4)]
    pic = with_identity(picture(*tracks), PENDING, UNKNOWN, HOSTILE, SUSPECT)
    threats = TewaEngine(DEPOT).evaluate(pic)
    by_rank = threats.track_id[threats.ranked()].tolist()
    assert by_rank == [3, 4, 2, 1]  # hostile, suspect, unknown, pending
    # Without identities (a tracker that predates them) the kinematic order stands.
    plain = TewaEngine(DEPOT).evaluate(picture(*tracks))
    assert plain.track_id[plain.ranked()].tolist() == [1, 2, 3, 4]  # nearest first


def test_an_order_whose_track_turned_friend_is_stopped_before_it_goes_out() -> None:
    threat = (1, MISSILE, (9000.0, 0.0, 50.0), (-250.0, 0.0, 0.0))
    engine = TewaEngine(DEPOT, weapons={"a": spec("a")}, pk_model=FLAT, approval=True)
    engine.update_weapon(weapon("a", (0.0, 0.0, 0.0)), T0)
    (proposal,) = engine.step(with_identity(picture(threat), PENDING), T0).orders
    assert engine.release(proposal)  # still pending: it may go out
    # The next picture identifies it (a Mode 5 reply): the approval is refused.
    engine.step(with_identity(picture(threat, time_ns=T0 + S), FRIEND), T0 + S)
    with pytest.raises(MccError, match="track 1 is identified as a friend now"):
        engine.approve(proposal.order_id, T0 + 2 * S)
    assert engine.order_status(proposal.order_id) == OrderStatus.ORDER_ABORTED
    assert not engine.release(proposal)
    assert engine.statistics().friend_orders_stopped == 2


def test_a_picture_with_malformed_identities_is_refused() -> None:
    msg = AirPicture(
        count=1,
        track_id=pack([5], "<u4"),
        status=pack([1], "u1"),
        classification=pack([2], "u1"),
        quality=pack([0.9], "<f8"),
        state=pack(np.zeros(6), "<f8"),
        covariance=pack(np.zeros((1, 6, 6)), "<f8"),
    )
    assert Picture.from_msg(msg).identity.tolist() == [PENDING]  # empty: a tracker of old
    for identity, why in (
        (b"\x03\x03", "identity: 2 bytes but count=1"),
        (b"\x09", "not an Identity"),
    ):
        with pytest.raises(MccError, match=why):
            Picture.from_msg(dataclasses.replace(msg, identity=identity))
    msg.identity, msg.iff = bytes([FRIEND]), bytes([IffAnswer.IFF_FRIEND.value])
    pic = Picture.from_msg(msg)
    assert pic.identity.tolist() == [FRIEND] and pic.iff.tolist() == [IffAnswer.IFF_FRIEND.value]


def _sam_toc_run(*, with_identity: bool, seconds: float = 45.0) -> tuple[list, TewaEngine]:
    """SAM TOC offline: its radars (IFF answers on the wire format) → the tracker → TEWA with
    its weapons always ready (no launcher: orders are given up and assignments go on). Each
    order as (time, track id, truth target nearest its track)."""
    from mcc.apps.launcher import load_weapons
    from mcc.apps.scenario import load_scenario
    from mcc.tracking import MultiTargetTracker, Scan, TrackerConfig
    from mcc.tracking.classify import classify
    from mcc.types.arrays import optional_field, packed_field

    scenario = load_scenario(REPO / "scenarios/sam-toc.yaml")
    weapons = load_weapons(REPO / "scenarios/weapons-sam-toc.yaml")
    engine = TewaEngine(
        Assets.from_scenario(scenario),
        weapons=weapons.by_id(),
        pk_model=weapons.pk_model,
        mc_trials=200,
    )
    tracker = MultiTargetTracker(TrackerConfig())
    rngs = [np.random.default_rng(i) for i in range(len(scenario.radars))]
    orders = []
    for k in range(1, int(seconds / 0.5)):
        t_s, now = 0.5 * k, T0 + k * S // 2
        truth = scenario.truth_at(t_s)
        for radar, rng in zip(scenario.radars, rngs, strict=True):
            if k % round(radar.scan_period_s / 0.5):
                continue
            msg = radar.scan(truth, t_s, rng).to_msg(
                sensor_id=radar.id,
                scan_id=k,
                origin_ns=now,
                publish_ns=now,
                sensor_position_m=radar.position_m,
            )
            polar = (packed_field(msg, n) for n in ("range_m", "azimuth_rad", "elevation_rad"))
            scan = Scan.from_polar(
                t_s,
                *polar,
                sigma_range_m=radar.sigma_range_m,
                sigma_azimuth_rad=radar.sigma_azimuth_rad,
                sigma_elevation_rad=radar.sigma_elevation_rad,
                sensor_position_m=radar.position_m,
                coverage=radar.in_coverage,
                iff=optional_field(msg, "iff"),
            )
            tracker.step(scan)
        table = tracker.tracks()
        for w in weapons.weapons:
            x, y, z = w.position_m
            ready = WeaponStatus(w.id, WeaponState.WEAPON_READY, w.rounds, w.rounds, x, y, z)
            ready.min_range_m, ready.max_range_m = w.min_range_m, w.max_range_m
            engine.update_weapon(ready, now)
        pic = Picture(
            time_ns=now,
            origin_ns=now,
            track_id=table.ids.astype(np.uint32),
            status=table.status,
            classification=classify(table.x, ndim=3)[0],
            state=table.x,
            identity=table.identity if with_identity else None,
        )
        live = truth.live()
        for order in engine.step(pic, now).orders:
            if engine.release(order):
                row = int(np.flatnonzero(table.ids == order.track_id)[0])
                nearest = np.argmin(np.linalg.norm(live.positions_m - table.x[row, :3], axis=1))
                orders.append((t_s, order.track_id, int(live.ids[nearest])))
    return orders, engine


def test_sam_toc_the_friendly_cap_flight_is_never_engaged() -> None:
    """The returning CAP flight (targets 901, 902, Mode 5) flies through the engagement zone
    at the airbase: with the tracker's identities no order ever names it, the raid is still
    engaged, and TEWA counts the vetoes. Without identities it would have been engaged."""
    friends = {901, 902}
    orders, engine = _sam_toc_run(with_identity=True)
    assert len({target for _, _, target in orders}) >= 5  # hostiles engaged
    assert not [o for o in orders if o[2] in friends], orders
    assert engine.statistics().friend_vetoes > 0
    blind, _ = _sam_toc_run(with_identity=False, seconds=10.0)
    assert [o for o in blind if o[2] in friends]  # the check above means something


def test_a_weapon_is_answered_for_only_by_the_launcher_identity_that_owns_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging
    from types import SimpleNamespace

    from mcc.apps.tewa import _TewaApp

    def app(secured: bool) -> SimpleNamespace:
        bus = SimpleNamespace(secured=secured)
        ctx = SimpleNamespace(bus=bus, log=logging.getLogger("mcc.app.tewa"))
        return SimpleNamespace(ctx=ctx, weapon_owners={}, dropped=Counter())

    def ok(a: SimpleNamespace, weapon: str, source: str | None, what: str = "status") -> bool:
        return bool(_TewaApp._from_owner(a, weapon, source, what))  # type: ignore[arg-type]

    secured = app(secured=True)
    assert ok(secured, "sam-1", "launcher.0") and ok(secured, "sam-2", "launcher.1")
    assert ok(secured, "sam-1", "launcher.0", "outcome")
    # launcher 1's identity answering for launcher 0's weapon: a forged KILL is not taken
    assert not ok(secured, "sam-1", "launcher.1", "outcome")
    assert not ok(secured, "sam-1", None)  # a writer that speaks for no one, on a secured bus
    assert secured.dropped == {
        "outcome not from its launcher": 1,
        "status not from its launcher": 1,
    }
    assert "from launcher.1, not its launcher launcher.0" in caplog.text
    # unsecured: nothing is authenticated, unsourced samples (tools, foreign peers) are taken
    assert ok(app(secured=False), "sam-1", None)


def test_a_radar_witnesses_a_track_with_a_detection_near_it_at_its_scan_time() -> None:
    from mcc.apps.tewa_model import SensorScans

    scans = SensorScans(gate_m=100.0, max_age_s=2.0)
    tracks = np.array([[1000.0, 0.0, 50.0], [0.0, 5000.0, 50.0]])
    velocity = np.array([[-250.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    # radar.0 saw both 1 s before the picture (track 1 was 250 m further out then)
    scans.add("radar.0", T0 - S, np.array([[1250.0, 0.0, 50.0], [0.0, 5030.0, 50.0]]))
    # radar.1 only the first, in the picture's scan; a far detection for the second
    scans.add("radar.1", T0, np.array([[1010.0, 0.0, 50.0], [0.0, 6000.0, 0.0]]))
    # radar.2's scan is too old to witness anything
    scans.add("radar.2", T0 - 3 * S, np.array([[1750.0, 0.0, 50.0], [0.0, 5000.0, 50.0]]))
    assert scans.count(tracks, velocity, T0).tolist() == [2, 1]
    # an older scan of a source never replaces its newer one; bounds hold
    scans.add("radar.1", T0 - 2 * S, np.zeros((0, 3)))
    assert scans.count(tracks, velocity, T0).tolist() == [2, 1]
    small = SensorScans(max_sources=1, max_detections=1)
    assert small.add("a", T0, np.zeros((1, 3)))
    assert not small.add("b", T0, np.zeros((1, 3))) and not small.add("a", T0, np.zeros((2, 3)))


def test_one_radar_alone_does_not_start_an_engagement_without_approval() -> None:
    threat = (1, MISSILE, (9000.0, 0.0, 50.0), (-250.0, 0.0, 0.0))
    for approval, seen, expected in (
        (False, [1], set()),  # one witness: held back, counted
        (False, [2], {1}),  # two radars: engaged
        (True, [1], {1}),  # an operator decides: proposed
    ):
        engine = TewaEngine(
            DEPOT, weapons={"a": spec("a")}, pk_model=FLAT, min_sensors=2, approval=approval
        )
        engine.update_weapon(weapon("a", (0.0, 0.0, 0.0)), T0)
        result = engine.step(picture(threat), T0, np.array(seen))
        assert {o.track_id for o in result.orders} == expected, (approval, seen)
        assert result.threats.to_msgs(DEPOT.ids)[0].witnesses == seen[0]  # on the console
        assert engine.statistics().uncorroborated == (1 if not expected else 0)
    # a picture with no threat (the soak's first cycle: tentative tracks only) is no crash
    engine = TewaEngine(DEPOT, weapons={"a": spec("a")}, pk_model=FLAT, min_sensors=2)
    engine.update_weapon(weapon("a", (0.0, 0.0, 0.0)), T0)
    empty = engine.step(picture(threat, tentative=(1,)), T0, np.array([1]))
    assert empty.orders == () and empty.threats.track_id.size == 0
    # not known (no detections read): every track counts as seen
    engine = TewaEngine(DEPOT, weapons={"a": spec("a")}, pk_model=FLAT, min_sensors=2)
    engine.update_weapon(weapon("a", (0.0, 0.0, 0.0)), T0)
    assert engine.step(picture(threat), T0).orders
    with pytest.raises(MccError, match="min_sensors"):
        TewaEngine(DEPOT, min_sensors=0)


def test_a_kill_reported_before_the_interceptor_could_get_there_is_not_believed() -> None:
    threat = (1, MISSILE, (9000.0, 0.0, 50.0), (-250.0, 0.0, 0.0))
    engine = TewaEngine(DEPOT, weapons={"a": spec("a")}, pk_model=FLAT, min_flyout_fraction=0.5)
    engine.update_weapon(weapon("a", (0.0, 0.0, 0.0)), T0)
    (order,) = engine.step(picture(threat), T0).orders
    flyout_ns = int(order.time_of_flight_s * S)
    assert flyout_ns > 2 * S
    # 2 ms after the order: no interceptor got there (a forged or broken launcher)
    assert engine.on_order(answer(order.order_id, OrderStatus.ORDER_KILL), T0 + 2_000_000) is None
    assert engine.statistics().implausible_outcomes == 1 and engine.statistics().kills == 0
    # an abort may come at once; a kill once the interceptor could be there counts
    assert engine.on_order(answer(order.order_id, OrderStatus.ORDER_IN_FLIGHT), T0 + 1) is not None
    at = T0 + flyout_ns // 2 + 1
    assert engine.on_order(answer(order.order_id, OrderStatus.ORDER_KILL), at) == (
        OrderStatus.ORDER_KILL
    )
    assert engine.statistics().kills == 1


def test_the_engine_forgets_the_oldest_finished_orders(monkeypatch: pytest.MonkeyPatch) -> None:
    """Raids that never stop: every order stayed in the engine, and each cycle went over all
    of them. Past MAX_ORDERS_KEPT, the oldest that hold nothing (answered) are forgotten."""
    from mcc.apps import tewa_engine

    monkeypatch.setattr(tewa_engine, "MAX_ORDERS_KEPT", 3)
    engine = two_weapon_engine(first_order_id=500, max_looks=0)
    issued: list[int] = []
    for k in range(8):
        now = T0 + k * 60 * S
        engine.update_weapon(weapon("long", (0.0, 0.0, 0.0), max_range_m=15000.0), now)
        engine.update_weapon(weapon("short", (8000.0, 0.0, 0.0), max_range_m=4000.0), now)
        threats = [(100 + 2 * k + i, *t[1:]) for i, t in enumerate(TWO_THREATS)]
        result = engine.step(picture(*threats, time_ns=now), now)
        issued += [o.order_id for o in result.orders]
        for o in result.orders:
            answer = EngagementOrder(order_id=o.order_id, status=OrderStatus.ORDER_KILL)
            assert engine.on_order(answer, now + 30 * S) == OrderStatus.ORDER_KILL
    assert len(issued) == 16 and len(engine._orders) <= 3 + 2
    assert engine.order_weapon(issued[-1]) is not None and engine.order_weapon(issued[0]) is None
    assert not engine.holds(issued[0]) and not engine.holds(issued[-1])  # answered: held no more
