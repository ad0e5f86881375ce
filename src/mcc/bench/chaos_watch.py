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

__all__ = ["Watch", "enum_value", "wait_for"]


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
                with self.lock:
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


def enum_value(value: Any) -> int:
    """An IDL enum member (or its number) as its number."""
    return int(getattr(value, "value", value))


def wait_for(condition: Callable[[], Any], timeout_s: float, what: str) -> Any:
    return wait_until(condition, timeout_s, what, bench="chaos")
