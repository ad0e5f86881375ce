"""Replicated supervisors: becoming the active one, adopting what runs and the desired state the
previous one left with the node agent, being fenced, and claiming from a silent active one.

Functions of the `Supervisor` they act on, called under its lock where they change its state
(`mcc.orchestrate.supervisor` tells the whole protocol).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcc.bus import Replier
from mcc.bus.rpc import COMMAND_CHANNEL
from mcc.errors import OrchestratorError
from mcc.orchestrate import registry
from mcc.orchestrate.backends.base import Leadership
from mcc.orchestrate.instances import Instance, S
from mcc.orchestrate.manifest import Cluster
from mcc.types import Command, CommandReply, Heartbeat

if TYPE_CHECKING:
    from mcc.orchestrate.supervisor import Supervisor

log = logging.getLogger("mcc.orchestrate")
#: A new standby has not discovered everyone yet: no claim in its first seconds.
STANDBY_GRACE_S = 3.0


def activate(sup: Supervisor, leadership: Leadership | None) -> None:
    """Under the lock: become the active supervisor, adopting what runs."""
    sup.role = "active"
    sup.epoch = leadership.epoch if leadership is not None else 0
    if leadership is not None and (leadership.instances or leadership.state):
        _adopt(sup, leadership)
    if sup._beat is not None:
        sup._beat.state = S.SYSTEM_RUNNING
        sup._beat.message = f"active epoch {sup.epoch}"
    if sup._replier is None:
        sup._replier = Replier[Command, CommandReply](
            sup.bus,
            sup._handle,
            replier_id=f"supervisor:{sup.mission.mission}",
            channel=COMMAND_CHANNEL,
        ).start()
    registry.register(sup)
    sup._status_dirty = True


def _adopt(sup: Supervisor, leadership: Leadership) -> None:
    """Take over the running instances and the desired state another supervisor left."""
    assert sup._planner is not None
    state = leadership.state if isinstance(leadership.state, dict) else {}
    same = state.get("fingerprint") == _fingerprint(sup)
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
        sup._planner.adopt(
            inst.id, system, running.node, cpu_set=inst.cpu_set, gpu_ids=gpu_ids, group=group
        )
        sup.instances[inst.id] = inst
        sup._event(inst.id, f"adopted (pid {inst.pid}, epoch {sup.epoch})")
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


def _fingerprint(sup: Supervisor) -> str:
    """What must not change for a supervisor to adopt the previous one's instances."""

    text = sup.mission.model_dump_json()
    return hashlib.sha256(text.encode()).hexdigest()[:32]


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


def _desired_state(sup: Supervisor) -> dict[str, Any]:
    now = time.monotonic()
    return {
        "fingerprint": _fingerprint(sup),
        "phase": sup.phase,
        "sizes": dict(sup.sizes),
        "disabled": sorted(sup.disabled),
        "epoch_ns": sup.epoch_ns,
        "run_dir": str(sup.run_dir.resolve()),
        "instances": {
            i.id: {
                "cpu_set": list(i.cpu_set),
                "gpu_ids": list(p.gpu_ids) if (p := sup._placement(i.id)) else [],
                "device": i.device,
                "restarts": i.restarts,
                "ran_s": round(now - i.started_mono, 1) if i.started_mono else 0.0,
            }
            for i in sup.instances.values()
            if i.pid
        },
    }


def save_state(sup: Supervisor) -> None:
    state = _desired_state(sup)
    instances = state["instances"]
    comparable = {**state, "instances": {k: {**v, "ran_s": 0} for k, v in instances.items()}}
    if comparable != sup._saved_state:
        sup._saved_state = comparable
        try:
            sup.backend.save_state(state)
        except OrchestratorError as exc:
            log.warning("cannot leave the desired state with the node agent: %s", exc)


def on_fenced(sup: Supervisor, epoch: int) -> None:
    """The backend's thread: another supervisor took over (epoch ``epoch``)."""
    with sup._lock:
        if sup.role == "fenced":
            return
        sup.role = "fenced"
        sup.epoch = epoch
    log.error(
        "mission %s: supervisor epoch %d took over; this one (pid %d) no longer commands "
        "and leaves",
        sup.mission.mission,
        epoch,
        os.getpid(),
    )
    if sup._beat is not None:
        sup._beat.state = S.SYSTEM_STOPPED
        sup._beat.message = f"fenced by epoch {epoch}"
    replier, sup._replier = sup._replier, None
    if replier is not None:
        replier.stop()
    registry.unregister(sup)
    sup.fenced.set()
    sup._done.set()


def watch_active(sup: Supervisor, now: float) -> None:
    """A standby: claim when the active supervisor is silent while the mission is not."""
    active = [(t, hb) for t, hb in sup._peers.values() if hb.state == S.SYSTEM_RUNNING]
    last_active = max((t for t, _ in active), default=sup._standby_since)
    for _, hb in active:
        epoch = epoch_of(hb)
        if epoch is not None and epoch > sup.epoch:
            sup.epoch = epoch
    if now - sup._standby_since < STANDBY_GRACE_S or now - last_active < sup.lease_s:
        return
    if now - sup._mission_beat_mono > sup.lease_s or now - sup._last_claim < sup.lease_s:
        return  # nothing heard at all: this standby is the one cut off
    sup._last_claim = now
    log.warning(
        "mission %s: the active supervisor is silent for %.1f s while the instances "
        "beat: claiming (epoch %d)",
        sup.mission.mission,
        now - last_active,
        sup.epoch,
    )
    sup.backend.claim(sup.epoch)


def epoch_of(hb: Heartbeat) -> int | None:
    """The epoch a supervisor's beat names (``active epoch N`` / ``standby epoch N``)."""
    words = hb.message.split()
    if len(words) == 3 and words[1] == "epoch" and words[2].isdigit():
        return int(words[2])
    return None
