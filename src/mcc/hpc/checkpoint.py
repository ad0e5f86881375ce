"""A worker's last checkpoint, read back through the persistence service (``mcc.persist``).

``Checkpoint`` uses the ``durable`` profile (TRANSIENT): the service stores every checkpoint a
worker publishes and replays the retained ones to a reader that joins later, after the worker
that wrote them died. A replacement under the same identity reads its own (job, worker) key and
resumes from the newest one. Without a service the history never comes: the worker starts from
nothing, which is still correct (the master re-issues whatever was unfinished), only slower.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from mcc.bus import Bus
from mcc.bus.history import HistoryReader
from mcc.types import Checkpoint

__all__ = ["MAX_CLOCK_SKEW_NS", "restore_checkpoint"]

log = logging.getLogger("mcc.hpc.checkpoint")

#: How far ahead of this host's clock a checkpoint's ``time_ns`` may be.
MAX_CLOCK_SKEW_NS = 60 * 10**9


def _newest(cp: Checkpoint) -> tuple[int, int]:
    # Its time, then (equal times) the later sample in the history's order.
    info = getattr(cp, "sample_info", None)
    return cp.time_ns, info.source_timestamp if info is not None else 0


def restore_checkpoint(
    bus: Bus, *, job_id: str, worker_id: str, timeout_s: float = 5.0
) -> Checkpoint | None:
    """The newest checkpoint of ``worker_id`` in ``job_id`` that the persistence service kept,
    or None (none kept, or no service answered within ``timeout_s``)."""
    reader = bus.reader("Checkpoint", history_timeout_s=timeout_s)
    try:
        return _restore(reader, job_id=job_id, worker_id=worker_id, timeout_s=timeout_s)
    finally:
        # Read once: kept open, it would take in (and, in a secured mission, decrypt) every
        # checkpoint of every other worker for the rest of the job.
        reader.close()


def _restore(reader: Any, *, job_id: str, worker_id: str, timeout_s: float) -> Checkpoint | None:
    start = time.monotonic()
    if not isinstance(reader, HistoryReader):
        return None  # the profile is not durable: nothing was kept
    if not reader.wait_for_history(timeout_s=timeout_s):
        log.info("%s: no persistence service answered in %.1f s", worker_id, timeout_s)
        return None
    # The newest by the checkpoint's own clock, but none stamped in the future: a sample
    # stamped a year ahead would otherwise win over every real checkpoint to come.
    horizon_ns = time.time_ns() + MAX_CLOCK_SKEW_NS
    # Every batch: the history holds every worker's checkpoints.
    mine = []
    while batch := reader.take(4096):
        mine += [cp for cp in batch if cp.job_id == job_id and cp.worker_id == worker_id]
    future = [cp for cp in mine if cp.time_ns > horizon_ns]
    if future:
        log.warning(
            "%s: %d checkpoints stamped more than %.0f s ahead ignored",
            worker_id,
            len(future),
            MAX_CLOCK_SKEW_NS / 1e9,
        )
    latest = max((cp for cp in mine if cp.time_ns <= horizon_ns), key=_newest, default=None)
    log.info(
        "%s: history in %.3f s, %d checkpoints of mine%s",
        worker_id,
        time.monotonic() - start,
        len(mine),
        f", newest {latest.items_done} items done" if latest is not None else "",
    )
    return latest
