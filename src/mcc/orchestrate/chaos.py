"""``mcc chaos``: faults on a running mission's netns nodes and instances.

    mcc chaos delay h2 --ms 50 [--jitter-ms 5]   # h2's outgoing traffic delayed (tc netem)
    mcc chaos loss h2 h3 --pct 10                 # 10 % of their outgoing packets lost
    mcc chaos partition h3                        # h3 cut off the bridge, both directions
    mcc chaos heal h3                             # undo partition, delay and loss
    mcc chaos kill tracker/0                      # SIGKILL an instance (SYSTEM = all of it)

Node faults act on the network lab that the local backend made for the mission's ``kind:
netns`` nodes (its description is ``<MCC_HOME>/netlab/<mission>.json``). ``kill`` kills an
instance's process group, as a crash would, and never takes the pid from the bus, where any
participant may answer a status request: it finds the process on this host from the mission's
registry record and checks it first (`instance_processes`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from mcc.errors import MccError, OrchestratorError
from mcc.netlab import NetLab, NetLabError, pid_alive
from mcc.orchestrate.manifest import NAME_PATTERN
from mcc.orchestrate.registry import ActiveMission, find, home, read_private
from mcc.settings import env_name

__all__ = ["add_parser", "find_lab", "instance_processes", "kill_instances"]

_NAME = NAME_PATTERN.removeprefix("^").removesuffix("$")
_TARGET = re.compile(rf"({_NAME})(?:/([0-9]{{1,9}}))?")
_INSTANCE_ID = re.compile(rf"({_NAME})/({_NAME})/([0-9]{{1,9}})")
_LOG_NAME = re.compile(rf"({_NAME})-([0-9]{{1,9}})\.log")  # the supervisor's SYSTEM-INDEX.log


def find_lab(mission: str | None) -> tuple[str, NetLab]:
    """The network lab of ``mission`` (or of the only mission with one) running here."""
    folder = home() / "netlab"
    labs: dict[str, dict[str, Any]] = {}
    refused: dict[str, str] = {}
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(read_private(path, what="the network lab description"))
            owner = data["owner_pid"] if isinstance(data, dict) else None
        except (OrchestratorError, ValueError, KeyError) as exc:
            refused[path.stem] = str(exc)
            continue
        if isinstance(owner, int) and not isinstance(owner, bool) and owner > 0:
            if pid_alive(owner):
                labs[path.stem] = data
        else:
            refused[path.stem] = f"the network lab description {path}: owner_pid = {owner!r}"
    if mission is not None:
        if mission not in labs:
            if mission in refused:
                raise OrchestratorError(refused[mission])
            raise OrchestratorError(
                f"mission {mission!r} has no network lab here (missions with netns nodes: "
                f"{', '.join(labs) or 'none'}); give its nodes `kind: netns` and `mcc up` it"
            )
        return mission, NetLab.attach(labs[mission])
    if len(labs) == 1:
        name, data = next(iter(labs.items()))
        return name, NetLab.attach(data)
    if not labs:
        why = "; refused: " + " | ".join(refused.values()) if refused else ""
        raise OrchestratorError(
            f"no running mission has netns nodes ({folder} has no live lab{why}); node faults "
            "need nodes of `kind: netns` (docs/operations.md)"
        )
    raise OrchestratorError(f"several missions have netns nodes ({', '.join(labs)}): --mission")


def instance_processes(record: ActiveMission) -> list[tuple[str, psutil.Process]]:
    """The instances of ``record``'s mission running on this host, as ``(id, process)``.

    Found and checked here, never told by the bus: a process of this user, leader of its own
    process group, that carries the instance's identity: ``MCC_INSTANCE_ID`` with this run's
    ``MCC_RUN_DIR`` in its environment (a process that was exec'd: commands, Ray), or, for an
    app the local backend forked without exec (its environment is the fork server's), the
    instance's log in this run folder as its stdout or stderr. On the local backend, only what
    the mission's node agent recorded (`_agent_instances`).
    """
    try:
        supervisor = psutil.Process(record.pid)
        ours = _owned(supervisor)
    except psutil.Error:
        ours = False
    if not ours:
        raise OrchestratorError(
            f"the supervisor of mission {record.mission!r} (pid {record.pid}, from its registry "
            "record) is not a process of yours on this host; is the mission still up?"
        )
    if record.backend == "local":
        return _agent_instances(record)
    candidates = list(psutil.process_iter())  # Ray's: the identity each carries picks them
    found = []
    for proc in candidates:
        with contextlib.suppress(psutil.Error, OSError):
            if (
                _owned(proc)
                and os.getpgid(proc.pid) == proc.pid
                and proc.status() != psutil.STATUS_ZOMBIE
            ):
                instance_id = _identity(proc, record)
                if instance_id is not None:
                    found.append((instance_id, proc))
    return sorted(found, key=lambda item: (item[0], item[1].pid))


def kill_instances(record: ActiveMission, targets: Sequence[str]) -> list[tuple[str, int]]:
    """SIGKILL the process groups of the instances of ``record``'s mission that match
    ``targets`` (SYSTEM or SYSTEM/INDEX), found by `instance_processes`; ``(id, pid)`` each."""
    wanted = [(target, _parse_target(target)) for target in targets]
    running = instance_processes(record)
    chosen: list[tuple[str, psutil.Process]] = []
    for target, (system, index) in wanted:
        matches = [
            (instance_id, proc)
            for instance_id, proc in running
            if instance_id.split("/")[1] == system
            and (index is None or instance_id.split("/")[2] == index)
        ]
        if not matches:
            live = [instance_id.split("/", 1)[1] for instance_id, _ in running]
            elsewhere = (
                " (its instances on other hosts are out of reach here)"
                if record.backend != "local"
                else ""
            )
            raise OrchestratorError(
                f"no running instance of mission {record.mission!r} on this host matches "
                f"{target!r}{elsewhere}; running here: {', '.join(live) or 'none'}"
            )
        chosen += [m for m in matches if m not in chosen]
    killed = []
    for instance_id, proc in chosen:
        if not proc.is_running():  # gone since it was checked (its pid may be another's now)
            continue
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # instances lead their own process group
        except ProcessLookupError:
            continue
        except PermissionError as exc:
            raise OrchestratorError(
                f"cannot kill {instance_id} (pid {proc.pid}): {exc.strerror}"
            ) from exc
        killed.append((instance_id, proc.pid))
    return killed


def _parse_target(target: str) -> tuple[str, str | None]:
    match = _TARGET.fullmatch(target)
    if match is None:
        raise OrchestratorError(
            f"{target!r} is not an instance: give SYSTEM or SYSTEM/INDEX, e.g. tracker or "
            "tracker/0 (see `mcc status`)"
        )
    index = match[2]
    return match[1], None if index is None else str(int(index))


def _owned(proc: psutil.Process) -> bool:
    uids = proc.uids()
    return bool(uids.real == os.getuid() and uids.effective == os.geteuid())


def _children(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return list(proc.children())
    except psutil.Error:
        return []


def _agent_instances(record: ActiveMission) -> list[tuple[str, psutil.Process]]:
    """The local backend's instances, as the mission's node agent records them in the user's
    private home: (instance id, pid, kernel start time), so a process that merely claims an
    identity, or took a dead instance's pid, is never one."""
    from mcc.orchestrate.agent import AgentPaths, proc_start_time
    from mcc.orchestrate.registry import home, read_private

    paths = AgentPaths.for_mission(home(), record.mission, record.domain)
    try:
        data = json.loads(read_private(paths.state, what="the node agent's record"))
        items = data["instances"]
    except (OSError, ValueError, KeyError, TypeError, MccError):
        return []
    found = []
    for item in items if isinstance(items, list) else []:
        with contextlib.suppress(psutil.Error, KeyError, TypeError, ValueError):
            pid, instance_id = int(item["pid"]), str(item["id"])
            if not instance_id.startswith(f"{record.mission}/"):
                continue
            if proc_start_time(pid) != int(item["start_time"]):
                continue
            proc = psutil.Process(pid)
            if _owned(proc) and os.getpgid(pid) == pid:
                found.append((instance_id, proc))
    return sorted(found, key=lambda item: (item[0], item[1].pid))


def _identity(proc: psutil.Process, record: ActiveMission) -> str | None:
    """The instance id ``proc`` carries for ``record``'s run, or None."""
    env = proc.environ()  # another process's, read by name: its values are not ours to check
    claimed = _INSTANCE_ID.fullmatch(env.get(env_name("instance_id"), ""))
    if claimed and claimed[1] == record.mission and env.get(env_name("run_dir")) == record.run_dir:
        return claimed[0]
    if record.backend == "local":
        logs = Path(record.run_dir) / "logs"
        for file in proc.open_files():
            path = Path(file.path)
            if file.fd in (1, 2) and path.parent == logs:
                log_name = _LOG_NAME.fullmatch(path.name)
                if log_name:
                    return f"{record.mission}/{log_name[1]}/{int(log_name[2])}"
    return None


def _cmd_chaos(args: argparse.Namespace) -> int:
    if args.action == "kill":
        for instance_id, pid in kill_instances(find(args.mission), args.targets):
            print(f"mcc chaos: killed {instance_id} (pid {pid})")
        return 0
    mission, lab = find_lab(args.mission)
    try:
        for node in args.targets:
            if args.action == "delay":
                lab.netem(node, delay_ms=args.ms, jitter_ms=args.jitter_ms)
                what = f"delay {args.ms:g} ms" + (
                    f" ± {args.jitter_ms:g}" if args.jitter_ms else ""
                )
            elif args.action == "loss":
                lab.netem(node, loss_pct=args.pct)
                what = f"loss {args.pct:g} %"
            elif args.action == "partition":
                lab.partition(node)
                what = "partitioned (cut off the bridge)"
            else:
                lab.heal(node)
                what = "healed (on the bridge, no delay, no loss)"
            print(f"mcc chaos: {mission}/{node}: {what}")
    except NetLabError as exc:
        raise OrchestratorError(f"mission {mission!r}: {exc}") from exc
    return 0


def add_parser(sub: Any) -> None:
    """Register ``mcc chaos`` on the ``mcc`` sub-parser set."""
    chaos = sub.add_parser(
        "chaos",
        help="inject faults: link delay/loss/partition on netns nodes, kill instances",
        description="Faults for a running mission: tc netem delay and loss on a netns node's "
        "outgoing traffic, partitions (a node cut off the lab bridge), heal, and SIGKILL of "
        "system instances. See docs/operations.md.",
    )
    actions = chaos.add_subparsers(dest="action", metavar="ACTION", required=True)

    def action(name: str, help_text: str, metavar: str = "NODE") -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = actions.add_parser(
            name, help=help_text, description=help_text
        )
        parser.add_argument("targets", nargs="+", metavar=metavar)
        parser.add_argument("--mission", help="mission name (default: the one running here)")
        parser.set_defaults(func=_cmd_chaos)
        return parser

    delay = action("delay", "delay the outgoing traffic of nodes (tc netem)")
    delay.add_argument("--ms", type=float, required=True, help="delay, milliseconds")
    delay.add_argument("--jitter-ms", type=float, default=0.0, help="± jitter, milliseconds")
    loss = action("loss", "drop a share of the nodes' outgoing packets at random")
    loss.add_argument("--pct", type=float, required=True, help="loss, percent (0-100)")
    action("partition", "cut nodes off the network (both directions)")
    action("heal", "undo partition, delay and loss on nodes")
    action("kill", "SIGKILL instances (SYSTEM or SYSTEM/INDEX) running here", "SYSTEM[/INDEX]")
