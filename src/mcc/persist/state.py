"""What a persistence replica keeps in memory about the bus: its counters, the writers and
topics it discovered, their rate windows and refusals, a topic's policy from a writer's QoS, and
the warnings it logs once."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from cyclonedds.core import Policy

from mcc.bus import Reader
from mcc.persist.store import TopicPolicy

log = logging.getLogger("mcc.persist")


@dataclass
class ServiceStatistics:
    """Counters since the service started."""

    stored: int = 0
    duplicates: int = 0
    refused: int = 0  # every refused sample: topic limits, quotas, rates, skew, denied
    disposed: int = 0
    ignored: int = 0  # samples of writers that are not durable, or undecodable
    requests: int = 0
    aligned: int = 0  # samples taken over from other replicas
    topics: int = 0
    transient_dropped: int = 0  # TRANSIENT samples found in the file at start-up
    rate_limited: int = 0  # refused: the writer's samples or bytes per window
    future_stamped: int = 0  # refused: source timestamp past max_future_skew_s
    unauthorized: int = 0  # refused stores and disposes, denied requests, left-out partitions
    truncated_replies: int = 0  # history replies cut short by max_reply_samples/_bytes
    bad_requests: int = 0  # history requests refused or dropped (malformed, over a rate)
    topics_refused: int = 0  # durable topics not kept: max_topics, or not declared
    writes_timed_out: int = 0  # replies and acks not sent: a reader (a dead one) blocked them
    expired: int = 0  # samples deleted past the retention (PersistLimits.retention_s)


@dataclass
class WriterInfo:
    """A writer the replica discovered (or the writer of a history request)."""

    guid: str
    topic: str
    type_name: str
    partitions: tuple[str, ...]
    durable: bool
    participant: str = ""


@dataclass
class Window:
    """A writer's (or requester's) use of one rate window, on this replica's receive clock."""

    start: float  # time.monotonic()
    samples: int = 0
    nbytes: int = 0


def current_window(windows: dict[str, Window], who: str, window_s: float, most: int) -> Window:
    """``who``'s window now (a new one once ``window_s`` passed); ``windows`` is forgotten
    whole once it holds ``most`` (a churn of writers or requesters must not grow it)."""
    now = time.monotonic()
    window = windows.get(who)
    if window is None or now - window.start >= window_s:
        if len(windows) >= most:
            windows.clear()
        window = windows[who] = Window(now)
    return window


@dataclass
class TopicReader:
    """The replica's reader of one durable topic."""

    name: str
    type_name: str
    type: Any
    reader: Reader[Any]
    policy: TopicPolicy | None  # from the first durable writer seen (or a previous run)
    keys: dict[int, tuple[bytes, str]] = field(default_factory=dict)  # instance handle → key


@dataclass
class Refusal:
    """The newest sample of a writer that was refused, and why (its acks say so)."""

    source_ns: int
    reason: str


def policy_of(name: str, type_name: str, qos: Any) -> TopicPolicy:
    """The topic's policy from a writer's QoS (its ``durability_service``)."""
    persistent = qos[Policy.Durability] == Policy.Durability.Persistent
    if Policy.DurabilityService not in qos:
        return TopicPolicy(name, type_name, persistent, history_depth=1)
    ds = qos[Policy.DurabilityService]
    depth = int(getattr(ds.history, "depth", -1))
    return TopicPolicy(
        name,
        type_name,
        persistent,
        history_depth=depth if depth > 0 else -1,
        max_samples=ds.max_samples,
        max_instances=ds.max_instances,
        max_samples_per_instance=ds.max_samples_per_instance,
        cleanup_delay_ns=ds.cleanup_delay,
    )


def key_json_of(sample: Any) -> str:
    """The key fields of ``sample`` as JSON (stored beside its key bytes)."""
    annotations = getattr(type(sample), "__idl_field_annotations__", {})
    keys = {name: getattr(sample, name) for name, ann in annotations.items() if ann.get("key")}
    return json.dumps(keys, default=str, sort_keys=True)


class LogOnce:
    """Logs a warning the first time ``what`` happens for ``who`` (a writer, a topic, "*"):
    hostile input must not flood the log. At most 10 000 such pairs are remembered."""

    def __init__(self) -> None:
        self._logged: set[tuple[str, str]] = set()

    def __call__(self, who: str, what: str, message: str, *args: Any) -> None:
        if (who, what) in self._logged or len(self._logged) >= 10_000:
            return
        self._logged.add((who, what))
        log.warning(message, *args)
