"""The task farm on the bus: a master hands out ``WorkItem``s, workers answer ``WorkResult``s.

Fault tolerance comes from three things working together:

* **identity**: a worker is ``mission/worker/i``; the orchestrator's restart policy (or a
  standby) starts a replacement under the same identity;
* **the master is authoritative**: it counts a result once per ``(job_id, item_id)`` (a second
  one is dropped and counted as a duplicate), and when a worker says hello with a new pid it
  sends that identity's unfinished items again; a worker silent for ``reassign_after_s`` has
  its unfinished items moved to live workers. No item is lost or counted twice, whatever dies;
* **checkpoints**: a worker publishes ``Checkpoint`` (profile ``durable``) as it goes: items
  done and the state of the item in progress (``PrimeScan.pack``). The persistence service
  keeps them; a replacement reads its identity's last checkpoint at start and resumes the
  interrupted item where it stood, instead of from its beginning.

Protocol (all on the job's ``job_id``; ``CONTROL_ID`` = 2^64-1):

====================  =========================================================================
worker → master       ``WorkResult(item_id=CONTROL_ID, value=pid, count=items done)``: hello,
                      repeated until the first item (or the end) arrives
master → worker       ``WorkItem(worker_id=w, item_id=k, lo, hi)``: count the primes in [lo, hi)
                      (profile ``state``: kept for late readers, disposed once done)
worker → master       ``WorkResult(item_id=k, count, value=largest, elapsed_ns)``
master → all          ``WorkItem(item_id=CONTROL_ID, worker_id="")``: the job is over, exit
====================  =========================================================================

Assignment: ``strided`` (item k to the k mod W-th worker, all items up front: the paper's
scheme, and the MPI baseline's) or ``dynamic`` (each worker holds ``prefetch`` items; a result
brings the next one: load balancing for uneven workers). ``WorkItem.worker_id`` is always set:
DDS delivers every sample to every matched reader, so a shared pool needs an arbiter, the master.

Bounds (hostile input is normal input): a job is at most ``MAX_N`` numbers in ``MAX_ITEMS``
items for ``MAX_WORKERS`` workers, an item at most ``MAX_ITEM_NUMBERS`` numbers (which bounds
its time); a worker holds at most ``MAX_QUEUED_ITEMS`` items; the master counts a result only
from a worker that said hello and only when it can be right (no more primes than numbers, the
largest inside the item), and keeps at most ``MAX_WORKERS`` identities. What is dropped is
counted (``JobResult.extra["dropped"]``) and logged once. Who wrote a sample is not known
here: in a secured mission DDS access control lets only the master publish ``WorkItem`` and
only workers ``WorkResult``; within those, ``worker_id`` is taken on trust.
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from math import isqrt
from pathlib import Path
from typing import Any

import numpy as np

from mcc.bus import Bus, Reader
from mcc.errors import MccError
from mcc.hpc.base import CONTROL_ID, HpcError, JobResult, default_job_id, write_result
from mcc.hpc.journal import Lease, MasterJournal, Token, decode_token, encode_token
from mcc.hpc.primes import DEFAULT_SEGMENT_NUMBERS, PrimeCount, PrimeScan, base_primes, split_range
from mcc.orchestrate.runtime import AppContext
from mcc.security.mission import Topics
from mcc.types import Checkpoint, Heartbeat, WorkItem, WorkResult

BUS_TOPICS = {
    # Checkpoint: the master's journal (its lease and the results it counted, mcc.hpc.journal)
    "master": Topics(
        publish=("WorkItem", "Checkpoint"), subscribe=("WorkResult", "Heartbeat", "Checkpoint")
    ),
    "worker": Topics(publish=("WorkResult", "Checkpoint"), subscribe=("WorkItem", "Checkpoint")),
}

__all__ = [
    "FarmMaster",
    "FarmWorker",
    "master",
    "result_path",
    "worker",
]

log = logging.getLogger("mcc.hpc.farm")

DURABLE_TOPICS = ("Checkpoint",)  # the supervisor starts the persistence service for these
#: Bounds of one job: numbers searched, items, worker identities (the master's and a
#: standby's), numbers per item (what one item may cost a worker), items a worker holds.
MAX_N = 10**12
MAX_ITEMS = 100_000
MAX_WORKERS = 1024
MAX_ITEM_NUMBERS = 10**10
MAX_QUEUED_ITEMS = 16_384
_MAX_REPLACEMENTS = 1000  # replacement records kept in the job result
MODES = ("strided", "dynamic")
# Work items are state, not a stream (the catalogue's `state` profile): the latest assignment
# of each item (its own instance, keyed by job and item), reliable and kept by the master's
# writer for readers that match later (transient-local). A worker whose reader the master has
# not discovered yet when it sends the items, and a replacement that starts after they were
# sent, both get them on matching; the master disposes an item once its result is in, so a
# late joiner gets only unfinished ones.
_STATE_HEADER = np.dtype("<u8")  # the checkpoint state: item id, then PrimeScan.pack()


def result_path(run_dir: Path, job_id: str) -> Path:
    """Where the master of ``job_id`` writes its ``JobResult``."""
    return Path(run_dir) / f"hpc-{job_id}.json"


def _worker_order(worker_id: str) -> tuple[str, int, str]:
    """Sort key: ``mission/system/index`` by system, then index as a number."""
    head, _, index = worker_id.rpartition("/")
    return (head, int(index), "") if index.isdigit() else (worker_id, 0, worker_id)


# -- master ------------------------------------------------------------------------------------


class _Superseded(Exception):
    """A higher claim than ours is in the journal: stop handing out work."""


@dataclass
class _WorkerView:
    """What the master knows of one worker identity."""

    worker_id: str
    pid: int
    seen_mono: float
    pending: list[int] = field(default_factory=list)  # issued, no result yet (in issue order)
    done: int = 0
    lost: bool = False  # its items were moved to others (reassign_after_s)


class FarmMaster:
    """Hand out the items of one primes job and gather the results.

    Args:
        bus: the master's bus.
        job_id: the job (a key of every sample).
        n: search [1, n].
        workers: how many worker identities to wait for before sending work.
        items: work items (default 8 per worker).
        mode: ``strided`` or ``dynamic``.
        prefetch: items each worker holds in dynamic mode.
        reassign_after_s: a worker with unfinished items that is silent (no heartbeat, hello
            or result) this long has them moved to live workers; ``None``: never.
        journal: the job's journal (``mcc.hpc.journal``); None: the job lives in this process
            only (a kill loses it).
        primary: without a lease in the journal, claim it at once (instance 0); a master that
            is not primary stands by until the holder's lease lapses.
        lease_s: a lease not renewed for this long has lapsed (renewed every ``lease_s / 4``).
    """

    def __init__(
        self,
        bus: Bus,
        *,
        job_id: str,
        n: int,
        workers: int,
        items: int | None = None,
        mode: str = "strided",
        prefetch: int = 2,
        reassign_after_s: float | None = 10.0,
        journal: MasterJournal | None = None,
        primary: bool = True,
        lease_s: float = 3.0,
    ) -> None:
        if not lease_s > 0:
            raise HpcError(f"lease_s = {lease_s}: a lease lasts > 0 s")
        if not 1 <= workers <= MAX_WORKERS:
            raise HpcError(f"workers = {workers}: a farm runs 1 to {MAX_WORKERS} workers")
        if mode not in MODES:
            raise HpcError(f"mode = {mode!r}: use one of {', '.join(MODES)}")
        if not 1 <= prefetch <= MAX_QUEUED_ITEMS:
            raise HpcError(
                f"prefetch = {prefetch}: each worker holds 1 to {MAX_QUEUED_ITEMS} items"
            )
        if not 2 <= n <= MAX_N:
            raise HpcError(f"n = {n}: search [1, n] with 2 <= n <= {MAX_N}")
        n_items = items if items is not None else 8 * workers
        if not 1 <= n_items <= MAX_ITEMS:
            raise HpcError(f"items = {n_items}: a job has 1 to {MAX_ITEMS} items")
        if mode == "strided" and -(-n_items // workers) > MAX_QUEUED_ITEMS // 4:
            raise HpcError(
                f"items = {n_items} for {workers} workers: strided mode hands each worker "
                f"all its items at once, at most {MAX_QUEUED_ITEMS // 4}; use fewer items or "
                "--mode dynamic"
            )
        if -(-n // n_items) > MAX_ITEM_NUMBERS:
            raise HpcError(
                f"n = {n} in {n_items} items: more than {MAX_ITEM_NUMBERS} numbers per item, "
                f"which workers refuse; use at least {-(-n // MAX_ITEM_NUMBERS)} items"
            )
        self.bus = bus
        self.job_id = job_id
        self.n = n
        self.expected_workers = workers
        self.ranges = split_range(n, n_items)
        self.mode = mode
        self.prefetch = prefetch
        self.reassign_after_s = reassign_after_s
        self.workers: dict[str, _WorkerView] = {}
        self.owner: dict[int, str] = {}
        self.results: dict[int, PrimeCount] = {}
        self.pool: deque[int] = deque()
        self.duplicates = 0
        self.reissued = 0
        self.replacements: list[dict[str, Any]] = []
        self.first_item_ns = 0
        self.last_result_ns = 0
        self.dropped: Counter[str] = Counter()  # samples not taken, by reason
        self.max_workers = min(MAX_WORKERS, max(2 * workers, workers + 16))
        self._issuing = False
        self.journal = journal
        self.primary = primary
        self.lease_s = lease_s
        self.token: Token = (0, "")  # ours while we hold the lease (mcc.hpc.journal)
        self.adopted = 0  # results taken from the journal at the last claim
        self.takeovers: list[dict[str, Any]] = []
        self.ended_by = ""  # the master that had finished the job when this one came
        self._unjournaled: list[tuple[int, int, int, str]] = []  # (item, count, largest, worker)
        self._last_renew = 0.0
        self._items = bus.writer("WorkItem")
        self._results = bus.reader("WorkResult")
        self._beats: Reader[Heartbeat] = bus.reader("Heartbeat")

    # -- the job ----------------------------------------------------------------------------

    def run(
        self, stop: threading.Event, *, start_timeout_s: float = 120.0, timeout_s: float = 3600.0
    ) -> JobResult:
        """Wait for the workers, hand out every item, gather every result; the job's result.

        With a journal: stand by until this master may hold the lease, claim it, take over
        what the journal says was done (or start the job), and stand by again if a higher
        claim comes (``mcc.hpc.journal``)."""
        deadline = time.monotonic() + timeout_s
        if self.journal is None:
            self._wait_for_workers(stop, start_timeout_s)
            self._start_issuing()
            return self._gather(stop, deadline)
        while True:
            self._stand_by(stop, deadline)
            lease = self.journal.state.lease
            try:
                if lease is not None and lease.done:
                    # The job ended: tell the workers again, for whoever missed it.
                    self._adopt(lease)
                    self.ended_by = lease.master
                    return self._conclude()
                self._take_lead(stop, start_timeout_s)
                return self._gather(stop, deadline)
            except _Superseded:
                top = self.journal.state.lease
                assert top is not None
                log.warning(
                    "job %s: %s claimed epoch %d over ours (%d): standing by",
                    self.job_id,
                    top.master,
                    top.epoch,
                    self.token[0],
                )
                self._reset()

    def _stand_by(self, stop: threading.Event, deadline: float) -> None:
        """Return once this master may claim the lease (or the job is over)."""
        assert self.journal is not None
        state = self.journal.poll()
        if self.journal.may_claim_now(primary=self.primary):
            return
        held = state.lease
        log.info(
            "job %s: standing by (lease %s)",
            self.job_id,
            f"epoch {held.epoch} held by {held.master}" if held else "not claimed yet",
        )
        last = time.monotonic()
        state.renewed = False
        while True:
            if stop.is_set():
                raise HpcError(f"job {self.job_id}: stopped while standing by")
            if time.monotonic() > deadline:
                raise HpcError(f"job {self.job_id}: stood by until the job's timeout")
            self._results.take_wait(256, timeout_s=0.05)  # not ours to count: drained
            self._beats.take()
            state = self.journal.poll()
            now = time.monotonic()
            if state.renewed:
                last, state.renewed = now, False
            if state.lease is not None and state.lease.done:
                return
            if now - last > self.lease_s:
                log.warning(
                    "job %s: lease of %s not renewed for %.1f s: taking over",
                    self.job_id,
                    state.lease.master if state.lease else "nobody",
                    now - last,
                )
                return

    def _adopt(self, lease: Lease) -> None:
        """Take the plan and the journaled results of ``lease``'s job."""
        assert self.journal is not None
        plan = (self.n, len(self.ranges), self.mode)
        if (lease.n, lease.items, lease.mode) != plan:
            raise HpcError(
                f"job {self.job_id}: the journal's plan (n {lease.n}, {lease.items} items, "
                f"{lease.mode}) is not this master's (n {plan[0]}, {plan[1]} items, {plan[2]}); "
                "give the job a new id or the same arguments"
            )
        self.first_item_ns = lease.first_item_ns
        self.adopted = 0
        for item_id, (count, largest) in self.journal.state.results.items():
            if self._plausible(item_id, count, largest):
                self.results.setdefault(item_id, PrimeCount(count, largest))
                self.adopted += 1

    def _take_lead(self, stop: threading.Event, start_timeout_s: float) -> None:
        """Claim the lease; take over the job in progress, or start it."""
        assert self.journal is not None
        prev = self.journal.poll().lease
        if prev is not None:
            self._adopt(prev)
        lease = self.journal.claim(
            Lease(
                epoch=0,
                master="",
                n=self.n,
                items=len(self.ranges),
                mode=self.mode,
                roster=prev.roster if prev is not None else (),
                first_item_ns=self.first_item_ns,
            )
        )
        self.token = lease.token
        self._last_renew = time.monotonic()
        log.info(
            "job %s: lease claimed, epoch %d%s",
            self.job_id,
            lease.epoch,
            f", taking over from {prev.master} (epoch {prev.epoch}) with {self.adopted} "
            f"results journaled"
            if prev is not None
            else "",
        )
        if not lease.roster:
            self._wait_for_workers(stop, start_timeout_s)
            self._start_issuing()
            return
        now = time.monotonic()
        self.workers = {w: _WorkerView(w, pid, now) for w, pid in lease.roster}
        self.expected_workers = len(lease.roster)
        self._issuing = True
        unfinished = [i for i in range(len(self.ranges)) if i not in self.results]
        order = [w for w, _ in lease.roster]
        if self.mode == "strided":
            for item_id in unfinished:
                self._issue(item_id, order[item_id % len(order)])
        else:
            self.pool.extend(unfinished)
            for _ in range(self.prefetch):
                for worker_id in order:
                    self._issue_next(worker_id)
        if prev is not None:
            self.takeovers.append(
                {
                    "epoch": lease.epoch,
                    "master": lease.master,
                    "from": prev.master,
                    "from_epoch": prev.epoch,
                    "adopted_results": self.adopted,
                    "reissued": len(unfinished),
                    "claim_ns": time.time_ns(),
                }
            )

    def _reset(self) -> None:
        """Forget the job in progress (another master leads it now)."""
        self.workers.clear()
        self.owner.clear()
        self.pool.clear()
        self._issuing = False
        self._unjournaled.clear()
        self.token = (0, "")

    def _wait_for_workers(self, stop: threading.Event, start_timeout_s: float) -> None:
        deadline = time.monotonic() + start_timeout_s
        while len(self.workers) < self.expected_workers:
            if stop.is_set():
                raise HpcError("stopped before the workers were ready")
            if time.monotonic() > deadline:
                came = ", ".join(self.workers) or "none"
                raise HpcError(
                    f"job {self.job_id}: {len(self.workers)} of {self.expected_workers} workers "
                    f"said hello within {start_timeout_s:g} s ({came}); are the workers "
                    "running on this domain and discovery tag?"
                )
            self._receive(0.05)
            self._keep_lease()

    def _gather(self, stop: threading.Event, deadline: float) -> JobResult:
        while len(self.results) < len(self.ranges):
            if stop.is_set():
                raise HpcError(f"stopped with {len(self.results)}/{len(self.ranges)} results")
            if time.monotonic() > deadline:
                raise HpcError(
                    f"job {self.job_id}: {len(self.results)}/{len(self.ranges)} results by "
                    "the job's timeout"
                )
            self._receive(0.2 if self.journal is None else min(0.2, self.lease_s / 8))
            self._reassign_silent()
            self._keep_lease()
        return self._conclude()

    def _keep_lease(self) -> None:
        """Renew the lease when due; step down when a higher claim came."""
        if self.journal is None:
            return
        self.journal.poll()
        if self.journal.superseded():
            raise _Superseded
        now = time.monotonic()
        if now - self._last_renew >= self.lease_s / 4:
            self.journal.renew()
            self._last_renew = now

    def _conclude(self) -> JobResult:
        if self.journal is not None and self.journal.lease is not None:
            try:
                self.journal.update(done=True)
            except MccError as exc:  # the job is done all the same; a successor redoes this
                log.warning("job %s: the journal did not store the end: %s", self.job_id, exc)
        self._finish()
        return self.result()

    def _start_issuing(self) -> None:
        order = sorted(self.workers, key=_worker_order)[: self.expected_workers]
        self._issuing = True
        self.first_item_ns = time.time_ns()
        if self.journal is not None:
            # The roster is stored before any item goes out: a successor assigns as we did.
            self.journal.update(
                roster=tuple((w, self.workers[w].pid) for w in order),
                first_item_ns=self.first_item_ns,
            )
        if self.mode == "strided":
            for item_id in range(len(self.ranges)):
                self._issue(item_id, order[item_id % len(order)])
        else:
            self.pool.extend(range(len(self.ranges)))
            for _ in range(self.prefetch):
                for worker_id in order:
                    self._issue_next(worker_id)

    def _issue(self, item_id: int, worker_id: str) -> None:
        lo, hi = self.ranges[item_id]
        self.owner[item_id] = worker_id
        view = self.workers[worker_id]
        if item_id not in view.pending:
            view.pending.append(item_id)
        self._items.write(
            WorkItem(
                job_id=self.job_id,
                item_id=item_id,
                worker_id=worker_id,
                lo=lo,
                hi=hi,
                payload=encode_token(self.token) if self.journal is not None else b"",
                issue_ns=time.time_ns(),
            )
        )

    def _issue_next(self, worker_id: str) -> None:
        while self.pool:
            item_id = self.pool.popleft()
            if item_id not in self.results:
                self._issue(item_id, worker_id)
                return

    def _receive(self, timeout_s: float) -> None:
        now = time.monotonic()
        for beat in self._beats.take():
            view = self.workers.get(beat.system_id)
            if view is not None and beat.pid == view.pid:
                view.seen_mono = now
        fresh: list[tuple[int, int, int, str]] = []
        for sample in self._results.take_wait(256, timeout_s=timeout_s):
            if sample.job_id != self.job_id:
                continue
            if sample.item_id == CONTROL_ID:
                # In order: what a worker finished before its replacement said hello counts
                # before the hello decides what to re-issue.
                self._count_all(fresh)
                fresh = []
                self._on_hello(sample.worker_id, int(sample.value))
            elif (checked := self._on_result(sample)) is not None:
                if any(checked[0] == f[0] for f in fresh):
                    self.duplicates += 1  # twice in one batch: counted once
                else:
                    fresh.append(checked)
        self._count_all(fresh)

    def _count_all(self, fresh: list[tuple[int, int, int, str]]) -> None:
        """Count new results; with a journal, once the journal has them (and any left over)."""
        if self.journal is not None and (fresh or self._unjournaled):
            # A result counts once it is in the journal: a successor then never re-issues it.
            batch = self._unjournaled + fresh
            try:
                self.journal.record([(i, c, g) for i, c, g, _ in batch])
            except MccError as exc:
                self._unjournaled = batch
                self._drop("results not journaled yet (retried)", str(exc))
                return
            self._unjournaled = []
            fresh = batch
        for item_id, count, largest, worker_id in fresh:
            self._count(item_id, count, largest, worker_id)

    def _drop(self, reason: str, detail: str) -> None:
        """Count a sample not taken; log the first of each reason."""
        self.dropped[reason] += 1
        if self.dropped[reason] == 1:
            log.warning(
                "job %s: %s (%s); further ones are counted, not logged",
                self.job_id,
                reason,
                detail[:200],
            )

    def _on_hello(self, worker_id: str, pid: int) -> None:
        now = time.monotonic()
        view = self.workers.get(worker_id)
        if view is None:
            if len(worker_id) > 256:
                self._drop("hello with a worker id over 256 characters", worker_id)
            elif not self._issuing and len(self.workers) < self.expected_workers:
                self.workers[worker_id] = _WorkerView(worker_id, pid, now)
                log.info("worker %s ready (pid %d)", worker_id, pid)
            elif self.mode == "dynamic" and self._issuing:  # a standby joins the pool
                if len(self.workers) >= self.max_workers:
                    self._drop("standby over the job's worker bound", worker_id)
                    return
                self.workers[worker_id] = _WorkerView(worker_id, pid, now)
                for _ in range(self.prefetch):
                    self._issue_next(worker_id)
            return
        view.seen_mono = now
        if view.pid == pid:
            return
        # A replacement under the same identity: send it what its predecessor left unfinished.
        unfinished = [i for i in view.pending if i not in self.results]
        if len(self.replacements) >= _MAX_REPLACEMENTS:
            self._drop("replacement records over the bound", worker_id)
        else:
            self.replacements.append(
                {
                    "worker_id": worker_id,
                    "old_pid": view.pid,
                    "new_pid": pid,
                    "hello_ns": time.time_ns(),
                    "reissued": len(unfinished),
                }
            )
            log.warning(
                "worker %s replaced (pid %d -> %d): re-issuing %d items",
                worker_id,
                view.pid,
                pid,
                len(unfinished),
            )
        view.pid = pid
        view.lost = False
        if self._issuing:
            view.pending = []
            for item_id in unfinished:
                self._issue(item_id, worker_id)
            self.reissued += len(unfinished)
            if self.mode == "dynamic":
                for _ in range(self.prefetch - len(unfinished)):
                    self._issue_next(worker_id)

    def _plausible(self, item_id: int, count: int, largest: int) -> bool:
        """Whether a result can be right: an item of the job, no more primes than numbers, the
        largest inside the item (dropped and counted when not)."""
        if not 0 <= item_id < len(self.ranges):
            self._drop("result for an item the job does not have", f"item {item_id}")
            return False
        lo, hi = self.ranges[item_id]
        if count > hi - lo or (largest != 0 if count == 0 else not lo <= largest < hi):
            self._drop(
                "result that cannot be right",
                f"item {item_id} [{lo}, {hi}): {count} primes, largest {largest}",
            )
            return False
        return True

    def _on_result(self, sample: WorkResult) -> tuple[int, int, int, str] | None:
        """A result sample checked: ``(item, count, largest, worker)`` when it is new."""
        item_id = int(sample.item_id)
        if item_id >= len(self.ranges):
            self._drop("result for an item the job does not have", f"item {item_id}")
            return None
        view = self.workers.get(sample.worker_id)
        if view is None:
            self._drop("result from a worker that never said hello", sample.worker_id)
            return None
        view.seen_mono = time.monotonic()
        count, largest = int(sample.count), int(sample.value)
        if not self._plausible(item_id, count, largest):
            return None
        if item_id in self.results:
            self.duplicates += 1
            return None
        return item_id, count, largest, sample.worker_id

    def _count(self, item_id: int, count: int, largest: int, worker_id: str) -> None:
        if item_id in self.results:
            self.duplicates += 1
            return
        self.results[item_id] = PrimeCount(count, largest)
        self.last_result_ns = time.time_ns()
        self._items.dispose(WorkItem(job_id=self.job_id, item_id=item_id))
        owner = self.workers.get(self.owner.get(item_id, ""))
        if owner is not None and item_id in owner.pending:
            owner.pending.remove(item_id)
        view = self.workers.get(worker_id)
        if view is not None:
            view.done += 1
        if self.mode == "dynamic":
            self._issue_next(worker_id)

    def _reassign_silent(self) -> None:
        if self.reassign_after_s is None:
            return
        now = time.monotonic()
        window = self.reassign_after_s
        silent = [
            v
            for v in self.workers.values()
            if not v.lost and v.pending and now - v.seen_mono > window
        ]
        for view in silent:
            others = [v for v in self.workers.values() if not v.lost and v is not view]
            # Prefer workers heard from lately; else any idle one (an idle worker may be quiet
            # only because it has nothing to say, e.g. without heartbeats).
            targets = [v for v in others if now - v.seen_mono <= window] or [
                v for v in others if v not in silent
            ]
            if not targets:
                continue  # nobody to take them: wait for a replacement's hello
            moved = [i for i in view.pending if i not in self.results]
            log.warning(
                "worker %s silent for %.1f s: moving its %d items to %s",
                view.worker_id,
                now - view.seen_mono,
                len(moved),
                ", ".join(v.worker_id for v in targets),
            )
            view.lost, view.pending = True, []
            for k, item_id in enumerate(moved):
                target = targets[k % len(targets)]
                target.seen_mono = max(target.seen_mono, now)  # a full window to answer
                self._issue(item_id, target.worker_id)
            self.reissued += len(moved)

    def _finish(self) -> None:
        self._items.write(
            WorkItem(
                job_id=self.job_id,
                item_id=CONTROL_ID,
                worker_id="",
                lo=0,
                hi=0,
                payload=encode_token(self.token) if self.journal is not None else b"",
                issue_ns=time.time_ns(),
            )
        )

    def result(self) -> JobResult:
        """The job's ``JobResult`` so far (``launch_s`` is the launcher's to fill in)."""
        total = PrimeCount()
        for found in self.results.values():
            total = total + found
        runtime_s = (
            (self.last_result_ns - self.first_item_ns) / 1e9 if self.last_result_ns else None
        )
        return JobResult(
            app="primes",
            impl="dds",
            workers=self.expected_workers,
            job_id=self.job_id,
            n=self.n,
            items=len(self.ranges),
            count=total.count,
            largest=total.largest,
            runtime_s=runtime_s,
            reissued_items=self.reissued,
            duplicate_results=self.duplicates,
            lost_items=len(self.ranges) - len(self.results),
            replacements=self.replacements,
            extra={
                "mode": self.mode,
                "first_item_ns": self.first_item_ns,
                "last_result_ns": self.last_result_ns,
                "items_per_worker": {w: v.done for w, v in sorted(self.workers.items())},
                "dropped": dict(self.dropped),
                **({"journal": self._journal_report()} if self.journal is not None else {}),
            },
        )

    def _journal_report(self) -> dict[str, Any]:
        assert self.journal is not None
        state = self.journal.state
        per_item = state.records_per_item
        return {
            "epoch": self.token[0],
            "master": self.token[1],
            "takeovers": self.takeovers,
            "adopted_results": self.adopted,
            "records": sum(per_item.values()),
            "records_per_item_max": max(per_item.values(), default=0),
            "items_journaled": len(per_item),
            "bad_records": dict(state.bad),
        }


# -- worker ------------------------------------------------------------------------------------


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
        checkpoint: this identity's last checkpoint (from the persistence service), if any.
        checkpoint_interval_s: the longest time between two checkpoints inside an item.
        segment_numbers: sieve segment (and the finest resume granularity).
        max_queued_items: items it holds at most (more are dropped, counted in ``dropped``).
    """

    def __init__(
        self,
        bus: Bus,
        *,
        worker_id: str,
        job_id: str,
        checkpoint: Checkpoint | None = None,
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
        if checkpoint is not None:
            self._restore(checkpoint)
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
        self._base = np.zeros(0, dtype=np.int64)
        self._base_limit = 0
        self._results = bus.writer("WorkResult")
        self._checkpoints = bus.writer("Checkpoint")
        self._items = bus.reader("WorkItem", on_data=self._on_items)

    def _restore(self, checkpoint: Checkpoint) -> None:
        self.items_done = int(checkpoint.items_done)
        self.last_item_id = int(checkpoint.last_item_id)
        state = bytes(checkpoint.state)
        if len(state) > _STATE_HEADER.itemsize:
            item_id = int(np.frombuffer(state[:8], dtype=_STATE_HEADER)[0])
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
        done_here = 0
        self._hello()  # at least once: the master learns of a replacement from it
        next_hello = time.monotonic() + hello_interval_s
        hello_with_work = False
        while not stop.is_set():
            if not self._got_any.is_set() and time.monotonic() >= next_hello:
                self._hello()
                next_hello = time.monotonic() + hello_interval_s
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
                result = self._work(item, stop)
                if result is None:  # stopped in the middle: the checkpoint has it
                    break
                self._results.write(result)
                if len(self._done) < MAX_ITEMS:
                    self._done[int(item.item_id)] = (item.lo, item.hi, result)
                done_here += 1
                if on_item is not None:
                    on_item(result)
                continue
            if self._over.is_set():
                break
            self._wake.wait(hello_interval_s)
            self._wake.clear()
        return done_here

    def _hello(self) -> None:
        self._results.write(
            WorkResult(
                job_id=self.job_id,
                item_id=CONTROL_ID,
                worker_id=self.worker_id,
                count=self.items_done,
                value=os.getpid(),
                payload=b"",
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

    def _work(self, item: WorkItem, stop: threading.Event) -> WorkResult | None:
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
        last_checkpoint = time.monotonic()
        for _ in scan.run(base):
            if stop.is_set():
                self._checkpoint(item.item_id, scan)
                return None
            if time.monotonic() - last_checkpoint >= self.checkpoint_interval_s:
                self._checkpoint(item.item_id, scan)
                last_checkpoint = time.monotonic()
        self.items_done += 1
        self.last_item_id = int(item.item_id)
        self._checkpoint(item.item_id, None)
        return WorkResult(
            job_id=self.job_id,
            item_id=item.item_id,
            worker_id=self.worker_id,
            count=scan.total.count,
            value=scan.total.largest,
            payload=b"",
            elapsed_ns=time.time_ns() - start_ns,
            done_ns=time.time_ns(),
        )

    def _checkpoint(self, item_id: int, scan: PrimeScan | None) -> None:
        state = b"" if scan is None else np.array([item_id], _STATE_HEADER).tobytes() + scan.pack()
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


# -- apps ----------------------------------------------------------------------------------------


def _parse(parser: argparse.ArgumentParser, args: Sequence[str]) -> argparse.Namespace:
    try:
        return parser.parse_args(list(args))
    except SystemExit:  # argparse printed the reason; fail as an app, not as the interpreter
        raise HpcError(
            f"{parser.prog}: bad arguments {list(args)!r} (see the usage above)"
        ) from None


def _master_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mcc.hpc.farm:master")
    p.add_argument("--n", type=int, required=True, help="search the primes in [1, N]")
    p.add_argument("--workers", type=int, required=True, help="worker identities to wait for")
    p.add_argument("--items", type=int, help="work items (default 8 per worker)")
    p.add_argument("--mode", choices=MODES, default="strided", help="assignment (strided)")
    p.add_argument("--prefetch", type=int, default=2, help="items per worker, dynamic mode")
    p.add_argument("--job", help="job id (default primes-<mission epoch>)")
    p.add_argument("--start-timeout-s", type=float, default=120.0, help="wait for workers")
    p.add_argument("--timeout-s", type=float, default=3600.0, help="the whole job")
    p.add_argument(
        "--reassign-after-s",
        type=float,
        default=10.0,
        help="move a silent worker's items to live workers after this long (0: never)",
    )
    p.add_argument(
        "--lease-s",
        type=float,
        default=3.0,
        help="a standby takes the job over once the holder's lease is this long unrenewed",
    )
    p.add_argument(
        "--journal-timeout-s",
        type=float,
        default=5.0,
        help="wait this long for the persistence service's replay of the job's journal (0: "
        "no journal: a mission without the service, whose job dies with its master)",
    )
    return p


def master(ctx: AppContext) -> int:
    """App ``mcc.hpc.farm:master``: run one primes job, write ``hpc-<job>.json`` to the run
    folder, tell the workers to exit, and exit 0.

    Instance 0 is the primary; other instances stand by and take the job over from the
    journal when the holder's lease lapses (``mcc.hpc.journal``); a restarted instance takes
    over at once what its own predecessor held."""
    args = _parse(_master_parser(), ctx.args)
    job_id = args.job or default_job_id("primes")
    primary = ctx.identity.index == 0
    journal: MasterJournal | None = None
    if not primary and args.journal_timeout_s <= 0:
        ctx.log.info("job %s: no journal (--journal-timeout-s 0): no standby; exiting", job_id)
        return 0
    if args.journal_timeout_s > 0:
        journal = MasterJournal(
            ctx.bus,
            job_id=job_id,
            master_id=ctx.identity.id,
            history_timeout_s=args.journal_timeout_s,
        )
        if not journal.available:
            if not primary:
                ctx.log.warning(
                    "job %s: no persistence service answered: a standby without the job's "
                    "journal cannot take over; exiting",
                    job_id,
                )
                return 0
            ctx.log.warning("job %s: no persistence service: the job has no journal", job_id)
            journal = None
    farm = FarmMaster(
        ctx.bus,
        job_id=job_id,
        n=args.n,
        workers=args.workers,
        items=args.items,
        mode=args.mode,
        prefetch=args.prefetch,
        reassign_after_s=args.reassign_after_s or None,
        journal=journal,
        primary=primary,
        lease_s=args.lease_s,
    )
    ctx.log.info(
        "job %s: primes in [1, %d], %d items, %d workers%s",
        job_id,
        args.n,
        len(farm.ranges),
        args.workers,
        "" if primary else " (standby)",
    )
    try:
        result = farm.run(ctx.stop, start_timeout_s=args.start_timeout_s, timeout_s=args.timeout_s)
    except HpcError as exc:
        if ctx.stopping:  # asked to stop (mcc down): not a failure
            ctx.log.info("job %s: %s", job_id, exc)
            return 0
        raise
    path = result_path(ctx.run_dir, job_id)
    if farm.ended_by and path.exists():
        ctx.log.info("job %s: finished by %s; its result is %s", job_id, farm.ended_by, path)
        return 0
    write_result(result, path)
    ctx.log.info(
        "job %s: %d primes, largest %d, %.3f s; %s",
        job_id,
        result.count or 0,
        result.largest or 0,
        result.runtime_s or 0.0,
        path,
    )
    return 0


def _worker_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mcc.hpc.farm:worker")
    p.add_argument("--job", help="job id (default primes-<mission epoch>)")
    p.add_argument("--checkpoint-interval-s", type=float, default=0.25)
    p.add_argument("--segment", type=int, default=DEFAULT_SEGMENT_NUMBERS, help="numbers/segment")
    p.add_argument("--start-timeout-s", type=float, default=120.0, help="wait for the master")
    p.add_argument(
        "--restore-timeout-s",
        type=float,
        default=5.0,
        help="wait this long for the persistence service's replay of my checkpoint (0: do not "
        "ask: a mission without the service)",
    )
    return p


def worker(ctx: AppContext) -> int:
    """App ``mcc.hpc.farm:worker``: restore this identity's checkpoint, serve the master."""
    from mcc.hpc.checkpoint import restore_checkpoint

    args = _parse(_worker_parser(), ctx.args)
    job_id = args.job or default_job_id("primes")
    worker_id = ctx.identity.id
    checkpoint = (
        restore_checkpoint(
            ctx.bus, job_id=job_id, worker_id=worker_id, timeout_s=args.restore_timeout_s
        )
        if args.restore_timeout_s > 0
        else None
    )
    farm = FarmWorker(
        ctx.bus,
        worker_id=worker_id,
        job_id=job_id,
        checkpoint=checkpoint,
        checkpoint_interval_s=args.checkpoint_interval_s,
        segment_numbers=args.segment,
    )
    done = farm.run(
        ctx.stop,
        start_timeout_s=args.start_timeout_s,
        on_item=lambda _result: ctx.heartbeat.count_out(),
    )
    ctx.log.info("%s: %d items done here (%d in all)", worker_id, done, farm.items_done)
    return 0
