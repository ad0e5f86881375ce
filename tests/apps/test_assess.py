"""The assessor's figures: GOSPA against truth moved to the picture time, orders, latencies."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mcc.apps.assess import MAX_SECONDS_KEPT, Assessment, AssessorConfig, _friends
from mcc.demo import _assess_fratricide, _fratricide
from mcc.orchestrate.manifest import load_manifest
from mcc.resources import mission_file
from mcc.types import AirPicture, EngagementOrder, OrderStatus, TrackStatus, Truth
from mcc.types.arrays import pack
from tests.conftest import REPO

T0 = 1_800_000_000_000_000_000


def truth(positions: list[list[float]], velocities: list[list[float]], time_ns: int) -> Truth:
    p, v = np.array(positions, float), np.array(velocities, float)
    n = len(p)
    return Truth(
        scenario_id="t",
        time_ns=time_ns,
        count=n,
        target_id=pack(np.arange(1, n + 1), "<u4"),
        target_class=pack(np.ones(n), "u1"),
        x_m=pack(p[:, 0], "<f8"),
        y_m=pack(p[:, 1], "<f8"),
        z_m=pack(p[:, 2], "<f8"),
        vx_mps=pack(v[:, 0], "<f8"),
        vy_mps=pack(v[:, 1], "<f8"),
        vz_mps=pack(v[:, 2], "<f8"),
    )


def picture(states: list[list[float]], status: list[TrackStatus], time_ns: int) -> AirPicture:
    s = np.array(states, float).reshape(-1, 6)
    n = len(s)
    return AirPicture(
        tracker_id="trk",
        cycle=1,
        time_ns=time_ns,
        origin_ns=time_ns - 30_000_000,
        publish_ns=time_ns + 5_000_000,
        count=n,
        track_id=pack(np.arange(1, n + 1), "<u4"),
        status=pack(np.array([x.value for x in status]), "u1"),
        classification=pack(np.zeros(n), "u1"),
        quality=pack(np.ones(n), "<f8"),
        state=pack(s, "<f8"),
        covariance=pack(np.tile(np.eye(6), (n, 1, 1)), "<f8"),
    )


def test_gospa_uses_truth_moved_to_the_picture_time() -> None:
    a = Assessment(cutoff_m=100.0)
    a.on_truth(truth([[0, 0, 1000]], [[100, 0, 0]], T0))
    # The picture is 1 s later: the target is at x = 100, and the track 3 m away from there.
    a.on_picture(
        picture([[103, 0, 1000, 100, 0, 0]], [TrackStatus.TRACK_CONFIRMED], T0 + 1_000_000_000)
    )
    assert list(a.gospa_m) == [pytest.approx(3.0)]
    assert a.summary()["picture_latency_ms"]["p50"] == pytest.approx(35.0)


def test_gospa_is_kept_per_second_of_scenario_time() -> None:
    a = Assessment(cutoff_m=100.0, epoch_ns=T0 - 5_000_000_000)
    a.on_truth(truth([[0, 0, 1000]], [[0, 0, 0]], T0))
    for offset_ms, error_m in ((0, 3.0), (500, 5.0), (1000, 7.0)):
        stamp = T0 + offset_ms * 1_000_000
        a.on_picture(picture([[error_m, 0, 1000, 0, 0, 0]], [TrackStatus.TRACK_CONFIRMED], stamp))
    # scenario seconds 5 (two pictures) and 6 (one)
    assert a.summary()["gospa_by_scenario_s"] == {"5": 4.0, "6": 7.0}
    assert Assessment().summary()["gospa_by_scenario_s"] == {}  # no epoch: not known


def test_the_per_second_gospa_keeps_the_latest_seconds() -> None:
    a = Assessment(cutoff_m=100.0, epoch_ns=T0)
    a.on_truth(truth([[0, 0, 1000]], [[0, 0, 0]], T0))
    for second in range(MAX_SECONDS_KEPT + 5):
        stamp = T0 + second * 1_000_000_000
        a.on_picture(picture([[1, 0, 1000, 0, 0, 0]], [TrackStatus.TRACK_CONFIRMED], stamp))
    kept = a.summary()["gospa_by_scenario_s"]
    assert len(kept) == MAX_SECONDS_KEPT and min(map(int, kept)) == 5


def test_tentative_tracks_do_not_count_and_misses_cost_c_squared_over_2() -> None:
    a = Assessment(cutoff_m=100.0)
    a.on_truth(truth([[0, 0, 0], [5000, 0, 0]], [[0, 0, 0], [0, 0, 0]], T0))
    a.on_picture(
        picture(
            [[0, 0, 0, 0, 0, 0], [5000, 0, 0, 0, 0, 0]],
            [TrackStatus.TRACK_CONFIRMED, TrackStatus.TRACK_TENTATIVE],
            T0,
        )
    )
    # One target unmatched: GOSPA^2 = c^2 / 2 (alpha = 2).
    assert a.gospa_m[0] == pytest.approx(np.sqrt(100.0**2 / 2))
    assert list(a.tracks) == [1] and list(a.targets) == [2]


def test_orders_count_outcomes_and_first_issue_latency() -> None:
    a = Assessment()
    issued = EngagementOrder(
        order_id=7,
        weapon_id="sam-1",
        track_id=3,
        pk=0.7,
        rounds=1,
        issue_ns=T0 + 250_000_000,
        origin_ns=T0,
        status=OrderStatus.ORDER_ISSUED,
    )
    a.on_order(issued)
    a.on_order(
        EngagementOrder(
            order_id=7, status=OrderStatus.ORDER_KILL, issue_ns=T0 + 9_000_000_000, origin_ns=T0
        )
    )  # noqa: E501
    a.on_order(EngagementOrder(order_id=8, status=OrderStatus.ORDER_MISS))
    summary = a.summary(truth_summary={"impacts": [{}, {}], "kills": [{}], "targets": 5})
    assert (summary["orders"], summary["kills"], summary["misses"]) == (2, 1, 1)
    assert summary["detection_to_order_ms"]["count"] == 1
    assert summary["detection_to_order_ms"]["p50"] == pytest.approx(250.0)
    assert (summary["leakers"], summary["targets_killed"], summary["targets_total"]) == (2, 1, 5)


def test_a_truth_stamped_in_the_future_does_not_stay_the_newest() -> None:
    """A sender's clock decided which truth the assessor kept: one stamped a year ahead was
    "the newest" for a year, and every picture was scored against it. On the bus the receive
    time bounds it."""
    a = Assessment(cutoff_m=100.0)
    now = T0
    year_ns = 365 * 24 * 3600 * 10**9
    a.on_truth(truth([[9e5, 0, 0]], [[0, 0, 0]], now + year_ns), receive_ns=now)
    a.on_truth(truth([[0, 0, 0]], [[0, 0, 0]], now - 3600 * 10**9), receive_ns=now)  # an hour old
    assert a.truth is None
    a.on_truth(truth([[0, 0, 1000]], [[0, 0, 0]], now), receive_ns=now)
    a.on_picture(
        picture([[0, 0, 1000, 0, 0, 0]], [TrackStatus.TRACK_CONFIRMED], now + year_ns), now
    )
    a.on_picture(picture([[3, 0, 1000, 0, 0, 0]], [TrackStatus.TRACK_CONFIRMED], now), now)
    assert list(a.gospa_m) == [pytest.approx(3.0)]
    assert a.dropped == {
        "truth stamped in the future": 1,
        "truth stamped long ago": 1,
        "picture stamped in the future": 1,
    }
    assert a.summary()["dropped"] == dict(a.dropped)


def test_what_the_assessor_keeps_is_bounded_and_it_counts_for_days() -> None:
    """The latest ``max_keys`` orders and threats are kept, the oldest forgotten; the counts
    are over all of them (refusing new keys at the bound stopped the figures after a few days
    of a mission that never ends)."""
    a = Assessment(max_keys=3)
    for order_id in range(5):
        a.on_order(EngagementOrder(order_id=order_id, status=OrderStatus.ORDER_ISSUED))
    a.on_order(EngagementOrder(order_id=4, status=OrderStatus.ORDER_KILL))
    a.on_order(EngagementOrder(order_id=3, status=OrderStatus.ORDER_MISS))
    a.on_order(EngagementOrder(order_id=3, status=OrderStatus.ORDER_MISS))  # a repeat
    for track_id in (*range(5), 4, 0):
        a.on_threat(track_id)
    assert sorted(a.orders) == [2, 3, 4] and list(a.threats) == [3, 4, 0]
    summary = a.summary()
    assert (summary["orders"], summary["kills"], summary["misses"]) == (5, 1, 1)
    assert summary["threats_seen"] == 6  # 0 came back after it was forgotten


def engagement(order_id: int, track_id: int, status: OrderStatus) -> EngagementOrder:
    return EngagementOrder(order_id=order_id, weapon_id="sam-1", track_id=track_id, status=status)


def test_orders_against_a_friendly_truth_target_are_fratricide() -> None:
    # Targets 1 (a hostile) and 2 (a friend, IFF Mode 5); tracks 1 and 2 on them, track 3 a
    # false track 5 km from anything.
    a = Assessment(cutoff_m=500.0, friend_ids=frozenset({2}))
    a.on_truth(truth([[0, 0, 1000], [10_000, 0, 3000]], [[0, 0, 0], [0, 0, 0]], T0))
    states = [[20, 0, 1000, 0, 0, 0], [10_030, 0, 3000, 0, 0, 0], [10_000, 5000, 3000, 0, 0, 0]]
    a.on_picture(picture(states, [TrackStatus.TRACK_CONFIRMED] * 3, T0))
    assert a.on_friend == {2: 2}
    a.on_order(engagement(10, 1, OrderStatus.ORDER_ISSUED))  # the hostile: fine
    a.on_order(engagement(11, 2, OrderStatus.ORDER_PROPOSED))  # proposed, then rejected:
    a.on_order(engagement(11, 2, OrderStatus.ORDER_ABORTED))  # it never went out
    a.on_order(engagement(12, 2, OrderStatus.ORDER_ISSUED))  # fratricide, counted once
    a.on_order(engagement(12, 2, OrderStatus.ORDER_IN_FLIGHT))
    a.on_order(engagement(12, 2, OrderStatus.ORDER_KILL))
    a.on_order(engagement(13, 3, OrderStatus.ORDER_ISSUED))  # a false track: not a friend
    truth_summary = {"targets": 1, "friends": 1, "friends_killed": [2], "kills": [], "impacts": []}
    summary = a.summary(truth_summary=truth_summary)
    assert (summary["friends"], summary["friends_engaged"], summary["friends_killed"]) == (1, 1, 1)
    assert summary["friend_orders"] == [{"order": 12, "target": 2}]
    # The friend flew on: its track is no longer on it once the picture says so.
    a.on_picture(picture(states[:1], [TrackStatus.TRACK_CONFIRMED], T0))
    assert a.on_friend == {}


def test_a_hostile_overtaking_a_friend_keeps_its_own_track() -> None:
    """A strike aircraft passes 300 m from the friendly CAP flight: its track's estimate,
    160 m off towards the friend, is nearer the friend for a scan. The pairing is one-to-one
    (as GOSPA's): the friend has its own track, so the order on the hostile's is no fratricide;
    with the friend's track gone, the lone track is the friend's."""
    a = Assessment(cutoff_m=1000.0, friend_ids=frozenset({2}))
    a.on_truth(truth([[0, 0, 3000], [300, 0, 3000]], [[0, 0, 0], [0, 0, 0]], T0))
    states = [[160, 0, 3000, 0, 0, 0], [330, 0, 3000, 0, 0, 0]]  # track 1 nearer the friend
    a.on_picture(picture(states, [TrackStatus.TRACK_CONFIRMED] * 2, T0))
    assert a.on_friend == {2: 2}
    a.on_order(engagement(20, 1, OrderStatus.ORDER_ISSUED))
    assert a.summary()["friends_engaged"] == 0
    a.on_picture(picture(states[:1], [TrackStatus.TRACK_CONFIRMED], T0))
    assert a.on_friend == {1: 2}
    a.on_order(engagement(21, 1, OrderStatus.ORDER_ISSUED))
    assert a.summary()["friend_orders"] == [{"order": 21, "target": 2}]


def test_without_the_scenario_fratricide_is_not_known_not_zero() -> None:
    a = Assessment()
    a.on_truth(truth([[0, 0, 1000]], [[0, 0, 0]], T0))
    a.on_picture(picture([[0, 0, 1000, 0, 0, 0]], [TrackStatus.TRACK_CONFIRMED], T0))
    a.on_order(engagement(1, 1, OrderStatus.ORDER_ISSUED))
    summary = a.summary()
    assert (summary["friends"], summary["friends_engaged"], summary["friends_killed"]) == (
        None,
        None,
        None,
    )
    # An older truth app (no friends_killed in its summary) leaves it unknown too.
    assert a.summary(truth_summary={"kills": [], "impacts": []})["friends_killed"] is None


def test_the_friends_are_the_scenarios_mode5_targets() -> None:
    assert _friends(None) is None
    assert _friends(REPO / "scenarios" / "sam-toc.yaml") == {901, 902}
    assert AssessorConfig(scenario="scenarios/sam-toc.yaml").scenario == Path(
        "scenarios/sam-toc.yaml"
    )
    with pytest.raises(ValueError, match="nope.yaml: cannot read the scenario"):
        AssessorConfig(scenario="nope.yaml")  # checked when the block is (mcc validate)


def test_the_demo_gives_the_assessor_the_truth_systems_scenario() -> None:
    mission = _assess_fratricide(load_manifest(mission_file("sam-toc")))
    assessor = mission.systems["assessor"].config
    assert _friends(REPO / assessor["scenario"]) == {901, 902}
    assert assessor["cutoff_m"] == 1000  # the rest of its config kept
    assert _fratricide({"friends_engaged": 0, "friends_killed": 0}) == "0 / 0"
    assert _fratricide({}) == "- / -"


def test_the_figures_keep_the_latest_values_in_a_fixed_array() -> None:
    """Hours of pictures: the latest ``size`` values, oldest first, in one array allocated
    (and touched) at creation. A deque of floats grew by ~32 bytes a picture per figure, a
    tuple of three by ~140, for the 9 hours MAX_KEPT pictures take at 3 a second."""
    import tracemalloc

    from mcc.apps.assess import Recent

    tracemalloc.start()
    recent = Recent(size=1000, width=3)
    before = tracemalloc.get_traced_memory()[0]
    for i in range(5000):
        recent.append((i, 2 * i, 3 * i))
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert grown < 10_000  # nothing kept per value
    assert len(recent) == 1000 and recent[0].tolist() == [4000, 8000, 12000]
    assert recent[-1].tolist() == [4999, 9998, 14997]
    assert recent.values()[:, 1].mean() == pytest.approx(2 * 4499.5)
    flat = Recent(size=4)
    assert len(flat) == 0 and list(flat) == []
    for v in (1.0, 2.0, 3.0):
        flat.append(v)
    assert list(flat) == [1.0, 2.0, 3.0] and flat[-1] == 3.0
