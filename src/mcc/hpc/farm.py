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
                      (profile ``state``: kept for late readers, retired once done)
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

import contextlib
import sys
import threading
from pathlib import Path
from typing import Literal

from pydantic import Field

from mcc.errors import MccError
from mcc.hpc.base import HpcError, JobResult, default_job_id, write_result
from mcc.hpc.farm_master import FarmMaster
from mcc.hpc.farm_protocol import (
    MAX_ITEM_NUMBERS,
    MAX_ITEMS,
    MAX_N,
    MAX_QUEUED_ITEMS,
    MAX_WORKERS,
    MODES,
    result_path,
)
from mcc.hpc.farm_worker import FarmWorker
from mcc.hpc.journal import MasterJournal
from mcc.hpc.primes import DEFAULT_SEGMENT_NUMBERS
from mcc.orchestrate.appconfig import AppConfig, NonNegative, Positive, app_config
from mcc.orchestrate.appspec import app
from mcc.orchestrate.runtime import AppContext
from mcc.security.mission import Topics
from mcc.waiting import WaitTimeoutError, wait_for

__all__ = [
    "MAX_ITEMS",
    "MAX_ITEM_NUMBERS",
    "MAX_N",
    "MAX_QUEUED_ITEMS",
    "MAX_WORKERS",
    "FarmMaster",
    "FarmWorker",
    "MasterConfig",
    "WorkerConfig",
    "master",
    "result_path",
    "worker",
    "write_own_result",
]


class MasterConfig(AppConfig):
    """The farm master's ``config:`` block (``n`` and ``workers`` required)."""

    n: int = Field(ge=1, le=MAX_N, description="search the primes in [1, n]")
    workers: int = Field(ge=1, le=MAX_WORKERS, description="worker identities to wait for")
    items: int | None = Field(
        default=None, ge=1, le=MAX_ITEMS, description="work items (default 8 per worker)"
    )
    mode: Literal["strided", "dynamic"] = Field(
        default="strided", description="assignment: " + ", ".join(MODES)
    )
    prefetch: int = Field(
        default=2, ge=1, le=MAX_QUEUED_ITEMS, description="items per worker, dynamic mode"
    )
    job: str | None = Field(default=None, description="job id (default primes-<mission epoch>)")
    start_timeout_s: Positive = Field(default=120.0, description="wait for the workers, s")
    timeout_s: Positive = Field(default=3600.0, description="the whole job, s")
    reassign_after_s: NonNegative = Field(
        default=10.0,
        description="move a silent worker's items to live workers after this long, s (0: never)",
    )
    lease_s: Positive = Field(
        default=3.0, description="a standby takes over once the holder's lease is this old, s"
    )
    journal_timeout_s: NonNegative = Field(
        default=5.0,
        description="wait for the persistence service's replay of the job's journal, s (0: no "
        "journal: a mission without the service, whose job dies with its master)",
    )


class WorkerConfig(AppConfig):
    """A farm worker's ``config:`` block (every field optional)."""

    job: str | None = Field(default=None, description="job id (default primes-<mission epoch>)")
    checkpoint_interval_s: Positive = Field(default=0.25, description="checkpoint period, s")
    segment: int = Field(
        default=DEFAULT_SEGMENT_NUMBERS, ge=1, description="numbers per sieve segment"
    )
    start_timeout_s: Positive = Field(default=120.0, description="wait for the master, s")
    restore_timeout_s: NonNegative = Field(
        default=5.0,
        description="wait for the persistence service's replay of my checkpoint, s (0: do not "
        "ask: a mission without the service)",
    )


def write_own_result(
    result: JobResult, path: Path, *, ended_by: str, wait_s: float, stop: threading.Event
) -> bool:
    """Write ``result`` to ``path`` unless another master ended the job (``ended_by``) and its
    result comes within ``wait_s``; whether ours was written.

    That master writes its result just after it marks the end in the journal. Ours has no
    runtime (the results were counted there): written first, it was what a reader of the
    file got, in 3 of 25 jobs at n = 10^7 (the standby and the leader racing)."""
    if ended_by:
        # A file another process writes: nothing tells us, so poll.
        with contextlib.suppress(WaitTimeoutError):
            wait_for(lambda: path.exists() or stop.is_set(), wait_s, str(path), period_s=0.02)
        if path.exists():
            return False
    write_result(result, path)
    return True


# FarmJournal: the master's journal (its lease and the results it counted, mcc.hpc.journal),
# durable: the supervisor starts the persistence service for it
@app(
    topics=Topics(
        publish=("WorkItem", "FarmJournal"), subscribe=("WorkResult", "Heartbeat", "FarmJournal")
    ),
    config=MasterConfig,
    durable=("FarmJournal",),
)
def master(ctx: AppContext) -> int:
    """App ``mcc.hpc.farm:master``: run one primes job, write ``hpc-<job>.json`` to the run
    folder, tell the workers to exit, and exit 0.

    Instance 0 is the primary; other instances stand by and take the job over from the
    journal when the holder's lease lapses (``mcc.hpc.journal``); a restarted instance takes
    over at once what its own predecessor held."""
    try:
        args = app_config(ctx, MasterConfig)
    except MccError as exc:  # a bad config: block, as `mcc validate` says it
        print(f"mcc: error: {exc}", file=sys.stderr)
        return 2
    job_id = args.job or default_job_id("primes")
    primary = ctx.identity.index == 0
    journal: MasterJournal | None = None
    if not primary and args.journal_timeout_s <= 0:
        ctx.log.info("job %s: no journal (journal_timeout_s 0): no standby; exiting", job_id)
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
    if not write_own_result(
        result, path, ended_by=farm.ended_by, wait_s=args.lease_s, stop=ctx.stop
    ):
        ctx.log.info("job %s: finished by %s; its result is %s", job_id, farm.ended_by, path)
        return 0
    ctx.log.info(
        "job %s: %d primes, largest %d, %.3f s; %s",
        job_id,
        result.count or 0,
        result.largest or 0,
        result.runtime_s or 0.0,
        path,
    )
    return 0


@app(
    topics=Topics(publish=("WorkResult", "Checkpoint"), subscribe=("WorkItem", "Checkpoint")),
    config=WorkerConfig,
    durable=("Checkpoint",),
)
def worker(ctx: AppContext) -> int:
    """App ``mcc.hpc.farm:worker``: restore this identity's checkpoint, serve the master."""
    from mcc.hpc.checkpoint import restore_checkpoint

    try:
        args = app_config(ctx, WorkerConfig)
    except MccError as exc:  # a bad config: block, as `mcc validate` says it
        print(f"mcc: error: {exc}", file=sys.stderr)
        return 2
    job_id = args.job or default_job_id("primes")
    worker_id = ctx.identity.id
    # The job's endpoints first: they match the master's while the persistence service
    # answers the checkpoint query, where a replacement made them only after its answer.
    farm = FarmWorker(
        ctx.bus,
        worker_id=worker_id,
        job_id=job_id,
        checkpoint_interval_s=args.checkpoint_interval_s,
        segment_numbers=args.segment,
    )
    if args.restore_timeout_s > 0:
        checkpoint = restore_checkpoint(
            ctx.bus, job_id=job_id, worker_id=worker_id, timeout_s=args.restore_timeout_s
        )
        if checkpoint is not None:
            farm.restore(checkpoint)
    done = farm.run(
        ctx.stop,
        start_timeout_s=args.start_timeout_s,
        on_item=lambda _result: ctx.heartbeat.count_out(),
    )
    ctx.log.info("%s: %d items done here (%d in all)", worker_id, done, farm.items_done)
    return 0
