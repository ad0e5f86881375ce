"""`Succession`, a supervisor's part that decides when a standby claims the mission: the claim
waits for a silent active supervisor, and a standby that was cut off and hears the mission again
waits its grace again before it may claim (a partition that heals is not a lost supervisor);
and the heartbeat intake that feeds it and the supervisor's loop."""

from __future__ import annotations

import time

from mcc.bus import Bus
from mcc.orchestrate.instances import Instance
from mcc.orchestrate.supervisor_bus import HeartbeatIntake
from mcc.orchestrate.supervisor_leadership import REJOIN_GRACE_S, STANDBY_GRACE_S, Succession
from mcc.types import Heartbeat, SystemState
from tests.conftest import wait_for

LEASE_S = 0.8


def _standby(at: float = 0.0) -> Succession:
    succession = Succession("m", lease_s=LEASE_S)
    succession.stand_by(1, at)
    return succession


def test_a_standby_claims_once_the_active_one_is_silent_while_the_mission_beats() -> None:
    s = _standby()
    s.hear_mission(STANDBY_GRACE_S + 1.0)
    assert s.should_claim(STANDBY_GRACE_S + 1.2)


def test_a_standby_that_hears_nothing_is_the_one_cut_off_and_never_claims() -> None:
    s = _standby()
    s.hear_mission(5.0)
    assert not any(s.should_claim(t) for t in (6.0, 10.0, 19.9))  # nothing heard since 5 s


def _active_beat() -> Heartbeat:
    return Heartbeat(state=SystemState.SYSTEM_RUNNING, message="active epoch 1")


def test_a_standby_cut_off_waits_for_the_active_one_when_it_hears_the_mission_again() -> None:
    s = _standby()
    s.hear_mission(5.0)
    s.hear_mission(20.0)  # after 15 s of silence: the partition healed
    # the instances are heard seconds before the active supervisor: no claim meanwhile
    for t in range(21, 30):
        s.hear_mission(float(t))
        assert not s.should_claim(t + 0.5)
    s.hear_peer("m/supervisor/7", _active_beat(), 29.6)  # the active one, rediscovered
    s.hear_mission(30.0)
    assert not s.should_claim(30.1)
    for t in range(31, 33):  # the instances beat each second; the active one went silent
        s.hear_mission(float(t))
    assert s.should_claim(32.1)  # a lease after its last beat: the active one is lost


def test_a_standby_cut_off_claims_after_its_rejoin_grace_if_the_active_one_never_returns() -> None:
    s = _standby()
    s.hear_mission(5.0)
    for t in range(20, 32):  # the partition healed at 20 s; the active one died during it
        s.hear_mission(float(t))
    assert not s.should_claim(20.0 + REJOIN_GRACE_S - 0.1)
    assert s.should_claim(20.0 + REJOIN_GRACE_S + 0.1)


def test_beats_a_period_apart_do_not_restart_the_grace() -> None:
    s = _standby()
    for t in range(1, 6):  # one instance, a beat a second: longer apart than a lease
        s.hear_mission(float(t))
    assert s.should_claim(5.1)


def test_only_a_beat_that_may_change_a_state_wakes_the_supervisors_loop(
    bus_env: dict[str, str], domain_id: int
) -> None:
    """A new instance beats every 20 ms for its first second; the supervisor's loop wakes for
    its first beat (it is then running), for a new process under its name and for other
    supervisors, and takes the rest at its next tick."""
    wakes: list[float] = []
    intake = HeartbeatIntake("m", Succession("m", lease_s=3.0), wake=lambda: wakes.append(1.0))
    inst = Instance("m/radar/0", "radar", 0, time.monotonic(), SystemState.SYSTEM_STARTING, 4242)
    with Bus(domain_id) as bus:
        bus.reader("Heartbeat", on_data=intake.on_data)
        writer = bus.writer("Heartbeat")
        assert writer.wait_for_readers(1, timeout_s=10)

        def beat(system_id: str = inst.id, pid: int = 4242) -> None:
            writer.write(Heartbeat(system_id=system_id, pid=pid, state=SystemState.SYSTEM_RUNNING))

        def applied() -> bool:
            intake.apply({inst.id: inst}, events, secured=False)
            return inst.last_beat_mono is not None and inst.last_beat_mono > mark

        events: list[tuple[int, str, str]] = []
        mark = time.monotonic()
        beat()
        wait_for(lambda: wakes, 10, "the first beat waking the loop")
        wait_for(applied, 10, "the first beat applied")
        assert inst.state == SystemState.SYSTEM_RUNNING and [e for _, _, e in events] == [
            "first heartbeat"
        ]
        woken = len(wakes)
        for _ in range(20):
            mark = time.monotonic()
            beat()
            wait_for(applied, 10, "a beat taken at a tick")
        assert len(wakes) == woken  # twenty beats of a running instance: no wake-up
        beat(pid=4243)  # another process under its name (a restart)
        wait_for(lambda: len(wakes) > woken, 10, "the new process's beat waking the loop")
        woken = len(wakes)
        beat(system_id="m/supervisor/77", pid=77)  # another supervisor
        wait_for(lambda: len(wakes) > woken, 10, "a supervisor's beat waking the loop")
