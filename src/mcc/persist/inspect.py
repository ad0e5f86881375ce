"""``mcc persist inspect``: a store's topics, instances, writers and samples, sizes and times."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcc.persist.schema import SCHEMA_VERSION
from mcc.persist.store import Store


@dataclass(frozen=True)
class TopicSummary:
    name: str
    type_name: str
    durability: str  # transient | persistent
    history: str  # "keep-last 16" | "keep-all"
    limits: str  # resource limits of the durability_service, "unlimited" when none
    instances: int
    samples: int
    size_bytes: int
    writers: int
    first_stored_ns: int
    last_stored_ns: int


@dataclass(frozen=True)
class InstanceSummary:
    topic: str
    key: str  # the key fields as JSON
    partitions: str
    samples: int
    size_bytes: int
    writers: int
    first_source_ns: int
    last_source_ns: int
    disposed_ns: int | None


@dataclass(frozen=True)
class WriterSummary:
    guid: str
    topic: str
    partitions: str
    stored: int  # samples committed from it since it appeared
    retained: int  # of those, still in the store (history depth)
    first_source_ns: int
    last_source_ns: int


@dataclass(frozen=True)
class SampleSummary:
    seq: int
    topic: str
    key: str
    writer_guid: str
    writer_seq: int
    source_ns: int
    stored_ns: int
    size_bytes: int


@dataclass(frozen=True)
class StoreReport:
    path: str
    file_size_bytes: int
    wal_size_bytes: int
    schema_version: int
    topics: list[TopicSummary]
    instances: list[InstanceSummary]
    writers: list[WriterSummary]
    samples: list[SampleSummary]  # newest first, at most ``limit``
    total_samples: int

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data (times as ns and ISO-8601)."""
        data = dataclasses.asdict(self)
        for section in ("topics", "instances", "writers", "samples"):
            for row in data[section]:
                for key in [k for k in row if k.endswith("_ns")]:
                    row[key.removesuffix("_ns") + "_iso"] = iso(row[key])
        return data


def inspect_store(path: str | Path, *, limit: int | None = None) -> StoreReport:
    """Summarise the store at ``path`` (``StoreError`` if it is not a readable MCC store)."""
    with Store.open(path, create=False, exclusive=False) as store:
        conn = store.connection
        topics = [
            TopicSummary(
                row["name"],
                row["type_name"],
                "persistent" if row["persistent"] else "transient",
                "keep-all" if row["history_depth"] < 0 else f"keep-last {row['history_depth']}",
                _limits(row["max_samples"], row["max_instances"], row["max_samples_per_instance"]),
                row["instances"],
                row["samples"],
                row["size_bytes"],
                row["writers"],
                row["first_stored_ns"],
                row["last_stored_ns"],
            )
            for row in conn.execute(
                "SELECT t.*, "
                "(SELECT COUNT(*) FROM instances i WHERE i.topic_id = t.id) AS instances, "
                "COUNT(s.seq) AS samples, COALESCE(SUM(LENGTH(s.data)), 0) AS size_bytes, "
                "COUNT(DISTINCT s.writer_guid) AS writers, "
                "COALESCE(MIN(s.stored_ns), 0) AS first_stored_ns, "
                "COALESCE(MAX(s.stored_ns), 0) AS last_stored_ns "
                "FROM topics t LEFT JOIN instances i ON i.topic_id = t.id "
                "LEFT JOIN samples s ON s.instance_id = i.id GROUP BY t.id ORDER BY t.name"
            )
        ]
        instances = [
            InstanceSummary(*row)
            for row in conn.execute(
                "SELECT t.name, i.key_json, i.partitions, COUNT(s.seq), "
                "COALESCE(SUM(LENGTH(s.data)), 0), COUNT(DISTINCT s.writer_guid), "
                "COALESCE(MIN(s.source_ns), 0), COALESCE(MAX(s.source_ns), 0), i.disposed_ns "
                "FROM instances i JOIN topics t ON i.topic_id = t.id "
                "LEFT JOIN samples s ON s.instance_id = i.id "
                "GROUP BY i.id ORDER BY t.name, i.key_json"
            )
        ]
        writers = [
            WriterSummary(*row)
            for row in conn.execute(
                "SELECT w.guid, t.name, w.partitions, w.stored, "
                "(SELECT COUNT(*) FROM samples s WHERE s.writer_guid = w.guid), "
                "w.first_source_ns, w.last_source_ns "
                "FROM writers w JOIN topics t ON w.topic_id = t.id ORDER BY t.name, w.guid"
            )
        ]
        total = int(conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0])
        samples = [
            SampleSummary(*row)
            for row in conn.execute(
                "SELECT s.seq, t.name, i.key_json, s.writer_guid, s.writer_seq, s.source_ns, "
                "s.stored_ns, LENGTH(s.data) FROM samples s "
                "JOIN instances i ON s.instance_id = i.id JOIN topics t ON i.topic_id = t.id "
                "ORDER BY s.source_ns DESC, s.writer_guid DESC LIMIT ?",
                (-1 if limit is None else limit,),
            )
        ]
        resolved = store.path
    wal = resolved.with_name(resolved.name + "-wal")
    return StoreReport(
        str(resolved),
        resolved.stat().st_size,
        wal.stat().st_size if wal.exists() else 0,
        SCHEMA_VERSION,
        topics,
        instances,
        writers,
        samples,
        total,
    )


def iso(ns: int | None) -> str | None:
    """Unix ns → ISO-8601 UTC with milliseconds; None and 0 stay empty."""
    if not ns:
        return None
    return dt.datetime.fromtimestamp(ns / 1e9, tz=dt.UTC).isoformat(timespec="milliseconds")


def print_report(report: StoreReport, *, console: Any = None) -> None:
    """Rich tables: topics, instances, writers, the newest samples."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    size = report.file_size_bytes + report.wal_size_bytes
    console.print(
        f"[bold]{report.path}[/bold]: MCC persistence store, schema {report.schema_version}, "
        f"{_bytes(size)} on disk ({_bytes(report.wal_size_bytes)} in the WAL), "
        f"{report.total_samples} samples"
    )
    topics = Table(title="topics")
    for col in ("topic", "type", "durability", "history", "limits", "instances", "samples"):
        topics.add_column(col, overflow="fold")
    for col in ("size", "writers", "first stored", "last stored"):
        topics.add_column(col, overflow="fold")
    for t in report.topics:
        topics.add_row(
            t.name,
            t.type_name,
            t.durability,
            t.history,
            t.limits,
            str(t.instances),
            str(t.samples),
            _bytes(t.size_bytes),
            str(t.writers),
            _time(t.first_stored_ns),
            _time(t.last_stored_ns),
        )
    console.print(topics)
    instances = Table(title="instances")
    for col in ("topic", "key", "partitions", "samples", "size", "writers", "oldest", "newest"):
        instances.add_column(col, overflow="fold")
    instances.add_column("disposed")
    for i in report.instances:
        instances.add_row(
            i.topic,
            i.key,
            _partitions(i.partitions),
            str(i.samples),
            _bytes(i.size_bytes),
            str(i.writers),
            _time(i.first_source_ns),
            _time(i.last_source_ns),
            _time(i.disposed_ns),
        )
    console.print(instances)
    writers = Table(title="writers")
    for col in ("writer GUID", "topic", "partitions", "stored", "retained", "first", "last"):
        writers.add_column(col, overflow="fold")
    for w in report.writers:
        writers.add_row(
            w.guid,
            w.topic,
            _partitions(w.partitions),
            str(w.stored),
            str(w.retained),
            _time(w.first_source_ns),
            _time(w.last_source_ns),
        )
    console.print(writers)
    shown = len(report.samples)
    title = "samples" if shown == report.total_samples else f"newest {shown} samples"
    samples = Table(title=f"{title} of {report.total_samples}")
    for col in ("seq", "topic", "key", "writer GUID", "writer seq", "written", "stored", "size"):
        samples.add_column(col, overflow="fold")
    for s in report.samples:
        samples.add_row(
            str(s.seq),
            s.topic,
            s.key,
            s.writer_guid,
            str(s.writer_seq),
            _time(s.source_ns),
            _time(s.stored_ns),
            _bytes(s.size_bytes),
        )
    console.print(samples)


def _limits(max_samples: int, max_instances: int, per_instance: int) -> str:
    if max_samples < 0 and max_instances < 0 and per_instance < 0:
        return "unlimited"

    def one(value: int) -> str:
        return "unlimited" if value < 0 else str(value)

    return (
        f"max_samples={one(max_samples)}, max_instances={one(max_instances)}, "
        f"max_samples_per_instance={one(per_instance)}"
    )


def _partitions(text: str) -> str:
    names = json.loads(text or "[]")
    return ", ".join(names) if names else "(default)"


def _time(ns: int | None) -> str:
    text = iso(ns)
    return text.replace("+00:00", "Z") if text else "-"


def _bytes(n: int) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
