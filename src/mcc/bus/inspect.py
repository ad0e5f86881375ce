"""Look at a live domain: which topics exist, what their samples say, how fast they come.

The engines behind ``mcc topic list|echo|hz`` (the habits of ``ros2 topic``).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
from cyclonedds.builtin import (
    BuiltinDataReader,
    BuiltinTopicDcpsPublication,
    BuiltinTopicDcpsSubscription,
)
from cyclonedds.core import Policy

from mcc.bus.core import PROFILE_TAG, Bus
from mcc.bus.qos import describe_qos
from mcc.types import OPTIONAL_ARRAYS, PACKED_ARRAYS
from mcc.types.arrays import packed_field


@dataclass
class TopicInfo:
    """A topic seen on the domain, with its endpoints."""

    name: str
    type_name: str
    writers: int = 0
    readers: int = 0
    profiles: set[str] = field(default_factory=set)
    qos: dict[str, str] = field(default_factory=dict)


def discover_topics(bus: Bus, *, duration_s: float = 2.0) -> list[TopicInfo]:
    """Topics with at least one remote or local endpoint, after ``duration_s`` of discovery."""
    pubs = BuiltinDataReader(bus.participant, BuiltinTopicDcpsPublication)
    subs = BuiltinDataReader(bus.participant, BuiltinTopicDcpsSubscription)
    time.sleep(duration_s)  # discovery is asynchronous: listen for a while, as ros2 topic list does
    topics: dict[str, TopicInfo] = {}
    for builtin, is_writer in ((pubs, True), (subs, False)):
        for ep in builtin.read(10_000):
            if not ep.sample_info.valid_data or ep.topic_name.startswith("DCPS"):
                continue
            info = topics.setdefault(ep.topic_name, TopicInfo(ep.topic_name, ep.type_name))
            if is_writer:
                info.writers += 1
                info.qos = info.qos or describe_qos(ep.qos)
            else:
                info.readers += 1
            data = ep.qos[Policy.Userdata].data if Policy.Userdata in ep.qos else b""
            if data.startswith(PROFILE_TAG):
                info.profiles.add(data[len(PROFILE_TAG) :].decode(errors="replace"))
    return sorted(topics.values(), key=lambda t: t.name)


def sample_to_dict(sample: Any, *, max_items: int = 8) -> dict[str, Any]:
    """A printable view of a sample: packed arrays decoded, long arrays shortened."""
    kind = type(sample).__name__
    packed = {**PACKED_ARRAYS.get(kind, {}), **OPTIONAL_ARRAYS.get(kind, {})}
    out: dict[str, Any] = {}
    for f in fields(sample):
        value = getattr(sample, f.name)
        if f.name in packed:
            value = _short(packed_field(sample, f.name), max_items)
        elif isinstance(value, enum.Enum):
            value = value.name
        elif isinstance(value, bytes):
            value = f"<{len(value)} bytes>"
        elif isinstance(value, list):
            value = [
                sample_to_dict(v, max_items=max_items) if hasattr(v, "__dataclass_fields__") else v
                for v in value[:max_items]
            ] + (["…"] if len(value) > max_items else [])
        elif hasattr(value, "__dataclass_fields__"):
            value = sample_to_dict(value, max_items=max_items)
        out[f.name] = value
    return out


def _short(array: np.ndarray[Any, Any], max_items: int) -> str:
    with np.printoptions(precision=3, threshold=max_items, edgeitems=2, suppress=True):
        return f"{array.dtype}{list(array.shape)} {np.array2string(array, separator=', ')}"


@dataclass(frozen=True)
class RateReport:
    """Rate and, where samples carry ``origin_ns``, end-to-end latency over one window."""

    samples: int
    window_s: float
    rate_hz: float
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    latency_max_ms: float | None


def measure_rate(
    reader: Any,
    *,
    window_s: float,
    windows: int | None = None,
    clock_ns: Callable[[], int] = time.time_ns,
) -> Iterator[RateReport]:
    """Yield one report per ``window_s``; latency is now − ``origin_ns`` at reception."""
    done = 0
    while windows is None or done < windows:
        start = time.monotonic()
        count, latencies = 0, []
        while (remaining := window_s - (time.monotonic() - start)) > 0:
            for sample in reader.take_wait(1024, timeout_s=remaining):
                count += 1
                origin = getattr(sample, "origin_ns", 0)
                if origin:
                    latencies.append(clock_ns() - origin)
        elapsed = time.monotonic() - start
        if latencies:
            p50, p99, pmax = np.percentile(latencies, [50, 99, 100]) / 1e6
            lat: tuple[float | None, ...] = (float(p50), float(p99), float(pmax))
        else:
            lat = (None, None, None)
        yield RateReport(count, elapsed, count / elapsed, *lat)
        done += 1
