"""The launcher: intercept geometry, the Pk model, engagements, reloads, and the app on the bus."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mcc.apps.launcher import (
    DEFAULT_CLASS_FACTORS,
    Launcher,
    PkModel,
    WeaponSpec,
    intercept_time_s,
    launcher,
    load_weapons,
    parse_weapons,
)
from mcc.apps.statefile import StateFile, open_state
from mcc.bus import Bus, HeartbeatPublisher
from mcc.errors import MccError, ScenarioError
from mcc.orchestrate.runtime import AppContext, Identity
from mcc.settings import Settings
from mcc.types import (
    EngagementOrder,
    OrderStatus,
    TargetClass,
    Track,
    TrackStatus,
    WeaponState,
    WeaponStatus,
)
from tests.apps.configs import configured
from tests.conftest import REPO, app_instance, stop_app, wait_for

S = 1_000_000_000  # ns per second
T0 = 1_700_000_000 * S
FLAT = PkModel(class_factors=(1.0,) * len(TargetClass))  # no class effect


def spec(**overrides: object) -> WeaponSpec:
    fields: dict[str, object] = {
        "id": "sam-1",
        "position_m": (0.0, 0.0, 0.0),
        "rounds": 4,
        "min_range_m": 500.0,
        "max_range_m": 20000.0,
        "interceptor_speed_mps": 1500.0,
        "base_pk": 0.8,
        "reload_s": 2.0,
        "magazine_reload_s": 10.0,
    }
    fields.update(overrides)
    return WeaponSpec.model_validate(fields)


def track(
    track_id: int = 7,
    position: tuple[float, float, float] = (6000.0, 0.0, 0.0),
    velocity: tuple[float, float, float] = (0.0, 0.0, 0.0),
    *,
    update_ns: int = T0,
    cls: TargetClass = TargetClass.CLASS_CRUISE_MISSILE,
    status: TrackStatus = TrackStatus.TRACK_CONFIRMED,
) -> Track:
    (x, y, z), (vx, vy, vz) = position, velocity
    return Track(
        track_id=track_id,
        status=status,
        classification=cls,
        x_m=x,
        y_m=y,
        z_m=z,
        vx_mps=vx,
        vy_mps=vy,
        vz_mps=vz,
        update_ns=update_ns,
        origin_ns=update_ns,
    )


def order(order_id: int = 1, track_id: int = 7, *, rounds: int = 1, weapon: str = "sam-1"):
    return EngagementOrder(
        order_id=order_id,
        weapon_id=weapon,
        track_id=track_id,
        pk=0.5,
        rounds=rounds,
        issue_ns=T0,
        origin_ns=T0 - S // 10,
        status=OrderStatus.ORDER_ISSUED,
    )


# -- geometry and the Pk model -------------------------------------------------------------


def test_intercept_time_closed_forms() -> None:
    w = [[0.0, 0.0, 0.0]]
    # Still target at 6 km, 1500 m/s: 4 s. Head-on at 500 m/s: 6000 / 2000 = 3 s.
    assert intercept_time_s(w, 1500.0, [[6000, 0, 0]], [[0, 0, 0]])[0, 0] == pytest.approx(4.0)
    assert intercept_time_s(w, 1500.0, [[6000, 0, 0]], [[-500, 0, 0]])[0, 0] == pytest.approx(3.0)
    # Receding at 500 m/s: 6000 / 1000 = 6 s. Receding faster than the interceptor: never.
    assert intercept_time_s(w, 1500.0, [[6000, 0, 0]], [[500, 0, 0]])[0, 0] == pytest.approx(6.0)
    assert intercept_time_s(w, 1500.0, [[6000, 0, 0]], [[2000, 0, 0]])[0, 0] == math.inf
    # A faster target closing head-on is still met; as fast and receding: never.
    assert intercept_time_s(w, 300.0, [[6000, 0, 0]], [[-900, 0, 0]])[0, 0] == pytest.approx(5.0)
    assert intercept_time_s(w, 300.0, [[6000, 0, 0]], [[300, 0, 0]])[0, 0] == math.inf


def test_intercept_point_is_reached_by_both() -> None:
    rng = np.random.default_rng(3)
    wp = rng.uniform(-5000, 5000, (4, 3))
    speed = rng.uniform(800, 1500, 4)
    tp = rng.uniform(-20000, 20000, (6, 3))
    tv = rng.uniform(-300, 300, (6, 3))
    t = intercept_time_s(wp, speed, tp, tv)
    assert t.shape == (4, 6) and np.isfinite(t).all()  # interceptors faster than every target
    point = tp[None] + tv[None] * t[..., None]
    np.testing.assert_allclose(np.linalg.norm(point - wp[:, None], axis=2), speed[:, None] * t)


def test_pk_model_range_and_class_factors() -> None:
    model = PkModel(optimal_range_fraction=0.5, edge_factor=0.4)
    r = np.array([100.0, 600.0, 5000.0, 7500.0, 10000.0, 10001.0])
    f = model.range_factor(r, 500.0, 10000.0)
    np.testing.assert_allclose(f, [0.0, 1.0, 1.0, 0.7, 0.4, 0.0])
    pk = model.pk(0.8, 7500.0, min_range_m=500.0, max_range_m=10000.0, classification=2)
    assert pk == pytest.approx(0.8 * 0.7 * DEFAULT_CLASS_FACTORS[2])
    # Broadcast weapons × targets; unknown class values count as CLASS_UNKNOWN.
    grid = model.pk(
        [[0.9], [0.5]], [[1000.0, 1000.0]], min_range_m=0, max_range_m=1e4, classification=[[1, 99]]
    )
    np.testing.assert_allclose(grid, [[0.9 * 0.9, 0.9 * 0.8], [0.5 * 0.9, 0.5 * 0.8]])
    with pytest.raises(ScenarioError, match="edge_factor"):
        PkModel(edge_factor=1.5)


# -- the launcher --------------------------------------------------------------------------


def test_flyout_timing_and_status_transitions() -> None:
    unit = Launcher(spec(rounds=2), pk_model=FLAT, rng=1, now_ns=T0)
    assert (unit.state, unit.rounds_ready, unit.next_event_ns()) == (
        WeaponState.WEAPON_READY,
        2,
        None,
    )

    reply = unit.engage(order(1), track(), T0)
    assert reply.reason == "" and reply.order.status == OrderStatus.ORDER_IN_FLIGHT
    assert (reply.order.order_id, reply.order.track_id, reply.order.rounds) == (1, 7, 1)
    assert reply.order.origin_ns == T0 - S // 10 and reply.order.issue_ns == T0
    status = unit.status()
    assert status.state == WeaponState.WEAPON_ENGAGING and status.engaged_track_id == 7
    assert status.rounds_ready == 1 and status.rounds_total == 2
    assert unit.next_event_ns() == T0 + 4 * S  # 6 km at 1500 m/s

    assert unit.advance(T0 + 4 * S - 1) == []
    (outcome,) = unit.advance(T0 + 4 * S)
    assert outcome.status in (OrderStatus.ORDER_KILL, OrderStatus.ORDER_MISS)
    assert (outcome.order_id, outcome.track_id, outcome.weapon_id) == (1, 7, "sam-1")
    assert outcome.pk == pytest.approx(0.8)
    assert unit.state == WeaponState.WEAPON_RELOADING and unit.status().engaged_track_id == 0
    assert unit.next_event_ns() == T0 + 6 * S  # reload_s = 2
    assert unit.advance(T0 + 6 * S) == [] and unit.state == WeaponState.WEAPON_READY

    # The last round: a magazine reload (10 s), then full again.
    unit.engage(order(2), track(update_ns=T0 + 6 * S), T0 + 6 * S)
    assert unit.rounds_ready == 0
    assert len(unit.advance(T0 + 10 * S)) == 1
    assert unit.state == WeaponState.WEAPON_RELOADING and unit.rounds_ready == 0
    unit.advance(T0 + 20 * S - 1)
    assert unit.state == WeaponState.WEAPON_RELOADING
    unit.advance(T0 + 20 * S)
    assert (unit.state, unit.rounds_ready) == (WeaponState.WEAPON_READY, 2)


def test_empty_without_magazine_reload_goes_offline() -> None:
    unit = Launcher(spec(rounds=1, magazine_reload_s=None, reload_s=0.0), rng=1, now_ns=T0)
    unit.engage(order(1), track(), T0)
    unit.advance(T0 + 10 * S)
    assert (unit.state, unit.rounds_ready) == (WeaponState.WEAPON_OFFLINE, 0)
    assert unit.engage(order(2), track(), T0 + 11 * S).order.status == OrderStatus.ORDER_ABORTED


def test_moving_target_is_met_at_the_predicted_point() -> None:
    # The track is 1 s old: the launcher extrapolates it before solving the intercept.
    unit = Launcher(spec(), pk_model=FLAT, rng=1, now_ns=T0)
    old = track(position=(6500.0, 0.0, 0.0), velocity=(-500.0, 0.0, 0.0), update_ns=T0 - S)
    plan = unit.plan_intercept(old, T0)
    assert plan is not None
    assert plan.time_of_flight_s == pytest.approx(3.0)  # 6000 m closing at 2000 m/s
    assert plan.point_m == pytest.approx((4500.0, 0.0, 0.0))
    assert plan.range_m == pytest.approx(4500.0)


@pytest.mark.parametrize(
    ("tr", "reason"),
    [
        (None, "track 7 unknown"),
        (track(status=TrackStatus.TRACK_DELETED), "track 7 deleted"),
        (track(position=(200.0, 0.0, 0.0)), "outside 500..20000 m"),
        (track(position=(30000.0, 0.0, 0.0)), "outside 500..20000 m"),
        (track(velocity=(3000.0, 0.0, 0.0)), "cannot catch"),
    ],
    ids=["unknown", "deleted", "too-close", "too-far", "too-fast"],
)
def test_orders_it_cannot_fly_are_aborted(tr: Track | None, reason: str) -> None:
    unit = Launcher(spec(), rng=1, now_ns=T0)
    reply = unit.engage(order(), tr, T0)
    assert reply.order.status == OrderStatus.ORDER_ABORTED and reason in reply.reason
    assert (unit.state, unit.rounds_ready) == (WeaponState.WEAPON_READY, 4)


def test_one_engagement_at_a_time_and_shutdown_aborts_it() -> None:
    unit = Launcher(spec(), rng=1, now_ns=T0)
    assert unit.engage(order(1), track(), T0).order.status == OrderStatus.ORDER_IN_FLIGHT
    busy = unit.engage(order(2, track_id=8), track(8), T0 + S)
    assert busy.order.status == OrderStatus.ORDER_ABORTED and "WEAPON_ENGAGING" in busy.reason
    (aborted,) = unit.shutdown(T0 + 2 * S)
    assert (aborted.order_id, aborted.status) == (1, OrderStatus.ORDER_ABORTED)
    assert unit.state == WeaponState.WEAPON_OFFLINE and unit.next_event_ns() is None
    assert unit.advance(T0 + 10 * S) == []


def _kills(seed: int, n: int, rounds: int) -> np.ndarray:
    unit = Launcher(
        spec(rounds=2, reload_s=0.0, magazine_reload_s=0.0, base_pk=0.7),
        pk_model=FLAT,
        rng=seed,
        now_ns=T0,
    )
    out = []
    for k in range(n):
        now = T0 + 10 * k * S
        unit.engage(order(k + 1, rounds=rounds), track(update_ns=now), now)
        (outcome,) = unit.advance(now + 5 * S)
        out.append(outcome.status == OrderStatus.ORDER_KILL)
    return np.array(out)


def test_kill_draws_follow_pk_and_the_seed() -> None:
    n = 1000
    single = _kills(11, n, rounds=1)
    salvo = _kills(12, n, rounds=2)  # two independent rounds: 1 - 0.3² = 0.91
    for kills, p in ((single, 0.7), (salvo, 0.91)):
        sigma = math.sqrt(p * (1 - p) / n)
        assert abs(kills.mean() - p) < 4 * sigma, (kills.mean(), p)
    np.testing.assert_array_equal(_kills(11, 100, 1), single[:100])  # same seed, same draws
    assert not np.array_equal(_kills(13, 100, 1), single[:100])


# -- the weapons file ----------------------------------------------------------------------


def test_the_shipped_weapons_file() -> None:
    weapons = load_weapons(REPO / "scenarios/weapons-sam-toc.yaml")
    assert [w.id for w in weapons.weapons] == ["sam-1", "sam-2", "sam-3"]
    assert weapons.weapon("sam-3").max_range_m == 8000
    assert weapons.pk_model == PkModel(optimal_range_fraction=0.6, edge_factor=0.5)
    a, b = weapons.rng("sam-1").random(3), weapons.rng("sam-1").random(3)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, weapons.rng("sam-2").random(3))


BASE = """
weapons:
  - {id: a, position_m: [0, 0, 0], rounds: 2, max_range_m: 9000, interceptor_speed_mps: 900,
     base_pk: 0.7}
"""


def test_weapons_file_options_and_mistakes() -> None:
    w = parse_weapons(BASE + "pk_model: {class_factors: {uav: 0.2}}\n")
    assert w.pk_model.class_factors[int(TargetClass.CLASS_UAV.value)] == 0.2
    assert w.weapons[0].reload_s == 2.0 and w.weapons[0].magazine_reload_s is None
    with pytest.raises(ScenarioError, match=r"<weapons>: weapons\.0\.base_pk: .*\(got 1\.5\)"):
        parse_weapons(BASE.replace("0.7", "1.5"))
    with pytest.raises(ScenarioError, match="duplicate id 'a'"):
        parse_weapons(BASE + BASE.replace("weapons:\n", ""))
    with pytest.raises(ScenarioError, match="unknown class 'jet'"):
        parse_weapons(BASE + "pk_model: {class_factors: {jet: 0.2}}\n")
    with pytest.raises(ScenarioError, match="min_range_m 9500 must be below max_range_m 9000"):
        parse_weapons(BASE.replace("rounds: 2,", "rounds: 2, min_range_m: 9500,"))
    with pytest.raises(ScenarioError, match="no weapon 'b'; weapons: a"):
        parse_weapons(BASE).weapon("b")


# -- the app on the bus --------------------------------------------------------------------


TEST_WEAPON = """
seed: 5
weapons:
  - {id: sam-t, position_m: [0, 0, 0], rounds: 2, min_range_m: 100, max_range_m: 10000,
     interceptor_speed_mps: 3000, base_pk: 0.9, reload_s: 1.0, magazine_reload_s: 5}
"""


@pytest.mark.slow
def test_launcher_process_engages_and_answers(
    bus_env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    weapons = tmp_path / "weapons.yaml"
    weapons.write_text(TEST_WEAPON)
    with Bus(domain_id) as bus:
        statuses = bus.reader("WeaponStatus")
        # Answers (EngagementOutcome) are keep-last-1 per order: the MISS/KILL would replace an
        # IN_FLIGHT not yet taken, so they are collected on the dispatcher as they arrive.
        answers: list[tuple[float, EngagementOrder]] = []
        answer_reader = bus.reader(  # noqa: F841 (kept open for the callback)
            "EngagementOutcome",
            on_data=lambda r: answers.extend((time.monotonic(), m) for m in r.take(64)),
        )
        tracks, orders = bus.writer("Track"), bus.writer("EngagementOrder")
        with app_instance(
            "mcc.apps.launcher:launcher",
            env=configured(bus_env, weapons=weapons, status_period_s=0.5),
            system="launcher",
            logs=tmp_path,
        ) as proc:
            first = _wait_status(statuses, lambda s: True, tmp_path)
            assert first.weapon_id == "sam-t" and first.state == WeaponState.WEAPON_READY
            assert (first.rounds_ready, first.rounds_total, first.max_range_m) == (2, 2, 10000.0)

            # A still target 3 km away: 1 s of flight at 3000 m/s.
            now = time.time_ns()
            tracks.write(track(42, (3000.0, 0.0, 1000.0), update_ns=now))
            orders.write(
                EngagementOrder(
                    order_id=9001,
                    weapon_id="sam-t",
                    track_id=42,
                    pk=0.9,
                    rounds=1,
                    issue_ns=now,
                    origin_ns=now - 50_000_000,
                    status=OrderStatus.ORDER_ISSUED,
                )
            )
            engaging = _wait_status(
                statuses, lambda s: s.state == WeaponState.WEAPON_ENGAGING, tmp_path
            )
            assert engaging.engaged_track_id == 42 and engaging.rounds_ready == 1
            t_launch, in_flight = _wait_answer(answers, OrderStatus.ORDER_IN_FLIGHT, tmp_path)
            t_outcome, outcome = _wait_answer(answers, None, tmp_path)
            flyout_s = t_outcome - t_launch
            assert outcome.status in (OrderStatus.ORDER_KILL, OrderStatus.ORDER_MISS)
            expected_s = math.hypot(3000, 1000) / 3000
            assert expected_s - 0.15 < flyout_s < expected_s + 0.5
            for msg in (in_flight, outcome):
                assert (msg.order_id, msg.track_id, msg.weapon_id) == (9001, 42, "sam-t")
                assert msg.origin_ns == now - 50_000_000
            reloading = _wait_status(
                statuses, lambda s: s.state != WeaponState.WEAPON_ENGAGING, tmp_path
            )
            assert reloading.state == WeaponState.WEAPON_RELOADING
            _wait_status(statuses, lambda s: s.state == WeaponState.WEAPON_READY, tmp_path)
            stop_app(proc, tmp_path, "launcher")
        last = _wait_status(statuses, lambda s: s.state == WeaponState.WEAPON_OFFLINE, tmp_path)
        assert last.weapon_id == "sam-t" and last.rounds_ready == 1


def _wait_status(reader, accept, logs: Path, timeout_s: float = 15.0) -> WeaponStatus:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for status in reader.take_wait(16, timeout_s=0.2):
            if accept(status):
                return status
    pytest.fail(
        f"no matching WeaponStatus in {timeout_s} s:\n{(logs / 'launcher.log').read_text()}"
    )


def _wait_answer(
    answers: list[tuple[float, EngagementOrder]], status, logs: Path, timeout_s: float = 10.0
) -> tuple[float, EngagementOrder]:
    """The first collected answer with ``status`` (None: any outcome, KILL/MISS/ABORTED)."""
    done = (OrderStatus.ORDER_KILL, OrderStatus.ORDER_MISS, OrderStatus.ORDER_ABORTED)

    def first() -> tuple[float, EngagementOrder] | None:
        for arrived, msg in list(answers):
            if (status is None and msg.status in done) or msg.status == status:
                return arrived, msg
        return None

    return wait_for(first, timeout_s, f"a {status} answer (see {logs / 'launcher.log'})")


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            {"weapon": "nope"},
            "weapons 'weapons-sam-toc' have no weapon 'nope'; weapons: sam-1, sam-2, sam-3",
        ),
        (
            {"weapons": "{bad}"},
            "systems.launcher.config.weapons: {bad}: weapons: Field required (got '{bad}')",
        ),
        (
            {"track_wait_s": -1},
            "systems.launcher.config.track_wait_s: Input should be greater than 0 (got -1)",
        ),
    ],
    ids=["unknown-weapon", "bad-file", "negative-wait"],
)
def test_a_user_mistake_is_a_message_and_status_2(
    domain_id: int,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    config: dict[str, Any],
    expected: str,
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("seed: 1\n")
    config = {k: v.format(bad=bad) if isinstance(v, str) else v for k, v in config.items()}
    with Bus(domain_id) as bus:
        ctx = AppContext(
            identity=Identity("test", "launcher", 0),
            args=[],
            bus=bus,
            heartbeat=HeartbeatPublisher(bus, "test/launcher/0"),
            run_dir=tmp_path,
            settings=Settings.from_env(configured({"MCC_SYSTEM": "launcher"}, **config)),
        )
        assert launcher(ctx) == 2
    assert capsys.readouterr().err == "mcc: error: " + expected.format(bad=bad) + "\n"


# -- never twice for one order, across a kill -9 ---------------------------------------------


@contextmanager
def launcher_process(
    weapons: Path, env: dict[str, str], logs: Path, **config: Any
) -> Iterator[subprocess.Popen[bytes]]:
    """``test/launcher/0`` under the runtime (run folder ``logs``: its record is
    ``logs/state/launcher-0.json``), output in ``logs/launcher.N.log``; killed after the block."""
    n = len(list(logs.glob("launcher.*.log")))
    with (logs / f"launcher.{n}.log").open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mcc.orchestrate.runtime", "mcc.apps.launcher:launcher"],
            cwd=REPO,
            env=configured(env, weapons=weapons, status_period_s=0.2, **config)
            | {"MCC_MISSION": "test", "MCC_SYSTEM": "launcher", "MCC_INDEX": "0"}
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


def launcher_logs(logs: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()}" for p in sorted(logs.glob("launcher.*.log")))


@pytest.mark.slow
def test_a_launcher_killed_in_flight_never_fires_the_order_again(
    bus_env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    """kill -9 with an interceptor in the air, restart under the same identity: the order
    (replayed to the new process by TEWA's writer) is not fired again, the magazine is as it
    was, and the engagement in flight still ends with one outcome."""
    weapons = tmp_path / "weapons.yaml"
    weapons.write_text(TEST_WEAPON)
    record = tmp_path / "state" / "launcher-0.json"
    with Bus(domain_id) as bus:
        statuses = bus.reader("WeaponStatus")
        answers: list[tuple[float, EngagementOrder]] = []
        answer_reader = bus.reader(  # noqa: F841 (kept open for the callback)
            "EngagementOutcome",
            on_data=lambda r: answers.extend((time.monotonic(), m) for m in r.take(64)),
        )
        tracks, orders = bus.writer("Track"), bus.writer("EngagementOrder")
        now = time.time_ns()
        # 9.05 km away: 3 s of flight at 3000 m/s, time to kill the launcher in between.
        tracks.write(track(42, (9000.0, 0.0, 1000.0), update_ns=now))
        order = EngagementOrder(
            order_id=9001,
            weapon_id="sam-t",
            track_id=42,
            pk=0.9,
            rounds=1,
            issue_ns=now,
            origin_ns=now,
            status=OrderStatus.ORDER_ISSUED,
        )
        with launcher_process(weapons, bus_env, tmp_path) as first:
            orders.write(order)
            t_launch, _ = _wait_answer(answers, OrderStatus.ORDER_IN_FLIGHT, tmp_path)
            first.kill()  # SIGKILL: no shutdown, no abort
            first.wait(10)
        assert record.exists(), launcher_logs(tmp_path)
        statuses.take(1024)
        with launcher_process(weapons, bus_env, tmp_path) as second:
            # The track and the order are replayed to the new process (transient-local).
            tracks.write(track(42, (9000.0, 0.0, 1000.0), update_ns=time.time_ns()))
            back = _wait_status(statuses, lambda s: True, tmp_path)
            assert (back.state, back.rounds_ready) == (WeaponState.WEAPON_ENGAGING, 1), (
                launcher_logs(tmp_path)
            )
            t_outcome, outcome = _wait_answer(answers, None, tmp_path)
            assert outcome.status in (OrderStatus.ORDER_KILL, OrderStatus.ORDER_MISS)
            assert t_outcome - t_launch > 2.5  # at the intercept time, not at the restart
            wait_for(
                lambda: (
                    "order 9001 ignored: answered ORDER_IN_FLIGHT before a restart"
                    in launcher_logs(tmp_path)
                ),
                10,
                "the replayed order refused",
            )
            assert second.poll() is None
    launches = Counter(a.order_id for _, a in answers if a.status == OrderStatus.ORDER_IN_FLIGHT)
    outcomes = Counter(a.order_id for _, a in answers if a.status != OrderStatus.ORDER_IN_FLIGHT)
    assert launches == {9001: 1}, answers
    assert outcomes == {9001: 1}, answers


@pytest.mark.slow
def test_a_corrupt_record_is_set_aside_and_the_launcher_starts_full(
    bus_env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    weapons = tmp_path / "weapons.yaml"
    weapons.write_text(TEST_WEAPON)
    record = tmp_path / "state" / "launcher-0.json"
    record.parent.mkdir()
    record.write_bytes(b'{"kind": "launcher", "version": 1, "unit": {"rounds_ready": 99}')
    with Bus(domain_id) as bus, launcher_process(weapons, bus_env, tmp_path):
        statuses = bus.reader("WeaponStatus")
        first = _wait_status(statuses, lambda s: True, tmp_path)
        assert (first.state, first.rounds_ready) == (WeaponState.WEAPON_READY, 2)
    assert (tmp_path / "state" / "launcher-0.json.corrupt").exists()
    assert "launcher state" in launcher_logs(tmp_path) and "starting clean" in launcher_logs(
        tmp_path
    )


@pytest.mark.parametrize(
    "doc",
    [
        {"unit": {"weapon_id": "other"}, "answered": []},
        {"unit": {}, "answered": []},
        {"answered": [[1, 99]]},
        {"answered": "nope"},
        {"answered": [[-1, 2]]},
    ],
    ids=["other-weapon", "empty-unit", "bad-status", "not-a-list", "negative-id"],
)
def test_a_record_that_does_not_fit_leaves_the_launcher_as_new(doc: dict) -> None:
    unit = Launcher(spec(), rng=0, now_ns=T0)
    good = unit.snapshot()
    with pytest.raises(MccError):
        unit.restore(doc.get("unit", {"weapon_id": "sam-1"}))
    assert unit.snapshot() == good


def test_a_snapshot_round_trips_an_engagement_in_flight() -> None:
    unit = Launcher(spec(), pk_model=FLAT, rng=0, now_ns=T0)
    order = EngagementOrder(order_id=5, weapon_id="sam-1", track_id=7, rounds=1)
    assert unit.engage(order, track(7), T0).order.status == OrderStatus.ORDER_IN_FLIGHT
    doc = json.loads(json.dumps(unit.snapshot()))  # through JSON, as on disk
    again = Launcher(spec(), pk_model=FLAT, rng=0, now_ns=T0 + S)
    again.restore(doc)
    assert again.snapshot() == unit.snapshot()
    assert again.state == WeaponState.WEAPON_ENGAGING and again.rounds_ready == 3
    (outcome,) = again.advance(T0 + 10 * S)
    assert (outcome.order_id, outcome.status) in {
        (5, OrderStatus.ORDER_KILL),
        (5, OrderStatus.ORDER_MISS),
    }


def test_the_state_file_is_atomic_and_refuses_what_is_not_its_own(tmp_path: Path) -> None:
    path = tmp_path / "state" / "x-0.json"
    sf = StateFile(path, kind="launcher")
    assert sf.load() is None and sf.corrupt == 0  # no file yet: a first start
    assert sf.save({"a": 1})
    assert StateFile(path, kind="launcher").load() == {"a": 1}
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in path.parent.iterdir()] == ["x-0.json"]  # no temporary left
    for garbage in (b"\xff\x00", b"[1]", b'{"kind": "tewa", "version": 1}', b"{" * 100_000):
        path.write_bytes(garbage)
        other = StateFile(path, kind="launcher")
        assert other.load() is None and other.corrupt == 1
        assert not path.exists() and path.with_name("x-0.json.corrupt").exists()


def test_outside_a_mission_there_is_no_record_unless_one_is_named(tmp_path: Path) -> None:
    common = {"run_dir": tmp_path, "system": "launcher", "index": 0, "kind": "launcher"}
    none = open_state(None, env={}, **common)  # type: ignore[arg-type]
    assert none.path is None and none.save({"a": 1}) and none.load() is None
    assert not (tmp_path / "state").exists()
    mission = open_state(None, env={"MCC_RUN_DIR": str(tmp_path)}, **common)  # type: ignore[arg-type]
    assert mission.path == tmp_path / "state" / "launcher-0.json"
    named = open_state(str(tmp_path / "mine.json"), env={}, **common)  # type: ignore[arg-type]
    assert named.path == tmp_path / "mine.json"


def test_the_launcher_keeps_bounded_tracks_and_order_ids(
    bus_env: dict[str, str], domain_id: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under raids that never stop, every track the tracker ever made stayed in the launcher
    (and every order id it took): a deleted track goes, and both are bounded."""
    from mcc.apps import launcher as module

    monkeypatch.setattr(module, "MAX_TRACKS", 3)
    monkeypatch.setattr(module, "MAX_SEEN", 4)
    weapons = tmp_path / "weapons.yaml"
    weapons.write_text(TEST_WEAPON)
    with Bus(domain_id) as bus, Bus(domain_id) as peer:
        ctx = AppContext(
            identity=Identity("test", "launcher", 0),
            args=[],
            bus=bus,
            heartbeat=HeartbeatPublisher(bus, "test/launcher/0"),
            run_dir=tmp_path,
            settings=Settings.from_env(configured({"MCC_SYSTEM": "launcher"}, weapons=weapons)),
        )
        opts = module.app_config(ctx, module.LauncherConfig)
        spec = load_weapons(weapons).weapons[0]
        unit = Launcher(spec, rng=np.random.default_rng(1), now_ns=time.time_ns())
        app = module._LauncherApp(ctx, unit, opts)
        tracks, orders = peer.writer("Track"), peer.writer("EngagementOrder")
        assert tracks.wait_for_readers(1, timeout_s=10)
        assert orders.wait_for_readers(1, timeout_s=10)
        for track_id in range(1, 4):
            tracks.write(track(track_id))
        tracks.write(track(2, status=TrackStatus.TRACK_DELETED))
        for track_id in range(10, 13):  # one fits, two are past the bound
            tracks.write(track(track_id))
        old_ns = time.time_ns() - 3600 * 10**9  # refused by age: only remembered as taken
        for order_id in range(100, 110):
            orders.write(
                EngagementOrder(
                    order_id=order_id,
                    weapon_id="sam-t",
                    track_id=1,
                    issue_ns=old_ns,
                    status=OrderStatus.ORDER_ISSUED,
                )  # fmt: skip
            )
        wait_for(
            lambda: (app._take(time.time_ns()), len(app.seen) == 4 and app.tracks_dropped == 2)[1],
            10,
            "tracks and orders taken",
        )
    assert sorted(app.tracks) == [1, 3, 10] and list(app.seen) == [106, 107, 108, 109]
