"""What a replica keeps and serves is bounded, on its own clock, and passes an authorization hook.

Store tests run on a real SQLite file; service tests run a replica on a real DDS domain
(in this process, the same code as ``mcc persist serve``) against writers and readers on
their own participants. Each attack comes first, then what the replica made of it.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcc import types
from mcc.bus import Bus, HistoryReader
from mcc.bus.history import HistoryClient, history_client
from mcc.errors import StoreError
from mcc.persist import inspect_store
from mcc.persist.limits import PersistLimits
from mcc.persist.policy import Action, DefaultPolicy, Principal
from mcc.persist.service import PersistService, open_service
from mcc.persist.store import Dispose, Store, TopicPolicy
from tests.conftest import wait_for
from tests.persist.test_store import DURABLE, retained, write

TIMEOUT_S = 30.0
KEEP_ALL = TopicPolicy("Log", "mcc::Checkpoint", persistent=False, history_depth=-1)


# -- the store ---------------------------------------------------------------------------------


def test_a_writer_cannot_fill_the_store_past_its_quota(tmp_path: Path) -> None:
    limits = PersistLimits(max_writer_samples=5, max_writer_bytes=1000, max_store_samples=8)
    with Store.open(tmp_path / "p.sqlite", limits=limits) as store:
        store.ensure_topic(KEEP_ALL)
        # one writer, ever new samples of a keep-all topic: the review's disk filler
        result = store.apply([write(f"k{i}", i, topic=KEEP_ALL) for i in range(1, 21)])
        assert result.stored == 5 and len(result.refused) == 15
        assert result.refused[0][1] == (
            "topic 'Log': max_writer_samples = 5 reached (this writer keeps 5)"
        )
        assert store.usage("w-1") == (5, sum(len(f"k{i}@{i}") for i in range(1, 6)))
        # other writers still store, until the store's own cap
        result = store.apply(
            [write(f"x{i}", 100 + i, topic=KEEP_ALL, writer=f"w-{i}") for i in range(2, 6)]
        )
        assert result.stored == 3
        assert result.refused[0][1].endswith("max_store_samples = 8 reached (the store keeps 8)")
        assert store.usage() == (8, store.usage()[1])
        big = dataclasses.replace(write("big", 999, topic=KEEP_ALL), data=b"x" * (2 << 20))
        assert "more than max_sample_bytes = 1048576" in store.apply([big]).refused[0][1]


def test_retention_deletes_old_samples_but_the_newest_of_each_instance(tmp_path: Path) -> None:
    """A keep-all topic written for hours stays bounded by the retention (on by default, a
    day), not by a quota that then refuses every new sample; the newest sample of an instance
    (a checkpoint written once) stays whatever its age, and the file gives its pages back."""
    assert PersistLimits().retention_s == 24 * 3600.0
    hour_ns = 3600 * 10**9
    limits = PersistLimits(retention_s=3600.0)
    with Store.open(tmp_path / "p.sqlite", limits=limits) as store:
        store.ensure_topic(KEEP_ALL)
        blob = b"x" * 4000
        store.apply([write("once", 1, topic=KEEP_ALL, writer="w-2")], now_ns=0)  # written once
        sizes: list[int] = []
        for hour in range(6):  # a steady writer: 200 samples an hour, stored on its clock
            ops = [
                dataclasses.replace(write("log", hour * 1000 + i, topic=KEEP_ALL), data=blob)
                for i in range(200)
            ]
            store.apply(ops, now_ns=hour * hour_ns)
            expired = store.expire(now_ns=hour * hour_ns + hour_ns // 2)
            assert expired == (200 if hour >= 1 else 0)
            assert store.usage()[0] == 201  # the last hour's samples and the checkpoint
            sizes.append(sum(p.stat().st_size for p in tmp_path.glob("p.sqlite*")))
        assert sizes[-1] <= sizes[2] * 1.1  # the file does not grow with the hours
        assert ("once", 1) in retained(store, "Log")
    with pytest.raises(StoreError, match=r"retention_s=0: must be a number of seconds > 0"):
        PersistLimits(retention_s=0)
    assert PersistLimits(retention_s=float("inf")).retention_s == float("inf")
    from mcc.persist.limits import retention_seconds  # the service app's --retention

    assert retention_seconds("3600") == 3600.0 and retention_seconds("inf") == float("inf")
    for bad in ("0", "-1", "nan", "soon"):
        with pytest.raises(argparse.ArgumentTypeError, match=f"got '{bad}'"):
            retention_seconds(bad)


def test_keep_last_replacements_at_the_quota_are_stored(tmp_path: Path) -> None:
    limits = PersistLimits(max_writer_samples=3)
    with Store.open(tmp_path / "p.sqlite", limits=limits) as store:
        store.ensure_topic(DURABLE)  # keep-last 3 per instance
        result = store.apply([write("a", t) for t in range(1, 11)])
        assert (result.stored, result.refused) == (10, [])  # each replaces the oldest
        assert store.usage("w-1")[0] == 3
        refused = store.apply([write("b", 20)]).refused  # a new instance would grow it
        assert refused and "max_writer_samples = 3 reached" in refused[0][1]
        # a dispose frees the quota, and the accounting survives a reopen
        store.apply([Dispose(DURABLE.name, DURABLE.type_name, (), b"a", "w-1", 30)])
        assert store.usage("w-1") == (0, 0)
        assert store.apply([write("b", 31), write("c", 32)]).stored == 2
    with Store.open(tmp_path / "p.sqlite", limits=limits) as store:
        assert store.usage("w-1") == (2, len(b"b@31") + len(b"c@32"))


def test_a_reply_is_bounded_and_carries_the_newest_of_every_instance_first(
    tmp_path: Path,
) -> None:
    with Store.open(tmp_path / "p.sqlite") as store:
        store.ensure_topic(DURABLE)
        store.apply([write(k, 10 * t + i) for t in range(1, 4) for i, k in enumerate("abc")])
        page = store.page("Checkpoint", max_samples=4)
        assert page.truncated
        # the newest of a, b and c, then the newest second newest: oldest first in the reply
        assert [(s.key, s.source_ns) for s in page.samples] == [
            (b"c", 22),
            (b"a", 30),
            (b"b", 31),
            (b"c", 32),
        ]
        size = len(page.samples[0].data)
        assert len(store.page("Checkpoint", max_bytes=2 * size).samples) == 2
        whole = store.page("Checkpoint")
        assert not whole.truncated and len(whole.samples) == 9


def test_store_files_and_the_folders_made_for_them_are_the_owner_s_only(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "m1" / "p.sqlite"
    with Store.open(path) as store:
        store.ensure_topic(DURABLE)
        store.apply([write("a", 1)])
        files = [path, path.with_name("p.sqlite-wal"), path.with_name("p.sqlite-shm")]
        for each in files:
            assert stat.S_IMODE(each.stat().st_mode) == 0o600, each
    for folder in (tmp_path / "runs", tmp_path / "runs" / "m1"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    # a store left readable by others (an older MCC) is taken back when it is served
    os.chmod(path, 0o644)
    Store.open(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


# -- the service on the bus ------------------------------------------------------------------


@pytest.fixture
def limits() -> PersistLimits:
    return PersistLimits()


@pytest.fixture
def service(
    bus_env: dict[str, str], domain_id: int, tmp_path: Path, limits: PersistLimits
) -> Iterator[PersistService]:
    with open_service(tmp_path / "p.sqlite", domain_id=domain_id, replica="a", limits=limits) as s:
        assert s.wait_ready(TIMEOUT_S)
        yield s


def _checkpoint(worker: str, items_done: int = 0, state: bytes = b"") -> types.Checkpoint:
    return types.Checkpoint(job_id="j", worker_id=worker, items_done=items_done, state=state)


def _late_reader(domain_id: int, **options: Any) -> tuple[HistoryReader[Any], list[Any]]:
    bus = Bus(domain_id, **options)
    reader = bus.reader("Checkpoint", history_timeout_s=TIMEOUT_S)
    assert isinstance(reader, HistoryReader) and reader.wait_for_history(TIMEOUT_S + 5)
    got = reader.take(10_000)
    bus.close()
    return reader, got


@pytest.mark.slow
@pytest.mark.parametrize("limits", [PersistLimits(max_writer_bytes=64 * 1024)])
def test_one_writer_flooding_a_durable_topic_stops_at_its_quota(
    service: PersistService, domain_id: int, tmp_path: Path
) -> None:
    with Bus(domain_id) as bus:
        cp = bus.writer("Checkpoint")
        assert cp.wait_for_replicas(1, timeout_s=TIMEOUT_S)
        state = bytes(4096)
        for i in range(100):  # 400 KB of new instances
            cp.write(_checkpoint(f"w{i}", state=state))
        with pytest.raises(StoreError, match="max_writer_bytes = 65536 reached"):
            cp.write_stored(_checkpoint("last", state=state), timeout_s=TIMEOUT_S)
        with Bus(domain_id) as other_bus:  # the quota is the writer's, not the topic's
            other_bus.writer("Checkpoint").write_stored(_checkpoint("other"), timeout_s=TIMEOUT_S)
    report = inspect_store(tmp_path / "p.sqlite")
    kept = sum(t.size_bytes for t in report.topics)
    assert 60 * 1024 < kept <= 64 * 1024 + 200
    assert service.stats.refused >= 100 - 64 * 1024 // 4096


@pytest.mark.slow
@pytest.mark.parametrize("limits", [PersistLimits(max_writer_samples_per_window=20)])
def test_a_writer_s_rate_is_bounded_on_the_replica_s_clock(
    service: PersistService, domain_id: int
) -> None:
    with Bus(domain_id) as bus:
        cp = bus.writer("Checkpoint")
        assert cp.wait_for_replicas(1, timeout_s=TIMEOUT_S)
        for i in range(30):
            cp.write(_checkpoint(f"w{i}"))
        with pytest.raises(StoreError, match="max_writer_samples_per_window = 20 reached"):
            cp.write_stored(_checkpoint("last"), timeout_s=TIMEOUT_S)
    assert service.stats.stored == 20 and service.stats.rate_limited == 11


@pytest.mark.slow
@pytest.mark.parametrize("limits", [PersistLimits(max_writer_samples_per_window=20)])
def test_a_refused_sample_that_was_only_published_is_refused_when_its_commit_is_awaited(
    service: PersistService, domain_id: int
) -> None:
    with Bus(domain_id) as bus:
        cp = bus.writer("Checkpoint")
        assert cp.wait_for_replicas(1, timeout_s=TIMEOUT_S)
        stamps = [cp.publish_stored(_checkpoint(f"w{i}"), timeout_s=TIMEOUT_S) for i in range(20)]
        cp.wait_stored(stamps[0], timeout_s=TIMEOUT_S)  # stored: an earlier one, stored too
        cp.wait_stored(stamps[-1], timeout_s=TIMEOUT_S)
        over = cp.publish_stored(_checkpoint("w20"), timeout_s=TIMEOUT_S)  # returns at once
        with pytest.raises(StoreError, match="max_writer_samples_per_window = 20 reached"):
            cp.wait_stored(over, timeout_s=TIMEOUT_S)
    assert service.stats.stored == 20 and service.stats.rate_limited == 1


@pytest.mark.slow
def test_a_sample_stamped_in_the_future_is_refused(service: PersistService, domain_id: int) -> None:
    with Bus(domain_id) as bus:
        cp = bus.writer("Checkpoint")
        assert cp.wait_for_replicas(1, timeout_s=TIMEOUT_S)
        # An hour ahead: it would sort after every real checkpoint of its instance forever.
        cp.dds.write(_checkpoint("w", 99), timestamp=time.time_ns() + 3600 * 10**9)
        cp.write_stored(_checkpoint("w", 1), timeout_s=TIMEOUT_S)
        cp.write_stored(_checkpoint("w", 2), timeout_s=TIMEOUT_S)
    _, got = _late_reader(domain_id)
    assert [c.items_done for c in got] == [1, 2]
    assert service.stats.future_stamped == 1


def test_a_sample_whose_text_is_not_utf8_is_counted_and_not_kept(
    service: PersistService, domain_id: int
) -> None:
    """Cyclone checks a sample's lengths, not its text: bytes that are no UTF-8 reach the
    replica, which must neither store them (a late joiner could not decode them) nor stop."""
    with Bus(domain_id) as bus:
        cp = bus.writer("Checkpoint")
        assert cp.wait_for_replicas(1, timeout_s=TIMEOUT_S)
        good = _checkpoint("wx", 7).serialize()
        bad = good.replace(b"wx\x00", b"\xff\xfe\x00")  # same length, invalid UTF-8
        assert bad != good and len(bad) == len(good)
        cp.write_cdr(bad)
        cp.write_stored(_checkpoint("w", 1), timeout_s=TIMEOUT_S)
        cp.write_cdr(good)  # the same instance's bytes, valid: stored as any other
        cp.write_stored(_checkpoint("w", 2), timeout_s=TIMEOUT_S)
    _, got = _late_reader(domain_id)
    assert sorted((c.worker_id, c.items_done) for c in got) == [("w", 1), ("w", 2), ("wx", 7)]
    assert service.stats.ignored == 1 and service.alive


@pytest.mark.slow
@pytest.mark.parametrize("limits", [PersistLimits(max_reply_samples=5)])
def test_a_late_joiner_gets_a_bounded_reply_that_says_it_was_cut(
    service: PersistService, domain_id: int
) -> None:
    with Bus(domain_id) as bus:
        cp = bus.writer("Checkpoint")
        assert cp.wait_for_replicas(1, timeout_s=TIMEOUT_S)
        for i in range(1, 12):
            cp.write(_checkpoint(f"w{i}", i))
        cp.write_stored(_checkpoint("w12", 12), timeout_s=TIMEOUT_S)
    reader, got = _late_reader(domain_id)
    assert [c.items_done for c in got] == [8, 9, 10, 11, 12]  # the newest, oldest first
    assert reader.history.truncated and service.stats.truncated_replies >= 1


@pytest.fixture
def guarded(
    bus_env: dict[str, str], domain_id: int, tmp_path: Path
) -> Iterator[tuple[PersistService, list[tuple[Any, ...]]]]:
    """A replica whose policy refuses every dispose and reads of partition ``secret``."""
    calls: list[tuple[Any, ...]] = []

    def policy(principal: Principal, action: Action, topic: str, partition: str) -> bool:
        calls.append((action, topic, partition, principal.participant))
        return action is not Action.DISPOSE and not (
            action is Action.READ and partition == "secret"
        )

    with open_service(
        tmp_path / "p.sqlite", domain_id=domain_id, replica="a", authorize=policy
    ) as service:
        assert service.wait_ready(TIMEOUT_S)
        yield service, calls


@pytest.mark.slow
def test_every_store_dispose_and_read_asks_the_authorization_hook(
    guarded: tuple[PersistService, list[tuple[Any, ...]]], domain_id: int
) -> None:
    service, calls = guarded
    with Bus(domain_id) as bus, Bus(domain_id, partitions=["secret"]) as secret_bus:
        cp = bus.writer("Checkpoint")
        cp.write_stored(_checkpoint("w", 1), timeout_s=TIMEOUT_S)
        secret_bus.writer("Checkpoint").write_stored(_checkpoint("s", 7), timeout_s=TIMEOUT_S)
        cp.dispose(_checkpoint("w"))  # anyone's dispose of w's checkpoint: refused here
        wait_for(lambda: service.stats.unauthorized == 1, TIMEOUT_S, "the refused dispose")
        me = str(bus.participant.guid)
        assert (Action.STORE, "Checkpoint", "", me) in calls
        assert (Action.DISPOSE, "Checkpoint", "", me) in calls
    reader, got = _late_reader(domain_id, partitions=["*"])
    assert [(c.worker_id, c.items_done) for c in got] == [("w", 1)]  # not the secret one
    assert any(c[:3] == (Action.READ, "Checkpoint", "secret") for c in calls)
    assert service.stats.unauthorized >= 2  # the dispose, and the secret sample left out


@pytest.mark.slow
def test_a_secured_replica_aligns_only_with_replicas_and_reads_only_to_readers(
    bus_env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    policy = DefaultPolicy(secured=True)
    with (
        open_service(tmp_path / "p.sqlite", domain_id=domain_id, authorize=policy) as service,
        Bus(domain_id) as bus,
    ):
        assert service.wait_ready(TIMEOUT_S)
        bus.writer("Checkpoint").write_stored(_checkpoint("w", 1), timeout_s=TIMEOUT_S)
        client = history_client(bus)
        wait_for(lambda: client.matched_replicas(), TIMEOUT_S, "the replica")
        (everything,) = client.fetch("", partitions=["*"], timeout_s=TIMEOUT_S)
        assert not everything.ok and "not authorized to align" in everything.message
        # History of a topic goes only to a participant with a reader of it (which DDS access
        # control let it create): asking is no way round its permissions.
        before = service.stats.unauthorized
        (denied,) = client.fetch("Checkpoint", timeout_s=TIMEOUT_S)
        assert denied.samples == [] and service.stats.unauthorized > before
        bus.reader("Checkpoint", history=False)
        (named,) = client.fetch("Checkpoint", timeout_s=TIMEOUT_S)
        assert named.ok and len(named.samples) == 1


# -- the history client against a rogue replica -------------------------------------------------


def _rogue_replier(bus: Bus, stop: threading.Event, samples: int) -> None:
    """Answer every history request three times under three names, ``samples`` samples each."""
    requests = bus.reader("PersistRequest", history=False)
    replies = bus.writer("PersistReply")
    while not stop.is_set():
        for request in requests.take_wait(timeout_s=0.1):
            for name in ("r1", "r2", "r3"):
                replies.write(
                    types.PersistReply(
                        request_id=request.request_id,
                        client_id=request.client_id,
                        replier_id=name,
                        complete=True,
                        ok=True,
                        samples=[
                            types.PersistSample(topic="Checkpoint", data=bytes(100), source_ns=i)
                            for i in range(samples)
                        ],
                    )
                )


@pytest.mark.slow
@pytest.mark.parametrize("samples", [3, 50])
def test_the_history_client_takes_one_bounded_reply_per_replica(
    bus_env: dict[str, str], domain_id: int, samples: int
) -> None:
    stop = threading.Event()
    with Bus(domain_id) as rogue_bus, Bus(domain_id) as bus:
        thread = threading.Thread(target=_rogue_replier, args=(rogue_bus, stop, samples))
        thread.start()
        try:
            client = HistoryClient(bus, max_samples=20)
            wait_for(lambda: client.matched_replicas(), TIMEOUT_S, "the rogue replier")
            replies, truncated = client.fetch_all("Checkpoint", timeout_s=5.0)
            client.close()
        finally:
            stop.set()
            thread.join(10)
    if samples == 3:  # one reply per participant, whatever names it gives itself
        assert [len(r.samples) for r in replies] == [3] and not truncated
    else:  # over the fetch's bound: dropped, and said
        assert replies == [] and truncated and client.dropped >= 1


@pytest.mark.slow
def test_only_the_topics_the_mission_declares_durable_are_kept(
    bus_env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    """An identity allowed to write some topic cannot fill the store by giving it durable QoS:
    the mission's replicas keep its declared durable topics only (``--topics``)."""
    with (
        open_service(
            tmp_path / "p.sqlite", domain_id=domain_id, replica="a", topics=["Checkpoint"]
        ) as service,
        Bus(domain_id) as bus,
    ):
        assert service.wait_ready(TIMEOUT_S)
        flood = bus.writer("Track", profile="durable")  # a state topic, written durable
        for i in range(50):
            flood.write(types.Track(track_id=i + 1))
        cp = bus.writer("Checkpoint")
        assert cp.wait_for_replicas(1, timeout_s=TIMEOUT_S)
        cp.write_stored(_checkpoint("w", 1), timeout_s=TIMEOUT_S)
        wait_for(lambda: service.stats.topics_refused >= 1, TIMEOUT_S, "the Track writer refused")
    report = inspect_store(tmp_path / "p.sqlite")
    assert [t.name for t in report.topics] == ["Checkpoint"], report.topics
