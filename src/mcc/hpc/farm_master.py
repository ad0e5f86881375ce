"""The task farm's master (``mcc.hpc.farm``): it hands out the items of one primes job,
counts each result once, re-issues a replaced worker's items and moves a silent one's to live
workers; with a journal (``mcc.hpc.journal``) a standby takes the job over when its lease lapses.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from mcc.bus import Bus, Reader
from mcc.errors import MccError
from mcc.hpc.base import CONTROL_ID, HpcError, JobResult
from mcc.hpc.farm_protocol import (
    IDLE,
    IDLE_HELLO_S,
    MAX_ITEM_NUMBERS,
    MAX_ITEMS,
    MAX_N,
    MAX_QUEUED_ITEMS,
    MAX_REPLACEMENTS,
    MAX_WORKERS,
    MODES,
    worker_order,
)
from mcc.hpc.journal import Lease, MasterJournal, Token, encode_token
from mcc.hpc.primes import PrimeCount, split_range
from mcc.security.mission import principal_of
from mcc.types import Heartbeat, WorkItem, WorkResult

__all__ = ["FarmMaster"]

log = logging.getLogger("mcc.hpc.farm")

#: How long the master waits for its WorkItem writer to match the workers' readers before the
#: first item (`FarmMaster._wait_for_workers`); past it, items go out all the same.
ITEM_MATCH_WAIT_S = 2.0

#: With a journal, results are committed together: a batch waits up to this long for more
#: results to share its durable write, unless it holds the job's last results or counting
#: them hands out work (dynamic mode, a replacement's hello). The price: a master killed
#: meanwhile leaves that many seconds of results to be computed again by its successor.
GROUP_COMMIT_S = 0.05


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
    issued_mono: float = 0.0  # when an item last went to it


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
        self.foreign_beats = 0  # heartbeats naming a worker from another identity (secured)
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
        # Results not in the journal yet, by item: (item, count, largest, worker), since
        # _held_since. Not counted yet, but not new either (`_on_result`).
        self._unjournaled: dict[int, tuple[int, int, int, str]] = {}
        self._held_since = 0.0
        self.result_writes = 0  # batches of results journaled: a commit on every replica each
        self._last_renew = 0.0
        self._items = bus.writer("WorkItem")
        # The intake (WorkResult, Heartbeat) is a leader's: a standby that read them would
        # decode (and on a secured bus decrypt) every result and beat of the job, on the cores
        # the workers compute on (`_open_intake`).
        self._intake: tuple[Reader[WorkResult], Reader[Heartbeat]] | None = None

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
            self._open_intake()
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
            stop.wait(0.05)
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
        results, _ = self._open_intake()
        if not lease.roster:
            self._wait_for_workers(stop, start_timeout_s)
            self._start_issuing()
            return
        # The workers answer what they had finished at once: our reader must hear them.
        if not results.wait_for_writers(len(lease.roster), timeout_s=ITEM_MATCH_WAIT_S):
            log.warning(
                "job %s: %d of %d workers' result writers matched after %g s; re-issuing "
                "anyway (a result missed meanwhile is asked for again once its worker is idle)",
                self.job_id,
                results.matched(),
                len(lease.roster),
                ITEM_MATCH_WAIT_S,
            )
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

    def _open_intake(self) -> tuple[Reader[WorkResult], Reader[Heartbeat]]:
        """The readers of results and beats, made when this master leads."""
        if self._intake is None:
            self._intake = (self.bus.reader("WorkResult"), self.bus.reader("Heartbeat"))
        return self._intake

    def _reset(self) -> None:
        """Forget the job in progress (another master leads it now) and its intake."""
        if self._intake is not None:
            for reader in self._intake:
                reader.close()
            self._intake = None
        self.workers.clear()
        self.owner.clear()
        self.pool.clear()
        self._issuing = False
        self._unjournaled.clear()
        self.token = (0, "")

    def _wait_for_workers(self, stop: threading.Event, start_timeout_s: float) -> None:
        """Until every worker said hello and then, for at most `ITEM_MATCH_WAIT_S`, until the
        WorkItem writer has matched as many readers as there are workers. A hello proves that
        a worker's WorkResult writer reached our reader, not that our WorkItem writer has
        matched its reader: discovery matches each pair of endpoints on its own, and an item
        written before the match reaches that worker only once the match completes. Measured
        on one host (primes, n = 2·10⁷, 2 workers, 8 runs): in 3 the writer had matched 1
        reader of 2 at the first item, and those jobs ran 70-204 ms against 28-58 ms. Like
        MPI_Init connecting the ranks, this is set-up: the job's clock starts after it. The
        lease is kept and ``stop`` obeyed throughout."""
        deadline = time.monotonic() + start_timeout_s
        all_hello: float | None = None  # when the last hello came: the match wait's start
        while True:
            if stop.is_set():
                raise HpcError("stopped before the workers were ready")
            now = time.monotonic()
            if all_hello is None and len(self.workers) >= self.expected_workers:
                all_hello = now
            if all_hello is not None:
                matched = self._items.matched()
                if matched >= self.expected_workers:
                    return
                if now - all_hello >= ITEM_MATCH_WAIT_S:
                    log.warning(
                        "job %s: %d of %d workers' item readers matched after %g s; issuing "
                        "anyway (items reach the others when they match)",
                        self.job_id,
                        matched,
                        self.expected_workers,
                        ITEM_MATCH_WAIT_S,
                    )
                    return
            elif now > deadline:
                came = ", ".join(self.workers) or "none"
                raise HpcError(
                    f"job {self.job_id}: {len(self.workers)} of {self.expected_workers} workers "
                    f"said hello within {start_timeout_s:g} s ({came}); are the workers "
                    "running on this domain and discovery tag?"
                )
            self._receive(0.05 if all_hello is None else 0.005)
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
            wait_s = 0.2 if self.journal is None else min(0.2, self.lease_s / 8)
            if self._unjournaled:  # a held batch is committed on time
                wait_s = max(0.0, min(wait_s, self._held_since + GROUP_COMMIT_S - time.monotonic()))
            self._receive(wait_s)
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
        order = sorted(self.workers, key=worker_order)[: self.expected_workers]
        self._issuing = True
        self.first_item_ns = time.time_ns()
        if self.journal is not None:
            # The roster, so that a successor assigns as we did, is committed while the first
            # items go out and before the first result counts (`MasterJournal.publish`).
            self.journal.publish(
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
        view.issued_mono = time.monotonic()
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
        results, beats = self._open_intake()
        secured = self.bus.secured
        for beat in beats.take():
            view = self.workers.get(beat.system_id)
            if view is None or beat.pid != view.pid:
                continue
            # a secured bus: only the worker's own identity keeps it alive (SYSTEM.INDEX)
            if secured and beats.source_of(beat) != principal_of(beat.system_id):
                self.foreign_beats += 1
                continue
            view.seen_mono = now
        fresh: list[tuple[int, int, int, str]] = []
        for sample in results.take_wait(256, timeout_s=timeout_s):
            if sample.job_id != self.job_id:
                continue
            if sample.item_id == CONTROL_ID:
                view = self.workers.get(sample.worker_id)
                if view is not None and view.pid == int(sample.value):
                    view.seen_mono = now  # a worker we know, saying it lives
                    if bytes(sample.payload) == IDLE:
                        self._on_idle(view, now)
                    continue
                # In order: what a worker finished before its replacement said hello counts
                # before the hello decides what to re-issue.
                self._count_all(fresh, now=True)
                fresh = []
                self._on_hello(sample.worker_id, int(sample.value))
            elif (checked := self._on_result(sample)) is not None:
                if any(checked[0] == f[0] for f in fresh):
                    self.duplicates += 1  # twice in one batch: counted once
                else:
                    fresh.append(checked)
        self._count_all(fresh)

    def _count_all(self, fresh: list[tuple[int, int, int, str]], *, now: bool = False) -> None:
        """Count new results; with a journal, once the journal has them: the batch held so
        far and ``fresh`` in one write, when due (`GROUP_COMMIT_S`) or ``now``."""
        if self.journal is not None and (fresh or self._unjournaled):
            # A result counts once it is in the journal: a successor then never re-issues it.
            if not self._unjournaled:
                self._held_since = time.monotonic()
            self._unjournaled.update((r[0], r) for r in fresh)
            batch = list(self._unjournaled.values())
            due = (
                now
                or self.mode == "dynamic"  # counting a result hands out the next item
                or len(self.results) + len(batch) >= len(self.ranges)  # the job's last ones
                or time.monotonic() - self._held_since >= GROUP_COMMIT_S
            )
            if not due:
                return
            try:
                self.journal.record([(i, c, g) for i, c, g, _ in batch])
                self.result_writes += 1
            except MccError as exc:
                self._held_since = time.monotonic()  # retried a GROUP_COMMIT_S from now
                self._drop("results not journaled yet (retried)", str(exc))
                return
            self._unjournaled.clear()
            fresh = batch
        counted = [i for i, c, g, w in fresh if self._count(i, c, g, w)]
        if len(self.results) < len(self.ranges):
            # Done items leave the writer's history, so that a replacement joining later gets
            # only unfinished ones; the job's last results retire none (the job is over: at
            # 10^7 that was 15 writes, each decrypted by every worker, on the clock).
            for item_id in counted:
                self._items.retire(WorkItem(job_id=self.job_id, item_id=item_id))

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
        if len(self.replacements) >= MAX_REPLACEMENTS:
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

    def _on_idle(self, view: _WorkerView, now: float) -> None:
        """A worker says it has done all it was given: what we still count as pending there
        (and issued long enough ago to have arrived) lost its result on the way."""
        if not self._issuing or now - view.issued_mono < IDLE_HELLO_S:
            return
        lost = [i for i in view.pending if i not in self.results and i not in self._unjournaled]
        if not lost:
            return
        log.warning(
            "job %s: worker %s is idle with %d items pending here: issuing them again",
            self.job_id,
            view.worker_id,
            len(lost),
        )
        for item_id in lost:
            self._issue(item_id, view.worker_id)
        self.reissued += len(lost)

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
        if item_id in self.results or item_id in self._unjournaled:
            self.duplicates += 1
            return None
        return item_id, count, largest, sample.worker_id

    def _count(self, item_id: int, count: int, largest: int, worker_id: str) -> bool:
        """Count one result; False for a duplicate."""
        if item_id in self.results:
            self.duplicates += 1
            return False
        self.results[item_id] = PrimeCount(count, largest)
        self.last_result_ns = time.time_ns()
        owner = self.workers.get(self.owner.get(item_id, ""))
        if owner is not None and item_id in owner.pending:
            owner.pending.remove(item_id)
        view = self.workers.get(worker_id)
        if view is not None:
            view.done += 1
        if self.mode == "dynamic":
            self._issue_next(worker_id)
        return True

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
            "result_writes": self.result_writes,
            "records_per_item_max": max(per_item.values(), default=0),
            "items_journaled": len(per_item),
            "bad_records": dict(state.bad),
        }
