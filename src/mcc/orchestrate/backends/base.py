"""What a backend does for the supervisor: start, stop and watch system instances.

The supervisor decides *what* runs (phases, clusters, restart policy, health); a backend
decides *how* a planned instance becomes a running process: a forked local process
(``local``) or a Ray actor (``ray``). A backend never restarts anything on its own
initiative except where its engine does it natively (Ray actor restarts after a node loss),
and it reports every exit as an ``ExitEvent``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from mcc.bus.transport import Transport
from mcc.security.confine import Confinement


@dataclass(frozen=True)
class LaunchSpec:
    """One instance to start: the argv, its environment and the resources it was given."""

    instance_id: str  # mission/system/index
    system: str
    index: int
    argv: tuple[str, ...]  # full command line; apps run `python -m mcc.orchestrate.runtime ...`
    env: Mapping[str, str]  # complete environment of the instance
    log_path: str
    node: str = "local"
    cpus: float = 1.0
    cpu_set: tuple[int, ...] = ()  # cores to pin to; empty = not pinned
    priority: str = "normal"  # normal | high | realtime
    memory_mb: int | None = None
    gpu: str = "none"  # none | shared | exclusive
    gpu_ids: tuple[int, ...] = ()  # devices given to an exclusive instance
    placement_group: str | None = None  # virtual cluster name, for backends that group
    placement: str = "pack"  # pack | spread
    labels: Mapping[str, float] = field(default_factory=dict)  # custom resources (Ray)
    #: What the process may reach (`mcc.security.confine`), applied in the child before the
    #: app or command runs; None: not confined.
    confinement: Confinement | None = None
    #: A secured mission: the instance's own identity (file name → content,
    #: `mcc.security.Identity.bundle`), which the backend writes into a private folder of the
    #: instance's host (`mcc.files.write_private_folder`) and names in ``MCC_IDENTITY_DIR``
    #: (removed when the instance exits); never in the
    #: environment, argv, a log or a status (not in ``repr``).
    identity: Mapping[str, bytes] | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Running:
    """Where an instance runs, as the backend knows it."""

    instance_id: str
    pid: int
    host: str
    node: str
    started_ns: int


@dataclass(frozen=True)
class ExitEvent:
    """An instance ended: its return code (negative = killed by that signal)."""

    instance_id: str
    pid: int
    returncode: int | None  # None: unknown (it ended while adopted, not a child of ours)
    time_ns: int


@dataclass(frozen=True)
class Warning_:
    """Something the backend could not apply as asked (e.g. realtime priority not permitted)."""

    instance_id: str
    message: str


@dataclass(frozen=True)
class Leadership:
    """What a supervisor learns from its node agent on connecting, or on being promoted."""

    active: bool  # this supervisor may command; otherwise it stands by
    epoch: int  # the fencing epoch: +1 at every change of active supervisor
    active_pid: int  # the active supervisor's pid (this one's when active)
    instances: tuple[Running, ...] = ()  # running now: to adopt, not to restart
    state: Any = None  # what the previous active left: its desired state
    exits: tuple[ExitEvent, ...] = ()  # instances that ended while nobody was active


class Backend(Protocol):
    """The interface every backend implements (``local``, ``ray``): all the supervisor calls.

    A backend subclasses it: the methods with a body here are defaults (no pinned cores, no
    GPUs, no replication) that a backend overrides where it has more to offer. The callbacks are
    set by the supervisor before `lead` and run on the backend's thread.

    Replication: a backend whose processes outlive their supervisor (``local``: the node
    agent) is shared by the supervisors of one mission, of which exactly one is active
    (`Leadership.active`). ``on_promoted(leadership)`` runs when this supervisor becomes
    active, ``on_fenced(epoch)`` when another one took over, ``on_shutdown()`` when the active
    one stopped the mission. A backend without replication returns None from `lead`.
    """

    name: str
    #: Called (no arguments) on every exit, so the supervisor reconciles without waiting a tick.
    on_event: Callable[[], None] | None = None
    on_promoted: Callable[[Leadership], None] | None = None
    on_fenced: Callable[[int], None] | None = None
    on_shutdown: Callable[[], None] | None = None

    def open(self) -> None:
        """Acquire what the backend needs (fork server, Ray connection)."""
        ...

    def capacity(self) -> Mapping[str, float]:
        """CPUs per node the planner may place on, e.g. ``{"local": 2.0}``."""
        ...

    def transport(self) -> Transport | None:
        """The transport of this host's processes that the backend decided (the local
        backend's network lab: its bridge); None: the environment's."""
        return None

    def cores(self) -> Mapping[str, list[int]]:
        """The cores of each node that instances may be pinned to; none: nothing pinned."""
        return {}

    def gpus(self) -> Mapping[str, list[int]]:
        """The GPU ids of each node that ``gpu: exclusive`` instances may have; none: none."""
        return {}

    def start(self, spec: LaunchSpec) -> Running:
        """Start one instance; raise ``OrchestratorError`` if it cannot be started."""
        ...

    def stop(self, instance_id: str, *, grace_s: float) -> None:
        """SIGTERM, then SIGKILL after ``grace_s``; returns without waiting for the exit event."""
        ...

    def kill(self, instance_id: str) -> None:
        """SIGKILL now (a stuck instance)."""
        ...

    def poll(self) -> list[ExitEvent]:
        """Exits since the last call."""
        ...

    def where(self, instance_id: str) -> Running | None:
        """Where the instance runs now (after a backend-side restart, the new place)."""
        ...

    def warnings(self) -> list[Warning_]:
        """Warnings since the last call."""
        ...

    def close(self) -> None:
        """Stop every instance still running and release the backend; no orphans."""
        ...

    def preload(self, modules: Sequence[str]) -> None:
        """Before `lead`: modules (the mission's apps) to import once where instances start,
        so that a restarted instance need not import its app; the default has nowhere to."""
        return None

    # -- replication: the defaults are a backend of one supervisor --------------------------

    def lead(self) -> Leadership | None:
        """Open the backend as a supervisor's: a replicated backend says whether it is the
        active one (else it stands by); the default opens it and returns None (always active)."""
        self.open()
        return None

    def claim(self, expect_epoch: int) -> bool:
        """Take over from an active supervisor that is cut off (compare-and-set on the epoch:
        refused if anything changed since ``expect_epoch`` was seen)."""
        return False

    def save_state(self, state: Any) -> None:
        """Leave the desired state with the agent, for the next active supervisor."""
        return None

    def confirm(self, *, timeout_s: float = 1.0) -> bool:
        """Whether this supervisor is still the active one (a round trip to the agent)."""
        return True
