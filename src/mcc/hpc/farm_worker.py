"""The task farm's worker (``mcc.hpc.farm``): it counts the primes of the items the master
gives it and publishes ``Checkpoint``s as it goes, so that a replacement under the same
identity resumes the interrupted item where it stood.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from math import isqrt

import numpy as np

from mcc.bus import Bus, Reader
from mcc.errors import MccError
from mcc.hpc.base import CONTROL_ID, HpcError
from mcc.hpc.farm_protocol import (
    IDLE,
    IDLE_HELLO_S,
    MAX_ITEM_NUMBERS,
    MAX_ITEMS,
    MAX_N,
    MAX_QUEUED_ITEMS,
    STATE_HEADER,
)
from mcc.hpc.journal import Token, decode_token
from mcc.hpc.primes import DEFAULT_SEGMENT_NUMBERS, PrimeScan, base_primes
from mcc.types import Checkpoint, WorkItem, WorkResult

__all__ = ["FarmWorker"]

log = logging.getLogger("mcc.hpc.farm")

#: How long a worker says hello every interval even after its items came (`FarmWorker.run`).
HELLO_REPEAT_S = 2.0


@dataclass
class _Resume:
    """A checkpointed item in progress: resume ``scan`` when ``item_id`` comes again."""

    item_id: int
    scan: PrimeScan


class FarmWorker:
    """Count primes for the master, checkpointing as it goes.

    Args:
        bus: the worker's bus.
        worker_id: its identity (``mission/system/index``), the same after a restart.
        job_id: the job it serves.
        checkpoint_interval_s: the least time between two checkpoints while it works: one
            inside an item saves the scan so far, one after an item what it finished. The end
            of an item whose scan was saved is always saved (no stale scan outlives its
            item), and so is what it finished once its queue is empty. Each checkpoint costs
            every persistence replica a commit: one per item cost short jobs most of their
            gap to MPI.
        segment_numbers: sieve segment (and the finest resume granularity).
        max_queued_items: items it holds at most (more are dropped, counted in ``dropped``).
    """

    def __init__(
        self,
        bus: Bus,
        *,
        worker_id: str,
        job_id: str,
        checkpoint_interval_s: float = 0.25,
        segment_numbers: int = DEFAULT_SEGMENT_NUMBERS,
        max_queued_items: int = MAX_QUEUED_ITEMS,
    ) -> None:
        self.bus = bus
        self.worker_id = worker_id
        self.max_queued_items = max_queued_items
        self.job_id = job_id
        self.checkpoint_interval_s = checkpoint_interval_s
        self.segment_numbers = segment_numbers
        self.items_done = 0
        self.last_item_id = 0
        self.resumed_from: dict[str, int] | None = None
        self._resume: _Resume | None = None
        self._queue: deque[WorkItem] = deque()
        self._queued: set[int] = set()
        # The master's token (mcc.hpc.journal): items of a lower one are a deposed master's.
        self.token: Token = (0, "")
        # Results sent, by item: (lo, hi, result), sent again if a new master re-issues the item.
        self._done: dict[int, tuple[int, int, WorkResult]] = {}
        self.dropped: Counter[str] = Counter()  # items not taken, by reason
        self._wake = threading.Event()
        self._over = threading.Event()
        self._got_any = threading.Event()
        self._hello_mono = 0.0  # when the last hello went out
        self._base = np.zeros(0, dtype=np.int64)
        self._base_limit = 0
        self._checkpoint_due = time.monotonic() + checkpoint_interval_s  # the next one (monotonic)
        self._unsaved = False  # items done since the last checkpoint
        self._results = bus.writer("WorkResult")
        self._checkpoints = bus.writer("Checkpoint")
        self._items = bus.reader("WorkItem", on_data=self._on_items)

    def restore(self, checkpoint: Checkpoint) -> None:
        """Resume from ``checkpoint`` (this identity's last, from the persistence service): its
        items done and the scan of the item it was in. Before `run`; items that came meanwhile
        wait in the queue."""
        self.items_done = int(checkpoint.items_done)
        self.last_item_id = int(checkpoint.last_item_id)
        state = bytes(checkpoint.state)
        if len(state) > STATE_HEADER.itemsize:
            item_id = int(np.frombuffer(state[:8], dtype=STATE_HEADER)[0])
            try:
                scan = PrimeScan.unpack(state[8:], segment_numbers=self.segment_numbers)
            except MccError as exc:  # not a state this worker wrote: start the item afresh
                log.warning("%s: checkpoint state ignored: %s", self.worker_id, exc)
            else:
                self._resume = _Resume(item_id, scan)
        log.info(
            "%s: restored checkpoint: %d items done%s",
            self.worker_id,
            self.items_done,
            f", item {self._resume.item_id} at {self._resume.scan.next_lo}" if self._resume else "",
        )

    def _drop(self, reason: str, item: WorkItem) -> None:
        self.dropped[reason] += 1
        if self.dropped[reason] == 1:
            log.warning(
                "%s: item %d [%d, %d) dropped: %s; further ones are counted, not logged",
                self.worker_id,
                item.item_id,
                item.lo,
                item.hi,
                reason,
            )

    def _on_items(self, reader: Reader[WorkItem]) -> None:
        """On the bus's dispatcher thread: keep this worker's items, in order, once each,
        within the bounds."""
        got = False
        for item in reader.take():
            if item.job_id != self.job_id:
                continue
            if item.item_id == CONTROL_ID:
                self._over.set()
                got = True
                continue
            if item.worker_id != self.worker_id:
                continue
            token = decode_token(bytes(item.payload))
            if token is None:
                self._drop("a master token that does not decode", item)
                continue
            if token < self.token:
                self._drop("an item from a master that lost its lease", item)
                continue
            if token > self.token:
                # A new master took the job over: it re-issues every unfinished item, so
                # what the deposed one handed out is dropped (the item in progress finishes).
                if self.token != (0, ""):
                    log.warning(
                        "%s: master %s (epoch %d) took over from %s (epoch %d): %d queued "
                        "items dropped",
                        self.worker_id,
                        token[1],
                        token[0],
                        self.token[1],
                        self.token[0],
                        len(self._queue),
                    )
                self.token = token
                self._queue.clear()
                self._queued.clear()
            if item.item_id not in self._queued:
                if not 0 <= item.lo <= item.hi <= MAX_N + 1:
                    self._drop(f"outside [0, {MAX_N + 1}]", item)
                elif item.hi - item.lo > MAX_ITEM_NUMBERS:
                    self._drop(f"more than MAX_ITEM_NUMBERS = {MAX_ITEM_NUMBERS} numbers", item)
                elif len(self._queue) >= self.max_queued_items or len(self._queued) >= MAX_ITEMS:
                    self._drop(f"more than max_queued_items = {self.max_queued_items} held", item)
                else:
                    self._queued.add(item.item_id)
                    self._queue.append(item)
                    got = True
        if got:
            self._got_any.set()
            self._wake.set()

    def run(
        self,
        stop: threading.Event,
        *,
        start_timeout_s: float = 120.0,
        hello_interval_s: float = 0.25,
        on_item: Callable[[WorkResult], None] | None = None,
    ) -> int:
        """Say hello, then work until the master says the job is over (or ``stop``); items done."""
        if not self._results.wait_for_readers(1, timeout_s=start_timeout_s):
            raise HpcError(
                f"{self.worker_id}: no master read WorkResult within {start_timeout_s:g} s "
                f"(job {self.job_id}); is the master running on this domain and discovery tag?"
            )
        self._items.wait_for_writers(1, timeout_s=start_timeout_s)
        self._hello()  # at least once: the master learns of a replacement from it
        quiet = threading.Event()  # the hellos end with the run
        threading.Thread(
            target=self._say_hello,
            args=(quiet, hello_interval_s),
            name="mcc-farm-hello",
            daemon=True,
        ).start()
        try:
            return self._serve(stop, hello_interval_s, on_item)
        finally:
            quiet.set()

    def _say_hello(self, quiet: threading.Event, interval_s: float) -> None:
        """Hello every ``interval_s`` until items come, and for `HELLO_REPEAT_S` in any case.
        A replacement gets its items from the master's writer once that writer has matched its
        reader, which may be before the master's reader has matched its `WorkResult` writer:
        its first hellos are then lost, and with them the re-issue of its unfinished items
        (which makes it resend the results the master missed meanwhile)."""
        until = time.monotonic() + HELLO_REPEAT_S
        while not quiet.wait(interval_s) and not self._over.is_set():
            if self._got_any.is_set() and time.monotonic() >= until:
                return
            self._hello()

    def _serve(
        self,
        stop: threading.Event,
        hello_interval_s: float,
        on_item: Callable[[WorkResult], None] | None,
    ) -> int:
        """Work the queue until the master says the job is over (or ``stop``); items done."""
        done_here = 0
        hello_with_work = False
        while not stop.is_set():
            if self._queue:
                if not hello_with_work:
                    # Again before the first item: a replacement gets its items from the
                    # master's writer on matching, and the first hello may have gone out
                    # when only another reader of WorkResult (a standby master, a watcher)
                    # had matched; the master's writer has matched by now, so its reader
                    # (same participant) almost surely too.
                    self._hello()
                    hello_with_work = True
                item = self._queue.popleft()
                done = self._done.get(int(item.item_id))
                if done is not None and done[:2] == (item.lo, item.hi):
                    # Done already (a new master re-issued it): the same answer again.
                    sent = done[2]
                    sent.done_ns = time.time_ns()
                    self._results.write(sent)
                    continue
                worked = self._work(item, stop)
                if worked is None:  # stopped in the middle: the checkpoint has it
                    break
                result, save_end = worked
                self._results.write(result)  # the answer first, the checkpoint after it
                if save_end:
                    self._checkpoint(item.item_id, None)
                if len(self._done) < MAX_ITEMS:
                    self._done[int(item.item_id)] = (item.lo, item.hi, result)
                done_here += 1
                if on_item is not None:
                    on_item(result)
                continue
            if self._over.is_set():
                break
            if self._got_any.is_set() and time.monotonic() - self._hello_mono >= IDLE_HELLO_S:
                self._hello(idle=True)
            self._wake.clear()
            if not self._queue and not self._over.is_set():
                self._wake.wait(hello_interval_s)
            if self._unsaved and not self._queue and not self._over.is_set():
                # Idle for a while and the job goes on: save the items done since the last
                # checkpoint. Not at once: at a job's end the last results' journal commit
                # would queue at the persistence replicas behind every worker's save.
                self._checkpoint(self.last_item_id, None)
            # The next checkpoint is due an interval into the work to come, not at its first
            # segment (items done and not saved yet are saved with it).
            self._checkpoint_due = time.monotonic() + self.checkpoint_interval_s
        return done_here

    def _hello(self, *, idle: bool = False) -> None:
        self._hello_mono = time.monotonic()
        self._results.write(
            WorkResult(
                job_id=self.job_id,
                item_id=CONTROL_ID,
                worker_id=self.worker_id,
                count=self.items_done,
                value=os.getpid(),
                payload=IDLE if idle else b"",
                elapsed_ns=0,
                done_ns=time.time_ns(),
            )
        )

    def _base_for(self, hi: int) -> np.ndarray:
        limit = isqrt(max(hi - 1, 0))
        if limit > self._base_limit:
            self._base = base_primes(limit)
            self._base_limit = limit
        return self._base

    def _work(self, item: WorkItem, stop: threading.Event) -> tuple[WorkResult, bool] | None:
        """Scan ``item`` (checkpointing while due); its result and whether its end must be
        saved (a checkpoint holds its scan, or one is due), or None when stopped."""
        start_ns = time.time_ns()
        resume = self._resume
        if (
            resume is not None
            and resume.item_id == item.item_id
            and (resume.scan.lo, resume.scan.hi) == (item.lo, item.hi)
        ):
            scan = resume.scan
            log.info("%s: item %d resumes at %d", self.worker_id, item.item_id, scan.next_lo)
            self.resumed_from = {"item_id": int(item.item_id), "next_lo": scan.next_lo}
            self._resume = None
        else:
            # Another item may come first (the master hands out new items while it reissues
            # the interrupted one): keep the resume point for the item it belongs to.
            scan = PrimeScan(item.lo, item.hi, segment_numbers=self.segment_numbers)
        base = self._base_for(item.hi)
        mid_item = False  # a checkpoint holds this item's scan: the end must replace it
        for _ in scan.run(base):
            if stop.is_set():
                self._checkpoint(item.item_id, scan)
                return None
            if time.monotonic() >= self._checkpoint_due:
                self._checkpoint(item.item_id, scan)
                mid_item = True
        self.items_done += 1
        self.last_item_id = int(item.item_id)
        self._unsaved = True
        return WorkResult(
            job_id=self.job_id,
            item_id=item.item_id,
            worker_id=self.worker_id,
            count=scan.total.count,
            value=scan.total.largest,
            payload=b"",
            elapsed_ns=time.time_ns() - start_ns,
            done_ns=time.time_ns(),
        ), mid_item or time.monotonic() >= self._checkpoint_due

    def _checkpoint(self, item_id: int, scan: PrimeScan | None) -> None:
        self._checkpoint_due = time.monotonic() + self.checkpoint_interval_s
        self._unsaved = False
        state = b"" if scan is None else np.array([item_id], STATE_HEADER).tobytes() + scan.pack()
        self._checkpoints.write(
            Checkpoint(
                job_id=self.job_id,
                worker_id=self.worker_id,
                items_done=self.items_done,
                last_item_id=self.last_item_id,
                state=state,
                time_ns=time.time_ns(),
            )
        )
