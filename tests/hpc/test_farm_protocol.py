"""The master's accounting on a real bus, with the test playing the workers."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from mcc.bus import Bus
from mcc.hpc import farm_master
from mcc.hpc.base import CONTROL_ID, JobResult, read_result, write_result
from mcc.hpc.farm import FarmMaster, FarmWorker, write_own_result
from mcc.hpc.farm_protocol import IDLE
from mcc.hpc.farm_worker import HELLO_REPEAT_S
from mcc.hpc.primes import base_primes, count_primes, isqrt, split_range
from mcc.types import Checkpoint, WorkItem, WorkResult
from tests.conftest import wait_for

from .test_primes import reference

JOB = "proto"


@pytest.fixture
def buses(bus_env: dict[str, str], domain_id: int) -> Iterator[tuple[Bus, Bus]]:
    with Bus(domain_id, name="master") as master_bus, Bus(domain_id, name="workers") as bus:
        yield master_bus, bus


class PlayedWorker:
    """A worker identity played by the test: hello, take items, answer them (correctly)."""

    def __init__(self, bus: Bus, worker_id: str) -> None:
        self.worker_id = worker_id
        self.results = bus.writer("WorkResult")
        self.items = bus.reader("WorkItem")
        self.base = base_primes(1_000)
        assert self.results.wait_for_readers(1, timeout_s=20)
        assert self.items.wait_for_writers(1, timeout_s=20)

    def hello(self, pid: int, *, idle: bool = False) -> None:
        self.results.write(
            WorkResult(
                job_id=JOB,
                item_id=CONTROL_ID,
                worker_id=self.worker_id,
                value=pid,
                payload=IDLE if idle else b"",
            )
        )

    def take_mine(self, count: int, timeout_s: float = 20.0) -> list[WorkItem]:
        """Wait for ``count`` items addressed to this identity (others' are skipped)."""
        mine: list[WorkItem] = []
        for _ in range(200):
            for item in self.items.take_wait(timeout_s=timeout_s / 200):
                if item.worker_id == self.worker_id and item.item_id != CONTROL_ID:
                    mine.append(item)
            if len(mine) >= count:
                return mine
        pytest.fail(f"{self.worker_id}: got {len(mine)} of {count} items")

    def answer_all(self, items: list[WorkItem]) -> None:
        for item in items:
            self.answer(item)

    def answer(self, item: WorkItem) -> None:
        found = count_primes(item.lo, item.hi, base_primes(isqrt(item.hi)))
        self.results.write(
            WorkResult(
                job_id=JOB,
                item_id=item.item_id,
                worker_id=self.worker_id,
                count=found.count,
                value=found.largest,
            )
        )


def start_master(
    bus: Bus, **options: object
) -> tuple[Future[JobResult], threading.Event, FarmMaster]:
    """A master running ``farm.run`` on a thread of its own: its result, its stop, itself."""
    stop = threading.Event()
    farm = FarmMaster(bus, job_id=JOB, **options)  # type: ignore[arg-type]
    pool = ThreadPoolExecutor(1)
    future = pool.submit(farm.run, stop, start_timeout_s=30, timeout_s=60)
    pool.shutdown(wait=False)
    return future, stop, farm


@contextlib.contextmanager
def four_items(
    buses: tuple[Bus, Bus],
) -> Iterator[tuple[FarmMaster, Future[JobResult], PlayedWorker, list[WorkItem]]]:
    """A master of [1, 10 000] in 4 items for one played worker (pid 111), who has them."""
    master_bus, bus = buses
    future, stop, farm = start_master(master_bus, n=10_000, workers=1, items=4)
    try:
        worker = PlayedWorker(bus, "t/worker/0")
        worker.hello(pid=111)
        items = worker.take_mine(4)
        assert [i.item_id for i in items] == [0, 1, 2, 3]
        yield farm, future, worker, items
    finally:
        stop.set()


def test_duplicates_are_dropped_and_a_replacement_gets_the_unfinished_items(
    buses: tuple[Bus, Bus],
) -> None:
    with four_items(buses) as (_, future, worker, items):
        worker.answer(items[0])
        worker.answer(items[1])
        worker.answer(items[1])  # the same result twice: counted once
        worker.hello(pid=222)  # a replacement under the same identity
        again = worker.take_mine(2)
        assert sorted(i.item_id for i in again) == [2, 3]
        worker.answer_all(again)
        result = future.result(timeout=30)
    assert (result.count, result.largest) == reference(10_000)
    assert result.duplicate_results == 1 and result.lost_items == 0
    assert result.reissued_items == 2
    (replacement,) = result.replacements
    assert replacement["worker_id"] == "t/worker/0"
    assert (replacement["old_pid"], replacement["new_pid"], replacement["reissued"]) == (
        111,
        222,
        2,
    )


def test_an_idle_worker_gets_again_the_items_whose_results_were_lost(
    buses: tuple[Bus, Bus], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The master waits IDLE_HELLO_S after an issue before it trusts an idle hello (the items
    # may still be on their way); here they have arrived: take them at their word at once.
    monkeypatch.setattr(farm_master, "IDLE_HELLO_S", 0.0)
    with four_items(buses) as (farm, future, worker, items):
        worker.answer_all(items[:2])  # the results of items 2 and 3 are lost on the way
        wait_for(lambda: len(farm.results) == 2, 20, "two results counted")
        worker.hello(pid=111, idle=True)
        again = worker.take_mine(2)
        assert sorted(i.item_id for i in again) == [2, 3]
        worker.answer_all(again)
        result = future.result(timeout=30)
    assert (result.count, result.largest) == reference(10_000)
    assert (result.reissued_items, result.duplicate_results, result.lost_items) == (2, 0, 0)
    assert result.replacements == []


def test_the_first_item_waits_for_the_workers_item_readers(buses: tuple[Bus, Bus]) -> None:
    """A hello proves that a worker's results reach the master, not that the master's items
    reach the worker: the master issues once its item writer has matched the worker's reader
    (the job's clock starts there), so no item waits in the writer for discovery."""
    master_bus, bus = buses
    future, stop, farm = start_master(master_bus, n=5_000, workers=1, items=2)
    try:
        results = bus.writer("WorkResult")
        assert results.wait_for_readers(1, timeout_s=20)
        results.write(WorkResult(job_id=JOB, item_id=CONTROL_ID, worker_id="t/worker/0", value=1))
        wait_for(lambda: "t/worker/0" in farm.workers, 20, "the hello at the master")
        # An observation window, not a synchronisation: the master has every hello and
        # nothing reads its items; the code before this wait issued within milliseconds.
        time.sleep(0.3)
        assert farm.first_item_ns == 0
        reader_ns = time.time_ns()
        worker = PlayedWorker(bus, "t/worker/0")  # its item reader matches now
        items = worker.take_mine(2)
        assert min(item.issue_ns for item in items) >= reader_ns
        worker.answer_all(items)
        result = future.result(timeout=30)
    finally:
        stop.set()
    assert (result.count, result.largest) == reference(5_000)


def test_a_silent_worker_s_items_move_to_a_live_one(buses: tuple[Bus, Bus]) -> None:
    master_bus, bus = buses
    future, stop, _ = start_master(master_bus, n=5_000, workers=2, items=4, reassign_after_s=0.5)
    try:
        live = PlayedWorker(bus, "t/worker/0")
        PlayedWorker(bus, "t/worker/1").hello(pid=2)  # says hello, then never a word
        live.hello(pid=1)
        mine = live.take_mine(2)
        for item in mine:
            live.answer(item)
        moved = live.take_mine(2)  # worker 1's items, once it has been silent 0.5 s
        assert sorted(i.item_id for i in moved) == [1, 3]
        for item in moved:
            live.answer(item)
        result = future.result(timeout=30)
    finally:
        stop.set()
    assert (result.count, result.largest) == reference(5_000)
    assert result.reissued_items == 2 and result.lost_items == 0


@pytest.mark.parametrize(("interval_s", "idle_s"), [(60.0, 0.0), (0.0, 0.0), (1.0, 1.5)])
def test_a_worker_checkpoints_at_most_once_an_interval_and_saves_its_items_when_idle(
    buses: tuple[Bus, Bus], interval_s: float, idle_s: float
) -> None:
    """Each durable ``Checkpoint`` costs every persistence replica a commit: a worker saves at
    most once per ``checkpoint_interval_s`` while it works, always again at the end of an item
    whose scan it saved mid-way (so no stale scan outlives its item), and what it finished
    once its queue has stayed empty for a hello interval. The interval counts from when the
    work comes: a worker idle for longer (``idle_s``) does not save the first segment of its
    first item. The test plays the master; six items of 500 000 numbers."""
    master_bus, bus = buses
    items = master_bus.writer("WorkItem")
    results = master_bus.reader("WorkResult")
    checkpoints: list[Checkpoint] = []
    # every sample as it arrives (the profile keeps the last 16 a worker wrote)
    master_bus.reader("Checkpoint", on_data=lambda r: checkpoints.extend(r.take()))
    worker = FarmWorker(
        bus,
        worker_id="t/worker/0",
        job_id=JOB,
        checkpoint_interval_s=interval_s,
        segment_numbers=1 << 18,  # two segments an item: interval 0 saves inside each item
    )
    stop = threading.Event()
    pool = ThreadPoolExecutor(1)
    done = pool.submit(worker.run, stop, start_timeout_s=30)
    pool.shutdown(wait=False)
    answers: dict[int, WorkResult] = {}
    try:
        wait_for(lambda: any(r.item_id == CONTROL_ID for r in results.take()), 20, "a hello")
        time.sleep(idle_s)  # idle on purpose, longer than the interval: no event to wait for
        ranges = split_range(3_000_000, 6)
        items.write_many(
            [
                WorkItem(job_id=JOB, item_id=k, worker_id="t/worker/0", lo=lo, hi=hi)
                for k, (lo, hi) in enumerate(ranges)
            ]
        )

        def all_saved() -> bool:
            answers.update((r.item_id, r) for r in results.take() if r.item_id != CONTROL_ID)
            return len(answers) == 6 and any(c.items_done == 6 for c in checkpoints)

        wait_for(all_saved, 30, "six results and a checkpoint of six items")
    finally:
        items.write(WorkItem(job_id=JOB, item_id=CONTROL_ID, worker_id=""))
        stop.set()
    assert done.result(timeout=30) == 6
    expected = reference(3_000_000)
    assert sum(r.count for r in answers.values()) == expected[0]
    last = checkpoints[-1]
    assert (last.items_done, last.last_item_id, bytes(last.state)) == (6, 5, b"")
    ends = [c for c in checkpoints if not bytes(c.state)]
    if interval_s:
        # all six queued before the first ended: one save, when idle (each item saved before)
        assert len(checkpoints) < 6, [c.items_done for c in checkpoints]
        if idle_s:  # six items in well under an interval from their start: none saved mid-way
            assert ends == checkpoints, [bytes(c.state) for c in checkpoints]
    else:
        assert len(ends) >= 6 and len(checkpoints) > len(ends)  # each item: mid-way, then end


def test_a_master_that_matches_late_still_hears_the_worker_that_has_its_items(
    buses: tuple[Bus, Bus],
) -> None:
    """A replacement gets its items from the master's writer (transient-local) as soon as that
    writer has matched its reader, which may be before the master's reader has matched its
    ``WorkResult`` writer (its first hellos reached only a watcher). It keeps saying hello for
    ``HELLO_REPEAT_S``, so the master still learns of it and re-issues what it missed."""
    master_bus, bus = buses
    items = master_bus.writer("WorkItem")
    watcher = master_bus.reader("WorkResult")  # the only reader when the worker starts
    items.write_many(
        [
            WorkItem(job_id=JOB, item_id=k, worker_id="t/worker/0", lo=lo, hi=hi)
            for k, (lo, hi) in enumerate(split_range(400_000, 4))
        ]
    )
    worker = FarmWorker(bus, worker_id="t/worker/0", job_id=JOB)
    stop = threading.Event()
    pool = ThreadPoolExecutor(1)
    done = pool.submit(worker.run, stop, start_timeout_s=30)
    pool.shutdown(wait=False)
    try:
        heard: list[WorkResult] = []

        def worked() -> bool:
            heard.extend(watcher.take())
            return any(r.item_id != CONTROL_ID for r in heard)

        wait_for(worked, 20, "a result at the watcher")
        started = min(r.done_ns for r in heard if r.item_id == CONTROL_ID)
        late = master_bus.reader("WorkResult")  # the master's reader, matching only now
        hello: list[WorkResult] = []
        deadline = time.monotonic() + HELLO_REPEAT_S + 5.0
        while not hello and time.monotonic() < deadline:
            hello = [r for r in late.take_wait(16, timeout_s=0.1) if r.item_id == CONTROL_ID]
    finally:
        items.write(WorkItem(job_id=JOB, item_id=CONTROL_ID, worker_id=""))
        stop.set()
    assert done.result(timeout=30) == 4
    assert hello and hello[0].worker_id == "t/worker/0"
    assert hello[0].done_ns - started <= HELLO_REPEAT_S * 1e9 + 0.5e9


def test_the_farm_and_stream_apps_config_blocks_are_checked(tmp_path: Path) -> None:
    """Each app of a module gets its own model; a bad block is each field's own line."""
    from mcc.hpc.farm import MasterConfig
    from mcc.hpc.jobs import primes_mission
    from mcc.orchestrate.appspec import app_problems

    path = tmp_path / "m.yaml"
    path.write_text(
        "mission: m\ndomain: 3\nsystems:\n"
        '  master: {app: "mcc.hpc.farm:master", config: {n: 0, workers: 2, mode: random}}\n'
        '  worker: {app: "mcc.hpc.farm:worker", config: {n: 5, segment: 0}}\n'
        '  source: {app: "mcc.hpc.stream:source", config: {chunk: 1024}}\n'
        '  echo: {app: "mcc.hpc.stream:echo", args: [--job, j]}\n'
    )
    problems = app_problems(path)
    assert problems[:2] == [
        f"{path}:4: systems.master.config.n: Input should be greater than or equal to 1 (got 0)",
        f"{path}:4: systems.master.config.mode: Input should be 'strided' or 'dynamic' "
        "(got 'random')",
    ]
    assert f"{path}:5: systems.worker.config.n: Extra inputs are not permitted (got 5)" in problems
    assert f"{path}:6: systems.source.config.bytes: Field required" in problems
    assert (
        f"{path}:7: systems.echo.args: mcc.hpc.stream:echo takes a config: block, not args "
        "(fields: job, start_timeout_s, max_bytes, expect_bytes) (got ['--job', 'j'])"
    ) in problems
    assert len(problems) == 6
    mission = primes_mission(n=1000, workers=2, job_id="j1", items=4, persist=False)
    master = MasterConfig.model_validate(mission.systems["master"].config)
    assert (master.n, master.workers, master.items, master.job) == (1000, 2, 4, "j1")
    assert master.journal_timeout_s == 0
    assert mission.clusters["worker"].config == {"job": "j1", "restore_timeout_s": 0}


def test_a_master_that_finds_the_job_ended_leaves_the_result_to_the_one_that_ended_it(
    tmp_path: Path,
) -> None:
    """A standby that reads the end in the journal has no runtime to report (the results
    were counted by the leader): it waits for the leader's file, which follows the journal's
    end, and writes its own only if that never comes."""
    leader = JobResult(app="primes", impl="dds", workers=2, job_id="j", runtime_s=1.5)
    standby = JobResult(app="primes", impl="dds", workers=2, job_id="j", runtime_s=None)
    stop = threading.Event()
    path = tmp_path / "hpc-j.json"
    later = threading.Timer(0.3, write_result, args=(leader, path))
    later.start()
    try:
        assert not write_own_result(standby, path, ended_by="m/master/0", wait_s=20, stop=stop)
    finally:
        later.join()
    got = read_result(path)
    assert got is not None and got.runtime_s == 1.5
    alone = tmp_path / "hpc-k.json"  # the leader died before writing: ours, after the wait
    assert write_own_result(standby, alone, ended_by="m/master/0", wait_s=0.1, stop=stop)
    assert read_result(alone) == standby
    own = tmp_path / "hpc-l.json"  # the master that ended the job writes at once
    assert write_own_result(leader, own, ended_by="", wait_s=20, stop=stop)
    assert read_result(own) == leader
