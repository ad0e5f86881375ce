"""The SQLite store: limits, disposes, transient vs persistent, and files that are not ours."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from mcc.bus.history import StoreError, merge_history
from mcc.persist.store import Dispose, Store, TopicPolicy, Write, partitions_match
from mcc.types import PersistReply, PersistSample, PersistTopic

DURABLE = TopicPolicy("Checkpoint", "mcc::Checkpoint", persistent=False, history_depth=3)
PERSISTENT = TopicPolicy("JobState", "mcc::Checkpoint", persistent=True, history_depth=3)


def write(
    key: str,
    source_ns: int,
    *,
    topic: TopicPolicy = DURABLE,
    writer: str = "w-1",
    partitions: tuple[str, ...] = (),
) -> Write:
    return Write(
        topic.name,
        topic.type_name,
        partitions,
        key.encode(),
        json.dumps({"worker_id": key}),
        writer,
        source_ns,
        f"{key}@{source_ns}".encode(),
    )


def retained(store: Store, topic: str = "Checkpoint", **kw: object) -> list[tuple[str, int]]:
    _, samples = store.history(topic, **kw)  # type: ignore[arg-type]
    return [(s.key.decode(), s.source_ns) for s in samples]


@pytest.fixture
def store(tmp_path: Path) -> Store:
    opened = Store.open(tmp_path / "p.sqlite")
    opened.ensure_topic(DURABLE)
    opened.ensure_topic(PERSISTENT)
    yield opened
    opened.close()


def test_keep_last_depth_per_instance_oldest_first(store: Store) -> None:
    result = store.apply([write("a", t) for t in range(1, 6)] + [write("b", 10)])
    assert (result.stored, result.duplicates, result.refused) == (6, 0, [])
    assert retained(store) == [("a", 3), ("a", 4), ("a", 5), ("b", 10)]
    assert store.writer_state("w-1").stored == 6  # type: ignore[union-attr]
    assert store.writer_state("w-1").last_source_ns == 10  # type: ignore[union-attr]


def test_a_sample_is_stored_once(store: Store) -> None:
    store.apply([write("a", 1), write("a", 2)])
    again = store.apply([write("a", 2), write("a", 2, writer="w-2")])
    assert (again.stored, again.duplicates) == (1, 1)  # same writer and time = same sample
    assert retained(store) == [("a", 1), ("a", 2), ("a", 2)]


def test_keep_all_limits_refuse_and_say_which(tmp_path: Path) -> None:
    limited = TopicPolicy(
        "Log",
        "mcc::Checkpoint",
        False,
        history_depth=-1,
        max_samples_per_instance=2,
        max_instances=2,
    )
    with Store.open(tmp_path / "p.sqlite") as store:
        store.ensure_topic(limited)
        result = store.apply(
            [write(k, t, topic=limited) for k, t in (("a", 1), ("a", 2), ("a", 3), ("b", 4))]
            + [write("c", 5, topic=limited)]
        )
        assert result.stored == 3
        assert [(op.source_ns, reason) for op, reason in result.refused] == [
            (3, "topic 'Log': max_samples_per_instance = 2 reached (keep-all history)"),
            (5, "topic 'Log': max_instances = 2 reached"),
        ]
        assert retained(store, "Log") == [("a", 1), ("a", 2), ("b", 4)]


def test_max_samples_counts_the_whole_topic(tmp_path: Path) -> None:
    capped = TopicPolicy("Capped", "mcc::Checkpoint", False, history_depth=2, max_samples=3)
    with Store.open(tmp_path / "p.sqlite") as store:
        store.ensure_topic(capped)
        result = store.apply([write(k, t, topic=capped) for k, t in (("a", 1), ("a", 2))])
        # a full keep-last instance makes room for itself; a new instance would not fit
        result = store.apply([write(k, t, topic=capped) for k, t in (("a", 3), ("b", 4), ("c", 5))])
        assert [op.source_ns for op, _ in result.refused] == [5]
        assert retained(store, "Capped") == [("a", 2), ("a", 3), ("b", 4)]


def test_dispose_removes_the_instance_after_the_cleanup_delay(tmp_path: Path) -> None:
    delayed = TopicPolicy("Slow", "mcc::Checkpoint", False, cleanup_delay_ns=1_000)
    with Store.open(tmp_path / "p.sqlite") as store:
        store.ensure_topic(DURABLE)
        store.ensure_topic(delayed)
        gone = Dispose(DURABLE.name, DURABLE.type_name, (), b"a", "w-1", 3)
        store.apply([write("a", 1), write("b", 2), gone])
        assert retained(store) == [("b", 2)]  # cleanup delay 0: at once
        store.apply(
            [
                write("a", 1, topic=delayed),
                Dispose(delayed.name, delayed.type_name, (), b"a", "w-1", 2),
            ],
            now_ns=5_000,
        )
        assert retained(store, "Slow") == []  # disposed instances are never replayed
        assert store.sweep(now_ns=5_999) == 0
        assert store.sweep(now_ns=6_000) == 1
        store.apply([write("a", 1), write("a", 9)])  # a write brings an instance back
        assert retained(store) == [("a", 1), ("b", 2), ("a", 9)]


def test_restart_keeps_persistent_and_drops_transient(tmp_path: Path) -> None:
    path = tmp_path / "p.sqlite"
    with Store.open(path) as store:
        store.ensure_topic(DURABLE)
        store.ensure_topic(PERSISTENT)
        store.apply([write("a", 1), write("j", 2, topic=PERSISTENT)])
    with Store.open(path) as store:
        assert store.drop_transient() == 1
        assert retained(store) == []
        assert retained(store, "JobState") == [("j", 2)]
        assert store.topic("JobState", "mcc::Checkpoint") == PERSISTENT


def test_history_follows_partitions(store: Store) -> None:
    store.apply(
        [write("a", 1, partitions=("vc1",)), write("b", 2), write("c", 3, partitions=("vc2",))]
    )
    assert retained(store, partitions=["vc1"]) == [("a", 1)]
    assert retained(store, partitions=[]) == [("b", 2)]
    assert retained(store, partitions=["vc*"]) == [("a", 1), ("c", 3)]
    assert retained(store, partitions=["*"]) == [("a", 1), ("b", 2), ("c", 3)]
    assert partitions_match(["a"], ["a", "b"]) and not partitions_match(["a"], [])


def test_replies_of_replicas_merge_once_in_order_within_depth() -> None:
    def sample(key: bytes, writer: str, source_ns: int) -> PersistSample:
        return PersistSample(topic="T", key=key, writer_guid=writer, source_ns=source_ns)

    topics = [PersistTopic(topic="T", history_depth=2)]
    a = PersistReply(
        replier_id="a",
        ok=True,
        topics=topics,
        samples=[sample(b"x", "w1", 1), sample(b"x", "w1", 2), sample(b"y", "w2", 5)],
    )
    b = PersistReply(  # b also saw a newer x, and the same y
        replier_id="b",
        ok=True,
        topics=topics,
        samples=[sample(b"x", "w1", 2), sample(b"x", "w1", 3), sample(b"y", "w2", 5)],
    )
    merged = merge_history([a, b], "T")
    assert [(s.key, s.source_ns) for s in merged] == [(b"x", 2), (b"x", 3), (b"y", 5)]
    assert [s.source_ns for s in merge_history([a, b], "T", reader_depth=1)] == [3, 5]
    assert merge_history([a], "other topic") == []


# -- files that are not usable stores ---------------------------------------------------------


def foreign(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)")
    conn.close()


def other_version(path: Path) -> None:
    Store.open(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 99")
    conn.close()


def truncated(path: Path) -> None:
    with Store.open(path) as store:
        store.ensure_topic(DURABLE)
        store.apply([write(f"k{i}", i) for i in range(300)])
        store.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


BROKEN = {
    "garbage": (
        lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8),
        "is not an SQLite database",
    ),
    "empty": (lambda p: p.write_bytes(b""), "is empty (0 bytes)"),
    "foreign": (foreign, "another application (application_id 0, tables: photos)"),
    "version": (other_version, "schema version 99; this MCC reads version 1"),
    "truncated": (truncated, "damaged"),
}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_an_unusable_file_is_refused_naming_it_and_the_fix(tmp_path: Path, kind: str) -> None:
    path = tmp_path / f"{kind}.sqlite"
    make, reason = BROKEN[kind]
    make(path)
    before = path.read_bytes()
    with pytest.raises(StoreError, match="persistence store") as err:
        Store.open(path)
    message = str(err.value)
    assert str(path) in message and reason in message, message
    assert "move it away" in message or "another --store" in message, message
    assert path.read_bytes() == before  # never reset, never touched


def test_one_service_per_store_file(tmp_path: Path) -> None:
    with Store.open(tmp_path / "p.sqlite"), pytest.raises(StoreError, match="in use by another"):
        Store.open(tmp_path / "p.sqlite")
    with Store.open(tmp_path / "p.sqlite", exclusive=False):  # inspect reads beside a service
        pass


def test_a_missing_store_is_not_created_for_reading(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        Store.open(tmp_path / "nope.sqlite", create=False)
    assert not (tmp_path / "nope.sqlite").exists()
