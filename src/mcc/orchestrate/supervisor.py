"""The supervisor: keeps a mission's instances running as the manifest and the operator ask.

It owns the desired state (phase, cluster sizes, systems stopped by hand) and reconciles the
running instances to it every tick: places and starts what is missing (or queues it when the
pool is full), stops what is no longer wanted, restarts by policy what exited, and kills what
went silent (no ``Heartbeat`` within the health timeout). It publishes ``MissionStatus``
(transient-local) and answers ``Command``s, so ``mcc status|scale|phase|stop|start|logs|down``
work from any terminal on the same domain. The backend (local processes or Ray) only
starts, stops and watches processes.

Supervisors are replicated (local backend): a second ``mcc up`` of a running mission stands
by. The node agent decides which one is active, with a fencing epoch (see
`mcc.orchestrate.agent`): when the active one dies the agent promotes the standby at once,
and it adopts every running instance and the desired state (phase, sizes, stopped systems,
restart counts) without restarting anything. Every supervisor beats on ``Heartbeat`` every
0.1 s (``MISSION/supervisor/PID``: RUNNING when active, STARTING when standing by); a standby
that hears the mission's instances but not the active supervisor for ``lease_s`` (a partition
cut it off) claims, and the agent fences the old active: it can no longer start or kill
anything, stops answering and exits.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcc.bus import Bus, HeartbeatPublisher, Reader, Replier, Transport
from mcc.bus.rpc import COMMAND_CHANNEL
from mcc.errors import MccError, OrchestratorError
from mcc.lifecycle import Service
from mcc.orchestrate import registry
from mcc.orchestrate.backends.base import Backend, ExitEvent, LaunchSpec, Leadership
from mcc.orchestrate.manifest import Cluster, Mission, System
from mcc.orchestrate.planner import Planner
from mcc.orchestrate.runtime import RUNTIME_ARGV
from mcc.orchestrate.services import mission_transports, system_topics, with_services
from mcc.settings import child_env, env_name
from mcc.types import Command, CommandReply, Heartbeat, MissionStatus, SystemEntry, SystemState

if TYPE_CHECKING:
    from mcc.security import Identity
    from mcc.security.mission import Topics

log = logging.getLogger("mcc.orchestrate")
S = SystemState
LIVE = (S.SYSTEM_STARTING, S.SYSTEM_RUNNING, S.SYSTEM_DEGRADED)
#: A supervisor's heartbeat period, and how long a standby waits for a silent active one
#: (while it hears the mission's instances) before it claims.
SUPERVISOR_BEAT_S = 0.1
LEASE_S = 1.5
#: A new standby has not discovered everyone yet: no claim in its first seconds.
STANDBY_GRACE_S = 3.0


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


class Supervisor(Service):
    """Run ``mission`` on ``backend`` until ``down()`` (or the end of ``run``'s duration)."""

    def __init__(
        self,
        mission: Mission,
        *,
        backend: Backend,
        run_dir: Path,
        phase: str | None = None,
        bus: Bus | None = None,
        tick_s: float = 0.05,
        status_period_s: float = 1.0,
        watch: Topics | None = None,
        transport: Transport | None = None,
    ) -> None:
        """``watch``: what the process running this supervisor also reads on the supervisor's
        bus (a job launcher watching results) when the mission is secured. Cyclone DDS gives a
        process one identity per domain, so such a watcher shares the supervisor's.
        ``transport``: the base transport of the mission's processes (default: this process's
        environment, ``MCC_TRANSPORT``); given, every process of the mission gets it."""
        if phase is not None and phase not in mission.phases:
            raise OrchestratorError(
                f"phase {phase!r} is not a phase of mission {mission.mission!r}; "
                f"its phases are: {', '.join(mission.phases)}"
            )
        gpus = backend.gpus()
        self.mission = mission = with_services(mission, gpus_available=any(gpus.values()))
        self.backend = backend
        self.run_dir = Path(run_dir)
        self.phase = phase or mission.phases[0]
        self.tick_s = tick_s
        self.status_period_s = status_period_s
        self.systems = mission.all_systems()
        self.order = mission.start_order()
        self.sizes = {
            name: (s.size if isinstance(s, Cluster) else s.replicas)
            for name, s in self.systems.items()
        }
        self.disabled: set[str] = set()
        self.instances: dict[str, Instance] = {}
        self.events: list[tuple[int, str, str]] = []  # (time_ns, instance id, what)
        self.state = S.SYSTEM_STARTING
        self.epoch_ns = time.time_ns() - time.time_ns() % 1_000_000_000 + 1_000_000_000
        self._going_down = False
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._done = threading.Event()
        self._own_bus = bus is None
        self._bus = bus
        self._planner: Planner | None = None
        self._thread: threading.Thread | None = None
        self._last_status = 0.0
        self._status_dirty = True
        self._readers: list[Reader[Any]] = []
        # Bounded: a flood of beats cannot grow it (the loop keeps up long before that).
        self._beats: deque[tuple[float, int, Heartbeat]] = deque(maxlen=65536)
        self._roudi: Any = None  # mcc.bus.shm.RouDi, when this supervisor started the host's
        transports = mission_transports(mission, transport or Transport.from_env())
        if transports is None and transport is not None:
            transports = (transport, transport)
        self._transport = transports[0] if transports else None
        #: What every other process of the mission (clients included) needs in its environment.
        self.client_env = transports[1].apply_to_env({}) if transports else {}
        self._instance_base = transports[1] if transports else None
        self._system_topics: dict[str, Topics] = {}  # secured: what each system may do
        self._watch = watch
        self.keystore: Path | None = None
        #: The environment of the mission's web console (its identity when secured).
        self.console_env = self.client_env
        #: active | standby | fenced (another supervisor took over: this one stops).
        self.role = "active"
        self.epoch = 0  # the node agent's fencing epoch of this supervisor's leadership
        self.lease_s = LEASE_S
        self.fenced = threading.Event()
        self._started = threading.Event()
        self._replier: Replier[Command, CommandReply] | None = None
        self._beat: HeartbeatPublisher | None = None
        self._peers: dict[str, tuple[float, Heartbeat]] = {}  # other supervisors' last beats
        self._mission_beat_mono = 0.0  # last beat of any instance of the mission
        self._heard_mono = 0.0  # last beat of anyone of the mission but this supervisor
        self._deaf = False
        self._standby_since = 0.0
        self._last_claim = 0.0
        self._saved_state: Any = None

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> Supervisor:
        """Open the backend and the bus, then reconcile in a background thread (or stand by
        when another supervisor of the mission is active)."""
        registry.private_dir(self.run_dir)
        registry.private_dir(self.run_dir / "logs")
        if self.mission.security == "on" and self.keystore is None:
            self.secure()
        if self.mission.transport.kind == "shm":
            from mcc.bus.shm import RouDi

            self._roudi = RouDi.ensure(log_path=self.run_dir / "logs" / "iox-roudi.log")
        if self._bus is None:
            self._bus = Bus(
                self.mission.domain,
                transport=self._transport,
                name=f"mcc supervisor {self.mission.mission}",
            )
        bus = self._bus
        self._status_writer = bus.writer("MissionStatus")
        self._readers.append(bus.reader("Heartbeat", on_data=self._on_heartbeats))
        backend = self.backend
        backend.on_event = self._wake.set
        backend.on_promoted = self._on_promoted
        backend.on_fenced = self._on_fenced
        backend.on_shutdown = self._on_shutdown
        leadership = backend.lead()  # None: a backend of one supervisor, opened and active
        self._planner = Planner(backend.capacity(), cores=backend.cores(), gpus=backend.gpus())
        self._beat = HeartbeatPublisher(
            bus,
            f"{self.mission.mission}/supervisor/{os.getpid()}",
            period_s=SUPERVISOR_BEAT_S,
            state=S.SYSTEM_STARTING,
        )
        with self._lock:
            if leadership is None or leadership.active:
                self._activate(leadership)
            else:
                self.role = "standby"
                self.epoch = leadership.epoch
                self._standby_since = time.monotonic()
                self._beat.message = f"standby epoch {self.epoch}"
                log.warning(
                    "mission %s: supervisor pid %d is active (epoch %d); this one stands by",
                    self.mission.mission,
                    leadership.active_pid,
                    leadership.epoch,
                )
        self._beat.start()
        self._thread = threading.Thread(target=self._loop, name="mcc-supervisor", daemon=True)
        self._thread.start()
        self._started.set()
        return self

    # -- leadership (replicated supervisors) --------------------------------------------

    def _activate(self, leadership: Leadership | None) -> None:
        """Under the lock: become the active supervisor, adopting what runs."""
        self.role = "active"
        self.epoch = leadership.epoch if leadership is not None else 0
        if leadership is not None and (leadership.instances or leadership.state):
            self._adopt(leadership)
        if self._beat is not None:
            self._beat.state = S.SYSTEM_RUNNING
            self._beat.message = f"active epoch {self.epoch}"
        if self._replier is None:
            self._replier = Replier[Command, CommandReply](
                self.bus,
                self._handle,
                replier_id=f"supervisor:{self.mission.mission}",
                channel=COMMAND_CHANNEL,
            ).start()
        registry.register(self)
        self._status_dirty = True

    def _adopt(self, leadership: Leadership) -> None:
        """Take over the running instances and the desired state another supervisor left."""
        assert self._planner is not None
        state = leadership.state if isinstance(leadership.state, dict) else {}
        same = state.get("fingerprint") == self._fingerprint()
        if state and not same:
            log.warning(
                "mission %s: the manifest changed since the running instances were started: "
                "they are restarted with the new one",
                self.mission.mission,
            )
        if same:
            self._restore(state)
        metas = state.get("instances") if same else None
        metas = metas if isinstance(metas, dict) else {}
        now = time.monotonic()
        for running in leadership.instances:
            mission, _, rest = running.instance_id.partition("/")
            name, _, index_text = rest.rpartition("/")
            system = self.systems.get(name)
            if mission != self.mission.mission or system is None or not index_text.isdigit():
                log.warning("%s is not of this mission: stopping it", running.instance_id)
                self.backend.kill(running.instance_id)
                continue
            meta = metas.get(running.instance_id)
            meta = meta if isinstance(meta, dict) else {}
            inst = Instance(running.instance_id, name, int(index_text), now)
            inst.pid, inst.host, inst.node = running.pid, running.host, running.node
            inst.cpu_set = tuple(int(c) for c in meta.get("cpu_set", ()))
            inst.device = str(meta.get("device", "cpu"))
            inst.restarts = int(meta.get("restarts", 0))
            inst.started_mono = now - float(meta.get("ran_s", 0.0))
            inst.last_beat_mono = now  # its health counts from the adoption
            inst.set_state(S.SYSTEM_RUNNING, "adopted")
            group = name if isinstance(system, Cluster) else None
            gpu_ids = tuple(int(g) for g in meta.get("gpu_ids", ()))
            self._planner.adopt(
                inst.id, system, running.node, cpu_set=inst.cpu_set, gpu_ids=gpu_ids, group=group
            )
            self.instances[inst.id] = inst
            self._event(inst.id, f"adopted (pid {inst.pid}, epoch {self.epoch})")
            if not same:
                self.backend.stop(inst.id, grace_s=self.mission.stop_grace_s)
                inst.set_state(S.SYSTEM_STOPPING, "manifest changed")
        log.warning(
            "mission %s: supervisor pid %d active (epoch %d): adopted %d running instances",
            self.mission.mission,
            os.getpid(),
            self.epoch,
            len(leadership.instances),
        )

    def _fingerprint(self) -> str:
        """What must not change for a supervisor to adopt the previous one's instances."""
        import hashlib

        text = self.mission.model_dump_json()
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def _restore(self, state: dict[str, Any]) -> None:
        phase = state.get("phase")
        if phase in self.mission.phases:
            self.phase = phase
        sizes = state.get("sizes")
        if isinstance(sizes, dict):
            for name, size in sizes.items():
                if name in self.sizes and isinstance(size, int) and size >= 0:
                    self.sizes[name] = size
        disabled = state.get("disabled")
        if isinstance(disabled, list):
            self.disabled = {d for d in disabled if d in self.systems}
        if isinstance(state.get("epoch_ns"), int):
            self.epoch_ns = state["epoch_ns"]
        if isinstance(state.get("run_dir"), str) and state["run_dir"]:
            self.run_dir = Path(state["run_dir"])

    def _desired_state(self) -> dict[str, Any]:
        now = time.monotonic()
        return {
            "fingerprint": self._fingerprint(),
            "phase": self.phase,
            "sizes": dict(self.sizes),
            "disabled": sorted(self.disabled),
            "epoch_ns": self.epoch_ns,
            "run_dir": str(self.run_dir.resolve()),
            "instances": {
                i.id: {
                    "cpu_set": list(i.cpu_set),
                    "gpu_ids": list(p.gpu_ids) if (p := self._placement(i.id)) else [],
                    "device": i.device,
                    "restarts": i.restarts,
                    "ran_s": round(now - i.started_mono, 1) if i.started_mono else 0.0,
                }
                for i in self.instances.values()
                if i.pid
            },
        }

    def _placement(self, instance_id: str) -> Any:
        return self._planner.placement(instance_id) if self._planner is not None else None

    def _save_state(self) -> None:
        state = self._desired_state()
        instances = state["instances"]
        comparable = {**state, "instances": {k: {**v, "ran_s": 0} for k, v in instances.items()}}
        if comparable != self._saved_state:
            self._saved_state = comparable
            try:
                self.backend.save_state(state)
            except OrchestratorError as exc:
                log.warning("cannot leave the desired state with the node agent: %s", exc)

    def _on_promoted(self, leadership: Leadership) -> None:
        """The backend's thread: the active supervisor is gone, this one takes over."""
        self._started.wait(30.0)  # promoted while still starting: once the planner exists
        with self._lock:
            if self.role == "active" or self._done.is_set():
                return
            self._activate(leadership)
        self._wake.set()

    def _on_fenced(self, epoch: int) -> None:
        """The backend's thread: another supervisor took over (epoch ``epoch``)."""
        with self._lock:
            if self.role == "fenced":
                return
            self.role = "fenced"
            self.epoch = epoch
        log.error(
            "mission %s: supervisor epoch %d took over; this one (pid %d) no longer commands "
            "and leaves",
            self.mission.mission,
            epoch,
            os.getpid(),
        )
        if self._beat is not None:
            self._beat.state = S.SYSTEM_STOPPED
            self._beat.message = f"fenced by epoch {epoch}"
        replier, self._replier = self._replier, None
        if replier is not None:
            replier.stop()
        registry.unregister(self)
        self.fenced.set()
        self._done.set()

    def _on_shutdown(self) -> None:
        """The backend's thread: the active supervisor stopped the mission."""
        log.info("mission %s stopped by the active supervisor", self.mission.mission)
        self._done.set()

    def _watch_active(self, now: float) -> None:
        """A standby: claim when the active supervisor is silent while the mission is not."""
        active = [(t, hb) for t, hb in self._peers.values() if hb.state == S.SYSTEM_RUNNING]
        last_active = max((t for t, _ in active), default=self._standby_since)
        for _, hb in active:
            epoch = _epoch_of(hb)
            if epoch is not None and epoch > self.epoch:
                self.epoch = epoch
        if now - self._standby_since < STANDBY_GRACE_S or now - last_active < self.lease_s:
            return
        if now - self._mission_beat_mono > self.lease_s or now - self._last_claim < self.lease_s:
            return  # nothing heard at all: this standby is the one cut off
        self._last_claim = now
        log.warning(
            "mission %s: the active supervisor is silent for %.1f s while the instances "
            "beat: claiming (epoch %d)",
            self.mission.mission,
            now - last_active,
            self.epoch,
        )
        self.backend.claim(self.epoch)

    def run(self, *, duration_s: float | None = None, stop: threading.Event | None = None) -> None:
        """Block until ``down`` is asked for, ``stop`` is set or ``duration_s`` has passed."""
        deadline = None if duration_s is None else time.monotonic() + duration_s
        while not self._done.is_set():
            if stop is not None and stop.is_set():
                break
            if deadline is not None and time.monotonic() >= deadline:
                break
            self._done.wait(0.1)
        self.close()

    def secure(self) -> None:
        """Identities for this supervisor and the console from the mission's keystore
        (``$MCC_HOME/keystores/MISSION``, created on first use), and the permissions of every
        system, for the identity each instance gets at its start; `start` calls it for a
        ``security: on`` mission unless done already (the demo does it before its console)."""
        from mcc.security.mission import CONSOLE, SUPERVISOR, mission_identities

        self.keystore = registry.home() / "keystores" / self.mission.mission
        identities = mission_identities(
            self.keystore,
            mission=self.mission.mission,
            domain=self.mission.domain,
            supervisor_watches=self._watch,
            protection=self.mission.protection,
        )
        self._system_topics = system_topics(self.mission)
        # The instances' base transport, fixed now: the process environment may carry the
        # console's identity later (the demo's console runs in this process).
        self._instance_base = self._instance_base or Transport.from_env()
        self._transport = _secured(self._transport, identities[SUPERVISOR])
        self.console_env = _secured(self._instance_base, identities[CONSOLE]).apply_to_env({})

    def _identity_env(self, inst: Instance) -> dict[str, str]:
        """A secured mission: the environment that carries ``inst``'s own, fresh identity."""
        if self.keystore is None:
            return {}
        from mcc.security.mission import instance_identity

        identity = instance_identity(
            self.keystore,
            mission=self.mission.mission,
            domain=self.mission.domain,
            system=inst.system,
            index=inst.index,
            topics=self._system_topics[inst.system],
        )
        env = _secured(self._instance_base, identity).apply_to_env({})
        return child_env(env, grants_at=self.mission.where(inst.system))

    def close(self) -> None:
        """Active: stop every instance gracefully, publish the final status, release
        everything. Standby or fenced: leave, stopping nothing."""
        if self.role != "active":
            self._done.set()
            if self._thread is not None and self._thread is not threading.current_thread():
                self._thread.join(5.0)
            self._release()
            return
        with self._lock:
            self._going_down = True
            self.state = S.SYSTEM_STOPPING
        self._wake.set()
        deadline = time.monotonic() + self.mission.stop_grace_s + 3.0
        while time.monotonic() < deadline and self._any(
            lambda i: i.pid and i.state != S.SYSTEM_STOPPED
        ):
            time.sleep(0.05)
        self._done.set()
        if self._thread is not None:
            self._thread.join(5.0)
        self.backend.close()
        with self._lock:
            for inst in self.instances.values():
                if inst.state not in (S.SYSTEM_FAILED,):
                    inst.set_state(S.SYSTEM_STOPPED)
            self.state = S.SYSTEM_STOPPED
        self._publish_status()
        self._write_summary()
        registry.unregister(self)
        self._release()

    def _release(self) -> None:
        if self.role != "active":
            self.backend.close()  # a standby's or fenced one's: leaves, stops nothing
        if self._beat is not None:
            self._beat.stop(final_state=S.SYSTEM_STOPPED)
        if self._replier is not None:
            self._replier.stop()
        if self._own_bus and self._bus is not None:
            self._bus.close()
        if self._roudi is not None and self.role == "active":  # after every process using it
            self._roudi.stop()

    def stop(self) -> None:
        """`close`, unless the supervisor is closed already (``with Supervisor(...)``: started
        on entry, stopped on exit)."""
        if not self._done.is_set():
            self.close()

    @property
    def bus(self) -> Bus:
        assert self._bus is not None, "start() the supervisor first"
        return self._bus

    # -- operator actions (also reachable as Commands) ----------------------------------

    def scale(self, cluster: str, size: int) -> None:
        spec = self.mission.clusters.get(cluster)
        if spec is None:
            raise OrchestratorError(
                f"{cluster!r} is not a virtual cluster of {self.mission.mission!r}; "
                f"clusters: {', '.join(self.mission.clusters) or 'none'}"
            )
        if not spec.min <= size <= spec.max:
            raise OrchestratorError(
                f"cluster {cluster!r}: size {size} is outside [min, max] = "
                f"[{spec.min}, {spec.max}] (change min/max in the manifest)"
            )
        with self._lock:
            self.sizes[cluster] = size
            self._event(cluster, f"scale {size}")
        self._wake.set()

    def set_phase(self, phase: str) -> None:
        if phase not in self.mission.phases:
            raise OrchestratorError(
                f"phase {phase!r} is not a phase of {self.mission.mission!r}; "
                f"phases: {', '.join(self.mission.phases)}"
            )
        with self._lock:
            self.phase = phase
            self._event("", f"phase {phase}")
        self._wake.set()

    def stop_system(self, name: str) -> None:
        self._check_system(name)
        with self._lock:
            self.disabled.add(name)
        self._wake.set()

    def start_system(self, name: str) -> None:
        self._check_system(name)
        with self._lock:
            self.disabled.discard(name)
            for inst in list(self.instances.values()):  # a failed system gets a fresh start
                if inst.system == name and inst.state in (S.SYSTEM_FAILED, S.SYSTEM_STOPPED):
                    self._forget(inst)
        self._wake.set()

    def restart(self, target: str) -> list[str]:
        """Restart an instance (``system/index`` or its full id) or every instance of a system."""
        with self._lock:
            chosen = [
                i
                for i in self.instances.values()
                if target in (i.id, i.system, f"{i.system}/{i.index}") and i.state in LIVE
            ]
            if not chosen:
                raise OrchestratorError(f"no running instance matches {target!r}")
            for inst in chosen:
                inst.restart_requested = True
                self.backend.stop(inst.id, grace_s=self.mission.stop_grace_s)
            return [i.id for i in chosen]

    def down(self) -> None:
        with self._lock:
            self._going_down = True
            self.state = S.SYSTEM_STOPPING
        self._wake.set()

    def log_path(self, target: str) -> Path:
        system, _, index = target.partition("/")
        self._check_system(system)
        return self.run_dir / "logs" / f"{system}-{int(index or 0)}.log"

    # -- reconciliation ----------------------------------------------------------------

    def _loop(self) -> None:
        while not self._done.is_set():
            if self.role != "active":
                now = time.monotonic()
                with self._lock:
                    self._apply_heartbeats()
                if self.role == "standby":
                    self._watch_active(now)
                self._wake.wait(self.tick_s)
                self._wake.clear()
                continue
            try:
                self._reconcile()
            except Exception:  # the supervisor must outlive a bug in one step
                log.exception("reconcile step failed")
            if self._going_down and not self._any(lambda i: i.pid and i.state != S.SYSTEM_STOPPED):
                if not self._done.is_set():
                    self._publish_status()
                self._done.set()
                return
            self._wake.wait(self.tick_s)
            self._wake.clear()

    def _reconcile(self) -> None:
        now = time.monotonic()
        if self._roudi is not None and self._roudi.watch():
            self.events.append((time.time_ns(), "iox-roudi", "restarted"))
        with self._lock:
            self._apply_heartbeats()
            for event in self.backend.poll():
                self._on_exit(event, now)
            for warning in self.backend.warnings():
                log.warning("%s: %s", warning.instance_id, warning.message)
                inst = self.instances.get(warning.instance_id)
                if inst is not None:
                    inst.reason = warning.message
                    self._status_dirty = True
            desired = self._desired()
            for inst in list(self.instances.values()):
                if inst.id not in desired:
                    self._retire(inst)
            for instance_id, (name, index) in desired.items():
                if instance_id not in self.instances:
                    self.instances[instance_id] = Instance(instance_id, name, index, now)
                    self._status_dirty = True
            self._check_health(now)
            self._start_pending(now)
            self._refresh_locations()
            self._save_state()
        if self._status_dirty or now - self._last_status >= self.status_period_s:
            self._publish_status()

    def _desired(self) -> dict[str, tuple[str, int]]:
        if self._going_down:
            return {}
        wanted: dict[str, tuple[str, int]] = {}
        for name in self.order:
            if name in self.disabled or not self.mission.runs_in(name, self.phase):
                continue
            for index in range(self.sizes[name]):
                wanted[f"{self.mission.mission}/{name}/{index}"] = (name, index)
        return wanted

    def _retire(self, inst: Instance) -> None:
        """An instance no longer wanted: stop it, or forget it if it has no process."""
        if inst.state in LIVE and inst.pid:
            self.backend.stop(inst.id, grace_s=self.mission.stop_grace_s)
            inst.set_state(S.SYSTEM_STOPPING, "not wanted in this phase/size")
            self._status_dirty = True
        elif inst.state == S.SYSTEM_STOPPING:
            pass  # its exit event will come
        elif not (self._going_down and inst.state in (S.SYSTEM_STOPPED, S.SYSTEM_FAILED)):
            self._forget(inst)

    def _forget(self, inst: Instance) -> None:
        assert self._planner is not None
        self._planner.release(inst.id)
        self.instances.pop(inst.id, None)
        self._status_dirty = True

    def _on_exit(self, event: ExitEvent, now: float) -> None:
        inst = self.instances.get(event.instance_id)
        if inst is None or inst.pid != event.pid:
            return
        self._status_dirty = True
        self._event(inst.id, f"exit {event.returncode}")
        inst.pid = 0
        how = _describe_exit(event.returncode)
        if inst.state == S.SYSTEM_STOPPING or inst.id not in self._desired():
            inst.set_state(S.SYSTEM_STOPPED, f"stopped ({how})")
            if self._going_down:  # keep it for the final status and summary
                assert self._planner is not None
                self._planner.release(inst.id)
            else:
                self._forget(inst)
            return
        system = self.systems[inst.system]
        policy = system.restart
        failed = event.returncode != 0 or inst.killing
        if inst.restart_requested:
            inst.restart_requested = False
            inst.restarts += 1
            inst.set_state(S.SYSTEM_PENDING, f"restart requested ({how})")
            inst.next_start_mono = now
            return
        if policy.policy == "never" or (policy.policy == "on-failure" and not failed):
            state = S.SYSTEM_FAILED if failed else S.SYSTEM_STOPPED
            inst.set_state(state, f"{how}; restart policy {policy.policy}")
            assert self._planner is not None
            self._planner.release(inst.id)
            return
        if inst.restarts >= policy.max_restarts:
            inst.set_state(
                S.SYSTEM_FAILED,
                f"{how}; gave up after {inst.restarts} restarts (restart.max_restarts)",
            )
            assert self._planner is not None
            self._planner.release(inst.id)
            return
        ran_s = now - inst.started_mono
        inst.failures_in_row = 1 if ran_s >= policy.stable_s else inst.failures_in_row + 1
        delay = (
            0.0
            if inst.failures_in_row == 1
            else min(policy.backoff_s * 2 ** (inst.failures_in_row - 2), policy.backoff_max_s)
        )
        inst.restarts += 1
        inst.next_start_mono = now + delay
        inst.set_state(S.SYSTEM_PENDING, f"{how}; restart {inst.restarts} in {delay:.2f} s")
        log.warning("%s %s; restarting in %.2f s", inst.id, how, delay)

    def _check_health(self, now: float) -> None:
        if self._heard_mono and now - self._heard_mono > self.lease_s:
            # Not one beat of anyone (instances, other supervisors) for a lease: this
            # supervisor is more likely cut off than every instance hung at once. Killing
            # them would only make the standby, which may hear them, adopt fresh restarts.
            if not self._deaf:
                self._deaf = True
                log.warning(
                    "mission %s: no heartbeat heard for %.1f s: this supervisor may be cut off "
                    "the network; it kills nothing for silence until it hears again",
                    self.mission.mission,
                    now - self._heard_mono,
                )
            return
        self._deaf = False
        for inst in self.instances.values():
            system = self.systems[inst.system]
            if inst.state not in LIVE or not inst.pid or inst.killing or not system.uses_heartbeat:
                continue
            if inst.last_beat_mono is None:
                if now - inst.started_mono > system.health.startup_s:
                    self._kill(inst, f"no heartbeat within {system.health.startup_s:g} s of start")
            elif now - inst.last_beat_mono > system.health.timeout_s:
                silent = now - inst.last_beat_mono
                self._kill(inst, f"silent for {silent:.1f} s (health.timeout_s)")

    def _kill(self, inst: Instance, reason: str) -> None:
        log.warning("%s: %s; killing it", inst.id, reason)
        inst.killing = True
        inst.reason = reason
        self._event(inst.id, f"kill: {reason}")
        self.backend.kill(inst.id)

    def _start_pending(self, now: float) -> None:
        assert self._planner is not None
        queue = sorted(
            (i for i in self.instances.values() if i.state == S.SYSTEM_PENDING),
            key=lambda i: (i.queued_mono, self.order.index(i.system), i.index),
        )
        blocked = False
        for position, inst in enumerate(queue):
            system = self.systems[inst.system]
            if inst.next_start_mono > now:
                continue
            waiting = [d for d in system.after if not self._ready(d)]
            if waiting:
                inst.reason = f"waiting for {', '.join(waiting)} to run"
                continue
            placement = self._planner.placement(inst.id)
            if placement is None and not blocked:
                impossible = self._planner.impossible(system)
                if impossible:
                    inst.set_state(S.SYSTEM_FAILED, f"cannot be placed: {impossible}")
                    self._status_dirty = True
                    continue
                group = inst.system if isinstance(system, Cluster) else None
                placement = self._planner.place(inst.id, system, group=group)
            if placement is None:
                blocked = True  # strict FIFO: later requests wait behind this one
                free = {n.name: round(n.free, 3) for n in self._planner.nodes.values()}
                reason = (
                    f"queued ({position + 1}): needs {system.resources.cpus:g} CPU; free {free}"
                )
                if inst.reason != reason:
                    inst.reason = reason
                    self._status_dirty = True
                continue
            self._launch(inst, system, placement.node, placement.cpu_set, placement.gpu_ids)

    def _launch(
        self,
        inst: Instance,
        system: System,
        node: str,
        cpu_set: tuple[int, ...],
        gpu_ids: tuple[int, ...],
    ) -> None:
        spec = self._launch_spec(inst, system, node, cpu_set, gpu_ids)
        try:
            running = self.backend.start(spec)
        except (OrchestratorError, OSError, TimeoutError) as exc:
            inst.set_state(S.SYSTEM_FAILED, f"backend could not start it: {exc}")
            self._status_dirty = True
            return
        inst.pid, inst.host, inst.node = running.pid, running.host, running.node
        inst.cpu_set, inst.device = cpu_set, spec.env[env_name("device")]
        inst.started_mono = time.monotonic()
        inst.last_beat_mono = None
        inst.killing = False
        running_now = not system.uses_heartbeat
        inst.set_state(S.SYSTEM_RUNNING if running_now else S.SYSTEM_STARTING, "")
        self._event(inst.id, "start")
        self._status_dirty = True

    def _launch_spec(
        self,
        inst: Instance,
        system: System,
        node: str,
        cpu_set: tuple[int, ...],
        gpu_ids: tuple[int, ...],
    ) -> LaunchSpec:
        mission = self.mission
        device = {"none": "cpu", "shared": "remote:compute", "exclusive": "cuda:0"}
        cluster = isinstance(system, Cluster)
        env = child_env(
            {
                **os.environ,
                **self.client_env,
                **self._identity_env(inst),
                **mission.env,
                **system.env,
            },
            mission=mission.mission,
            system=inst.system,
            index=inst.index,
            instance_id=inst.id,
            domain=mission.domain,
            run_dir=self.run_dir.resolve(),
            phase=self.phase,
            epoch_ns=self.epoch_ns,
            device=device[system.resources.gpu],
            heartbeat_period_s=min(1.0, system.health.timeout_s / 3),
            ray_max_restarts=0 if system.restart.policy == "never" else system.restart.max_restarts,
            cluster=inst.system if cluster else None,
            cluster_size=self.sizes[inst.system] if cluster else None,
        )
        if gpu_ids:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpu_ids))
        if system.app is not None:
            argv = (*RUNTIME_ARGV, system.app, *system.args)
        else:
            assert system.command is not None
            argv = (*system.command, *system.args)
        labels: dict[str, float] = {}  # only a system tied to a node is tied to its labels:
        if system.node is not None:  # the others may move when their node is lost (Ray)
            for manifest_node in mission.nodes:
                if manifest_node.name == system.node:
                    labels = dict(manifest_node.labels)
        return LaunchSpec(
            instance_id=inst.id,
            system=inst.system,
            index=inst.index,
            argv=tuple(argv),
            env=env,
            log_path=str(self.run_dir / "logs" / f"{inst.system}-{inst.index}.log"),
            node=node,
            cpus=system.resources.cpus,
            cpu_set=cpu_set,
            priority=system.priority,
            memory_mb=system.resources.memory_mb,
            gpu=system.resources.gpu,
            gpu_ids=gpu_ids,
            placement_group=inst.system if cluster else None,
            placement=system.placement if isinstance(system, Cluster) else "pack",
            labels=labels,
        )

    def _ready(self, name: str) -> bool:
        """A dependency is ready when every wanted instance of it runs (and beats)."""
        instances = [i for i in self.instances.values() if i.system == name]
        return all(i.state == S.SYSTEM_RUNNING for i in instances)

    def _refresh_locations(self) -> None:
        for inst in self.instances.values():
            if inst.state in LIVE:
                running = self.backend.where(inst.id)
                if running is not None and (running.node, running.pid) != (inst.node, inst.pid):
                    self._event(inst.id, f"moved to {running.node}")
                    inst.node, inst.host, inst.pid = running.node, running.host, running.pid
                    inst.last_beat_mono = None
                    inst.started_mono = time.monotonic()
                    self._status_dirty = True

    # -- bus: heartbeats, status, commands -------------------------------------------------

    def _on_heartbeats(self, reader: Reader[Heartbeat]) -> None:
        """On Cyclone's thread: stamp and queue; the loop applies them (no lock wait here)."""
        now, now_ns = time.monotonic(), time.time_ns()
        for hb in reader.take():
            self._beats.append((now, now_ns, hb))
        self._wake.set()

    def _apply_heartbeats(self) -> None:
        prefix = f"{self.mission.mission}/"
        supervisors = f"{prefix}supervisor/"
        own = f"{supervisors}{os.getpid()}"
        while self._beats:
            now, now_ns, hb = self._beats.popleft()
            if hb.system_id.startswith(supervisors):
                if hb.system_id != own and (len(self._peers) < 64 or hb.system_id in self._peers):
                    self._peers[hb.system_id] = (now, hb)
                    self._heard_mono = now
                continue
            if hb.system_id.startswith(prefix):
                self._mission_beat_mono = self._heard_mono = now
            inst = self.instances.get(hb.system_id)
            if inst is None or inst.state not in LIVE or not _beat_of(hb, inst):
                continue
            if hb.state in (S.SYSTEM_STOPPED, S.SYSTEM_FAILED):
                continue  # a last word before exiting: the exit event says the rest
            inst.last_beat_mono = now
            if inst.state == S.SYSTEM_STARTING:
                inst.set_state(S.SYSTEM_RUNNING)
                inst.since_ns = now_ns  # when it beat, not when the loop saw it
                self.events.append((now_ns, inst.id, "first heartbeat"))
                self._status_dirty = True
            if hb.device:
                inst.device = hb.device

    def status(self) -> dict[str, Any]:
        """The mission's state as a plain dict (what ``mcc status --json`` prints)."""
        with self._lock:
            return {
                "mission": self.mission.mission,
                "phase": self.phase,
                "state": self._mission_state().name.removeprefix("SYSTEM_").lower(),
                "backend": self.backend.name,
                "domain": self.mission.domain,
                "security": self.mission.security,
                "run_dir": str(self.run_dir),
                "clusters": self._clusters(),
                "supervisors": self._supervisors(),
                "instances": [
                    {
                        "id": i.id,
                        "state": i.state.name.removeprefix("SYSTEM_").lower(),
                        "pid": i.pid,
                        "host": i.host,
                        "node": i.node,
                        "cpus": _cpu_list(i.cpu_set),
                        "device": i.device,
                        "restarts": i.restarts,
                        "reason": i.reason,
                    }
                    for i in self._sorted_instances()
                ],
            }

    def _supervisors(self) -> list[dict[str, Any]]:
        """This supervisor and the others it hears: role, epoch and how fresh their beat is."""
        import socket

        now = time.monotonic()
        rows = [
            {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "role": self.role,
                "epoch": self.epoch,
                "beat_age_s": 0.0,
                "healthy": True,
            }
        ]
        for seen, hb in self._peers.values():
            age = now - seen
            if hb.state == S.SYSTEM_STOPPED or age > 30.0:
                continue
            role = "active" if hb.state == S.SYSTEM_RUNNING else "standby"
            rows.append(
                {
                    "pid": hb.pid,
                    "host": hb.host,
                    "role": role,
                    "epoch": _epoch_of(hb) or 0,
                    "beat_age_s": round(age, 2),
                    "healthy": age < self.lease_s,
                }
            )
        return rows

    def _clusters(self) -> dict[str, dict[str, Any]]:
        return {
            name: {"size": self.sizes[name], "min": c.min, "max": c.max, "placement": c.placement}
            for name, c in self.mission.clusters.items()
        }

    def _sorted_instances(self) -> Iterator[Instance]:
        return iter(
            sorted(self.instances.values(), key=lambda i: (self.order.index(i.system), i.index))
        )

    def _mission_state(self) -> SystemState:
        if self.state in (S.SYSTEM_STOPPING, S.SYSTEM_STOPPED):
            return self.state
        states = {i.state for i in self.instances.values()}
        if S.SYSTEM_FAILED in states:
            return S.SYSTEM_DEGRADED
        if states & {S.SYSTEM_PENDING, S.SYSTEM_STARTING}:
            return S.SYSTEM_STARTING
        return S.SYSTEM_RUNNING

    def _publish_status(self) -> None:
        with self._lock:
            entries = [
                SystemEntry(
                    system_id=i.id,
                    state=i.state,
                    pid=i.pid,
                    restarts=i.restarts,
                    host=i.host,
                    device=i.device,
                    node=i.node,
                    cpus=_cpu_list(i.cpu_set),
                    reason=i.reason[:200],
                    since_ns=i.since_ns,
                )
                for i in self._sorted_instances()
            ]
            status = MissionStatus(
                mission=self.mission.mission,
                phase=self.phase,
                state=self._mission_state(),
                domain_id=self.mission.domain,
                run_dir=str(self.run_dir),
                systems=entries,
                time_ns=time.time_ns(),
                backend=self.backend.name,
                clusters_json=json.dumps(self._clusters()),
            )
            self._status_dirty = False
            self._last_status = time.monotonic()
        self._status_writer.write(status)

    def _handle(self, command: Command) -> CommandReply:
        if command.mission and command.mission != self.mission.mission:
            raise MccError(
                f"this domain runs mission {self.mission.mission!r}, not {command.mission!r}"
            )
        args = json.loads(command.args_json or "{}")
        verb, target = command.verb, command.target
        if self.role != "active":
            raise MccError(f"this supervisor is {self.role}, not active (epoch {self.epoch})")
        if verb != "status":  # who commanded: the sender's identity, never a field it wrote
            assert self._replier is not None
            sender = self._replier.sender(command)
            log.info("command %s %s from %s (%s)", verb, target, sender, command.client_id)
            with self._lock:
                self.events.append(
                    (time.time_ns(), f"{COMMAND_CHANNEL}/{sender}", f"{verb} {target}")
                )
        result: Any = None
        if verb == "status":
            result = self.status()
        elif verb == "scale":
            self.scale(target, int(args["size"]))
        elif verb == "phase":
            self.set_phase(target or args["phase"])
        elif verb == "stop":
            self.stop_system(target)
        elif verb == "start":
            self.start_system(target)
        elif verb == "restart":
            result = self.restart(target)
        elif verb == "logs":
            path = self.log_path(target)
            lines = int(args.get("lines", 50))
            text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else []
            result = {"path": str(path), "lines": text}
        elif verb == "down":
            self.down()
        else:
            verbs = "status, scale, phase, stop, start, restart, logs, down"
            raise MccError(f"unknown verb {verb!r}; verbs: {verbs}")
        return CommandReply(
            ok=True, message=f"{verb} {target}".strip(), result_json=json.dumps(result)
        )

    # -- helpers ------------------------------------------------------------------------

    def _check_system(self, name: str) -> None:
        if name not in self.systems:
            raise OrchestratorError(
                f"{name!r} is not a system of {self.mission.mission!r}; "
                f"systems: {', '.join(self.systems)}"
            )

    def _any(self, predicate: Any) -> bool:
        with self._lock:
            return any(predicate(i) for i in self.instances.values())

    def _event(self, instance_id: str, what: str) -> None:
        self.events.append((time.time_ns(), instance_id, what))
        self._status_dirty = True

    def _write_summary(self) -> None:
        summary = {
            **self.status(),
            "events": [{"time_ns": t, "instance": i, "event": e} for t, i, e in self.events],
        }
        registry.write_private(self.run_dir / "supervisor.json", json.dumps(summary, indent=2))


def _beat_of(hb: Heartbeat, inst: Instance) -> bool:
    """Whether ``hb`` can be ``inst``'s: the pid it names is the one the backend started (a
    beat naming pid 0 or another process is not this instance's, whoever sent it); where the
    backend knows no pid (a Ray actor before its first beat), any real pid."""
    if hb.pid <= 0:
        return False
    return not inst.pid or hb.pid == inst.pid


def _secured(base: Transport | None, identity: Identity) -> Transport:
    """``base`` (default: the environment's transport) with ``identity``'s DDS Security."""
    base = base or Transport.from_env()
    return dataclasses.replace(base, extra_xml=base.extra_xml + identity.security_xml())


def _epoch_of(hb: Heartbeat) -> int | None:
    """The epoch a supervisor's beat names (``active epoch N`` / ``standby epoch N``)."""
    words = hb.message.split()
    if len(words) == 3 and words[1] == "epoch" and words[2].isdigit():
        return int(words[2])
    return None


def _describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "ended (exit status unknown: it was adopted, not a child of this agent)"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited {returncode}"


def _cpu_list(cores: tuple[int, ...]) -> str:
    return ",".join(map(str, cores))
