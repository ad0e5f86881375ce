"""What the supervisor knows of each instance of a mission (`Instance`), and the states that
count as alive."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from mcc.types import SystemState

S = SystemState
#: The states of an instance that has a process (or is getting one).
LIVE = (S.SYSTEM_STARTING, S.SYSTEM_RUNNING, S.SYSTEM_DEGRADED)


@dataclass
class Instance:
    """What the supervisor knows of one instance (``mission/system/index``)."""

    id: str
    system: str
    index: int
    queued_mono: float
    state: SystemState = S.SYSTEM_PENDING
    pid: int = 0
    host: str = ""
    node: str = ""
    cpu_set: tuple[int, ...] = ()
    device: str = "cpu"
    restarts: int = 0
    failures_in_row: int = 0
    reason: str = ""
    since_ns: int = field(default_factory=time.time_ns)
    started_mono: float = 0.0
    last_beat_mono: float | None = None
    next_start_mono: float = 0.0
    killing: bool = False
    restart_requested: bool = False

    def set_state(self, state: SystemState, reason: str | None = None) -> None:
        if state != self.state:
            self.state = state
            self.since_ns = time.time_ns()
        if reason is not None:
            self.reason = reason
