"""What the store takes and gives: topic policies, write and dispose operations, their
results, per-writer state and history pages."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from mcc.types import PersistSample, PersistTopic

UNLIMITED = -1


@dataclass(frozen=True)
class TopicPolicy:
    """How a topic is kept: durability kind and the writers' ``durability_service`` policy."""

    name: str
    type_name: str
    persistent: bool
    history_depth: int = 16  # keep-last depth per instance; -1 = keep-all
    max_samples: int = UNLIMITED
    max_instances: int = UNLIMITED
    max_samples_per_instance: int = UNLIMITED
    cleanup_delay_ns: int = 0

    @property
    def durability(self) -> str:
        return "persistent" if self.persistent else "transient"

    def to_msg(self) -> PersistTopic:
        return PersistTopic(
            topic=self.name,
            type_name=self.type_name,
            persistent=self.persistent,
            history_depth=self.history_depth,
            max_samples=self.max_samples,
            max_instances=self.max_instances,
            max_samples_per_instance=self.max_samples_per_instance,
            cleanup_delay_ns=self.cleanup_delay_ns,
        )

    @classmethod
    def from_msg(cls, msg: PersistTopic) -> TopicPolicy:
        return cls(
            msg.topic,
            msg.type_name,
            msg.persistent,
            msg.history_depth,
            msg.max_samples,
            msg.max_instances,
            msg.max_samples_per_instance,
            msg.cleanup_delay_ns,
        )


@dataclass(frozen=True)
class Write:
    """A sample to store."""

    topic: str
    type_name: str
    partitions: tuple[str, ...]
    key: bytes
    key_json: str
    writer_guid: str
    source_ns: int
    data: bytes


@dataclass(frozen=True)
class Dispose:
    """An explicit dispose of an instance: its samples go after the cleanup delay."""

    topic: str
    type_name: str
    partitions: tuple[str, ...]
    key: bytes
    writer_guid: str
    source_ns: int


@dataclass
class ApplyResult:
    """What one ``apply`` did, per writer GUID: stored/duplicate/refused."""

    stored: int = 0
    duplicates: int = 0
    disposed: int = 0
    refused: list[tuple[Write, str]] = field(default_factory=list)
    writers: set[str] = field(default_factory=set)  # writers with samples stored or refused


@dataclass(frozen=True)
class WriterState:
    """What a replica has committed from one writer (the content of its ``PersistAck``)."""

    guid: str
    topic: str
    stored: int
    last_source_ns: int


def partitions_match(reader: Sequence[str], writer: Sequence[str]) -> bool:
    """DDS partition matching: some reader name matches some writer name (wildcards allowed)."""
    return any(
        fnmatchcase(w, r) or fnmatchcase(r, w) for r in (reader or ("",)) for w in (writer or ("",))
    )


#: ``allow(topic, partition)``: whether a history reply may hold samples of ``topic`` written
#: in ``partition`` (the service asks its authorization hook).
Allow = Callable[[str, str], bool]


@dataclass(frozen=True)
class HistoryPage:
    """The retained samples a history reply carries, and whether bounds cut it short."""

    topics: list[TopicPolicy]
    samples: list[PersistSample]  # oldest first
    truncated: bool = False  # a bound (samples or bytes per reply) left samples out
    denied: int = 0  # samples left out because their partition was not allowed


def policy_from_row(row: sqlite3.Row) -> TopicPolicy:
    """A topic's policy from its row in the store's ``topics`` table."""
    return TopicPolicy(
        row["name"],
        row["type_name"],
        bool(row["persistent"]),
        row["history_depth"],
        row["max_samples"],
        row["max_instances"],
        row["max_samples_per_instance"],
        row["cleanup_delay_ns"],
    )
