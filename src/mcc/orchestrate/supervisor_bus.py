"""The supervisor on the bus: the heartbeats it hears (`HeartbeatIntake`, a part it owns), the
``MissionStatus`` it publishes (and ``supervisor.json``), and the ``Command``s it answers
(``mcc status|scale|phase|…``, through its public actions).

The status functions read a `Supervisor`'s public state; it calls them under its lock.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from mcc.bus.rpc import COMMAND_CHANNEL
from mcc.errors import MccError
from mcc.orchestrate import registry
from mcc.orchestrate.instances import LIVE, Instance, S
from mcc.orchestrate.supervisor_leadership import Succession, epoch_of
from mcc.types import Command, CommandReply, Heartbeat, MissionStatus, SystemEntry, SystemState

if TYPE_CHECKING:  # types only: the Supervisor composes this part and hands itself in
    from mcc.bus import Reader
    from mcc.orchestrate.supervisor import Supervisor

log = logging.getLogger("mcc.orchestrate")


#: How many (system id, pid) pairs `HeartbeatIntake` keeps as running before it starts over.
MAX_RUNNING_KEYS = 65536


class HeartbeatIntake:
    """The heartbeats a supervisor hears: queued as they arrive (on Cyclone's thread, no lock
    waited for), applied by the supervisor's loop (`apply`): an instance's marks it alive,
    another supervisor's goes to the `Succession`. In a secured mission a beat counts only
    when it comes from the identity that owns what it names; the others are counted by reason
    (`refused`)."""

    def __init__(self, mission: str, succession: Succession, *, wake: Callable[[], None]) -> None:
        self.mission = mission
        self._succession = succession
        self._wake = wake
        # Bounded: a flood of beats cannot grow it (the loop keeps up long before that).
        # (when, when in ns, beat, its authenticated source: `Reader.source_of`)
        self._beats: deque[tuple[float, int, Heartbeat, str | None]] = deque(maxlen=65536)
        #: Beats refused because their sender is not who they name, by reason.
        self.refused: Counter[str] = Counter()
        # (system id, pid) of the instances whose beat marked them running: their next beats
        # change nothing the loop must act on at once, and wait for its next tick.
        self._running: set[tuple[str, int]] = set()

    def on_data(self, reader: Reader[Heartbeat]) -> None:
        """On Cyclone's thread: stamp and queue; the loop applies them. Only a beat that may
        change a state wakes the loop (an instance's first, a new process's, a supervisor's);
        the others wait for its next tick (``tick_s``). A new instance beats every 20 ms for
        its first second, and a reconcile for each of those beats cost the supervisor 44 ms
        of CPU in the first 265 ms of a primes job of 10^8 that began as its workers did (8
        ms with the tick), on 2 cores where the workers wanted both."""
        now, now_ns = time.monotonic(), time.time_ns()
        wake = False
        for hb in reader.take():
            self._beats.append((now, now_ns, hb, reader.source_of(hb)))
            wake = wake or (hb.system_id, hb.pid) not in self._running
        if wake:
            self._wake()

    def apply(
        self,
        instances: Mapping[str, Instance],
        events: list[tuple[int, str, str]],
        *,
        secured: bool,
    ) -> bool:
        """Under the supervisor's lock: apply the queued beats to ``instances`` (a first beat
        is recorded in ``events``); whether any instance changed state."""
        prefix = f"{self.mission}/"
        supervisors = f"{prefix}supervisor/"
        own = f"{supervisors}{os.getpid()}"
        changed = False
        while self._beats:
            now, now_ns, hb, source = self._beats.popleft()
            if secured and not self._from_its_owner(hb, source):
                continue
            if hb.system_id.startswith(supervisors):
                if hb.system_id != own:
                    self._succession.hear_peer(hb.system_id, hb, now)
                continue
            if hb.system_id.startswith(prefix):
                self._succession.hear_mission(now)
            inst = instances.get(hb.system_id)
            if inst is None or inst.state not in LIVE or not _beat_of(hb, inst):
                continue
            if hb.state in (S.SYSTEM_STOPPED, S.SYSTEM_FAILED):
                continue  # a last word before exiting: the exit event says the rest
            inst.last_beat_mono = now
            if inst.state == S.SYSTEM_STARTING:
                inst.set_state(S.SYSTEM_RUNNING)
                inst.since_ns = now_ns  # when it beat, not when the loop saw it
                events.append((now_ns, inst.id, "first heartbeat"))
                changed = True
                if len(self._running) >= MAX_RUNNING_KEYS:  # restarts add pids: bounded
                    self._running.clear()
                self._running.add((hb.system_id, hb.pid))
            if hb.device:
                inst.device = hb.device
        return changed

    def _from_its_owner(self, hb: Heartbeat, source: str | None) -> bool:
        """Whether ``hb`` comes from the identity that owns what it names: a supervisor's beat
        from a supervisor identity, ``MISSION/SYSTEM/INDEX`` from ``SYSTEM.INDEX``. In a
        secured mission the source is authenticated, so a stolen radar identity can neither
        keep a stopped tracker "running" nor claim a supervisor's epoch. A refusal is counted
        and the first of each source logged."""
        from mcc.security.mission import principal_of

        owner = principal_of(hb.system_id)
        if owner is not None and hb.system_id.startswith(f"{self.mission}/"):
            if source == owner:
                return True
            why = f"beat as {owner[:80]} from {source or 'no source'}"
        else:
            why = f"beat naming no instance of this mission from {source or 'no source'}"
        self.refused[why if len(self.refused) < 256 else "other"] += 1
        if self.refused[why] == 1:
            log.warning(
                "mission %s: heartbeat refused (%s: %.80r); further ones are counted",
                self.mission,
                why,
                hb.system_id,
            )
        return False


def status(sup: Supervisor, peers: Iterable[tuple[float, Heartbeat]]) -> dict[str, Any]:
    """Under the supervisor's lock: the mission's state as a plain dict (what ``mcc status
    --json`` prints); ``peers``: (when heard, last beat) of the other supervisors."""
    return {
        "mission": sup.mission.mission,
        "phase": sup.phase,
        "state": _mission_state(sup).name.removeprefix("SYSTEM_").lower(),
        "backend": sup.backend.name,
        "domain": sup.mission.domain,
        "security": sup.mission.security,
        "run_dir": str(sup.run_dir),
        "clusters": _clusters(sup),
        "supervisors": _supervisors(sup, peers),
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


def _supervisors(sup: Supervisor, peers: Iterable[tuple[float, Heartbeat]]) -> list[dict[str, Any]]:
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
    for seen, hb in peers:
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


def mission_status(sup: Supervisor) -> MissionStatus:
    """Under the supervisor's lock: the ``MissionStatus`` it publishes."""
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
    return MissionStatus(
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


def handle(
    sup: Supervisor,
    command: Command,
    *,
    sender: Callable[[Command], str],
    record: Callable[[str, str], None],
) -> CommandReply:
    """The replier's thread: one operator command, through the supervisor's public actions.
    ``sender``: who sent it (its authenticated identity); ``record``: adds an event (under the
    supervisor's lock)."""
    if command.mission and command.mission != sup.mission.mission:
        raise MccError(f"this domain runs mission {sup.mission.mission!r}, not {command.mission!r}")
    args = json.loads(command.args_json or "{}")
    verb, target = command.verb, command.target
    if sup.role != "active":
        raise MccError(f"this supervisor is {sup.role}, not active (epoch {sup.epoch})")
    if verb != "status":  # who commanded: the sender's identity, never a field it wrote
        who = sender(command)
        log.info("command %s %s from %s (%s)", verb, target, who, command.client_id)
        record(f"{COMMAND_CHANNEL}/{who}", f"{verb} {target}")
    result: Any = None
    if verb == "status":
        result = sup.status()
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


def audit(sup: Supervisor, command: Command, result: str, message: str, *, who: str) -> None:
    """Record ``command`` (not ``status``) and its ``result`` in the mission's audit, as its
    sender's identity ``who`` (the partition it writes in: authenticated on a secured bus) and
    the person the sender says it acts for (``on_behalf_of``: the console's web user)."""
    if command.verb == "status" or sup.audit is None:
        return
    sup.audit.record_command(
        who=who, role="operator", verb=command.verb, target=command.target,
        args_json=command.args_json, client=command.client_id, result=result, message=message,
        by="supervisor",
    )  # fmt: skip


def write_summary(sup: Supervisor) -> None:
    summary = {
        **sup.status(),
        "events": [{"time_ns": t, "instance": i, "event": e} for t, i, e in sup.events],
    }
    registry.write_private(sup.run_dir / "supervisor.json", json.dumps(summary, indent=2))


def _beat_of(hb: Heartbeat, inst: Instance) -> bool:
    """Whether ``hb`` can be ``inst``'s: the pid it names is the one the backend started (a
    beat naming pid 0 or another process is not this instance's, whoever sent it); where the
    backend knows no pid (a Ray actor before its first beat), any real pid."""
    if hb.pid <= 0:
        return False
    return not inst.pid or hb.pid == inst.pid


def _cpu_list(cores: tuple[int, ...]) -> str:
    return ",".join(map(str, cores))
