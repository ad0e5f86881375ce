"""The supervisor on the bus: the heartbeats it hears, the ``MissionStatus`` it publishes (and
``supervisor.json``), and the ``Command``s it answers (``mcc status|scale|phase|…``).

Functions of the `Supervisor` they serve; the status is read under its lock.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from mcc.bus.rpc import COMMAND_CHANNEL
from mcc.errors import MccError
from mcc.orchestrate import registry
from mcc.orchestrate.instances import LIVE, Instance, S
from mcc.orchestrate.supervisor_leadership import epoch_of
from mcc.types import Command, CommandReply, Heartbeat, MissionStatus, SystemEntry, SystemState

if TYPE_CHECKING:
    from mcc.orchestrate.supervisor import Supervisor

log = logging.getLogger("mcc.orchestrate")


def apply_heartbeats(sup: Supervisor) -> None:
    prefix = f"{sup.mission.mission}/"
    supervisors = f"{prefix}supervisor/"
    own = f"{supervisors}{os.getpid()}"
    secured = sup._bus is not None and sup._bus.secured
    while sup._beats:
        now, now_ns, hb, source = sup._beats.popleft()
        if secured and not _beat_from_its_owner(sup, hb, source):
            continue
        if hb.system_id.startswith(supervisors):
            if hb.system_id != own and (len(sup._peers) < 64 or hb.system_id in sup._peers):
                sup._peers[hb.system_id] = (now, hb)
                sup._heard_mono = now
            continue
        if hb.system_id.startswith(prefix):
            sup._mission_beat_mono = sup._heard_mono = now
        inst = sup.instances.get(hb.system_id)
        if inst is None or inst.state not in LIVE or not _beat_of(hb, inst):
            continue
        if hb.state in (S.SYSTEM_STOPPED, S.SYSTEM_FAILED):
            continue  # a last word before exiting: the exit event says the rest
        inst.last_beat_mono = now
        if inst.state == S.SYSTEM_STARTING:
            inst.set_state(S.SYSTEM_RUNNING)
            inst.since_ns = now_ns  # when it beat, not when the loop saw it
            sup.events.append((now_ns, inst.id, "first heartbeat"))
            sup._status_dirty = True
        if hb.device:
            inst.device = hb.device


def status(sup: Supervisor) -> dict[str, Any]:
    """The mission's state as a plain dict (what ``mcc status --json`` prints)."""
    with sup._lock:
        return {
            "mission": sup.mission.mission,
            "phase": sup.phase,
            "state": _mission_state(sup).name.removeprefix("SYSTEM_").lower(),
            "backend": sup.backend.name,
            "domain": sup.mission.domain,
            "security": sup.mission.security,
            "run_dir": str(sup.run_dir),
            "clusters": _clusters(sup),
            "supervisors": _supervisors(sup),
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
                for i in _sorted_instances(sup)
            ],
        }


def _supervisors(sup: Supervisor) -> list[dict[str, Any]]:
    """This supervisor and the others it hears: role, epoch and how fresh their beat is."""

    now = time.monotonic()
    rows = [
        {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "role": sup.role,
            "epoch": sup.epoch,
            "beat_age_s": 0.0,
            "healthy": True,
        }
    ]
    for seen, hb in sup._peers.values():
        age = now - seen
        if hb.state == S.SYSTEM_STOPPED or age > 30.0:
            continue
        role = "active" if hb.state == S.SYSTEM_RUNNING else "standby"
        rows.append(
            {
                "pid": hb.pid,
                "host": hb.host,
                "role": role,
                "epoch": epoch_of(hb) or 0,
                "beat_age_s": round(age, 2),
                "healthy": age < sup.lease_s,
            }
        )
    return rows


def _clusters(sup: Supervisor) -> dict[str, dict[str, Any]]:
    return {
        name: {"size": sup.sizes[name], "min": c.min, "max": c.max, "placement": c.placement}
        for name, c in sup.mission.clusters.items()
    }


def _sorted_instances(sup: Supervisor) -> Iterator[Instance]:
    return iter(sorted(sup.instances.values(), key=lambda i: (sup.order.index(i.system), i.index)))


def _mission_state(sup: Supervisor) -> SystemState:
    if sup.state in (S.SYSTEM_STOPPING, S.SYSTEM_STOPPED):
        return sup.state
    states = {i.state for i in sup.instances.values()}
    if S.SYSTEM_FAILED in states:
        return S.SYSTEM_DEGRADED
    if states & {S.SYSTEM_PENDING, S.SYSTEM_STARTING}:
        return S.SYSTEM_STARTING
    return S.SYSTEM_RUNNING


def publish_status(sup: Supervisor) -> None:
    with sup._lock:
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
            for i in _sorted_instances(sup)
        ]
        status = MissionStatus(
            mission=sup.mission.mission,
            phase=sup.phase,
            state=_mission_state(sup),
            domain_id=sup.mission.domain,
            run_dir=str(sup.run_dir),
            systems=entries,
            time_ns=time.time_ns(),
            backend=sup.backend.name,
            clusters_json=json.dumps(_clusters(sup)),
        )
        sup._status_dirty = False
        sup._last_status = time.monotonic()
    sup._status_writer.write(status)


def handle(sup: Supervisor, command: Command) -> CommandReply:
    if command.mission and command.mission != sup.mission.mission:
        raise MccError(f"this domain runs mission {sup.mission.mission!r}, not {command.mission!r}")
    args = json.loads(command.args_json or "{}")
    verb, target = command.verb, command.target
    if sup.role != "active":
        raise MccError(f"this supervisor is {sup.role}, not active (epoch {sup.epoch})")
    if verb != "status":  # who commanded: the sender's identity, never a field it wrote
        assert sup._replier is not None
        sender = sup._replier.sender(command)
        log.info("command %s %s from %s (%s)", verb, target, sender, command.client_id)
        with sup._lock:
            sup.events.append((time.time_ns(), f"{COMMAND_CHANNEL}/{sender}", f"{verb} {target}"))
    result: Any = None
    if verb == "status":
        result = status(sup)
    elif verb == "scale":
        sup.scale(target, int(args["size"]))
    elif verb == "phase":
        sup.set_phase(target or args["phase"])
    elif verb == "stop":
        sup.stop_system(target)
    elif verb == "start":
        sup.start_system(target)
    elif verb == "restart":
        result = sup.restart(target)
    elif verb == "logs":
        path = sup.log_path(target)
        lines = int(args.get("lines", 50))
        text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else []
        result = {"path": str(path), "lines": text}
    elif verb == "down":
        sup.down()
    else:
        verbs = "status, scale, phase, stop, start, restart, logs, down"
        raise MccError(f"unknown verb {verb!r}; verbs: {verbs}")
    return CommandReply(ok=True, message=f"{verb} {target}".strip(), result_json=json.dumps(result))


def audit(sup: Supervisor, command: Command, result: str, message: str) -> None:
    """Record ``command`` (not ``status``) and its ``result`` in the mission's audit, as its
    sender's identity (the partition it writes in: authenticated on a secured bus) and the
    person the sender says it acts for (``on_behalf_of``: the console's web user)."""
    if command.verb == "status" or sup.audit is None:
        return
    sup.audit.record_command(
        who=sup._replier.sender(command) if sup._replier is not None else "unknown",
        role="operator", verb=command.verb, target=command.target, args_json=command.args_json,
        client=command.client_id, result=result, message=message, by="supervisor",
    )  # fmt: skip


def write_summary(sup: Supervisor) -> None:
    summary = {
        **status(sup),
        "events": [{"time_ns": t, "instance": i, "event": e} for t, i, e in sup.events],
    }
    registry.write_private(sup.run_dir / "supervisor.json", json.dumps(summary, indent=2))


def _beat_from_its_owner(sup: Supervisor, hb: Heartbeat, source: str | None) -> bool:
    """Whether ``hb`` comes from the identity that owns what it names: a supervisor's beat
    from a supervisor identity, ``MISSION/SYSTEM/INDEX`` from ``SYSTEM.INDEX``. In a secured
    mission the source is authenticated, so a stolen radar identity can neither keep a stopped
    tracker "running" nor claim a supervisor's epoch. A refusal is counted and the first of
    each source logged."""
    from mcc.security.mission import principal_of

    owner = principal_of(hb.system_id)
    if owner is not None and hb.system_id.startswith(f"{sup.mission.mission}/"):
        if source == owner:
            return True
        why = f"beat as {owner[:80]} from {source or 'no source'}"
    else:
        why = f"beat naming no instance of this mission from {source or 'no source'}"
    sup.refused_beats[why if len(sup.refused_beats) < 256 else "other"] += 1
    if sup.refused_beats[why] == 1:
        log.warning(
            "mission %s: heartbeat refused (%s: %.80r); further ones are counted",
            sup.mission.mission,
            why,
            hb.system_id,
        )
    return False


def _beat_of(hb: Heartbeat, inst: Instance) -> bool:
    """Whether ``hb`` can be ``inst``'s: the pid it names is the one the backend started (a
    beat naming pid 0 or another process is not this instance's, whoever sent it); where the
    backend knows no pid (a Ray actor before its first beat), any real pid."""
    if hb.pid <= 0:
        return False
    return not inst.pid or hb.pid == inst.pid


def _cpu_list(cores: tuple[int, ...]) -> str:
    return ",".join(map(str, cores))
