"""The master's lease on a real bus: workers obey the highest token, a master that reads a
higher claim steps down and hands out nothing, and takes over again once that claim lapses."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from mcc.bus import Bus
from mcc.hpc import farm_master, farm_worker
from mcc.hpc.base import CONTROL_ID, JobResult
from mcc.hpc.farm import FarmMaster, FarmWorker
from mcc.hpc.journal import (
    JOURNAL_TOPIC,
    RESULTS_PREFIX,
    JournalState,
    Lease,
    MasterJournal,
    encode_token,
    read_records,
)
from mcc.hpc.primes import split_range
from mcc.persist import open_service
from mcc.types import WorkItem, WorkResult
from tests.conftest import wait_for

from .test_farm_protocol import PlayedWorker
from .test_primes import reference

JOB = "proto"  # the played workers' job (test_farm_protocol)


@pytest.fixture
def buses(bus_env: dict[str, str], domain_id: int) -> Iterator[tuple[Bus, Bus]]:
    with Bus(domain_id, name="master") as master_bus, Bus(domain_id, name="others") as bus:
        yield master_bus, bus


def item(item_id: int, token: tuple[int, str], lo: int = 1, hi: int = 1000) -> WorkItem:
    return WorkItem(
        job_id=JOB,
        item_id=item_id,
        worker_id="t/worker/0",
        lo=lo,
        hi=hi,
        payload=encode_token(token),
        issue_ns=0,
    )


def start_worker(bus: Bus) -> tuple[FarmWorker, Future[int], threading.Event]:
    """A real worker ``t/worker/0`` of the job running on a thread of its own: itself, the
    items it will have computed, its stop."""
    worker = FarmWorker(bus, worker_id="t/worker/0", job_id=JOB)
    stop = threading.Event()
    pool = ThreadPoolExecutor(1)
    done: Future[int] = pool.submit(worker.run, stop, start_timeout_s=20)
    pool.shutdown(wait=False)
    return worker, done, stop


def test_a_worker_obeys_the_highest_token_and_answers_a_re_issued_item_from_its_results(
    buses: tuple[Bus, Bus],
) -> None:
    worker_bus, bus = buses
    results: list[WorkResult] = []
    got = threading.Event()

    def on_results(reader: object) -> None:
        results.extend(r for r in result_reader.take(64) if r.item_id != CONTROL_ID)
        got.set()

    result_reader = bus.reader("WorkResult", on_data=on_results)
    items = bus.writer("WorkItem")
    farm, done, stop = start_worker(worker_bus)
    try:
        assert items.wait_for_readers(1, timeout_s=20)
        items.write(item(0, (1, "t/master/0")))
        wait_for(lambda: len(results) == 1, 20, "the first result")
        items.write(item(1, (0, "")))  # a master without a lease: lower, dropped
        garbage = item(4, (9, "x"))
        garbage.payload = b"\x01\x02"  # not a token: dropped, counted
        items.write(garbage)
        items.write(item(2, (2, "t/master/1")))  # a new master: item 0 comes again
        items.write(item(0, (2, "t/master/1")))
        wait_for(lambda: len(results) == 3, 20, "items 2 and 0 under the new token")
        items.write(item(3, (1, "t/master/0")))  # the deposed master, still talking
        items.write(WorkItem(job_id=JOB, item_id=CONTROL_ID, worker_id="", payload=b"", issue_ns=0))
        assert done.result(timeout=20) == 2  # items 0 and 2 computed; 0 again from its result
    finally:
        stop.set()
    assert [r.item_id for r in results] == [0, 2, 0]
    assert (results[2].count, results[2].elapsed_ns) == (results[0].count, results[0].elapsed_ns)
    assert farm.dropped == {
        "an item from a master that lost its lease": 2,
        "a master token that does not decode": 1,
    }
    assert farm.token == (2, "t/master/1")


@contextlib.contextmanager
def journaled_master(
    buses: tuple[Bus, Bus], domain_id: int, tmp_path: Path, *, lease_s: float = 3.0
) -> Iterator[tuple[FarmMaster, Future[JobResult], PlayedWorker]]:
    """A master of 4 items with a journal (a persistence service of its own) running on the
    first bus, and the played worker it waits for on the second, hello said."""
    master_bus, bus = buses
    with open_service(tmp_path / "p.sqlite", domain_id=domain_id, replica="p") as service:
        service.wait_ready(timeout_s=20)
        journal = MasterJournal(master_bus, job_id=JOB, master_id="t/master/0")
        assert journal.available
        farm = FarmMaster(
            master_bus, job_id=JOB, n=10_000, workers=1, items=4, journal=journal, lease_s=lease_s
        )
        stop = threading.Event()
        pool = ThreadPoolExecutor(1)
        future: Future[JobResult] = pool.submit(farm.run, stop, start_timeout_s=30, timeout_s=60)
        pool.shutdown(wait=False)
        try:
            worker = PlayedWorker(bus, "t/worker/0")
            worker.hello(pid=111)
            yield farm, future, worker
        finally:
            stop.set()


def test_a_master_that_reads_a_higher_claim_stands_by_then_takes_the_job_back(
    buses: tuple[Bus, Bus], domain_id: int, tmp_path: Path
) -> None:
    bus = buses[1]
    with journaled_master(buses, domain_id, tmp_path, lease_s=1.0) as (farm, future, worker):
        first = worker.take_mine(4)
        assert {i.payload for i in first} == {encode_token((1, "t/master/0"))}
        worker.answer(first[0])
        wait_for(lambda: 0 in farm.results, 20, "the first result counted")
        # Another master claims epoch 5 (and never renews it), with the job's roster.
        rival = Lease(
            epoch=5,
            master="t/master/9",
            n=10_000,
            items=4,
            mode="strided",
            roster=(("t/worker/0", 111),),
        )
        cps = bus.writer(JOURNAL_TOPIC)
        assert cps.wait_for_readers(2, timeout_s=20)  # the service and the master
        cps.write_stored(rival.encode(JOB), timeout_s=10)
        wait_for(lambda: farm.token == (0, ""), 20, "the master standing by")
        worker.hello(pid=222)  # a replacement: a leading master would re-issue to it
        # Once the rival's claim lapses (1 s unrenewed), the master claims epoch 6 and
        # re-issues what has no result, under its new token.
        again = worker.take_mine(3, timeout_s=30)
        assert sorted(i.item_id for i in again) == [1, 2, 3]
        assert {i.payload for i in again} == {encode_token((6, "t/master/0"))}
        for i in again:
            worker.answer(i)
        result = future.result(timeout=30)
    assert (result.count, result.largest) == reference(10_000)
    journal_report = result.extra["journal"]
    assert journal_report["epoch"] == 6 and journal_report["records_per_item_max"] == 1
    (takeover,) = journal_report["takeovers"]
    assert (takeover["from"], takeover["adopted_results"]) == ("t/master/9", 1)


# -- group commit: results that come together share one durable write --------------------------

#: The master, its job's result to come, the played worker, the items of each journal write.
JournaledFarm = tuple[FarmMaster, Future[JobResult], PlayedWorker, list[list[int]]]


@pytest.fixture
def journaled_farm(
    buses: tuple[Bus, Bus], domain_id: int, tmp_path: Path
) -> Iterator[JournaledFarm]:
    """A journaled master of 4 items for one played worker, and the items of each journal
    write of results as the persistence service received them."""
    bus = buses[1]
    writes: list[list[int]] = []

    def on_records(reader: object) -> None:
        for cp in watch.take(64):
            if cp.job_id == JOB and cp.worker_id.startswith(RESULTS_PREFIX):
                writes.append(sorted(read_records(JournalState(), [cp], job_id=JOB).results))

    watch = bus.reader(JOURNAL_TOPIC, on_data=on_records)
    with journaled_master(buses, domain_id, tmp_path) as (farm, future, worker):
        yield farm, future, worker, writes


def items_with_window(
    farm: JournaledFarm, monkeypatch: pytest.MonkeyPatch, window_s: float
) -> list[WorkItem]:
    """The job's four items, taken by the played worker, with a group commit of ``window_s``."""
    monkeypatch.setattr(farm_master, "GROUP_COMMIT_S", window_s)
    return farm[2].take_mine(4)


def test_results_are_held_for_one_write_and_the_jobs_last_ones_are_not(
    journaled_farm: JournaledFarm, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A window far longer than the test: only the job's last results end it.
    farm, future, worker, writes = journaled_farm
    items = items_with_window(journaled_farm, monkeypatch, 60.0)
    worker.answer_all(items[:3])
    worker.answer(items[0])  # again while held: counted once, journaled once
    wait_for(lambda: farm.duplicates == 1, 20, "the duplicate seen")
    assert farm.results == {} and writes == []  # held, not counted yet
    started = time.monotonic()
    worker.answer(items[3])
    result = future.result(timeout=30)
    assert time.monotonic() - started < 30  # the last result did not wait out the window
    assert (result.count, result.largest) == reference(10_000)
    # one durable write for the job's four results
    wait_for(lambda: writes, 20, "the journal write seen")
    assert writes == [[0, 1, 2, 3]]
    journal = result.extra["journal"]
    assert (journal["records_per_item_max"], journal["result_writes"]) == (1, 1)
    assert result.duplicate_results == 1


def test_a_held_result_is_journaled_when_the_window_ends_without_more_results(
    journaled_farm: JournaledFarm, monkeypatch: pytest.MonkeyPatch
) -> None:
    farm, future, worker, writes = journaled_farm
    items = items_with_window(journaled_farm, monkeypatch, 0.3)
    worker.answer(items[0])
    wait_for(lambda: 0 in farm.results, 20, "the held result counted once the window ended")
    wait_for(lambda: writes, 20, "the journal write seen")
    assert writes == [[0]]
    worker.answer_all(items[1:])
    assert future.result(timeout=30).lost_items == 0


def test_a_master_whose_predecessor_died_before_the_roster_was_stored_hears_the_busy_workers(
    buses: tuple[Bus, Bus], domain_id: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The roster is committed while the first items go out (`MasterJournal.publish`): a
    master killed in between leaves workers with items and a lease without a roster. Its
    successor knows its workers only from hellos, which a worker that has its items says again
    once idle (`IDLE_HELLO_S`), so the job ends, exact."""
    monkeypatch.setattr(farm_worker, "HELLO_REPEAT_S", 0.0)  # no start-up hellos to help
    master_bus, bus = buses
    ranges = split_range(10_000, 4)
    with (
        open_service(tmp_path / "p.sqlite", domain_id=domain_id, replica="p") as service,
        Bus(domain_id, name="worker") as worker_bus,
    ):
        service.wait_ready(timeout_s=20)
        # The dead master: its claim is stored, its roster is not; its items went out.
        dead = Lease(epoch=1, master="t/master/0", n=10_000, items=4, mode="strided")
        cps = bus.writer(JOURNAL_TOPIC)
        cps.write_stored(dead.encode(JOB), timeout_s=10)
        items = bus.writer("WorkItem")
        results = bus.reader("WorkResult")
        _, done, stop = start_worker(worker_bus)
        try:
            assert items.wait_for_readers(1, timeout_s=20)
            for k, (lo, hi) in enumerate(ranges):
                items.write(item(k, (1, "t/master/0"), lo, hi))
            answered: set[int] = set()

            def all_answered() -> bool:
                answered.update(r.item_id for r in results.take() if r.item_id != CONTROL_ID)
                return len(answered) == 4

            wait_for(all_answered, 20, "the dead master's items answered")
            items.close()  # the dead master's endpoints go with it
            results.close()
            # Its successor under the same identity: claims epoch 2 at once, finds no roster.
            journal = MasterJournal(master_bus, job_id=JOB, master_id="t/master/0")
            farm = FarmMaster(master_bus, job_id=JOB, n=10_000, workers=1, items=4, journal=journal)
            result = farm.run(stop, start_timeout_s=20, timeout_s=30)
            assert done.result(timeout=20) == 4  # each item computed once: the rest re-sent
        finally:
            stop.set()
    assert (result.count, result.largest) == reference(10_000)
    assert result.extra["journal"]["epoch"] == 2
    assert result.extra["journal"]["records_per_item_max"] == 1
