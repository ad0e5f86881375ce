"""The assessor's figures: GOSPA against truth moved to the picture time, orders, latencies."""

from __future__ import annotations

import numpy as np
import pytest

from mcc.apps.assess import Assessment
from mcc.types import AirPicture, EngagementOrder, OrderStatus, TrackStatus, Truth
from mcc.types.arrays import pack

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


def test_what_the_assessor_keeps_is_bounded() -> None:
    a = Assessment(max_keys=3)
    for order_id in range(5):
        a.on_order(EngagementOrder(order_id=order_id, status=OrderStatus.ORDER_ISSUED))
    for track_id in range(5):
        a.on_threat(track_id)
    assert sorted(a.orders) == [0, 1, 2] and a.threats == {0, 1, 2}
    assert a.dropped == {
        "order past the bound of orders tracked": 2,
        "threat past the bound of threats tracked": 2,
    }
