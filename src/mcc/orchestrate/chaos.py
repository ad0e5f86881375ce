"""``mcc chaos``: faults on a running mission's netns nodes and instances.

    mcc chaos delay h2 --ms 50 [--jitter-ms 5]   # h2's outgoing traffic delayed (tc netem)
    mcc chaos loss h2 h3 --pct 10                 # 10 % of their outgoing packets lost
    mcc chaos partition h3                        # h3 cut off the bridge, both directions
    mcc chaos heal h3                             # undo partition, delay and loss
    mcc chaos kill tracker/0                      # SIGKILL an instance (SYSTEM = all of it)

Node faults act on the network lab that the local backend made for the mission's ``kind:
netns`` nodes (its description is ``<MCC_HOME>/netlab/<mission>.json``); ``kill`` asks the
supervisor for the instance's pid over the bus and kills its process group, as a crash would.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from typing import Any

from mcc.errors import OrchestratorError
from mcc.netlab import NetLab, NetLabError, _pid_alive

__all__ = ["add_parser", "find_lab", "kill_instances"]


def find_lab(mission: str | None) -> tuple[str, NetLab]:
    """The network lab of ``mission`` (or of the only mission with one) running here."""
    from mcc.orchestrate.registry import home

    folder = home() / "netlab"
    labs: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if _pid_alive(int(data.get("owner_pid", 0))):
            labs[path.stem] = data
    if mission is not None:
        if mission not in labs:
            raise OrchestratorError(
                f"mission {mission!r} has no network lab here (missions with netns nodes: "
                f"{', '.join(labs) or 'none'}); give its nodes `kind: netns` and `mcc up` it"
            )
        return mission, NetLab.attach(labs[mission])
    if len(labs) == 1:
        name, data = next(iter(labs.items()))
        return name, NetLab.attach(data)
    if not labs:
        raise OrchestratorError(
            f"no running mission has netns nodes ({folder} is empty); node faults need nodes "
            "of `kind: netns` (docs/operations.md)"
        )
    raise OrchestratorError(f"several missions have netns nodes ({', '.join(labs)}): --mission")


def kill_instances(status: dict[str, Any], target: str) -> list[tuple[str, int]]:
    """SIGKILL the process groups of the live instances matching ``target`` (SYSTEM[/INDEX])."""
    system, _, index = target.partition("/")
    chosen = [
        inst
        for inst in status["instances"]
        if inst["pid"]
        and inst["id"].split("/")[1] == system
        and (not index or inst["id"].split("/")[2] == index)
    ]
    if not chosen:
        live = [i["id"].split("/", 1)[1] for i in status["instances"] if i["pid"]]
        raise OrchestratorError(
            f"no running instance matches {target!r}; running: {', '.join(live) or 'none'}"
        )
    killed = []
    for inst in chosen:
        try:
            os.killpg(inst["pid"], signal.SIGKILL)  # instances lead their own process group
        except ProcessLookupError:
            continue
        except PermissionError:
            os.kill(inst["pid"], signal.SIGKILL)
        killed.append((inst["id"], int(inst["pid"])))
    return killed


def _cmd_chaos(args: argparse.Namespace) -> int:
    if args.action == "kill":
        from mcc.orchestrate.client import open_client

        with open_client(mission=args.mission, timeout_s=args.timeout) as client:
            status = client.status()
        for target in args.targets:
            for instance_id, pid in kill_instances(status, target):
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
    kill = action("kill", "SIGKILL instances (SYSTEM or SYSTEM/INDEX)", "SYSTEM[/INDEX]")
    kill.add_argument("--timeout", type=float, default=5.0, help="seconds to reach the mission")
