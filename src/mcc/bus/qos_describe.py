"""QoS for people: policy names and ``describe_qos`` (what `mcc qos`, incompatible-QoS
reports and docs/qos.md show), with the defaults a profile that leaves a policy unset gets."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from cyclonedds.qos import (
    BasePolicy,
    Policy,
    Qos,
)

INFINITE_NS = 0x7FFF_FFFF_FFFF_FFFF  # DDS_INFINITY


_DEFAULT_MAX_BLOCKING_NS = 100_000_000  # Cyclone's default for reliable writers


# DDS QosPolicyId_t values, as in requested/offered incompatible QoS statuses.
_POLICY_NAMES = {
    1: "user_data",
    2: "durability",
    3: "presentation",
    4: "deadline",
    5: "latency_budget",
    6: "ownership",
    7: "ownership_strength",
    8: "liveliness",
    9: "time_based_filter",
    10: "partition",
    11: "reliability",
    12: "destination_order",
    13: "history",
    14: "resource_limits",
    15: "entity_factory",
    16: "writer_data_lifecycle",
    17: "reader_data_lifecycle",
    18: "topic_data",
    19: "group_data",
    20: "transport_priority",
    21: "lifespan",
    22: "durability_service",
    23: "property",
    24: "type_consistency",
    25: "data_representation",
}


# Order of describe_qos keys; policies not listed follow in the Qos' own order.
_DESCRIBE_ORDER = (
    "reliability",
    "durability",
    "history",
    "deadline",
    "liveliness",
    "resource_limits",
    "durability_service",
    "lifespan",
    "latency_budget",
    "ownership",
    "ownership_strength",
    "destination_order",
    "transport_priority",
    "time_based_filter",
    "partition",
    "presentation",
    "writer_data_lifecycle",
    "reader_data_lifecycle",
)


# describe_qos always shows these when present; other policies only when not at their default.
_CORE = ("reliability", "durability", "history", "deadline", "liveliness", "resource_limits")


_DEFAULT_TEXT = {
    "durability_service": "keep-last 1",
    "lifespan": "infinite",
    "latency_budget": "0 s",
    "ownership": "shared",
    "ownership_strength": "0",
    "destination_order": "by-reception-timestamp",
    "transport_priority": "0",
    "time_based_filter": "0 s",
    "partition": "",
    "presentation": "instance",
    "writer_data_lifecycle": "autodispose",
    "reader_data_lifecycle": "autopurge no-writer infinite, disposed infinite",
}


# Plumbing rather than QoS a person chooses (MCC reads its profile tag from user data itself).
_NOT_DESCRIBED = frozenset(
    {
        "BinaryProperty",
        "DataRepresentation",
        "EntityName",
        "Groupdata",
        "IgnoreLocal",
        "Property",
        "Topicdata",
        "TypeConsistency",
        "Userdata",
    }
)


# What a reader or writer gets for a policy its profile leaves unset (Cyclone's defaults).
_COMMON_DEFAULTS = {
    "durability": "volatile",
    "history": "keep-last 1",
    "deadline": "infinite",
    "liveliness": "automatic, lease infinite",
    "resource_limits": "unlimited",
}


READER_DEFAULTS = {"reliability": "best-effort", **_COMMON_DEFAULTS}


WRITER_DEFAULTS = {"reliability": "reliable", **_COMMON_DEFAULTS}


def describe_qos(qos: Qos) -> dict[str, str]:
    """The policies of ``qos`` for people, e.g. ``{"history": "keep-last 1", …}``.

    Reliability, durability, history, deadline, liveliness and resource limits are shown when
    present; other policies only when they differ from the DDS default. Plumbing (user data, data
    representation, type consistency …) is left out.
    """
    described: dict[str, str] = {}
    for policy in qos:
        if getattr(policy, "__scope__", "").partition("<")[0] in _NOT_DESCRIBED:
            continue
        key, text = _describe_policy(policy)
        if key in _CORE or _DEFAULT_TEXT.get(key) != text:
            described[key] = text
    return {key: described[key] for key in ordered_keys(described)}


def policy_name(policy_id: int) -> str:
    """The name of a DDS QoS policy id, as in incompatible-QoS statuses (11 → "reliability")."""
    return _POLICY_NAMES.get(policy_id, f"policy {policy_id}")


def ordered_keys(keys: Iterable[str]) -> list[str]:
    unique = list(dict.fromkeys(keys))
    known = [key for key in _DESCRIBE_ORDER if key in unique]
    return known + [key for key in unique if key not in _DESCRIBE_ORDER]


def _duration(ns: int) -> str:
    if ns >= INFINITE_NS:
        return "infinite"
    for unit, size in (("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)):
        if ns % size == 0:
            return f"{ns // size} {unit}"
    return f"{ns} ns"


def _limit(value: int) -> str:
    return "unlimited" if value < 0 else str(value)


def _history(policy: BasePolicy) -> str:
    if isinstance(policy, Policy.History.KeepLast):
        return f"keep-last {policy.depth}"
    return "keep-all"


def _limits(max_samples: int, max_instances: int, max_samples_per_instance: int) -> str:
    if max_samples < 0 and max_instances < 0 and max_samples_per_instance < 0:
        return "unlimited"
    return (
        f"max_samples={_limit(max_samples)}, max_instances={_limit(max_instances)}, "
        f"max_samples_per_instance={_limit(max_samples_per_instance)}"
    )


def _kebab(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _describe_policy(policy: BasePolicy) -> tuple[str, str]:
    scope: str = getattr(policy, "__scope__", type(policy).__name__)
    if isinstance(policy, Policy.Reliability.Reliable):
        blocking = policy.max_blocking_time
        if blocking == _DEFAULT_MAX_BLOCKING_NS:
            return "reliability", "reliable"
        return "reliability", f"reliable, max-blocking {_duration(blocking)}"
    if scope == "History":
        return "history", _history(policy)
    if isinstance(policy, Policy.Deadline):
        return "deadline", _duration(policy.deadline)
    if isinstance(policy, Policy.LatencyBudget):
        return "latency_budget", _duration(policy.budget)
    if isinstance(policy, Policy.Lifespan):
        return "lifespan", _duration(policy.lifespan)
    if isinstance(
        policy,
        Policy.Liveliness.Automatic
        | Policy.Liveliness.ManualByParticipant
        | Policy.Liveliness.ManualByTopic,
    ):
        return "liveliness", f"{policy_kind(policy)}, lease {_duration(policy.lease_duration)}"
    if isinstance(policy, Policy.ResourceLimits):
        return "resource_limits", _limits(
            policy.max_samples, policy.max_instances, policy.max_samples_per_instance
        )
    if isinstance(policy, Policy.DurabilityService):
        text = _history(policy.history)
        if policy.cleanup_delay:
            text += f", cleanup delay {_duration(policy.cleanup_delay)}"
        limits = _limits(policy.max_samples, policy.max_instances, policy.max_samples_per_instance)
        if limits != "unlimited":
            text += f", {limits}"
        return "durability_service", text
    if isinstance(policy, Policy.Partition):
        return "partition", ", ".join(policy.partitions)
    if isinstance(policy, Policy.OwnershipStrength):
        return "ownership_strength", str(policy.strength)
    if isinstance(policy, Policy.TransportPriority):
        return "transport_priority", str(policy.priority)
    if isinstance(policy, Policy.TimeBasedFilter):
        return "time_based_filter", _duration(policy.filter_time)
    if isinstance(policy, Policy.WriterDataLifecycle):
        return "writer_data_lifecycle", "autodispose" if policy.autodispose else "no autodispose"
    if isinstance(policy, Policy.ReaderDataLifecycle):
        nowriter = _duration(policy.autopurge_nowriter_samples_delay)
        disposed = _duration(policy.autopurge_disposed_samples_delay)
        return "reader_data_lifecycle", f"autopurge no-writer {nowriter}, disposed {disposed}"
    if scope == "PresentationAccessScope":
        flags = [f for f in ("coherent", "ordered") if getattr(policy, f"{f}_access", False)]
        return "presentation", ", ".join([policy_kind(policy), *flags])
    return _snake(scope), _generic(policy)


def policy_kind(policy: BasePolicy) -> str:
    """``Policy.Durability.TransientLocal`` → "transient-local"."""
    return _kebab(type(policy).__name__.rpartition(".")[2])


def _generic(policy: BasePolicy) -> str:
    """A policy by its kind if it has no fields, else by its fields."""
    if not dataclasses.is_dataclass(policy) or not dataclasses.fields(policy):
        return policy_kind(policy)
    return ", ".join(f"{f.name}={getattr(policy, f.name)}" for f in dataclasses.fields(policy))
