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

from mcc.bus import Bus
from mcc.bus.history import HistoryReader
from mcc.types import Checkpoint

__all__ = ["restore_checkpoint"]

log = logging.getLogger("mcc.hpc.checkpoint")


def restore_checkpoint(
    bus: Bus, *, job_id: str, worker_id: str, timeout_s: float = 5.0
) -> Checkpoint | None:
    """The newest checkpoint of ``worker_id`` in ``job_id`` that the persistence service kept,
    or None (none kept, or no service answered within ``timeout_s``)."""
    start = time.monotonic()
    reader = bus.reader("Checkpoint", history_timeout_s=timeout_s)
    if not isinstance(reader, HistoryReader):
        return None  # the profile is not durable: nothing was kept
    if not reader.wait_for_history(timeout_s=timeout_s):
        log.info("%s: no persistence service answered in %.1f s", worker_id, timeout_s)
        return None
    mine = [cp for cp in reader.take(4096) if cp.job_id == job_id and cp.worker_id == worker_id]
    latest = max(mine, key=lambda cp: cp.time_ns, default=None)
    log.info(
        "%s: history in %.3f s, %d checkpoints of mine%s",
        worker_id,
        time.monotonic() - start,
        len(mine),
        f", newest {latest.items_done} items done" if latest is not None else "",
    )
    return latest
