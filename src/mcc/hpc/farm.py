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

from mcc.hpc.base import HpcError, default_job_id, write_result
from mcc.hpc.farm_master import FarmMaster
from mcc.hpc.farm_protocol import (
    MAX_ITEM_NUMBERS,
    MAX_ITEMS,
    MAX_N,
    MAX_QUEUED_ITEMS,
    MAX_WORKERS,
    MODES,
    parse_app_args,
    result_path,
)
from mcc.hpc.farm_worker import FarmWorker
from mcc.hpc.journal import MasterJournal
from mcc.hpc.primes import DEFAULT_SEGMENT_NUMBERS
from mcc.orchestrate.runtime import AppContext
from mcc.security.mission import Topics

BUS_TOPICS = {
    # Checkpoint: the master's journal (its lease and the results it counted, mcc.hpc.journal)
    "master": Topics(
        publish=("WorkItem", "Checkpoint"), subscribe=("WorkResult", "Heartbeat", "Checkpoint")
    ),
    "worker": Topics(publish=("WorkResult", "Checkpoint"), subscribe=("WorkItem", "Checkpoint")),
}

__all__ = [
    "MAX_ITEMS",
    "MAX_ITEM_NUMBERS",
    "MAX_N",
    "MAX_QUEUED_ITEMS",
    "MAX_WORKERS",
    "FarmMaster",
    "FarmWorker",
    "master",
    "result_path",
    "worker",
]


DURABLE_TOPICS = ("Checkpoint",)  # the supervisor starts the persistence service for these


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
    args = parse_app_args(_master_parser(), ctx.args)
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

    args = parse_app_args(_worker_parser(), ctx.args)
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
