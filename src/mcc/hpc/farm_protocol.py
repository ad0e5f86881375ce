"""The task farm's bounds and the names its master, workers and apps share (``mcc.hpc.farm``
tells the protocol): the limits of one job, the assignment modes, where a job's result goes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

#: Bounds of one job: numbers searched, items, worker identities (the master's and a
#: standby's), numbers per item (what one item may cost a worker), items a worker holds.
MAX_N = 10**12
MAX_ITEMS = 100_000
MAX_WORKERS = 1024
MAX_ITEM_NUMBERS = 10**10
MAX_QUEUED_ITEMS = 16_384
MAX_REPLACEMENTS = 1000  # replacement records kept in the job result
MODES = ("strided", "dynamic")
# Work items are state, not a stream (the catalogue's `state` profile): the latest assignment
# of each item (its own instance, keyed by job and item), reliable and kept by the master's
# writer for readers that match later (transient-local). A worker whose reader the master has
# not discovered yet when it sends the items, and a replacement that starts after they were
# sent, both get them on matching; the master disposes an item once its result is in, so a
# late joiner gets only unfinished ones.
STATE_HEADER = np.dtype("<u8")  # the checkpoint state: item id, then PrimeScan.pack()
#: A worker that has done all it was given says hello again this often, its hello's payload
#: `IDLE`. Results are a stream (volatile): one written before a new master's reader matched
#: is lost, so a master that still counts items pending at an idle worker issues them again
#: (the worker answers from the results it kept), and a master that took the job over
#: without a roster learns of its workers from these hellos.
IDLE_HELLO_S = 1.0
IDLE = b"idle"


def result_path(run_dir: Path, job_id: str) -> Path:
    """Where the master of ``job_id`` writes its ``JobResult``."""
    return Path(run_dir) / f"hpc-{job_id}.json"


def worker_order(worker_id: str) -> tuple[str, int, str]:
    """Sort key: ``mission/system/index`` by system, then index as a number."""
    head, _, index = worker_id.rpartition("/")
    return (head, int(index), "") if index.isdigit() else (worker_id, 0, worker_id)
