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

import logging
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcc.bus import Bus, HeartbeatPublisher, Reader, Replier, Transport
from mcc.bus.rpc import COMMAND_CHANNEL
from mcc.errors import OrchestratorError
from mcc.files import rotate_log
from mcc.lifecycle import Service
from mcc.observe.audit import AUDIT_FILE, AuditLog
from mcc.orchestrate import registry
from mcc.orchestrate import supervisor_bus as on_bus
from mcc.orchestrate import supervisor_leadership as leading
from mcc.orchestrate.backends.base import Backend, ExitEvent, Leadership
from mcc.orchestrate.instances import LIVE, Instance, S
from mcc.orchestrate.manifest import Cluster, Mission
from mcc.orchestrate.planner import Planner
from mcc.orchestrate.services import mission_transports, system_topics, with_services
from mcc.orchestrate.supervisor_bus import HeartbeatIntake
from mcc.orchestrate.supervisor_launch import Launcher, secured
from mcc.orchestrate.supervisor_leadership import Succession
from mcc.settings import current
from mcc.types import Command, CommandReply

if TYPE_CHECKING:
    from mcc.security.mission import Topics

log = logging.getLogger("mcc.orchestrate")
#: A supervisor's heartbeat period, and how long a standby waits for a silent active one
#: (while it hears the mission's instances) before it claims.
SUPERVISOR_BEAT_S = 0.1
#: How often the instances' log sizes are checked against ``log_max_bytes``.
LOG_CHECK_S = 10.0
LEASE_S = 1.5


class Supervisor(Service):
    """Run ``mission`` on ``backend`` until ``down()`` (or the end of ``run``'s duration).

    It owns the desired state and the instances, and composes the parts that own the rest:
    a `Succession` (role, epoch, the other supervisors, claims), a `HeartbeatIntake` (the
    beats heard, the refused ones counted) and a `Launcher` (the launch queue)."""

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
        home: Path | None = None,
    ) -> None:
        """``watch``: what the process running this supervisor also reads on the supervisor's
        bus (a job launcher watching results) when the mission is secured. Cyclone DDS gives a
        process one identity per domain, so such a watcher shares the supervisor's.
        ``transport``: the base transport of the mission's processes (default: the backend's,
        e.g. a network lab's bridge, else this process's ``MCC_TRANSPORT``); given, every
        process of the mission gets it. ``home``: this supervisor's MCC home (its registry
        record, keystores, what no instance may reach; default `registry.home`): a process
        may run missions in homes of their own (the HPC bench) without changing its
        environment; give the backend the same one (`open_mission` does)."""
        if phase is not None and phase not in mission.phases:
            raise OrchestratorError(
                f"phase {phase!r} is not a phase of mission {mission.mission!r}; "
                f"its phases are: {', '.join(mission.phases)}"
            )
        gpus = backend.gpus()
        self.mission = mission = with_services(mission, gpus_available=any(gpus.values()))
        self.backend = backend
        self.run_dir = Path(run_dir)
        self.home = registry.home(home)
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
        self.audit: AuditLog | None = None  # RUN_DIR/audit.jsonl, opened by start
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
        self._last_rotation = 0.0
        self._status_dirty = True
        self._readers: list[Reader[Any]] = []
        self._status_writer: Any = None  # the MissionStatus writer, opened by start
        self._succession = Succession(mission.mission, lease_s=LEASE_S)
        self._heartbeats = HeartbeatIntake(mission.mission, self._succession, wake=self._wake.set)
        self._launcher: Launcher | None = None  # made by start, with the planner
        self._roudi: Any = None  # mcc.bus.shm.RouDi, when this supervisor started the host's
        transport = transport or backend.transport()
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
        self.fenced = threading.Event()
        self._started = threading.Event()
        self._replier: Replier[Command, CommandReply] | None = None
        self._beat: HeartbeatPublisher | None = None
        self._deaf = False

    @property
    def role(self) -> str:
        """active | standby | fenced (another supervisor took over: this one stops)."""
        return self._succession.role

    @property
    def epoch(self) -> int:
        """The node agent's fencing epoch of this supervisor's leadership."""
        return self._succession.epoch

    @property
    def lease_s(self) -> float:
        """How long a standby waits for a silent active supervisor before it claims."""
        return self._succession.lease_s

    @property
    def refused_beats(self) -> Counter[str]:
        """Beats refused because their sender is not who they name, by reason."""
        return self._heartbeats.refused

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> Supervisor:
        """Open the backend and the bus, then reconcile in a background thread (or stand by
        when another supervisor of the mission is active)."""
        registry.private_dir(self.run_dir)
        registry.private_dir(self.run_dir / "logs")
        self.audit = AuditLog(self.run_dir / AUDIT_FILE)
        if self.mission.security == "on" and self.keystore is None:
            self.secure()
        if self._transport is not None and self._transport.kind == "shm":
            from mcc.bus.shm import RouDi  # the manifest's transport or the one it was given

            self._roudi = RouDi.ensure(log_path=self.run_dir / "logs" / "iox-roudi.log")
        if self._bus is None:
            from mcc.security.mission import SUPERVISOR  # the identity its beats come from

            self._bus = Bus(
                self.mission.domain,
                transport=self._transport,
                name=f"mcc supervisor {self.mission.mission}",
                source=SUPERVISOR,
            )
        bus = self._bus
        self._status_writer = bus.writer("MissionStatus")
        self._readers.append(bus.reader("Heartbeat", on_data=self._heartbeats.on_data))
        backend = self.backend
        backend.on_event = self._wake.set
        backend.on_promoted = self._on_promoted
        backend.on_fenced = self._on_fenced
        backend.on_shutdown = self._on_shutdown
        backend.preload(
            sorted({s.app.partition(":")[0] for s in self.systems.values() if s.app is not None})
        )
        leadership = backend.lead()  # None: a backend of one supervisor, opened and active
        self._planner = Planner(backend.capacity(), cores=backend.cores(), gpus=backend.gpus())
        self._launcher = Launcher(
            self,
            self._planner,
            event=self._event,
            home=self.home,
            instance_base=self._instance_base,
            system_topics=self._system_topics,
        )
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
                self._succession.stand_by(leadership.epoch, time.monotonic())
                self._beat.message = self._succession.beat_message
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

    def _placement(self, instance_id: str) -> Any:
        return self._planner.placement(instance_id) if self._planner is not None else None

    def _activate(self, leadership: Leadership | None) -> None:
        """Under the lock: become the active supervisor, adopting what runs."""
        self._succession.lead(leadership.epoch if leadership is not None else 0)
        if leadership is not None and (leadership.instances or leadership.state):
            assert self._planner is not None
            leading.adopt(self, leadership, planner=self._planner, event=self._event)
        if self._beat is not None:
            self._beat.state = S.SYSTEM_RUNNING
            self._beat.message = self._succession.beat_message
        if self._replier is None:
            self._replier = Replier[Command, CommandReply](
                self.bus,
                self._handle,
                replier_id=f"supervisor:{self.mission.mission}",
                channel=COMMAND_CHANNEL,
            ).start()
        registry.register(self)
        self._status_dirty = True

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
            if not self._succession.fence(epoch):
                return
        log.error(
            "mission %s: supervisor epoch %d took over; this one (pid %d) no longer commands "
            "and leaves",
            self.mission.mission,
            epoch,
            os.getpid(),
        )
        if self._beat is not None:
            self._beat.state = S.SYSTEM_STOPPED
            self._beat.message = self._succession.beat_message
        replier, self._replier = self._replier, None
        if replier is not None:
            replier.stop()
        registry.unregister(self)
        self.fenced.set()
        self._done.set()

    def _watch_active(self, now: float) -> None:
        """A standby: claim when the active supervisor is silent while the mission is not."""
        with self._lock:
            claim = self._succession.should_claim(now)
        if claim:
            self.backend.claim(self.epoch)

    def _leave_state(self) -> None:
        """Under the lock: leave the desired state with the node agent when it changed, for
        a successor to adopt."""
        state = leading.desired_state(self, self._placement)
        if self._succession.changed(state):
            try:
                self.backend.save_state(state)
            except OrchestratorError as exc:
                log.warning("cannot leave the desired state with the node agent: %s", exc)

    def _on_shutdown(self) -> None:
        """The backend's thread: the active supervisor stopped the mission."""
        log.info("mission %s stopped by the active supervisor", self.mission.mission)
        self._done.set()

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
        (``keystores/MISSION`` in its `home`, created on first use), and the permissions of
        every system, for the identity each instance gets at its start; `start` calls it for a
        ``security: on`` mission unless done already (the demo does it before its console)."""
        from mcc.security.mission import CONSOLE, SUPERVISOR, mission_identities

        self.keystore = self.home / "keystores" / self.mission.mission
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
        self._transport = secured(self._transport, identities[SUPERVISOR])
        self.console_env = secured(self._instance_base, identities[CONSOLE]).apply_to_env({})

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
        on_bus.write_summary(self)
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
        if self.audit is not None:
            self.audit.close()

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
            # Where the backend moved an instance first (Ray after a node loss): its silence
            # started over with the move. Checked after, the old process's silence killed the
            # one Ray had just started (seen on the lab: truth moved, then killed 10 ms later).
            self._refresh_locations()
            self._check_health(now)
            assert self._launcher is not None
            if self._launcher.start_pending(now):
                self._status_dirty = True
            self._refresh_locations()
            self._leave_state()
        if self._status_dirty or now - self._last_status >= self.status_period_s:
            self._publish_status()
        if now - self._last_rotation >= LOG_CHECK_S:
            self._last_rotation = now
            self._rotate_logs()

    def _rotate_logs(self) -> None:
        """Rotate the instances' logs that grew past ``log_max_bytes`` (a setting)."""
        limit = current().log_max_bytes
        for path in (self.run_dir / "logs").glob("*.log"):
            if rotate_log(path, limit):
                log.info("%s: past %d bytes, rotated to %s.1", path.name, limit, path.name)

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
        if inst is None:
            return
        if inst.pid != event.pid and (inst.state not in LIVE or self.backend.where(inst.id)):
            # An older process's exit, while this one runs. A process Ray moved to another
            # host that exits before this supervisor saw the move has a pid it does not know
            # yet; the backend, which holds nothing of it any more, says it is the last one.
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
        heard = self._succession.heard_mono
        if heard and now - heard > self.lease_s:
            # Not one beat of anyone (instances, other supervisors) for a lease: this
            # supervisor is more likely cut off than every instance hung at once. Killing
            # them would only make the standby, which may hear them, adopt fresh restarts.
            if not self._deaf:
                self._deaf = True
                log.warning(
                    "mission %s: no heartbeat heard for %.1f s: this supervisor may be cut off "
                    "the network; it kills nothing for silence until it hears again",
                    self.mission.mission,
                    now - heard,
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

    def _refresh_locations(self) -> None:
        for inst in self.instances.values():
            if inst.state in LIVE:
                running = self.backend.where(inst.id)
                if running is not None and (running.node, running.pid) != (inst.node, inst.pid):
                    self._event(inst.id, f"moved to {running.node}")
                    inst.node, inst.host, inst.pid = running.node, running.host, running.pid
                    inst.killing = False  # a kill of the old process: it went with its node
                    inst.reason = f"moved to {running.node}"
                    inst.last_beat_mono = None
                    inst.started_mono = time.monotonic()
                    self._status_dirty = True

    # -- bus: heartbeats, status, commands (mcc.orchestrate.supervisor_bus) ----------------

    def _apply_heartbeats(self) -> None:
        """Under the lock: the beats heard since the last tick."""
        secured = self._bus is not None and self._bus.secured
        if self._heartbeats.apply(self.instances, self.events, secured=secured):
            self._status_dirty = True

    def status(self) -> dict[str, Any]:
        """The mission's state as a plain dict (what ``mcc status --json`` prints)."""
        with self._lock:
            return on_bus.status(self, self._succession.peers())

    def _publish_status(self) -> None:
        with self._lock:
            status = on_bus.mission_status(self)
            self._status_dirty = False
            self._last_status = time.monotonic()
        self._status_writer.write(status)

    def _handle(self, command: Command) -> CommandReply:
        """The replier's thread: one operator command, recorded in the mission's audit (all
        but ``status``) with what came of it."""
        try:
            reply = on_bus.handle(self, command, sender=self._sender, record=self._record)
        except Exception as exc:
            on_bus.audit(self, command, "failed", str(exc), who=self._sender(command))
            raise
        on_bus.audit(self, command, "ok", reply.message, who=self._sender(command))
        return reply

    def _sender(self, command: Command) -> str:
        """Who sent ``command``: its writer's identity (authenticated on a secured bus)."""
        return self._replier.sender(command) if self._replier is not None else "unknown"

    def _record(self, instance_id: str, what: str) -> None:
        with self._lock:
            self._event(instance_id, what)

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


def _describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "ended (exit status unknown: it was adopted, not a child of this agent)"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited {returncode}"


def make_backend(
    mission: Mission, name: str = "local", *, address: str | None = None, home: Path | None = None
) -> Backend:
    """The backend ``name`` for ``mission``: ``local`` (node agents on this host, their files
    in ``home``, default `registry.home`) or ``ray`` (a Ray cluster at ``address``, default:
    start or join the local one; each node keeps its own home)."""
    if name == "local":
        from mcc.orchestrate.backends.local import LocalBackend

        return LocalBackend(
            mission.nodes, mission=mission.mission, domain=mission.domain, home=home
        )
    if name == "ray":
        from mcc.orchestrate.backends.ray import RayBackend

        return RayBackend(address=address, namespace=f"mcc-{mission.mission}")
    raise OrchestratorError(f"backend {name!r}: expected 'local' or 'ray'")


def default_run_dir(mission: Mission, *, home: Path | None = None) -> Path:
    """``HOME/runs/MISSION-YYYYmmdd-HHMMSS`` (``home``: default `registry.home`)."""
    from datetime import datetime

    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return registry.home(home) / "runs" / f"{mission.mission}-{stamp}"


def open_mission(
    mission: Mission,
    *,
    backend: str = "local",
    address: str | None = None,
    run_dir: Path | None = None,
    home: Path | None = None,
    **options: Any,
) -> Supervisor:
    """The one way to set a mission up to run: its supervisor on backend ``backend`` (see
    `make_backend`), its run folder (default `default_run_dir`); ``options`` go to
    `Supervisor` (``phase``, ``watch``, ``transport``, …); ``home``: the MCC home of the
    supervisor and its backend (default `registry.home`). `mcc up`, `mcc demo` and the HPC
    jobs all start here; ``with open_mission(m) as sup:`` runs it until the block ends."""
    folder = run_dir if run_dir is not None else default_run_dir(mission, home=home)
    return Supervisor(
        mission,
        backend=make_backend(mission, backend, address=address, home=home),
        run_dir=folder,
        home=home,
        **options,
    )
