"""The Ray backend: the same manifest and commands as ``local``, on the nodes of a Ray cluster.

Every instance is a Ray actor named after its instance id (``mission/system/index``) in the
backend's namespace. The actor runs the instance as its child process (the same argv and
environment as the local backend) and reports the exit code through ``wait()``; the
supervisor restarts an instance that *exits*, exactly as with ``local``. A *node loss* is
Ray's to repair: the actor has ``max_restarts`` (``MCC_RAY_MAX_RESTARTS`` in the instance
environment, infinite when absent) and Ray re-creates it on a surviving node, where its
constructor starts the process again with the same identity. Calls in flight (``wait``,
``watch``, ``terminate``) carry ``max_task_retries=-1``, so they follow the actor to its new
node instead of failing; only an actor that is dead for good shows up as an exit (-9), as
does one whose node died and that Ray cannot re-place (its label is on no other node) or
did not within ``start_timeout_s``.

No orphans: the child gets ``PR_SET_PDEATHSIG = SIGKILL`` from the thread that spawned it
and its own session, so when the actor's worker dies (node loss, ``ray.kill``, the cluster
stops), the child dies with it.

No single point of failure: the actors (and placement groups) are *detached*, so they outlive
the supervisor that started them. Supervisors are replicated as with ``local``: a mission's
`MissionLeader` (a detached actor, its epoch and desired state kept in Ray's GCS) makes one
active and the others stand by (`lead`); the active one renews a lease every ``POLL_S``, and
when it stops (its process or its host lost) the first standby to ask after ``lease_s`` is
promoted with the next epoch and adopts every instance actor of the namespace without
restarting any (`Leadership.instances`). Fencing is at the actuators: an adopting supervisor
raises each actor's fence to its epoch, and an actor refuses the signals of an older one. With
no supervisor for ``MCC_AGENT_ORPHAN_S`` the leader stops the mission. Ray's head with GCS
fault tolerance (an external Redis, docs/deploy.md) restarts without touching an instance.

Placement: ``cpus`` → ``num_cpus``, ``gpu: exclusive`` → ``num_gpus=1`` (Ray's device goes in
``CUDA_VISIBLE_DEVICES``), ``labels`` → custom resources declared on the nodes
(``ray start --resources '{"node:radar-1": 1}'``), of which an instance asks ``LABEL_SHARE``
so a labelled node takes any number of instances, ``memory_mb`` → Ray's ``memory``. Ray
places; the planner's ``LaunchSpec.node`` is advisory (``where()`` tells the truth).
Virtual clusters become placement groups (``pack`` → PACK, ``spread`` → SPREAD, both soft so a
bundle on a lost node is re-placed): the first start of a cluster reserves
``MCC_CLUSTER_SIZE`` bundles (1 when absent) of one instance each; a scale-up beyond the free
bundles reserves another group with the same strategy, sized to the shortfall; an exit frees
its bundle for the next start, and a group is removed once none of its bundles is used.
docs/deploy.md tells how to run a mission on a Ray cluster, KubeRay or Slurm.
"""

from __future__ import annotations

import collections
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mcc.errors import OrchestratorError
from mcc.lifecycle import Closeable
from mcc.orchestrate.backends.base import (
    Backend,
    ExitEvent,
    LaunchSpec,
    Leadership,
    Running,
    Warning_,
)
from mcc.orchestrate.backends.ray_actor import (
    LEADER,
    TAIL_LINES,
    InstanceActor,
    MissionLeader,
    import_ray,
)
from mcc.security.confine import CONFINE_MODULE
from mcc.settings import Settings, SettingsError

log = logging.getLogger("mcc.orchestrate.ray")

LABEL_SHARE = 0.001  # what an instance asks of each node label: a label places, it does not count
NODE_CHECK_S = 0.5  # how often the backend looks for lost nodes
KILLED = -signal.SIGKILL  # the return code of an instance whose actor is dead for good
POLL_S = 0.1  # how often the active supervisor renews its lease and a standby asks for it
LEASE_S = 0.8  # a lease not renewed for this long passes to a standby


# -- the driver side: the supervisor's process ----------------------------------------------


@dataclass
class _Group:
    """One Ray placement group of a virtual cluster: bundles of one instance each."""

    cluster: str
    shape: tuple[tuple[str, float], ...]
    pg: Any
    size: int
    used: set[int] = field(default_factory=set)

    def free_bundle(self) -> int | None:
        return next((i for i in range(self.size) if i not in self.used), None)


@dataclass
class _Instance:
    spec: LaunchSpec
    actor: Any
    wait_ref: Any
    watch_ref: Any  # None once the actor is dead for good
    running: Running
    incarnation: str
    node_id: str
    demand: Mapping[str, float]
    group: _Group | None = None
    bundle: int = -1
    lost_since: float | None = None  # monotonic time its node was found dead


class RayBackend(Closeable, Backend):
    """Instances as Ray actors on a Ray cluster (``address="auto"``) or a local Ray instance.

    ``address``: None starts a private local Ray (``num_cpus``, ``system_config``); "auto"
    or "HOST:PORT" joins a running cluster. ``namespace``: the actors' namespace, one per
    mission (``mcc-<mission>``). ``start_timeout_s``: how long ``start`` waits for Ray to
    place an instance before giving up. ``lease_s``: how long the active supervisor's lease
    outlives its last renewal before a standby takes over (`lead`); ``orphan_s``: how long the
    mission runs with no supervisor at all (default ``MCC_AGENT_ORPHAN_S``).
    """

    name = "ray"

    def __init__(
        self,
        *,
        address: str | None = None,
        namespace: str,
        num_cpus: int | None = None,
        system_config: Mapping[str, Any] | None = None,
        start_timeout_s: float = 60.0,
        lease_s: float = LEASE_S,
        orphan_s: float | None = None,
    ) -> None:
        self.address = address
        self.lease_s = lease_s
        self.orphan_s = orphan_s
        # single: opened without `lead` (no replication) | active | standby | fenced
        self.role = "single"
        self.epoch = 0
        self._token = f"{os.getpid()}@{socket.gethostname()}/{time.time_ns()}"
        self._leader: Any = None
        self._claimed: dict[str, Any] | None = None  # a successful claim, to promote on
        self.namespace = namespace
        self.num_cpus = num_cpus
        self.system_config = dict(system_config or {})
        self.start_timeout_s = start_timeout_s
        self._ray: Any = None
        self._actor_class: Any = None
        self._connected = False  # we called ray.init, so we call ray.shutdown
        self._lock = threading.RLock()
        self._instances: dict[str, _Instance] = {}
        self._starting: set[str] = set()
        self._groups: list[_Group] = []
        self._group_serial: collections.Counter[str] = collections.Counter()
        self._exits: list[ExitEvent] = []
        self._warnings: list[Warning_] = []
        self._node_names: dict[str, str] = {}
        self._alive_ids: set[str] = set()  # the alive nodes at the last check
        self._monitor: threading.Thread | None = None
        self._leasing: threading.Thread | None = None
        self._closing = threading.Event()

    # -- lifecycle -------------------------------------------------------------------

    def open(self) -> None:
        """Connect to (or start) Ray and start watching instances."""
        ray = import_ray()
        self._ray = ray
        if not ray.is_initialized():
            options: dict[str, Any] = {
                "namespace": self.namespace,
                "log_to_driver": False,
                "logging_level": logging.WARNING,
            }
            if self.address is None:  # "local": a new instance, even if one runs on this host
                options.update(include_dashboard=False, num_cpus=self.num_cpus)
                if self.system_config:
                    options["_system_config"] = self.system_config
            try:
                ray.init(address=self.address or "local", **options)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                where = self.address or "a local Ray instance"
                raise OrchestratorError(
                    f"cannot connect to Ray at {where}: {exc}; start a cluster with "
                    "`ray start --head` (or leave the address out to start one here)"
                ) from None
            self._connected = True
        # Ship the actor class by value: by reference, every new Ray worker (every start and
        # every restart after a node loss) would import mcc.orchestrate, the bus and
        # cyclonedds first, about 2 s on a small node. By value it needs only mcc.errors and
        # mcc.orchestrate.limits.
        ray.cloudpickle.register_pickle_by_value(sys.modules[InstanceActor.__module__])
        self._actor_class = ray.remote(InstanceActor)
        # Ray warns at every start of a detached restartable actor in a placement group that
        # removing the group kills it: the backend removes a group only once its actors ended.
        logging.getLogger("ray.actor").addFilter(_QUIET_GROUPS)
        self._closing.clear()
        self._monitor = threading.Thread(target=self._watch_loop, name="mcc-ray", daemon=True)
        self._monitor.start()
        # The lease on a thread of its own: a slow ray.nodes() or a GCS restart must not delay
        # the active supervisor's renewals into a failover.
        self._leasing = threading.Thread(target=self._lease_loop, name="mcc-ray-lease", daemon=True)
        self._leasing.start()

    def close(self, *, grace_s: float = 5.0) -> None:
        """Stop every instance (SIGTERM, SIGKILL after ``grace_s``), kill its actor, leave Ray.

        A standby or fenced supervisor's backend only leaves: the instances are the active
        one's. The active one's also ends the mission's leader (a standby hears that the
        mission was stopped)."""
        if self._ray is None:
            return
        ray = self._ray
        if self.role in ("standby", "fenced"):
            self._closing.set()
            self._join_threads()
            with self._lock:
                self._instances.clear()
            if self._connected:
                ray.shutdown()
                self._connected = False
            self._ray = None
            return
        with self._lock:
            instances = list(self._instances.values())
        for inst in instances:
            inst.actor.terminate.remote(grace_s, self.epoch)
        refs = [inst.wait_ref for inst in instances]
        ready: list[Any] = []
        if refs:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=grace_s + 2.0)
        self._closing.set()
        self._join_threads()
        with self._lock:
            self._collect(ready)
            for inst in list(self._instances.values()):  # stuck: killing the actor kills it
                self._forget(inst)
            for group in self._groups:
                self._remove_group(group)
            self._groups.clear()
        if self._leader is not None:  # the groups of the supervisors before this one too
            _remove_groups_of(ray, self.namespace)
            try:
                ray.kill(self._leader, no_restart=True)
            except Exception as exc:  # the cluster may be gone already
                log.debug("ending the mission's leader: %s", exc)
            self._leader = None
        if self._connected:
            ray.shutdown()
            self._connected = False
        self._ray = None

    def _join_threads(self) -> None:
        for thread in (self._monitor, self._leasing):
            if thread is not None and thread is not threading.current_thread():
                thread.join(5.0)
        self._monitor = self._leasing = None

    # -- Backend protocol -------------------------------------------------------------

    def capacity(self) -> Mapping[str, float]:
        """CPUs per alive Ray node, keyed by its human name (see ``node_name``).

        Nodes that share a label (the pods of one KubeRay worker group) are one node here:
        an instance placed by that label may run on any of them.
        """
        cpus: dict[str, float] = {}
        for node in self._alive_nodes():
            name = self._name_of(node)
            cpus[name] = cpus.get(name, 0.0) + float(node["Resources"].get("CPU", 0.0))
        return cpus

    def start(self, spec: LaunchSpec) -> Running:
        ray = self._require_open()
        with self._lock:
            if spec.instance_id in self._instances or spec.instance_id in self._starting:
                raise OrchestratorError(
                    f"{spec.instance_id} is already running on the ray backend; stop it first"
                )
            self._starting.add(spec.instance_id)
        try:
            return self._start(ray, spec)
        finally:
            with self._lock:
                self._starting.discard(spec.instance_id)

    def stop(self, instance_id: str, *, grace_s: float) -> None:
        inst = self._instances.get(instance_id)
        if inst is not None:
            inst.actor.terminate.remote(grace_s, self.epoch, inst.incarnation)

    def kill(self, instance_id: str) -> None:
        inst = self._instances.get(instance_id)
        if inst is not None:
            inst.actor.kill.remote(self.epoch, inst.incarnation)

    def poll(self) -> list[ExitEvent]:
        if self._ray is not None:
            with self._lock:
                refs = self._refs()
            if refs:
                ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0)
                with self._lock:
                    exited = self._collect(ready)
                if exited and self.on_event is not None:
                    self.on_event()
        with self._lock:
            exits, self._exits = self._exits, []
        return exits

    def where(self, instance_id: str) -> Running | None:
        inst = self._instances.get(instance_id)
        return inst.running if inst is not None else None

    def warnings(self) -> list[Warning_]:
        with self._lock:
            warnings, self._warnings = self._warnings, []
        return warnings

    # -- replication: supervisors on several hosts ----------------------------------------

    def lead(self) -> Leadership:
        """Open as a supervisor of the mission: active (adopting every instance actor of the
        namespace) if no other supervisor holds the mission's lease, else standing by."""
        if self.orphan_s is None:
            try:
                self.orphan_s = Settings.from_env().agent_orphan_s
            except SettingsError as exc:
                raise OrchestratorError(str(exc)) from None
        self.open()
        ray = self._ray
        try:
            self._leader = (
                ray.remote(MissionLeader)
                .options(
                    name=LEADER,
                    namespace=self.namespace,
                    lifetime="detached",
                    get_if_exists=True,
                    num_cpus=0,
                    max_restarts=-1,
                    max_task_retries=-1,
                    max_concurrency=4,
                    **self._leader_placement(),
                )
                .remote(self.namespace, self.lease_s, self.orphan_s)
            )
            answer = ray.get(
                self._leader.hello.remote(self._token, os.getpid()), timeout=self.start_timeout_s
            )
        except (ray.exceptions.RayError, ValueError) as exc:
            self.close()
            raise OrchestratorError(f"the mission's leader on Ray: {_first(exc)}") from None
        return self._lead(answer)

    def _lead(self, answer: Mapping[str, Any]) -> Leadership:
        """Become what the leader answered; active: adopt what runs."""
        self.epoch = int(answer["epoch"])
        if not answer["active"]:
            self.role = "standby"
            return Leadership(False, self.epoch, int(answer["active_pid"]))
        self.role = "active"
        instances = self._adopt()
        return Leadership(True, self.epoch, os.getpid(), instances, answer.get("state"))

    def _adopt(self) -> tuple[Running, ...]:
        """Every instance actor of the namespace, fenced to this epoch, watched from now on."""
        ray = self._ray
        names = [
            entry["name"]
            for entry in ray.util.list_named_actors(all_namespaces=True)
            if entry["namespace"] == self.namespace and entry["name"] != LEADER
        ]
        adopted: list[Running] = []
        for name in names:
            with self._lock:
                if name in self._instances:
                    adopted.append(self._instances[name].running)
                    continue
            try:
                actor = ray.get_actor(name, namespace=self.namespace)
                actor.fence.remote(self.epoch)
                info: dict[str, Any] = ray.get(actor.info.remote(), timeout=self.start_timeout_s)
            except (ray.exceptions.RayError, ValueError) as exc:
                log.warning("%s: cannot adopt its Ray actor: %s", name, _first(exc))
                continue
            meta = info.get("meta") or {}
            system, _, index = name.rpartition("/")
            spec = LaunchSpec(
                name,
                system.rpartition("/")[2],
                int(index) if index.isdigit() else 0,
                (),
                {},
                "",
                placement_group=meta.get("cluster"),
            )
            running = self._running(name, info)
            inst = _Instance(
                spec=spec,
                actor=actor,
                wait_ref=actor.wait.remote(),
                watch_ref=actor.watch.remote(info["incarnation"]),
                running=running,
                incarnation=str(info["incarnation"]),
                node_id=str(info["node_id"]),
                demand=dict(meta.get("demand") or {"CPU": 1.0}),
            )
            with self._lock:
                self._instances[name] = inst
            adopted.append(running)
        log.warning(
            "ray backend: epoch %d adopts %d instance actors of %s",
            self.epoch,
            len(adopted),
            self.namespace,
        )
        return tuple(adopted)

    def claim(self, expect_epoch: int) -> bool:
        """Take the lease at once (the active supervisor is cut off); promoted by the backend's
        thread (``on_promoted``) when granted."""
        if self._leader is None or self.role != "standby":
            return False
        try:
            answer = self._ray.get(
                self._leader.claim.remote(self._token, os.getpid(), expect_epoch), timeout=2.0
            )
        except self._ray.exceptions.RayError as exc:
            log.warning("claiming the mission: %s", _first(exc))
            return False
        if answer["active"]:
            with self._lock:
                self._claimed = answer
        return bool(answer["active"])

    def save_state(self, state: Any) -> None:
        if self._leader is not None and self.role == "active":
            self._leader.save.remote(self._token, self.epoch, state)

    def confirm(self, *, timeout_s: float = 1.0) -> bool:
        if self._leader is None:
            return self.role == "single"
        try:
            answer = self._ray.get(
                self._leader.renew.remote(self._token, self.epoch), timeout=timeout_s
            )
        except self._ray.exceptions.RayError:
            return False
        return bool(answer["active"]) and int(answer["epoch"]) == self.epoch

    def _leadership_step(self) -> None:
        """The backend's thread, every ``POLL_S``: renew the lease (active) or ask for it
        (standby); promote, fence or end as the leader answers."""
        ray = self._ray
        if self._leader is None or self.role not in ("active", "standby"):
            return
        with self._lock:
            claimed, self._claimed = self._claimed, None
        try:
            if claimed is not None:
                answer = claimed
            elif self.role == "active":
                answer = ray.get(self._leader.renew.remote(self._token, self.epoch), timeout=2.0)
            else:
                answer = ray.get(self._leader.standby.remote(self._token, os.getpid()), timeout=2.0)
        except ray.exceptions.GetTimeoutError:
            return  # the leader is restarting (its node, the head): ask again
        except ray.exceptions.RayError as exc:
            if self.role == "standby":  # the leader is dead for good: the mission was stopped
                log.info("the mission's leader ended (%s): the mission is stopped", _first(exc))
                self._leader = None
                if self.on_shutdown is not None:
                    self.on_shutdown()
            return
        if self.role == "active" and not answer["active"]:
            self.role = "fenced"
            self.epoch = int(answer["epoch"])
            log.error("ray backend: supervisor epoch %d took over; this one is fenced", self.epoch)
            if self.on_fenced is not None:
                self.on_fenced(self.epoch)
        elif self.role == "standby" and answer["active"]:
            leadership = self._lead(answer)
            if self.on_promoted is not None:
                self.on_promoted(leadership)
            if self.on_event is not None:
                self.on_event()

    # -- beyond the protocol ------------------------------------------------------------

    def tail(
        self, instance_id: str, lines: int = TAIL_LINES, *, timeout_s: float = 5.0
    ) -> list[str]:
        """The last output lines of an instance, wherever it runs (its log is on its node)."""
        ray = self._require_open()
        inst = self._instances.get(instance_id)
        if inst is None:
            raise OrchestratorError(f"{instance_id} is not running on the ray backend")
        try:
            lines_out: list[str] = ray.get(inst.actor.tail.remote(lines), timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise OrchestratorError(
                f"{instance_id}: no answer within {timeout_s:g} s (restarting?)"
            ) from None
        return lines_out

    def node_name(self, node_id: str) -> str:
        """The human name of a Ray node: its ``node:NAME`` label, else ``IP/short id``."""
        with self._lock:
            name = self._node_names.get(node_id)
        if name is None:
            for node in self._ray.nodes():
                self._name_of(node)
            name = self._node_names.get(node_id, node_id[:8])
        return name

    # -- internals --------------------------------------------------------------------

    def _require_open(self) -> Any:
        if self._ray is None:
            raise OrchestratorError("the ray backend is not open (call open() first)")
        return self._ray

    def _leader_placement(self) -> dict[str, Any]:
        """Where the mission's leader actor goes when this supervisor creates it: on another
        node than this one (the head's first), never beside the supervisor it must outlive.
        Ray puts an actor on its creator's node by default: the active supervisor's host lost,
        the leader went with it and the standby's claim waited for Ray to notice the node lost
        and restart the leader elsewhere (1.5 s on the container lab, against 0.9 s for the
        supervisor's process alone). Soft: a cluster of one node keeps it there."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = self._require_open().get_runtime_context().get_node_id()
        others = [n for n in self._alive_nodes() if n["NodeID"] != here]
        if not others:
            return {}
        others.sort(key=lambda n: ("node:__internal_head__" not in n.get("Resources", {}),
                                   str(n["NodeID"])))  # fmt: skip
        return {
            "scheduling_strategy": NodeAffinitySchedulingStrategy(
                node_id=others[0]["NodeID"], soft=True
            )
        }

    def _alive_nodes(self) -> list[dict[str, Any]]:
        ray = self._require_open()
        return [node for node in ray.nodes() if node.get("Alive")]

    def _name_of(self, node: Mapping[str, Any]) -> str:
        node_id = str(node["NodeID"])
        labels = sorted(
            key[len("node:") :]
            for key in node.get("Resources", {})
            if key.startswith("node:") and not _ray_node_resource(key[len("node:") :])
        )
        name = labels[0] if labels else f"{node.get('NodeManagerAddress', '?')}/{node_id[:8]}"
        with self._lock:
            self._node_names[node_id] = name
        return name

    def _demand(self, spec: LaunchSpec) -> dict[str, float]:
        demand: dict[str, float] = {"CPU": spec.cpus}
        if spec.gpu == "exclusive":
            demand["GPU"] = 1.0
        if spec.memory_mb:
            demand["memory"] = float(spec.memory_mb * 2**20)
        # Labels are what a node declares (`--resources '{"node:radar-1": 1}'`), so an instance
        # asks for a sliver of each, as Ray's own node:<ip> resources are used: any number of
        # instances share a labelled node.
        demand.update({str(k): LABEL_SHARE for k in spec.labels})
        return demand

    def _check_feasible(self, spec: LaunchSpec, demand: Mapping[str, float]) -> None:
        nodes = self._alive_nodes()
        if _fits_somewhere(nodes, demand):
            return
        offered = "; ".join(
            f"{self._name_of(n)}: CPU {n['Resources'].get('CPU', 0):g}"
            + "".join(
                f", {k} {v:g}"
                for k, v in sorted(n["Resources"].items())
                if k in demand and k != "CPU"
            )
            for n in nodes
        )
        raise OrchestratorError(
            f"{spec.instance_id}: no Ray node offers {_show(demand)} (nodes: {offered or 'none'}); "
            "declare the labels on a node (ray start --resources '{\"NAME\": 1}') or ask for less"
        )

    def _start(self, ray: Any, spec: LaunchSpec) -> Running:
        demand = self._demand(spec)
        self._check_feasible(spec, demand)
        max_restarts = _settings(spec).ray_max_restarts
        options: dict[str, Any] = {
            "name": spec.instance_id,
            "namespace": self.namespace,
            "num_cpus": spec.cpus,
            "num_gpus": 1 if spec.gpu == "exclusive" else 0,
            "resources": {k: v for k, v in demand.items() if k not in ("CPU", "GPU", "memory")},
            "max_restarts": max_restarts,
            "max_task_retries": -1 if max_restarts != 0 else 0,
            "max_concurrency": 8,  # wait, watch, terminate, kill, tail, info at once
            "lifetime": "detached",  # outlives this supervisor: a standby adopts it
        }
        if spec.memory_mb:
            options["memory"] = spec.memory_mb * 2**20
        group: _Group | None = None
        bundle = -1
        if spec.placement_group:
            group, bundle = self._take_bundle(ray, spec, demand)
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=group.pg,
                placement_group_bundle_index=bundle,
                placement_group_capture_child_tasks=False,
            )
        try:
            argv = list(spec.argv)
            if spec.confinement is not None:  # the actor's child confines itself, then runs
                argv = [sys.executable, "-m", CONFINE_MODULE, spec.confinement.to_json(), "--"]
                argv += spec.argv
            actor = self._actor_class.options(**options).remote(
                spec.instance_id,
                argv,
                dict(spec.env),
                spec.log_path,
                list(spec.cpu_set),
                spec.priority,
                spec.memory_mb,
                spec.gpu == "exclusive",
                identity=dict(spec.identity) if spec.identity else None,
                meta={"demand": demand, "cluster": spec.placement_group},
                epoch=self.epoch,
            )
        except ValueError as exc:  # the name is still taken
            self._release(group, bundle)
            raise OrchestratorError(f"{spec.instance_id}: Ray refused the actor: {exc}") from None
        try:
            info: dict[str, Any] = ray.get(actor.info.remote(), timeout=self.start_timeout_s)
        except ray.exceptions.GetTimeoutError:
            ray.kill(actor, no_restart=True)
            self._release(group, bundle)
            raise OrchestratorError(
                f"{spec.instance_id}: Ray did not place it within {self.start_timeout_s:g} s "
                f"(needs {_show(demand)}); free resources or add nodes"
            ) from None
        except ray.exceptions.RayError as exc:
            ray.kill(actor, no_restart=True)
            self._release(group, bundle)
            raise OrchestratorError(f"{spec.instance_id}: the Ray actor failed: {exc}") from None
        if info["error"]:
            ray.kill(actor, no_restart=True)
            self._release(group, bundle)
            raise OrchestratorError(f"{spec.instance_id}: {info['error']}")
        running = self._running(spec.instance_id, info)
        inst = _Instance(
            spec=spec,
            actor=actor,
            wait_ref=actor.wait.remote(),
            watch_ref=actor.watch.remote(info["incarnation"]),
            running=running,
            incarnation=info["incarnation"],
            node_id=str(info["node_id"]),
            demand=demand,
            group=group,
            bundle=bundle,
        )
        with self._lock:
            self._instances[spec.instance_id] = inst
            self._add_warnings(spec.instance_id, info)
        return running

    def _running(self, instance_id: str, info: Mapping[str, Any]) -> Running:
        return Running(
            instance_id,
            int(info["pid"]),
            str(info["host"]),
            self.node_name(str(info["node_id"])),
            int(info["started_ns"]),
        )

    def _add_warnings(self, instance_id: str, info: Mapping[str, Any]) -> None:
        for message in info["warnings"]:
            self._warnings.append(Warning_(instance_id, message))
            log.warning("%s: %s", instance_id, message)

    def _take_bundle(
        self, ray: Any, spec: LaunchSpec, demand: Mapping[str, float]
    ) -> tuple[_Group, int]:
        cluster = spec.placement_group
        assert cluster is not None
        shape = tuple(sorted(demand.items()))
        with self._lock:
            for group in self._groups:
                if group.cluster == cluster and group.shape == shape:
                    free = group.free_bundle()
                    if free is not None:
                        group.used.add(free)
                        return group, free
            members = sum(
                1 for inst in self._instances.values() if inst.spec.placement_group == cluster
            )
            serial = self._group_serial[cluster]
            self._group_serial[cluster] += 1
        size = max(1, _settings(spec).cluster_size - members)
        strategy = "SPREAD" if spec.placement == "spread" else "PACK"
        pg = ray.util.placement_group(
            [dict(demand) for _ in range(size)],
            strategy=strategy,
            # an adopting supervisor counts from 0 again: its epoch keeps the names apart
            name=f"{self.namespace}/{cluster}/{serial}" + (f"@{self.epoch}" if self.epoch else ""),
            lifetime="detached",
        )
        try:
            ray.get(pg.ready(), timeout=self.start_timeout_s)
        except ray.exceptions.GetTimeoutError:
            ray.util.remove_placement_group(pg)
            raise OrchestratorError(
                f"{spec.instance_id}: Ray could not reserve {size} x {_show(demand)} for "
                f"cluster {cluster!r} ({strategy}) within {self.start_timeout_s:g} s; "
                "free resources or add nodes"
            ) from None
        group = _Group(cluster, shape, pg, size, {0})
        with self._lock:
            self._groups.append(group)
        return group, 0

    def _release(self, group: _Group | None, bundle: int) -> None:
        if group is None:
            return
        with self._lock:
            group.used.discard(bundle)
            if not group.used and group in self._groups:
                self._groups.remove(group)
                self._remove_group(group)

    def _remove_group(self, group: _Group) -> None:
        try:
            self._ray.util.remove_placement_group(group.pg)
        except Exception as exc:  # the cluster may be gone already
            log.debug("removing placement group %s: %s", group.cluster, exc)

    def _refs(self) -> list[Any]:
        refs = []
        for inst in self._instances.values():
            refs.append(inst.wait_ref)
            if inst.watch_ref is not None:
                refs.append(inst.watch_ref)
        return refs

    def _collect(self, ready: Sequence[Any]) -> bool:
        """Turn finished ``wait``/``watch`` calls into exits and new places (lock held).

        True when there were exits: the caller calls ``on_event`` once it let go of the lock.
        """
        if not ready:
            return False
        ray = self._ray
        done = set(ready)
        exited = False
        for inst in list(self._instances.values()):
            if inst.wait_ref in done:
                try:
                    code = int(ray.get(inst.wait_ref))
                except ray.exceptions.RayError as exc:
                    code = KILLED
                    self._warnings.append(
                        Warning_(inst.spec.instance_id, f"its Ray actor died: {_first(exc)}")
                    )
                self._exits.append(
                    ExitEvent(inst.spec.instance_id, inst.running.pid, code, time.time_ns())
                )
                self._forget(inst)
                exited = True
            elif inst.watch_ref in done:
                try:
                    info = ray.get(inst.watch_ref)
                except ray.exceptions.RayError:
                    inst.watch_ref = None  # dead for good: its wait_ref reports it
                    continue
                self._moved(inst, info)
        return exited

    def _moved(self, inst: _Instance, info: Mapping[str, Any]) -> None:
        """The actor was restarted by Ray (node loss): same identity, new place."""
        inst.incarnation = str(info["incarnation"])
        inst.node_id = str(info["node_id"])
        inst.lost_since = None
        inst.watch_ref = inst.actor.watch.remote(inst.incarnation)
        if info["error"]:
            self._warnings.append(
                Warning_(inst.spec.instance_id, f"not restarted after a node loss: {info['error']}")
            )
        old = inst.running
        inst.running = self._running(inst.spec.instance_id, info)
        self._add_warnings(inst.spec.instance_id, info)
        log.warning(
            "%s moved by Ray from %s (pid %d) to %s (pid %d) after a node loss",
            inst.spec.instance_id,
            old.node,
            old.pid,
            inst.running.node,
            inst.running.pid,
        )

    def _forget(self, inst: _Instance) -> None:
        self._instances.pop(inst.spec.instance_id, None)
        ray = self._ray
        try:
            if inst.watch_ref is not None:
                # Killed with a call in flight, Ray would log that it retries the call.
                refs = [inst.actor.release.remote(), inst.watch_ref]
                ray.wait(refs, num_returns=2, timeout=2.0)
            ray.kill(inst.actor, no_restart=True)
        except Exception as exc:  # already dead
            log.debug("killing the actor of %s: %s", inst.spec.instance_id, exc)
        self._release(inst.group, inst.bundle)

    def _watch_loop(self) -> None:
        """Report exits and moves as they happen, so ``on_event`` fires without polling."""
        ray = self._ray
        next_check = time.monotonic() + NODE_CHECK_S
        while not self._closing.is_set():
            with self._lock:
                refs = self._refs()
            if not refs:
                self._closing.wait(POLL_S)
                continue
            try:
                ready, _ = ray.wait(refs, num_returns=1, timeout=POLL_S)
                exited = False
                if ready and not self._closing.is_set():
                    with self._lock:
                        exited = self._collect(ready)
                if time.monotonic() >= next_check and not self._closing.is_set():
                    next_check = time.monotonic() + NODE_CHECK_S
                    exited = self._check_lost(ray.nodes()) or exited
            except Exception as exc:  # Ray is shutting down under us
                log.debug("watching instances: %s", exc)
                return
            if exited and self.on_event is not None:
                self.on_event()

    def _lease_loop(self) -> None:
        """Renew the lease (active) or ask for it (standby) every ``POLL_S``."""
        while not self._closing.wait(POLL_S):
            try:
                self._leadership_step()
            except Exception:  # the leadership must outlive a bug in one step
                log.exception("ray backend: leadership step failed")

    def _check_lost(self, nodes: list[dict[str, Any]]) -> bool:
        """Give up on instances whose node died and that Ray cannot (or did not) re-place.

        Ray would keep such an actor pending for ever (its label is on no other node); the
        supervisor hears an exit (-9) instead, and its restart policy decides.
        """
        alive = [node for node in nodes if node.get("Alive")]
        alive_ids = {str(node["NodeID"]) for node in alive}
        for node_id in self._alive_ids - alive_ids:
            log.warning("Ray node %s lost", self.node_name(node_id))
        self._alive_ids = alive_ids
        now = time.monotonic()
        exited = False
        with self._lock:
            for inst in list(self._instances.values()):
                if inst.node_id in alive_ids:
                    continue
                if inst.lost_since is None:
                    inst.lost_since = now
                    if _fits_somewhere(alive, inst.demand):
                        log.warning(
                            "%s: node %s lost; Ray is restarting it elsewhere",
                            inst.spec.instance_id,
                            inst.running.node,
                        )
                        continue
                    why = f"no other node offers {_show(inst.demand)}"
                elif now - inst.lost_since > self.start_timeout_s:
                    why = f"Ray did not restart it within {self.start_timeout_s:g} s"
                else:
                    continue
                self._warnings.append(
                    Warning_(inst.spec.instance_id, f"node {inst.running.node} lost and {why}")
                )
                self._exits.append(
                    ExitEvent(inst.spec.instance_id, inst.running.pid, KILLED, time.time_ns())
                )
                inst.watch_ref = None  # the actor cannot answer a release
                self._forget(inst)
                exited = True
        return exited


class _NotRestartableInGroup(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "restartable detached actor with a placement group" not in record.getMessage()


_QUIET_GROUPS = _NotRestartableInGroup()  # one instance: added once, however many opens


def _remove_groups_of(ray: Any, namespace: str) -> None:
    """Remove the (detached) placement groups of ``namespace``'s missions still in place."""
    try:
        table = ray.util.placement_group_table()
    except Exception as exc:  # the cluster may be gone already
        log.debug("listing placement groups: %s", exc)
        return
    for entry in table.values():
        name = str(entry.get("name") or "")
        if name.startswith(f"{namespace}/") and entry.get("state") != "REMOVED":
            try:
                ray.util.remove_placement_group(ray.util.get_placement_group(name))
            except Exception as exc:
                log.debug("removing placement group %s: %s", name, exc)


def _fits_somewhere(nodes: Sequence[Mapping[str, Any]], demand: Mapping[str, float]) -> bool:
    """Some node of ``nodes`` has (in total) every resource of ``demand``."""
    for node in nodes:
        have = node.get("Resources", {})
        if all(have.get(key, 0.0) + 1e-9 >= value for key, value in demand.items()):
            return True
    return False


def _ray_node_resource(name: str) -> bool:
    """Resources Ray puts on every node itself: ``node:<ip>`` and the head marker."""
    if name.startswith("__"):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _settings(spec: LaunchSpec) -> Settings:
    """The instance's settings (its restarts, its cluster's size); a bad one fails its start."""
    try:
        return Settings.from_env(spec.env)
    except SettingsError as exc:
        raise OrchestratorError(f"{spec.instance_id}: {exc}") from None


def _show(demand: Mapping[str, float]) -> str:
    parts = []
    for key, value in demand.items():
        if key == "memory":
            parts.append(f"memory {value / 2**20:g} MiB")
        else:
            parts.append(f"{key} {value:g}")
    return "{" + ", ".join(parts) + "}"


def _first(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
