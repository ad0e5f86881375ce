"""The pieces of the console's state (``mcc.console.state``): the topics it reads, the names
of the IDL enums the page shows, the chart `Series`, and the guards of the strict JSON the
browsers get (non-finite numbers refused or replaced by None).
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mcc.types import (
    Identity,
    IffAnswer,
    OrderStatus,
    SystemState,
    TargetClass,
    TrackStatus,
    WeaponState,
)

TOPICS = (
    "AirPicture",
    "Track",
    "Threat",
    "EngagementOrder",
    "WeaponStatus",
    "Heartbeat",
    "MissionStatus",
    "DetectionBatch",
    "Truth",
)


def _names(enum: Any, prefix: str) -> dict[int, str]:
    return {int(m.value): m.name.removeprefix(prefix).lower() for m in enum}


TRACK_STATUS = _names(TrackStatus, "TRACK_")
TARGET_CLASS = _names(TargetClass, "CLASS_")
ORDER_STATUS = _names(OrderStatus, "ORDER_")
WEAPON_STATE = _names(WeaponState, "WEAPON_")
SYSTEM_STATE = _names(SystemState, "SYSTEM_")
#: STANAG 1241 standard identity and the last IFF answer of a track (``friend``,
#: ``assumed_friend``, ``hostile`` …; ``not_interrogated``, ``no_reply``, ``friend`` …).
IDENTITY = _names(Identity, "IDENTITY_")
IFF_ANSWER = _names(IffAnswer, "IFF_")
#: What the page shows for an identity or IFF value it does not know (counted).
UNKNOWN_VALUE = "?"
#: Why an identity or IFF value is shown as ``?``.
IDENTITY_ERRORS = {
    "unknown_value": "a value outside the enum",
    "malformed": "its packed identity/iff arrays do not match its count",
}


def lookup_table(names: dict[int, str]) -> np.ndarray:
    """``names`` as a table indexed by an octet (``UNKNOWN_VALUE`` where there is no name), to
    name a packed ``u1`` array at once."""
    return np.array([names.get(i, UNKNOWN_VALUE) for i in range(256)], dtype=object)


IDENTITY_TABLE = lookup_table(IDENTITY)
IFF_TABLE = lookup_table(IFF_ANSWER)
HELD_ORDERS = ("proposed", "issued", "in_flight")
#: TEWA re-publishes every threat each cycle: a threat not heard again within this long of
#: the newest one (receive time) is gone.
THREAT_CYCLE_NS = 2_000_000_000
DROP_REASONS = {
    "nonfinite": "a number is NaN or infinite",
    "future": "stamped more than {skew_s:g} s ahead of this host's clock",
    "malformed": "its packed arrays do not match its count",
    "oversized": "a field is larger than the console takes",
}


def enum_value(x: Any) -> int:
    return int(getattr(x, "value", x))


def ns_to_ms(ns: int) -> int:
    return int(ns // 1_000_000)


def rounded(x: float, digits: int = 1) -> float:
    return round(float(x), digits)


@dataclass
class Series:
    """Points (Unix ms, value) of the last ``history_s``."""

    history_s: float
    maxlen: int = 2000
    points: deque[tuple[int, float]] = field(default_factory=deque)

    def add(self, t_ms: int, value: float, *, per_s: bool = False) -> None:
        if per_s and self.points and self.points[-1][0] // 1000 == t_ms // 1000:
            self.points[-1] = (t_ms, value)  # one point per second: the latest
        else:
            self.points.append((t_ms, value))
        if len(self.points) > self.maxlen:
            self.points.popleft()

    def recent(self, now_ms: int) -> list[list[float]]:
        horizon = now_ms - int(self.history_s * 1000)
        while self.points and self.points[0][0] < horizon:
            self.points.popleft()
        return [[t, round(v, 3)] for t, v in self.points]

    def values(self, now_ms: int, window_s: float) -> list[float]:
        horizon = now_ms - int(window_s * 1000)
        return [v for t, v in self.points if t >= horizon]


def percentile(values: Iterable[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) of ``values``; None when there are none."""
    data = list(values)
    return float(np.percentile(data, q)) if data else None


#: The system part of a supervisor's heartbeat id (``MISSION/supervisor/PID``).
SUPERVISOR = "supervisor"


def system_of(system_id: str) -> str:
    parts = system_id.split("/")
    return parts[1] if len(parts) == 3 else system_id


def round2(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def all_finite(*values: float) -> bool:
    return all(math.isfinite(v) for v in values)


class NonFiniteError(ValueError):
    """A JSON text with NaN, Infinity or a number too large for a double."""


def _refuse_constant(name: str) -> Any:
    raise NonFiniteError(name)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NonFiniteError(text)
    return value


def strict_json(text: str) -> Any:
    """``text`` parsed as strict JSON: ``NonFiniteError`` for NaN, Infinity or 1e999, which
    Python's parser accepts and a browser's refuses."""
    return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)


def finite_only(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (the last guard of the JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_only(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_only(v) for v in value]
    return value


def evict(items: OrderedDict[str, Any], keep: int) -> int:
    """Remove the least recently heard of ``items`` beyond ``keep``; the number removed."""
    over = max(len(items) - keep, 0)
    for _ in range(over):
        items.popitem(last=False)
    return over
