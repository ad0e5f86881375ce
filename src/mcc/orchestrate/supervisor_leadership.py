"""Replicated supervisors: which one leads (`Succession`: role, fencing epoch, the other
supervisors heard, when to claim), and what passes from one to the next (`adopt` the running
instances and the desired state the previous one left with the node agent, `desired_state` to
leave).

`mcc.orchestrate.supervisor` tells the whole protocol; the `Supervisor` composes a `Succession`
and calls these under its lock.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcc.orchestrate.backends.base import Leadership
from mcc.orchestrate.instances import Instance, S
from mcc.orchestrate.manifest import Cluster
from mcc.orchestrate.planner import Placement, Planner
from mcc.types import Heartbeat

if TYPE_CHECKING:  # types only: the Supervisor composes this part and hands itself in
    from mcc.orchestrate.supervisor import Supervisor

log = logging.getLogger("mcc.orchestrate")
#: A new standby has not discovered everyone yet: no claim in its first seconds.
STANDBY_GRACE_S = 3.0
#: A standby that was cut off and hears the mission again waits this long for the active
#: supervisor before it may claim (unless it hears it sooner): after a partition longer than
#: a participant's lease every pair of participants discovers and, secured, authenticates
#: each other again, in no set order; on the container lab the active supervisor came back
#: 1-2 s after the instances, past `STANDBY_GRACE_S` from their first beat.
REJOIN_GRACE_S = 10.0
#: Other supervisors remembered at most (a flood of forged names cannot grow the table).
MAX_PEERS = 64


class Succession:
    """Who of the mission's supervisors leads, as this one sees it.

    Holds this supervisor's ``role`` (active | standby | fenced) and ``epoch`` (the node agent's
    fencing epoch of its leadership), the last beat of each other supervisor, when it last heard
    the mission and anyone at all, when it stood by and last claimed, and the desired state it
    last left for a successor. Not thread-safe: its `Supervisor` calls it under its lock.
    """

    def __init__(self, mission: str, *, lease_s: float) -> None:
        self.mission = mission
        self.role = "active"
        self.epoch = 0
        #: How long a standby waits for a silent active one (hearing the mission) to claim.
        self.lease_s = lease_s
        self._peers: dict[str, tuple[float, Heartbeat]] = {}  # other supervisors' last beats
        self._mission_mono = 0.0  # last beat of any instance of the mission
        self._heard_mono = 0.0  # last beat of anyone of the mission but this supervisor
        self._standby_since = 0.0
        self._rejoining = False  # cut off, the mission heard again, the active one not yet
        self._last_claim = 0.0
        self._left: Any = None  # the desired state last left with the agent (comparable form)

    # -- role --------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        return self.role == "active"

    def lead(self, epoch: int) -> None:
        """This supervisor is the active one, at ``epoch``."""
        self.role, self.epoch = "active", epoch

    def stand_by(self, epoch: int, now: float) -> None:
        """Another supervisor (``epoch``) is active: this one stands by from ``now``."""
        self.role, self.epoch = "standby", epoch
        self._standby_since = now

    def fence(self, epoch: int) -> bool:
        """Another supervisor took over at ``epoch``; False when this one was fenced already."""
        if self.role == "fenced":
            return False
        self.role, self.epoch = "fenced", epoch
        return True

    @property
    def beat_message(self) -> str:
        """What this supervisor's heartbeat says of it (`epoch_of` reads it back)."""
        if self.role == "fenced":
            return f"fenced by epoch {self.epoch}"
        return f"{self.role} epoch {self.epoch}"

    # -- what it hears -----------------------------------------------------------------

    def hear_peer(self, system_id: str, hb: Heartbeat, now: float) -> None:
        """Another supervisor's beat (``system_id``: ``MISSION/supervisor/PID``)."""
        if len(self._peers) < MAX_PEERS or system_id in self._peers:
            self._peers[system_id] = (now, hb)
            self._heard_mono = now
            if hb.state == S.SYSTEM_RUNNING:
                self._rejoining = False

    def hear_mission(self, now: float) -> None:
        """A beat of one of the mission's instances. A standby that hears the mission again
        after a silence of `STANDBY_GRACE_S` (three heartbeat periods: it was cut off, and the
        partition healed) waits `REJOIN_GRACE_S` from then, or until it hears the active
        supervisor: the active one's beats may come seconds after the instances', and a claim
        in between would ask to take over from a supervisor that never stopped."""
        silent_s = now - self._mission_mono
        if self.role == "standby" and self._mission_mono and silent_s > STANDBY_GRACE_S:
            self._standby_since = now
            self._rejoining = True
        self._mission_mono = self._heard_mono = now

    @property
    def heard_mono(self) -> float:
        """When anyone of the mission but this supervisor was last heard (0: never)."""
        return self._heard_mono

    def peers(self) -> list[tuple[float, Heartbeat]]:
        """(when heard, last beat) of each other supervisor."""
        return list(self._peers.values())

    # -- claiming ----------------------------------------------------------------------

    def should_claim(self, now: float) -> bool:
        """A standby: whether to claim now (the active supervisor silent for a lease while the
        mission is not, past the grace of a new standby and a lease after the last claim). It
        follows the highest epoch it hears, so a claim names it."""
        active = [(t, hb) for t, hb in self._peers.values() if hb.state == S.SYSTEM_RUNNING]
        last_active = max((t for t, _ in active), default=self._standby_since)
        for _, hb in active:
            epoch = epoch_of(hb)
            if epoch is not None and epoch > self.epoch:
                self.epoch = epoch
        grace = REJOIN_GRACE_S if self._rejoining else STANDBY_GRACE_S
        if now - self._standby_since < grace or now - last_active < self.lease_s:
            return False
        if now - self._mission_mono > self.lease_s or now - self._last_claim < self.lease_s:
            return False  # nothing heard at all: this standby is the one cut off
        self._last_claim = now
        log.warning(
            "mission %s: the active supervisor is silent for %.1f s while the instances "
            "beat: claiming (epoch %d)",
            self.mission,
            now - last_active,
            self.epoch,
        )
        return True

    # -- the desired state left for a successor ----------------------------------------

    def changed(self, state: dict[str, Any]) -> bool:
        """Whether ``state`` (`desired_state`) differs from the one last left, in what a
        successor needs (run times aside); remembered when it does."""
        comparable = {
            **state,
            "instances": {k: {**v, "ran_s": 0} for k, v in state["instances"].items()},
        }
        if comparable == self._left:
            return False
        self._left = comparable
        return True


def epoch_of(hb: Heartbeat) -> int | None:
    """The epoch a supervisor's beat names (``active epoch N`` / ``standby epoch N``)."""
    words = hb.message.split()
    if len(words) == 3 and words[1] == "epoch" and words[2].isdigit():
        return int(words[2])
    return None


def fingerprint(sup: Supervisor) -> str:
    """What must not change for a supervisor to adopt the previous one's instances."""
    text = sup.mission.model_dump_json()
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def adopt(
    sup: Supervisor,
    leadership: Leadership,
    *,
    planner: Planner,
    event: Callable[[str, str], None],
) -> None:
    """Under the lock: take over the running instances and the desired state another
    supervisor left (``planner`` books their resources, ``event`` records each)."""
    state = leadership.state if isinstance(leadership.state, dict) else {}
    same = state.get("fingerprint") == fingerprint(sup)
    if state and not same:
        log.warning(
            "mission %s: the manifest changed since the running instances were started: "
            "they are restarted with the new one",
            sup.mission.mission,
        )
    if same:
        _restore(sup, state)
    metas = state.get("instances") if same else None
    metas = metas if isinstance(metas, dict) else {}
    now = time.monotonic()
    for running in leadership.instances:
        mission, _, rest = running.instance_id.partition("/")
        name, _, index_text = rest.rpartition("/")
        system = sup.systems.get(name)
        if mission != sup.mission.mission or system is None or not index_text.isdigit():
            log.warning("%s is not of this mission: stopping it", running.instance_id)
            sup.backend.kill(running.instance_id)
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
        planner.adopt(
            inst.id, system, running.node, cpu_set=inst.cpu_set, gpu_ids=gpu_ids, group=group
        )
        sup.instances[inst.id] = inst
        event(inst.id, f"adopted (pid {inst.pid}, epoch {sup.epoch})")
        if not same:
            sup.backend.stop(inst.id, grace_s=sup.mission.stop_grace_s)
            inst.set_state(S.SYSTEM_STOPPING, "manifest changed")
    log.warning(
        "mission %s: supervisor pid %d active (epoch %d): adopted %d running instances",
        sup.mission.mission,
        os.getpid(),
        sup.epoch,
        len(leadership.instances),
    )


def _restore(sup: Supervisor, state: dict[str, Any]) -> None:
    phase = state.get("phase")
    if phase in sup.mission.phases:
        sup.phase = phase
    sizes = state.get("sizes")
    if isinstance(sizes, dict):
        for name, size in sizes.items():
            if name in sup.sizes and isinstance(size, int) and size >= 0:
                sup.sizes[name] = size
    disabled = state.get("disabled")
    if isinstance(disabled, list):
        sup.disabled = {d for d in disabled if d in sup.systems}
    if isinstance(state.get("epoch_ns"), int):
        sup.epoch_ns = state["epoch_ns"]
    if isinstance(state.get("run_dir"), str) and state["run_dir"]:
        sup.run_dir = Path(state["run_dir"])


def desired_state(sup: Supervisor, placement: Callable[[str], Placement | None]) -> dict[str, Any]:
    """What a successor needs to carry on: the desired state and each running instance's
    placement (``placement``: the planner's, by instance id) and history."""
    now = time.monotonic()
    instances: Iterable[Instance] = sup.instances.values()
    return {
        "fingerprint": fingerprint(sup),
        "phase": sup.phase,
        "sizes": dict(sup.sizes),
        "disabled": sorted(sup.disabled),
        "epoch_ns": sup.epoch_ns,
        "run_dir": str(sup.run_dir.resolve()),
        "instances": {
            i.id: {
                "cpu_set": list(i.cpu_set),
                "gpu_ids": list(p.gpu_ids) if (p := placement(i.id)) else [],
                "device": i.device,
                "restarts": i.restarts,
                "ran_s": round(now - i.started_mono, 1) if i.started_mono else 0.0,
            }
            for i in instances
            if i.pid
        },
    }
