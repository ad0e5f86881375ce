"""Starting what the supervisor wants running: the queue of pending instances in start order
(dependencies first, strict FIFO when the pool is full), their placement, and the command line
and environment each one gets.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from mcc.bus import Transport
from mcc.errors import OrchestratorError
from mcc.orchestrate.backends.base import LaunchSpec
from mcc.orchestrate.instances import Instance, S
from mcc.orchestrate.manifest import Cluster, System
from mcc.orchestrate.planner import Placement, Planner
from mcc.orchestrate.runtime import RUNTIME_ARGV
from mcc.security.confine import Confinement, instance_confinement
from mcc.settings import child_env, current, env_name, environ

#: How an instance's DDS Security configuration names its identity's folder: Cyclone expands
#: the variable in the instance, where its backend set it to the folder it wrote.
IDENTITY_DIR_REF = "${" + env_name("identity_dir") + "}"
log = logging.getLogger("mcc.orchestrate")
_TEMP_VARS = ("TMPDIR", "TMP", "TEMP")  # where a process looks for its temporary folder

if TYPE_CHECKING:  # types only: the Supervisor composes this part and hands itself in
    from mcc.orchestrate.supervisor import Supervisor
    from mcc.security import Identity
    from mcc.security.mission import Topics


class Launcher:
    """The supervisor's launch queue: its pending instances started in order (dependencies
    first, strict FIFO when the pool is full: a request that does not fit holds back the later
    ones), each placed by ``planner`` and given its command line, environment, identity and
    confinement. It reads the supervisor's public desired state (phase, sizes, run folder,
    keystore); ``event`` records what it starts; ``home``: the supervisor's MCC_HOME, which
    no instance may reach."""

    def __init__(
        self,
        sup: Supervisor,
        planner: Planner,
        *,
        event: Callable[[str, str], None],
        home: Path,
        instance_base: Transport | None,
        system_topics: Mapping[str, Topics],
    ) -> None:
        self._sup = sup
        self._planner = planner
        self._event = event
        self._home = home
        #: The instances' base transport (a secured mission adds each one's identity).
        self._instance_base = instance_base
        self._system_topics = system_topics  # secured: what each system may do
        self._home_exposure_told = False  # MCC_HOME where instances may write: said once

    def start_pending(self, now: float) -> bool:
        """Under the supervisor's lock: start what is pending and may start now; whether the
        status changed (an instance started, failed or moved in the queue)."""
        sup = self._sup
        queue = sorted(
            (i for i in sup.instances.values() if i.state == S.SYSTEM_PENDING),
            key=lambda i: (i.queued_mono, sup.order.index(i.system), i.index),
        )
        changed = False
        blocked = False
        for position, inst in enumerate(queue):
            system = sup.systems[inst.system]
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
                    changed = True
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
                    changed = True
                continue
            self.launch(inst, system, placement)
            changed = True
        return changed

    def launch(self, inst: Instance, system: System, placement: Placement) -> None:
        """Start ``inst`` where ``placement`` says; a refusal fails it (the restart policy
        decides)."""
        spec = self._launch_spec(inst, system, placement)
        try:
            running = self._sup.backend.start(spec)
        except (OrchestratorError, OSError, TimeoutError) as exc:
            inst.set_state(S.SYSTEM_FAILED, f"backend could not start it: {exc}")
            return
        inst.pid, inst.host, inst.node = running.pid, running.host, running.node
        inst.cpu_set, inst.device = placement.cpu_set, spec.env[env_name("device")]
        inst.started_mono = time.monotonic()
        inst.last_beat_mono = None
        inst.killing = False
        running_now = not system.uses_heartbeat
        inst.set_state(S.SYSTEM_RUNNING if running_now else S.SYSTEM_STARTING, "")
        self._event(inst.id, "start")

    def _launch_spec(self, inst: Instance, system: System, placement: Placement) -> LaunchSpec:
        """The instance's command line and environment (`mcc.settings.child_env`), and what it
        was given of the node."""
        sup = self._sup
        mission = sup.mission
        device = {"none": "cpu", "shared": "remote:compute", "exclusive": "cuda:0"}
        identity = self._identity(inst)
        cluster = isinstance(system, Cluster)
        env = child_env(
            {
                **environ(),
                **sup.client_env,
                **self._identity_env(inst, identity),
                **mission.env,
                **system.env,
            },
            mission=mission.mission,
            system=inst.system,
            index=inst.index,
            instance_id=inst.id,
            domain=mission.domain,
            run_dir=sup.run_dir.resolve(),
            phase=sup.phase,
            epoch_ns=sup.epoch_ns,
            device=device[system.resources.gpu],
            heartbeat_period_s=min(1.0, system.health.timeout_s / 3),
            ray_max_restarts=0 if system.restart.policy == "never" else system.restart.max_restarts,
            cluster=inst.system if cluster else None,
            cluster_size=sup.sizes[inst.system] if cluster else None,
            config=None if system.config is None else json.dumps(system.config),
        )
        if placement.gpu_ids:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, placement.gpu_ids))
        if current().confine and not any(env.get(k) for k in _TEMP_VARS):
            # A library that picks its temporary folder by access(2), which Landlock does not
            # change (SQLite: /var/tmp before /tmp), would pick one the confinement refuses to
            # write: name the one it grants.
            env["TMPDIR"] = "/tmp"
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
            log_path=str(sup.run_dir / "logs" / f"{inst.system}-{inst.index}.log"),
            node=placement.node,
            cpus=system.resources.cpus,
            cpu_set=placement.cpu_set,
            priority=system.priority,
            memory_mb=system.resources.memory_mb,
            gpu=system.resources.gpu,
            gpu_ids=placement.gpu_ids,
            placement_group=inst.system if cluster else None,
            placement=system.placement if isinstance(system, Cluster) else "pack",
            labels=labels,
            confinement=self._confinement(env),
            identity=identity.bundle() if identity is not None else None,
        )

    def _identity(self, inst: Instance) -> Identity | None:
        """A secured mission: ``inst``'s own, fresh identity."""
        sup = self._sup
        if sup.keystore is None:
            return None
        from mcc.security.mission import instance_identity

        return instance_identity(
            sup.keystore,
            mission=sup.mission.mission,
            domain=sup.mission.domain,
            system=inst.system,
            index=inst.index,
            topics=self._system_topics[inst.system],
        )

    def _identity_env(self, inst: Instance, identity: Identity | None) -> dict[str, str]:
        """The environment that carries ``identity`` (none for an open mission): its DDS
        Security configuration names the files in ``$MCC_IDENTITY_DIR``, the private folder
        where the instance's backend writes them on its host (`LaunchSpec.identity`); no
        keystore path."""
        if identity is None:
            return {}
        env = secured(self._instance_base, identity, folder=IDENTITY_DIR_REF).apply_to_env({})
        return child_env(
            env, grants_at=self._sup.mission.where(inst.system), source=identity.source
        )

    def _confinement(self, env: Mapping[str, str]) -> Confinement | None:
        """What the instance may reach: nothing of the supervisor's MCC_HOME (keystores,
        agents' tokens, the console's users; the backend adds the folder it writes the
        instance's own identity to), writes in its run folder and temporary folders
        (`mcc.security.confine`); None when ``MCC_CONFINE`` is off."""
        if not current().confine:
            return None
        temp = [env[k] for k in _TEMP_VARS if env.get(k)]
        home = self._home
        conf = instance_confinement(home=home, run_dir=self._sup.run_dir.resolve(), temp_dirs=temp)
        if str(home) in conf.exposed and not self._home_exposure_told:
            self._home_exposure_told = True
            log.warning(
                "MCC_HOME %s is inside a folder every instance may write (/tmp, its run folder "
                "or $TMPDIR): instances can read its keystores and agent tokens; keep MCC_HOME "
                "elsewhere (default ~/.local/state/mcc)",
                home,
            )
        return conf

    def _ready(self, name: str) -> bool:
        """A dependency is ready when every wanted instance of it runs (and beats)."""
        instances = [i for i in self._sup.instances.values() if i.system == name]
        return all(i.state == S.SYSTEM_RUNNING for i in instances)


def secured(base: Transport | None, identity: Identity, *, folder: str | None = None) -> Transport:
    """``base`` (default: the environment's transport) with ``identity``'s DDS Security (its
    files in the keystore, or in ``folder``: `mcc.security.Identity.security_xml`)."""
    base = base or Transport.from_env()
    xml = identity.security_xml(folder)
    return dataclasses.replace(base, extra_xml=base.extra_xml + xml)
