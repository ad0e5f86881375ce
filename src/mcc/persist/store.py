"""The SQLite store of one persistence replica: one file, WAL mode, committed before acked.

>>> with Store.open("persist.sqlite") as store:
...     store.ensure_topic(policy)
...     result = store.apply([Write(...), Dispose(...)])   # one transaction
...     topics, samples = store.history("Checkpoint", partitions=["vc1"])

A file is checked before it is used: an SQLite database of another application, another schema
version, garbage bytes or a truncated file raise ``StoreError`` naming the file and the fix;
the store never resets a file it cannot read. The file (and the WAL files beside it, which
SQLite creates with its mode) is only its owner's (0600), folders it creates too (0700).
What it keeps is bounded per writer and in all (`mcc.persist.limits.PersistLimits`): a write
past a bound is refused, like one past a topic's resource limits. docs/persistence.md
describes the schema.
"""

from __future__ import annotations

import json
import logging
import math
import sqlite3
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from mcc.bus.history import StoreError
from mcc.lifecycle import Closeable
from mcc.persist.limits import PersistLimits
from mcc.persist.records import (
    Allow,
    ApplyResult,
    Dispose,
    HistoryPage,
    TopicPolicy,
    Write,
    WriterState,
    partitions_match,
    policy_from_row,
)
from mcc.persist.schema import (
    check_file,
    check_schema,
    corrupt_error,
    create_file,
    lock_file,
    make_owner_only,
    unlock_file,
)
from mcc.types import PersistSample

log = logging.getLogger("mcc.persist")


class Store(Closeable):
    """One replica's SQLite file. Not thread-safe: one thread (the service loop) uses it."""

    def __init__(
        self,
        path: Path,
        conn: sqlite3.Connection,
        lock_fd: int | None,
        limits: PersistLimits | None = None,
    ) -> None:
        self.path = path
        self.limits = limits or PersistLimits()
        self._conn = conn
        self._lock_fd = lock_fd
        self._topics: dict[tuple[str, str], tuple[int, TopicPolicy]] = {}
        for row in conn.execute("SELECT * FROM topics"):
            policy = policy_from_row(row)
            self._topics[(policy.name, policy.type_name)] = (row["id"], policy)
        # What each writer keeps here (samples, bytes), and all together: the quotas.
        self._usage: dict[str, list[int]] = {}
        self._total = [0, 0]
        self._load_usage()

    def _load_usage(self) -> None:
        self._usage = {
            row[0]: [int(row[1]), int(row[2])]
            for row in self._conn.execute(
                "SELECT writer_guid, COUNT(*), TOTAL(LENGTH(data)) FROM samples "
                "GROUP BY writer_guid"
            )
        }
        self._total = [
            sum(u[0] for u in self._usage.values()),
            sum(u[1] for u in self._usage.values()),
        ]

    def usage(self, writer_guid: str | None = None) -> tuple[int, int]:
        """(samples, bytes) kept from ``writer_guid``, or in all (None)."""
        if writer_guid is None:
            return self._total[0], self._total[1]
        kept = self._usage.get(writer_guid, [0, 0])
        return kept[0], kept[1]

    def _account(self, deltas: dict[str, list[int]]) -> None:
        for guid, (samples, nbytes) in deltas.items():
            kept = self._usage.setdefault(guid, [0, 0])
            kept[0] += samples
            kept[1] += nbytes
            self._total[0] += samples
            self._total[1] += nbytes
            if kept[0] <= 0:
                del self._usage[guid]

    # -- opening ----------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        create: bool = True,
        exclusive: bool = True,
        limits: PersistLimits | None = None,
    ) -> Store:
        """Open (or create) the store at ``path``; ``StoreError`` if the file is not usable.

        ``exclusive`` locks the file for this process (one service per store file), and makes
        a store file readable by others its owner's only (0600). Folders on the way that do not
        exist are created (0700) when ``create``.
        """
        path = Path(path).expanduser().absolute()
        if not check_file(path, create=create):
            create_file(path)
        elif exclusive:
            make_owner_only(path)
        lock_fd = lock_file(path) if exclusive else None
        try:
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            unlock_file(lock_fd)
            raise StoreError(
                f"cannot open persistence store {path}: {exc}; check the path and its permissions"
            ) from exc
        conn.row_factory = sqlite3.Row
        try:
            check_schema(conn, path)
            conn.execute("PRAGMA journal_mode = WAL")
            # FULL: a commit is on disk before the service acknowledges it (power loss too);
            # WAL alone already survives a kill -9 of the service.
            conn.execute("PRAGMA synchronous = FULL")
            # Temporary tables, sorts and statement journals in memory (each is bounded by the
            # store's quotas): SQLite picks its temporary folder by access(2), which a Landlock
            # confinement does not change, so a confined replica chose /var/tmp, could not
            # open a file there, and failed its commit ("unable to open database file") as
            # soon as a batch of large samples needed one.
            conn.execute("PRAGMA temp_store = MEMORY")
            conn.execute("PRAGMA foreign_keys = ON")
            return cls(path, conn, lock_fd, limits)
        except sqlite3.DatabaseError as exc:
            conn.close()
            unlock_file(lock_fd)
            raise corrupt_error(path, exc) from exc
        except BaseException:
            conn.close()
            unlock_file(lock_fd)
            raise

    def close(self) -> None:
        self._conn.close()
        unlock_file(self._lock_fd)
        self._lock_fd = None

    # -- topics -----------------------------------------------------------------------------
    def topics(self) -> list[TopicPolicy]:
        return [policy for _, policy in self._topics.values()]

    def topic(self, name: str, type_name: str) -> TopicPolicy | None:
        entry = self._topics.get((name, type_name))
        return entry[1] if entry else None

    def ensure_topic(self, policy: TopicPolicy) -> TopicPolicy:
        """Register ``policy`` for its topic; the first one registered wins (returned)."""
        entry = self._topics.get((policy.name, policy.type_name))
        if entry is not None:
            return entry[1]
        cur = self._conn.execute(
            "INSERT INTO topics (name, type_name, persistent, history_depth, max_samples, "
            "max_instances, max_samples_per_instance, cleanup_delay_ns, created_ns) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                policy.name,
                policy.type_name,
                int(policy.persistent),
                policy.history_depth,
                policy.max_samples,
                policy.max_instances,
                policy.max_samples_per_instance,
                policy.cleanup_delay_ns,
                time.time_ns(),
            ),
        )
        self._topics[(policy.name, policy.type_name)] = (int(cur.lastrowid or 0), policy)
        return policy

    # -- writing ----------------------------------------------------------------------------
    def apply(self, ops: Iterable[Write | Dispose], *, now_ns: int | None = None) -> ApplyResult:
        """Store writes and disposes in order, in one transaction, committed on return."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        result = ApplyResult()
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            for op in ops:
                if isinstance(op, Write):
                    self._write(op, now_ns, result)
                else:
                    self._dispose(op, now_ns, result)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            self._load_usage()
            raise
        return result

    def _write(self, op: Write, now_ns: int, result: ApplyResult) -> None:
        entry = self._topics.get((op.topic, op.type_name))
        if entry is None:
            raise StoreError(f"topic {op.topic!r} ({op.type_name}) is not registered")
        conn = self._conn
        limits = self.limits
        if len(op.data) > limits.max_sample_bytes:
            return self._refuse(
                op,
                f"a sample of {len(op.data)} bytes, more than max_sample_bytes = "
                f"{limits.max_sample_bytes}",
                result,
            )
        if conn.execute(
            "SELECT 1 FROM samples WHERE writer_guid = ? AND source_ns = ?",
            (op.writer_guid, op.source_ns),
        ).fetchone():
            result.duplicates += 1
            result.writers.add(op.writer_guid)
            return None
        # Insert, then measure what the store holds: over a quota, the savepoint undoes it.
        conn.execute("SAVEPOINT write")
        try:
            outcome = self._insert(op, now_ns, *entry)
            if isinstance(outcome, dict):
                over = self._over_quota(op.writer_guid, outcome)
                if over is not None:
                    outcome = over
        except BaseException:
            conn.execute("ROLLBACK TO write")
            conn.execute("RELEASE write")
            raise
        if isinstance(outcome, str):
            conn.execute("ROLLBACK TO write")
            conn.execute("RELEASE write")
            return self._refuse(op, outcome, result)
        conn.execute("RELEASE write")
        self._account(outcome)
        result.stored += 1
        result.writers.add(op.writer_guid)
        return None

    def _over_quota(self, guid: str, deltas: dict[str, list[int]]) -> str | None:
        """Which quota the write of ``deltas`` passes (only a growth counts), or None."""
        limits = self.limits
        mine = self._usage.get(guid, [0, 0])
        d_mine = deltas.get(guid, [0, 0])
        d_all = [sum(d[0] for d in deltas.values()), sum(d[1] for d in deltas.values())]
        for now, delta, bound, name in (
            (mine[0], d_mine[0], limits.max_writer_samples, "max_writer_samples"),
            (mine[1], d_mine[1], limits.max_writer_bytes, "max_writer_bytes"),
            (self._total[0], d_all[0], limits.max_store_samples, "max_store_samples"),
            (self._total[1], d_all[1], limits.max_store_bytes, "max_store_bytes"),
        ):
            if delta > 0 and now + delta > bound:
                whose = "this writer" if name.startswith("max_writer") else "the store"
                return f"{name} = {bound} reached ({whose} keeps {now})"
        return None

    def _deleted(self, cursor: sqlite3.Cursor, deltas: dict[str, list[int]]) -> None:
        """Count the rows a ``DELETE … RETURNING writer_guid, LENGTH(data)`` removed."""
        for guid, nbytes in cursor.fetchall():
            d = deltas.setdefault(guid, [0, 0])
            d[0] -= 1
            d[1] -= int(nbytes)

    def _insert(
        self, op: Write, now_ns: int, topic_id: int, policy: TopicPolicy
    ) -> dict[str, list[int]] | str:
        """Store ``op`` within the topic's limits: what it changed per writer (samples, bytes),
        or why it is refused."""
        conn = self._conn
        parts = json.dumps(sorted(op.partitions))
        deltas: dict[str, list[int]] = {op.writer_guid: [1, len(op.data)]}
        row = conn.execute(
            "SELECT id, disposed_ns FROM instances WHERE topic_id = ? AND partitions = ? "
            "AND key = ?",
            (topic_id, parts, op.key),
        ).fetchone()
        if row is None:
            if (
                policy.max_instances >= 0
                and self._count(
                    "SELECT COUNT(*) FROM instances WHERE topic_id = ? AND disposed_ns IS NULL",
                    topic_id,
                )
                >= policy.max_instances
            ):
                return f"max_instances = {policy.max_instances} reached"
            instance_id = int(
                conn.execute(
                    "INSERT INTO instances (topic_id, partitions, key, key_json) "
                    "VALUES (?, ?, ?, ?)",
                    (topic_id, parts, op.key, op.key_json),
                ).lastrowid
                or 0
            )
            in_instance = 0
        else:
            instance_id = row["id"]
            if row["disposed_ns"] is not None:  # a write after a dispose brings it back
                conn.execute("UPDATE instances SET disposed_ns = NULL WHERE id = ?", (instance_id,))
                self._deleted(
                    conn.execute(
                        "DELETE FROM samples WHERE instance_id = ? "
                        "RETURNING writer_guid, LENGTH(data)",
                        (instance_id,),
                    ),
                    deltas,
                )
            in_instance = self._count(
                "SELECT COUNT(*) FROM samples WHERE instance_id = ?", instance_id
            )
        keep_last = policy.history_depth > 0
        full_instance = keep_last and in_instance >= policy.history_depth
        if not keep_last and 0 <= policy.max_samples_per_instance <= in_instance:
            return (
                f"max_samples_per_instance = {policy.max_samples_per_instance} reached "
                "(keep-all history)"
            )
        if policy.max_samples >= 0 and not full_instance:
            total = self._count(
                "SELECT COUNT(*) FROM samples s JOIN instances i ON s.instance_id = i.id "
                "WHERE i.topic_id = ?",
                topic_id,
            )
            if total >= policy.max_samples:
                return f"max_samples = {policy.max_samples} reached"
        writer = conn.execute(
            "SELECT stored FROM writers WHERE guid = ?", (op.writer_guid,)
        ).fetchone()
        writer_seq = (writer["stored"] if writer else 0) + 1
        conn.execute(
            "INSERT INTO samples (instance_id, writer_guid, writer_seq, source_ns, stored_ns, "
            "data) VALUES (?, ?, ?, ?, ?, ?)",
            (instance_id, op.writer_guid, writer_seq, op.source_ns, now_ns, op.data),
        )
        if writer is None:
            conn.execute(
                "INSERT INTO writers (guid, topic_id, partitions, stored, first_source_ns, "
                "last_source_ns) VALUES (?, ?, ?, 1, ?, ?)",
                (op.writer_guid, topic_id, parts, op.source_ns, op.source_ns),
            )
        else:
            conn.execute(
                "UPDATE writers SET stored = stored + 1, "
                "last_source_ns = MAX(last_source_ns, ?) WHERE guid = ?",
                (op.source_ns, op.writer_guid),
            )
        if full_instance:  # keep-last: the oldest samples of the instance make room
            self._deleted(
                conn.execute(
                    "DELETE FROM samples WHERE seq IN (SELECT seq FROM samples WHERE "
                    "instance_id = ? ORDER BY source_ns DESC, writer_guid DESC LIMIT -1 "
                    "OFFSET ?) RETURNING writer_guid, LENGTH(data)",
                    (instance_id, policy.history_depth),
                ),
                deltas,
            )
        return deltas

    def _refuse(self, op: Write, reason: str, result: ApplyResult) -> None:
        result.refused.append((op, f"topic {op.topic!r}: {reason}"))
        result.writers.add(op.writer_guid)

    def _dispose(self, op: Dispose, now_ns: int, result: ApplyResult) -> None:
        entry = self._topics.get((op.topic, op.type_name))
        if entry is None:
            return
        topic_id, policy = entry
        parts = json.dumps(sorted(op.partitions))
        if policy.cleanup_delay_ns <= 0:
            ids = [
                r["id"]
                for r in self._conn.execute(
                    "SELECT id FROM instances WHERE topic_id = ? AND partitions = ? AND key = ?",
                    (topic_id, parts, op.key),
                )
            ]
            self._delete_instances(ids)
        else:
            self._conn.execute(
                "UPDATE instances SET disposed_ns = ? WHERE topic_id = ? AND partitions = ? "
                "AND key = ? AND disposed_ns IS NULL",
                (now_ns, topic_id, parts, op.key),
            )
        result.disposed += 1

    def _delete_instances(self, ids: Sequence[int]) -> None:
        deltas: dict[str, list[int]] = {}
        for instance_id in ids:
            self._deleted(
                self._conn.execute(
                    "DELETE FROM samples WHERE instance_id = ? RETURNING writer_guid, LENGTH(data)",
                    (instance_id,),
                ),
                deltas,
            )
            self._conn.execute("DELETE FROM instances WHERE id = ?", (instance_id,))
        self._account(deltas)

    def expire(self, now_ns: int | None = None) -> int:
        """Delete the samples stored more than ``limits.retention_s`` ago, but the newest of
        each instance; give the freed pages back to the file system. How many went."""
        if not math.isfinite(self.limits.retention_s):
            return 0
        now_ns = time.time_ns() if now_ns is None else now_ns
        cutoff = now_ns - int(self.limits.retention_s * 1e9)
        deltas: dict[str, list[int]] = {}
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            self._deleted(
                self._conn.execute(
                    "DELETE FROM samples WHERE stored_ns < ? AND seq NOT IN "
                    "(SELECT MAX(seq) FROM samples GROUP BY instance_id) "
                    "RETURNING writer_guid, LENGTH(data)",
                    (cutoff,),
                ),
                deltas,
            )
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._account(deltas)
        gone = sum(-d[0] for d in deltas.values())
        if gone:
            # a store created with auto_vacuum = INCREMENTAL shrinks; an older one reuses pages
            self._conn.execute("PRAGMA incremental_vacuum")
        return gone

    def sweep(self, now_ns: int | None = None) -> int:
        """Delete disposed instances whose cleanup delay has passed; how many went."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        ids = [
            r["id"]
            for r in self._conn.execute(
                "SELECT i.id FROM instances i JOIN topics t ON i.topic_id = t.id "
                "WHERE i.disposed_ns IS NOT NULL AND i.disposed_ns + t.cleanup_delay_ns <= ?",
                (now_ns,),
            )
        ]
        if ids:
            self._conn.execute("BEGIN IMMEDIATE")
            self._delete_instances(ids)
            self._conn.execute("COMMIT")
        self._forget_idle_writers()
        return len(ids)

    def _forget_idle_writers(self) -> None:
        """Past ``max_writers`` rows, drop the rows of writers that keep no sample here (their
        counts only fed acknowledgements): rogue writer churn must not grow the file."""
        if self._count("SELECT COUNT(*) FROM writers") <= self.limits.max_writers:
            return
        self._conn.execute("BEGIN IMMEDIATE")
        self._conn.execute(
            "DELETE FROM writers WHERE guid NOT IN (SELECT DISTINCT writer_guid FROM samples)"
        )
        self._conn.execute("COMMIT")

    def drop_transient(self) -> int:
        """Delete the TRANSIENT samples (at start-up: they lived as long as the service did)."""
        self._conn.execute("BEGIN IMMEDIATE")
        transient = "SELECT id FROM topics WHERE persistent = 0"
        instances = f"SELECT id FROM instances WHERE topic_id IN ({transient})"
        count = self._count(f"SELECT COUNT(*) FROM samples WHERE instance_id IN ({instances})")
        self._conn.execute(f"DELETE FROM samples WHERE instance_id IN ({instances})")
        self._conn.execute(f"DELETE FROM instances WHERE topic_id IN ({transient})")
        self._conn.execute(f"DELETE FROM writers WHERE topic_id IN ({transient})")
        self._conn.execute("COMMIT")
        self._load_usage()
        return count

    def _count(self, sql: str, *args: object) -> int:
        return int(self._conn.execute(sql, args).fetchone()[0])

    # -- reading ----------------------------------------------------------------------------
    def writer_state(self, guid: str) -> WriterState | None:
        row = self._conn.execute(
            "SELECT w.guid, t.name, w.stored, w.last_source_ns FROM writers w "
            "JOIN topics t ON w.topic_id = t.id WHERE w.guid = ?",
            (guid,),
        ).fetchone()
        return WriterState(*row) if row else None

    def writer_states(self) -> list[WriterState]:
        rows = self._conn.execute(
            "SELECT w.guid, t.name, w.stored, w.last_source_ns FROM writers w "
            "JOIN topics t ON w.topic_id = t.id ORDER BY w.guid"
        )
        return [WriterState(*row) for row in rows]

    def history(
        self, topic: str = "", *, type_name: str = "", partitions: Sequence[str] = ("*",)
    ) -> tuple[list[TopicPolicy], list[PersistSample]]:
        """The retained samples of ``topic`` ("" = all) for a reader in ``partitions``, all of
        them (``page`` bounds them, for replies).

        Disposed instances are left out; samples come oldest first (by source timestamp).
        """
        page = self.page(topic, type_name=type_name, partitions=partitions)
        return page.topics, page.samples

    def page(
        self,
        topic: str = "",
        *,
        type_name: str = "",
        partitions: Sequence[str] = ("*",),
        max_samples: int | None = None,
        max_bytes: int | None = None,
        allow: Allow | None = None,
    ) -> HistoryPage:
        """What a history reply carries: as `history`, at most ``max_samples`` samples of at
        most ``max_bytes`` (None: unbounded), from partitions ``allow`` allows.

        When a bound cuts it short, the newest sample of every instance comes before the
        second newest of any, and so on: a late joiner gets the state of every instance first.
        """
        wanted = {
            topic_id: policy
            for topic_id, policy in self._topics.values()
            if (not topic or policy.name == topic)
            and (not type_name or policy.type_name == type_name)
        }
        samples: list[PersistSample] = []
        truncated, denied, size = False, 0, 0
        allowed: dict[tuple[str, str], bool] = {}
        if wanted:
            marks = ", ".join("?" * len(wanted))
            rows = self._conn.execute(
                "SELECT i.topic_id, i.partitions, i.key, i.key_json, s.writer_guid, "
                "s.writer_seq, s.source_ns, s.stored_ns, s.data, ROW_NUMBER() OVER (PARTITION BY "
                "s.instance_id ORDER BY s.source_ns DESC, s.writer_guid DESC) AS age "
                "FROM samples s JOIN instances i ON s.instance_id = i.id "
                f"WHERE i.topic_id IN ({marks}) AND i.disposed_ns IS NULL "
                "ORDER BY age, s.source_ns DESC, s.writer_guid DESC",
                tuple(wanted),
            )
            for row in rows:
                policy = wanted[row["topic_id"]]
                written_in = json.loads(row["partitions"])
                if not partitions_match(partitions, written_in):
                    continue
                if allow is not None:
                    key = (policy.name, row["partitions"])
                    ok = allowed.get(key)
                    if ok is None:
                        ok = allowed[key] = any(
                            allow(policy.name, p)
                            for p in (written_in or [""])
                            if partitions_match(partitions, [p])
                        )
                    if not ok:
                        denied += 1
                        continue
                nbytes = len(row["data"])
                if (max_samples is not None and len(samples) >= max_samples) or (
                    max_bytes is not None and size + nbytes > max_bytes
                ):
                    truncated = True
                    break
                size += nbytes
                samples.append(
                    PersistSample(
                        topic=policy.name,
                        partitions_json=row["partitions"],
                        key=row["key"],
                        key_json=row["key_json"],
                        writer_guid=row["writer_guid"],
                        writer_seq=row["writer_seq"],
                        source_ns=row["source_ns"],
                        stored_ns=row["stored_ns"],
                        data=row["data"],
                    )
                )
        samples.sort(key=lambda s: (s.source_ns, s.writer_guid))
        return HistoryPage(list(wanted.values()), samples, truncated, denied)

    @property
    def connection(self) -> sqlite3.Connection:
        """The SQLite connection (for ``mcc persist inspect``'s read-only queries)."""
        return self._conn


# -- checks -----------------------------------------------------------------------------------
