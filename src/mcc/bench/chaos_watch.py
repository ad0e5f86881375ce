"""What ``mcc bench chaos`` hears of the mission it kills in (``mcc.bench.chaos``): `Watch`,
the statuses, pictures, supervisor beats, orders and outcomes, stamped with the bench's own
monotonic clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mcc.bench.deploy import wait_until
from mcc.types import OrderStatus, SystemState

__all__ = [
    "ORDER_DRAIN_S", "SWITCH_WINDOW_S", "Watch", "enum_value", "id_switches", "missing_ids",
    "picture_gap", "score_orders", "wait_for",
]  # fmt: skip

#: Tracks lost while new ids appear within this long of the recovery: id switches.
SWITCH_WINDOW_S = 3.0
NUMBERING_JUMP = 1000  # a larger step between order ids is a new numbering, not a loss
ORDER_DRAIN_S = 20.0  # an order issued later than this before the end may still be in flight
TERMINAL = {OrderStatus.ORDER_KILL.value, OrderStatus.ORDER_MISS.value}


@dataclass
class Watch:
    """What the bench hears, stamped with its own monotonic clock."""

    mission: str
    status: Any = None
    status_mono: float = 0.0
    statuses: list[tuple[float, dict[str, tuple[int, int, int, int]]]] = field(default_factory=list)
    pictures: list[tuple[float, frozenset[int]]] = field(default_factory=list)
    active_beats: dict[int, float] = field(default_factory=dict)  # supervisor pid → first
    orders: dict[int, float] = field(default_factory=dict)  # order id → first seen (issued)
    order_ids: set[int] = field(default_factory=set)  # every id heard, whatever its status
    outcomes: dict[int, set[tuple[int, int]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on_status(self, reader: Any) -> None:
        now = time.monotonic()
        for msg in reader.take():
            if msg.mission != self.mission:
                continue
            entries = {
                e.system_id: (enum_value(e.state), e.pid, e.since_ns, e.restarts)
                for e in msg.systems
            }
            with self.lock:
                self.status, self.status_mono = msg, now
                self.statuses.append((now, entries))

    def on_picture(self, reader: Any) -> None:
        now = time.monotonic()
        for msg in reader.take():
            ids = np.frombuffer(bytes(msg.track_id), dtype="<u4")
            with self.lock:
                self.pictures.append((now, frozenset(int(i) for i in ids)))

    def on_beat(self, reader: Any) -> None:
        now = time.monotonic()
        prefix = f"{self.mission}/supervisor/"
        for hb in reader.take():
            if hb.system_id.startswith(prefix) and hb.message.startswith("active"):
                with self.lock:
                    self.active_beats.setdefault(hb.pid, now)

    def on_order(self, reader: Any) -> None:
        now = time.monotonic()
        for order in reader.take():
            with self.lock:
                self.order_ids.add(order.order_id)
                if enum_value(order.status) == OrderStatus.ORDER_ISSUED.value:
                    self.orders.setdefault(order.order_id, now)

    def on_outcome(self, reader: Any) -> None:
        for outcome in reader.take():
            with self.lock:
                seen = self.outcomes.setdefault(outcome.order_id, set())
                seen.add((enum_value(outcome.status), outcome.rounds))

    def running(self) -> dict[str, tuple[int, int, int, int]]:
        with self.lock:
            if not self.statuses:
                return {}
            entries = self.statuses[-1][1]
        running = SystemState.SYSTEM_RUNNING.value
        return {k: v for k, v in entries.items() if v[0] == running}


def picture_gap(watch: Watch, start: float, end: float) -> float | None:
    with watch.lock:
        times = [t for t, _ in watch.pictures if start <= t <= end]
    if not watch.pictures:
        return None
    if len(times) < 2:
        return round(end - start, 3)
    edges = [start, *times, end]
    return round(max(b - a for a, b in zip(edges, edges[1:], strict=False)), 3)


def id_switches(watch: Watch, index_before: int, recovered: float) -> int:
    """Tracks of the last picture before the kill that vanish while new ids appear."""
    with watch.lock:
        last = watch.pictures[index_before - 1][1] if index_before else frozenset()
        later = [
            ids for t, ids in watch.pictures[index_before:] if t <= recovered + SWITCH_WINDOW_S
        ]
    seen_after = frozenset().union(*later)
    return min(len(last - seen_after), len(seen_after - last))  # lost ids, new ids


def missing_ids(ids: list[int]) -> int:
    """Ids never heard between the first and last of each numbering (a TEWA that starts with
    no record numbers from a new base): ``EngagementOrder`` samples lost though reliable."""
    return sum(b - a - 1 for a, b in zip(ids, ids[1:], strict=False) if 1 < b - a <= NUMBERING_JUMP)


def score_orders(watch: Watch, end: float) -> dict[str, int]:
    """The orders of a run, by ``end`` (the watch's clock): issued, lost (issued more than
    `ORDER_DRAIN_S` before the end, never answered with an outcome), duplicated (answered
    with two different final outcomes: fired twice), and ids never heard (`missing_ids`)."""
    with watch.lock:
        orders = dict(watch.orders)
        outcomes = {k: set(v) for k, v in watch.outcomes.items()}
        ids = sorted(watch.order_ids)
    settled = [o for o, t in orders.items() if end - t > ORDER_DRAIN_S]
    return {
        "orders_issued": len(orders),
        "orders_lost": sum(1 for o in settled if o not in outcomes),
        "orders_duplicated": sum(
            1 for seen in outcomes.values() if len({s for s in seen if s[0] in TERMINAL}) > 1
        ),
        "order_ids_missing": missing_ids(ids),
    }


def enum_value(value: Any) -> int:
    """An IDL enum member (or its number) as its number."""
    return int(getattr(value, "value", value))


def wait_for(condition: Callable[[], Any], timeout_s: float, what: str) -> Any:
    return wait_until(condition, timeout_s, what, bench="chaos")
