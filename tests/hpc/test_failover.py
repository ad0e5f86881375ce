"""HPC master failover: real processes, a real kill -9 of the master in the middle of a job.

The persistence service, the master(s) and the workers run under the app runtime as they do
under the supervisor, each as ``test/SYSTEM/INDEX``; the test plays the supervisor's part (a
restart under the same identity) so that what is tested is the farm's own failover. The
journal (``mcc.hpc.journal``) is then read back from the service: every item has exactly one
result record, whatever the master's kill interrupted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mcc.bus import Bus
from mcc.hpc.base import CONTROL_ID, JobResult, read_result, write_result
from mcc.hpc.farm import result_path
from mcc.hpc.journal import (
    JOURNAL_TOPIC,
    LEASE_KEY,
    RESULTS_PREFIX,
    JournalState,
    Lease,
    decode_token,
    encode_token,
    read_records,
)
from mcc.types import Checkpoint
from tests.apps.configs import configured
from tests.conftest import REPO, wait_for

N = 4 * 10**9
PI_N, LARGEST = 189_961_812, 3_999_999_979  # pi(4e9), the largest prime below (computed)
ITEMS = 40


@contextmanager
def instance(
    spec: str, env: dict[str, str], system: str, index: int, logs: Path, **config: Any
) -> Iterator[subprocess.Popen[bytes]]:
    """``test/SYSTEM/INDEX`` under the runtime with the ``config:`` block ``config``, its
    output in ``logs/SYSTEM-INDEX.N.log``; killed (group and all) after the block if it still
    runs."""
    n = len(list(logs.glob(f"{system}-{index}.*.log")))
    log = logs / f"{system}-{index}.{n}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mcc.orchestrate.runtime", spec],
            cwd=REPO,
            env={
                **configured(env, **config),
                "MCC_MISSION": "test",
                "MCC_SYSTEM": system,
                "MCC_INDEX": str(index),
                "MCC_RUN_DIR": str(logs),
            },
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield proc
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(5)


def logs_of(folder: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(folder.glob("*.log")))


class Progress:
    """Distinct items with a result on the bus, as the test sees them."""

    def __init__(self, bus: Bus, job: str) -> None:
        self.items: set[int] = set()
        self.job = job
        self.reader = bus.reader("WorkResult", on_data=self._on)

    def _on(self, reader: object) -> None:
        for r in self.reader.take(256):
            if r.job_id == self.job and r.item_id != CONTROL_ID:
                self.items.add(int(r.item_id))


def journal_records(bus: Bus, job: str) -> JournalState:
    """The job's journal as the persistence service keeps it (history of a fresh reader)."""
    reader = bus.reader(JOURNAL_TOPIC, history_timeout_s=10.0)
    assert reader.wait_for_history(timeout_s=10.0), "no persistence service answered"
    state = JournalState()
    while batch := reader.take(1024):
        read_records(state, batch, job_id=job)
    reader.close()
    return state


def master_config(job: str, **extra: Any) -> dict[str, Any]:
    return {"n": N, "workers": 2, "items": ITEMS, "job": job, **extra}


def check_exact(result: JobResult, state: JournalState) -> None:
    assert (result.count, result.largest, result.lost_items) == (PI_N, LARGEST, 0)
    per_item = state.records_per_item
    assert sorted(per_item) == list(range(ITEMS)), "an item has no journaled result"
    counted_twice = {i: c for i, c in per_item.items() if c != 1}
    assert counted_twice == {}, f"items counted more than once: {counted_twice}"
    assert sum(c for c, _ in state.results.values()) == PI_N
    assert state.bad == Counter()


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("how", ["restarted", "standby"])
def test_a_master_killed_mid_job_is_taken_over_and_the_answer_is_exact(
    bus_env: dict[str, str], domain_id: int, tmp_path: Path, how: str
) -> None:
    """kill -9 of the master once a quarter of the results are in: the same identity
    restarted (the supervisor's restart policy) or a standby (``test/master/1``) takes the job
    over from the journal; the answer is exact and no item is counted twice."""
    job = f"failover-{how}-{os.getpid()}"
    farm = "mcc.hpc.farm"
    with ExitStack() as stack, Bus(domain_id, name="test") as bus:
        progress = Progress(bus, job)

        def run(spec: str, system: str, index: int = 0, **config: Any) -> subprocess.Popen[bytes]:
            return stack.enter_context(instance(spec, bus_env, system, index, tmp_path, **config))

        run("mcc.persist.service:main", system="persist")
        master = run(f"{farm}:master", "master", **master_config(job, lease_s=1))
        if how == "standby":
            run(f"{farm}:master", "master", 1, **master_config(job, lease_s=1))
        for i in range(2):
            run(f"{farm}:worker", "worker", i, job=job)
        wait_for(
            lambda: len(progress.items) >= ITEMS // 4 or master.poll() is not None,
            120,
            f"a quarter of the results\n{logs_of(tmp_path)}",
        )
        assert master.poll() is None, f"the job ended before the kill\n{logs_of(tmp_path)}"
        killed_at = len(progress.items)
        master.send_signal(signal.SIGKILL)
        master.wait(10)
        kill_ns = time.time_ns()
        if how == "restarted":  # what the supervisor's restart policy does
            run(f"{farm}:master", "master", **master_config(job, lease_s=1))
        path = result_path(tmp_path, job)
        result: JobResult = wait_for(
            lambda: read_result(path), 180, f"the job's result\n{logs_of(tmp_path)}"
        )
        state = journal_records(bus, job)

    assert killed_at < ITEMS, "the kill came after the last result"
    check_exact(result, state)
    journal = result.extra["journal"]
    (takeover,) = journal["takeovers"]
    taker = "test/master/0" if how == "restarted" else "test/master/1"
    assert (takeover["master"], takeover["from"]) == (taker, "test/master/0")
    assert takeover["epoch"] == takeover["from_epoch"] + 1 == 2
    assert takeover["claim_ns"] > kill_ns
    # What was journaled before the kill was not computed again (a result counts once it is
    # in the journal, and the successor re-issues only items without one).
    assert takeover["adopted_results"] + takeover["reissued"] == ITEMS
    assert takeover["adopted_results"] >= 1
    assert journal["records_per_item_max"] == 1


# -- the journal's records, hostile ones included --------------------------------------------------


def lease_record(job: str, state: bytes, epoch: int = 1) -> Checkpoint:
    return Checkpoint(
        job_id=job, worker_id=LEASE_KEY, items_done=epoch, last_item_id=0, state=state, time_ns=1
    )


def results_record(job: str, key: str, rows: list[tuple[int, int, int]] | bytes) -> Checkpoint:
    dtype = np.dtype([("item", "<u8"), ("count", "<u8"), ("largest", "<i8")])
    state = rows if isinstance(rows, bytes) else np.array(rows, dtype).tobytes()
    return Checkpoint(
        job_id=job, worker_id=RESULTS_PREFIX + key, items_done=1, last_item_id=0, state=state
    )


def test_leases_round_trip_and_the_highest_token_wins() -> None:
    a = Lease(epoch=1, master="m/master/0", n=100, items=4, mode="strided", roster=(("w/0", 7),))
    b = Lease(epoch=2, master="m/master/1", n=100, items=4, mode="strided")
    back = Lease.decode(a.encode("j"))
    assert (back.token, back.roster, back.n, back.items) == (a.token, a.roster, 100, 4)
    state = JournalState()
    read_records(state, [b.encode("j"), a.encode("j"), a.encode("other job")], job_id="j")
    assert state.lease is not None and state.lease.token == (2, "m/master/1")
    assert decode_token(encode_token((5, "m/master/1"))) == (5, "m/master/1")
    assert decode_token(b"") == (0, "")
    assert (1, "a") < (2, "") and (2, "m/master/0") < (2, "m/master/1")


@pytest.mark.parametrize(
    "record",
    [
        lease_record("j", b"\xff\xfe not json"),
        lease_record("j", b"[1, 2]"),
        lease_record("j", b'{"master": "m", "epoch": -1, "n": 1, "items": 1, "mode": "strided"}'),
        lease_record("j", b'{"master": "m", "epoch": true, "n": 1, "items": 1, "mode": "s"}'),
        lease_record(
            "j",
            b'{"master": "m", "epoch": 1, "n": 1, "items": 1, "mode": "s", "first_item_ns": 0,'
            b' "roster": [["w", 1], ["w", 2]]}',
        ),
        lease_record("j", b"{" * 600_000),
        results_record("j", "1/m/1", b"\x00" * 25),
        Checkpoint(job_id="j", worker_id="@nonsense", state=b""),
    ],
    ids=["bytes", "list", "negative", "bool", "twice", "huge", "ragged", "unknown-key"],
)
def test_a_corrupt_journal_record_is_counted_and_ignored(record: Checkpoint) -> None:
    state = JournalState()
    good = results_record("j", "1/m/2", [(3, 10, 97)])
    read_records(state, [record, good], job_id="j")
    assert sum(state.bad.values()) == 1
    assert state.lease is None and state.results == {3: (10, 97)}


def test_a_token_that_is_not_one_is_refused() -> None:
    assert decode_token(b"\x01\x02") is None
    assert decode_token(b"\x00" * 8 + b"\xff") is None
    assert decode_token(b"\x00" * 8 + b"x" * 300) is None


def test_a_standby_and_the_master_that_finished_may_write_the_result_at_once(
    tmp_path: Path,
) -> None:
    """The standby learns the job is done and writes its result while the master that did it
    writes the same file: the two used one temporary name, and one of them died renaming a
    file the other had just renamed (FileNotFoundError, seen on 2026-11-29)."""
    path = tmp_path / "hpc-job.json"
    results = [JobResult(app="primes", impl="dds", workers=1, job_id="j", count=k) for k in (1, 2)]
    start = threading.Barrier(2)

    def write_often(result: JobResult) -> None:
        start.wait()
        for _ in range(300):
            write_result(result, path)

    with ThreadPoolExecutor(2) as pool:
        for done in [pool.submit(write_often, r) for r in results]:
            done.result(timeout=60)
    assert json.loads(path.read_text())["count"] in (1, 2)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left
