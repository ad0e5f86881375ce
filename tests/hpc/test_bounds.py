"""A rogue participant on the job topics: what it sends is bounded, checked, counted, dropped.

Each test plays the rogue on its own participant of a real bus against the real master,
worker, echo or persistence service, then shows the job still comes out right.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mcc.bus import Bus
from mcc.errors import MccError
from mcc.hpc.base import HpcError
from mcc.hpc.checkpoint import restore_checkpoint
from mcc.hpc.farm import MAX_ITEM_NUMBERS, FarmMaster, FarmWorker
from mcc.hpc.primes import PrimeScan
from mcc.hpc.stream import run_echo, run_source
from mcc.persist.service import open_service
from mcc.types import BulkBlock, Checkpoint, WorkItem, WorkResult
from tests.conftest import wait_for

from .test_farm_protocol import JOB, PlayedWorker, start_master
from .test_primes import reference


@pytest.fixture
def buses(bus_env: dict[str, str], domain_id: int) -> Iterator[tuple[Bus, Bus]]:
    with Bus(domain_id, name="mcc") as mcc_bus, Bus(domain_id, name="rogue") as rogue_bus:
        yield mcc_bus, rogue_bus


def test_a_worker_refuses_items_it_could_never_finish_and_holds_a_bounded_queue(
    buses: tuple[Bus, Bus],
) -> None:
    worker_bus, rogue_bus = buses
    worker = FarmWorker(worker_bus, worker_id="w", job_id=JOB, max_queued_items=8)
    items = rogue_bus.writer("WorkItem")
    assert items.wait_for_readers(1, timeout_s=20)

    def item(item_id: int, lo: int, hi: int) -> WorkItem:
        return WorkItem(job_id=JOB, item_id=item_id, worker_id="w", lo=lo, hi=hi, payload=b"")

    # 2^62 numbers: a base sieve of 2^31 flags, then centuries of work; then a flood.
    items.write(item(0, 1, 2**62))
    items.write(item(1, 5, 3))
    for k in range(2, 22):
        items.write(item(k, 1, 1000))
    wait_for(lambda: sum(worker.dropped.values()) == 14, 20, "the dropped items")
    assert worker.dropped == {
        "outside [0, 1000000000001]": 2,
        "more than max_queued_items = 8 held": 12,
    }
    # one item may span at most MAX_ITEM_NUMBERS numbers, whatever its range
    items.write(item(30, 10**11, 10**11 + MAX_ITEM_NUMBERS + 1))
    wait_for(lambda: sum(worker.dropped.values()) == 15, 20, "the too-wide item")


def test_the_master_counts_only_results_that_can_be_right_from_its_workers(
    buses: tuple[Bus, Bus],
) -> None:
    master_bus, bus = buses
    future, stop, farm = start_master(master_bus, n=10_000, workers=1, items=2)
    try:
        worker = PlayedWorker(bus, "t/worker/0")
        worker.hello(pid=1)
        first, second = worker.take_mine(2)
        rogue = bus.writer("WorkResult")
        for item_id, worker_id, count, largest in (
            (first.item_id, "nobody", 10, first.lo + 1),  # never said hello
            (first.item_id, "t/worker/0", 10**9, first.lo + 1),  # more primes than numbers
            (first.item_id, "t/worker/0", 3, second.hi + 7),  # the largest outside the item
            (99, "t/worker/0", 1, 0),  # an item the job does not have
        ):
            rogue.write(
                WorkResult(
                    job_id=JOB, item_id=item_id, worker_id=worker_id, count=count, value=largest
                )
            )
        wait_for(lambda: sum(farm.dropped.values()) == 4, 20, "the rogue results dropped")
        worker.answer(first)
        worker.answer(second)
        result = future.result(timeout=30)
    finally:
        stop.set()
    assert (result.count, result.largest) == reference(10_000)
    assert result.extra["dropped"] == {
        "result from a worker that never said hello": 1,
        "result that cannot be right": 2,
        "result for an item the job does not have": 1,
    }


def test_a_job_past_its_bounds_is_refused_before_it_starts(buses: tuple[Bus, Bus]) -> None:
    bus, _ = buses
    with pytest.raises(HpcError, match="2 <= n <= 1000000000000"):
        FarmMaster(bus, job_id=JOB, n=2**62, workers=2)
    with pytest.raises(HpcError, match="a job has 1 to 100000 items"):
        FarmMaster(bus, job_id=JOB, n=10**9, workers=2, items=10**6, mode="dynamic")
    with pytest.raises(HpcError, match="use at least 100 items"):
        FarmMaster(bus, job_id=JOB, n=10**12, workers=2, items=8)
    with pytest.raises(HpcError, match="a farm runs 1 to 1024 workers"):
        FarmMaster(bus, job_id=JOB, n=100, workers=5000)


def test_an_echo_allocates_no_more_than_its_bound_for_a_rogue_chunk(
    buses: tuple[Bus, Bus], caplog: pytest.LogCaptureFixture
) -> None:
    source_bus, rogue_bus = buses
    stop = threading.Event()
    with Bus(source_bus.domain_id, name="echo") as echo_bus, ThreadPoolExecutor(2) as pool:
        echo = pool.submit(
            run_echo, echo_bus, job_id="s", echo_id="e", stop=stop, max_bytes=1 << 20
        )
        rogue = rogue_bus.writer("Bulk")  # a Python writer of the native endpoints' type
        assert rogue.wait_for_readers(1, timeout_s=20)
        rogue_blocks = (
            (1, 0, 1 << 40, 4096),  # a terabyte buffer
            (2, 1 << 19, 1 << 19, 4096),  # a block past its buffer's end
            (3, 0, 4096, 65536),  # a block larger than its buffer
            (4, 0, 1 << 19, 70000),  # more data than a block holds
        )
        for transfer, offset, total, length in rogue_blocks:
            rogue.write(
                BulkBlock(transfer=transfer, count=1, offset=offset, total=total, length=length)
            )
        try:
            result = run_source(
                source_bus,
                job_id="s",
                size_bytes=1 << 19,
                chunk_bytes=64 << 10,
                stop=stop,
                start_timeout_s=30,
            )
            assert echo.result(timeout=30) == 2 << 19  # the untimed warm-up, then the stream
        finally:
            stop.set()
    assert result.verified is True
    assert "transfer dropped: a stream of 1099511627776 bytes (at most 1048576)" in caplog.text


def test_a_checkpoint_stamped_in_the_future_or_impossible_is_not_restored(
    bus_env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    honest = PrimeScan(1, 1000, 501)
    year_ns = 365 * 24 * 3600 * 10**9
    with (
        open_service(tmp_path / "p.sqlite", domain_id=domain_id, replica="a") as service,
        Bus(domain_id, name="rogue") as bus,
    ):
        assert service.wait_ready(20)
        cp = bus.writer("Checkpoint")
        for items_done, time_ns in ((3, time.time_ns()), (99, time.time_ns() + year_ns)):
            cp.write_stored(
                Checkpoint(
                    job_id=JOB,
                    worker_id="w",
                    items_done=items_done,
                    state=bytes(8) + honest.pack(),
                    time_ns=time_ns,
                ),
                timeout_s=20,
            )
        with Bus(domain_id, name="replacement") as mine:
            restored = restore_checkpoint(mine, job_id=JOB, worker_id="w", timeout_s=20)
    assert restored is not None and restored.items_done == 3
    # a state no scan could have packed is refused, not resumed from
    forged = honest.pack()[:24] + (10**6).to_bytes(8, "little") + bytes(8)
    with pytest.raises(MccError, match="impossible"):
        PrimeScan.unpack(forged)
