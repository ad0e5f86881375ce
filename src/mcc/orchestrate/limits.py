"""What an instance's process gets before its app runs: its cores, its priority, its memory.

Applied in the child by both backends: the local backend's zygote (`mcc.orchestrate.zygote`)
and the Ray actor (`mcc.orchestrate.backends.ray`). A priority that the user may not take is
a warning and the next one down (realtime → high → normal), never a failed start.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Callable, Sequence

NICE_HIGH = -10  # priority "high"; also "realtime" when SCHED_FIFO is refused
RT_PRIORITY = 50  # priority "realtime": SCHED_FIFO at this level


def apply_limits(
    cores: Sequence[int],
    priority: str,
    memory_mb: int | None,
    *,
    warn: Callable[[str], None],
    where: str = "",
) -> None:
    """Pin this process to ``cores``, give it ``priority`` (normal, high, realtime) and limit
    its data segment to ``memory_mb`` (RLIMIT_DATA; ``OSError``/``ValueError`` when refused).
    ``warn`` gets what could not be applied, ``where`` (" on HOST") says where."""
    if cores:
        try:
            os.sched_setaffinity(0, cores)
        except OSError as exc:
            warn(f"cannot pin to cores {list(cores)}: {exc.strerror}; running unpinned")
    if priority == "realtime":
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(RT_PRIORITY))
        except OSError as exc:
            warn(
                f"realtime priority (SCHED_FIFO {RT_PRIORITY}) not permitted{where} "
                f"({exc.strerror}); running at nice {NICE_HIGH} instead: grant CAP_SYS_NICE or "
                "an rtprio limit (ulimit -r) to the user running mcc"
            )
            priority = "high"
    if priority == "high":
        try:
            os.setpriority(os.PRIO_PROCESS, 0, NICE_HIGH)
        except OSError as exc:
            warn(
                f"high priority (nice {NICE_HIGH}) not permitted{where} ({exc.strerror}); "
                "running at nice 0"
            )
    if memory_mb:
        limit = memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
