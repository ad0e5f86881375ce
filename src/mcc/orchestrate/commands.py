"""The orchestrator's sub-commands of `mcc`: validate, up, status, logs, scale, phase, stop,
start, restart, down. `up` runs the supervisor; the others are bus clients."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from mcc.errors import ManifestError
from mcc.orchestrate.appspec import app_problems
from mcc.orchestrate.manifest import load_manifest
from mcc.settings import current, external


def add_parsers(sub: Any) -> None:
    """Register the orchestrator's sub-commands on the `mcc` sub-parser set."""
    validate = sub.add_parser(
        "validate",
        help="check mission manifests",
        description="Check mission manifests; every error names the file, line, field, "
        "bad value and what is allowed. Exit 2 on any error.",
    )
    validate.add_argument("files", nargs="+", metavar="FILE")
    validate.set_defaults(func=cmd_validate)

    up = sub.add_parser(
        "up",
        help="run a mission (supervisor in the foreground)",
        description="Start the supervisor for mission FILE: it starts the systems of the "
        "first (or given) phase, restarts them by policy, publishes MissionStatus and obeys "
        "`mcc status|scale|phase|stop|start|down` from other terminals. Ctrl-C stops it.",
    )
    up.add_argument("file", metavar="FILE")
    up.add_argument("--backend", choices=["local", "ray"], default="local")
    up.add_argument("--address", help="Ray cluster address ('auto' joins a running cluster)")
    up.add_argument("--phase", help="phase to start in (default: the manifest's first)")
    up.add_argument("--duration", type=float, help="stop after this many seconds")
    up.add_argument("--run-dir", help="run folder (default $MCC_HOME/runs/<mission>-<time>)")
    up.add_argument("--quiet", action="store_true", help="no live table, state changes only")
    up.add_argument(
        "--metrics-port",
        type=int,
        help="serve this supervisor's Prometheus /metrics on 127.0.0.1:PORT (0: any free port)",
    )
    up.set_defaults(func=cmd_up)

    def client_parser(name: str, help_text: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = sub.add_parser(
            name, help=help_text, description=help_text
        )
        parser.add_argument("--mission", help="mission name (default: the one running here)")
        parser.add_argument(
            "--domain",
            type=int,
            help="DDS domain of the mission (default: from $MCC_HOME/active, written by `mcc up`)",
        )
        parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait")
        parser.add_argument(
            "--as",
            dest="operator",
            default=current().operator,
            help="a secured mission: act as operator identity MISSION/NAME of its keystore "
            "(`mcc security identity KEYSTORE MISSION/NAME --operator`); commands are "
            "attributed to NAME (default: env MCC_OPERATOR, else 'operator')",
        )
        parser.add_argument(
            "--identity",
            metavar="FILE",
            help="with --domain, a secured mission on another host: act as the identity in FILE "
            "(made there by `mcc security export`; or install it once with `mcc security "
            "import FILE`)",
        )
        return parser

    status = client_parser("status", "show a running mission: phase, instances, where they run")
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(func=cmd_status)
    logs = client_parser("logs", "show the log of a system instance (SYSTEM or SYSTEM/INDEX)")
    logs.add_argument("target", metavar="SYSTEM[/INDEX]")
    logs.add_argument("--lines", "-n", type=int, default=50)
    logs.add_argument("--follow", "-f", action="store_true", help="keep printing new lines")
    logs.set_defaults(func=cmd_logs)
    scale = client_parser("scale", "resize a virtual cluster")
    scale.add_argument("cluster")
    scale.add_argument("size", type=int)
    scale.set_defaults(func=cmd_simple, verb="scale")
    phase = client_parser("phase", "change the mission phase (starts and stops systems)")
    phase.add_argument("phase")
    phase.set_defaults(func=cmd_simple, verb="phase")
    for verb, text in (
        ("stop", "stop every instance of a system (until `mcc start`)"),
        ("start", "start a stopped or failed system again"),
        ("restart", "restart a system or one instance (SYSTEM/INDEX)"),
    ):
        parser = client_parser(verb, text)
        parser.add_argument("target", metavar="SYSTEM")
        parser.set_defaults(func=cmd_simple, verb=verb)
    down = client_parser("down", "stop a running mission")
    down.add_argument("--no-wait", action="store_true", help="return without waiting")
    down.set_defaults(func=cmd_down)


# -- validate and up -----------------------------------------------------------------------


def cmd_validate(args: argparse.Namespace) -> int:
    failed = False
    for file in args.files:
        try:
            mission = load_manifest(file)
            problems = app_problems(file)
        except ManifestError as exc:
            failed = True
            for problem in exc.problems:
                print(problem, file=sys.stderr)
            continue
        if problems:
            failed = True
            for problem in problems:
                print(problem, file=sys.stderr)
            continue
        instances = sum(s.replicas for s in mission.systems.values()) + sum(
            c.size for c in mission.clusters.values()
        )
        print(
            f"{file}: ok: mission {mission.mission!r} on domain {mission.domain}, "
            f"{len(mission.systems)} systems, {len(mission.clusters)} clusters, "
            f"{instances} instances, phases {', '.join(mission.phases)}"
        )
    return 2 if failed else 0


def cmd_up(args: argparse.Namespace) -> int:
    from mcc.orchestrate.supervisor import open_mission

    mission = load_manifest(args.file)
    problems = app_problems(args.file, only_given=True)
    if problems:
        raise ManifestError("\n".join(problems), problems=problems)
    supervisor = open_mission(
        mission,
        backend=args.backend,
        address=args.address,
        run_dir=Path(args.run_dir) if args.run_dir else None,
        phase=args.phase,
    )
    run_dir = supervisor.run_dir
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(
        f"mcc up: mission {mission.mission!r} on domain {mission.domain}, backend "
        f"{args.backend}, run folder {run_dir}",
        flush=True,
    )
    supervisor.start()
    if supervisor.role == "standby":
        print(
            f"mcc up: standing by: another supervisor of {mission.mission!r} is active; this "
            "one takes over (adopting every running instance) if it dies",
            flush=True,
        )
    printer = threading.Thread(
        target=_print_progress, args=(supervisor, stop, args.quiet), daemon=True
    )
    printer.start()
    from mcc.bus.heartbeat import freeze_startup_objects
    from mcc.observe.service import supervisor_service  # READY=1 and watchdog under systemd

    freeze_startup_objects()
    try:
        with supervisor_service(supervisor, metrics_port=args.metrics_port):
            supervisor.run(duration_s=args.duration, stop=stop)
    finally:
        stop.set()
        printer.join(2.0)
    if supervisor.fenced.is_set():
        print(
            f"mcc up: fenced: another supervisor of {mission.mission!r} took over (epoch "
            f"{supervisor.epoch}); this one stopped commanding and leaves the mission running",
            flush=True,
        )
        return 0
    status = supervisor.status()
    if supervisor.role != "active":
        print(f"mcc up: standby of {mission.mission!r} leaves", flush=True)
        return 0
    print(_status_table_text(status), flush=True)
    print(
        f"mcc up: mission {mission.mission!r} stopped; run folder {status['run_dir']}", flush=True
    )
    failed = [i["id"] for i in status["instances"] if i["state"] == "failed"]
    return 1 if failed else 0


def _print_progress(supervisor: Any, stop: threading.Event, quiet: bool) -> None:
    """One line per instance state change (and a table every 10 s on a terminal)."""
    seen: dict[str, str] = {}
    last_table = time.monotonic()
    interactive = sys.stdout.isatty() and not quiet
    while not stop.wait(0.2):
        status = supervisor.status()
        for inst in status["instances"]:
            key = f"{inst['state']}|{inst['pid']}"
            if seen.get(inst["id"]) != key:
                seen[inst["id"]] = key
                where = f" pid {inst['pid']} on {inst['node']}" if inst["pid"] else ""
                reason = f" ({inst['reason']})" if inst["reason"] else ""
                print(f"  {inst['id']}: {inst['state']}{where}{reason}", flush=True)
        if interactive and time.monotonic() - last_table > 10:
            last_table = time.monotonic()
            print(_status_table_text(status), flush=True)


# -- clients -----------------------------------------------------------------------------


def _client(args: argparse.Namespace) -> Any:
    from mcc.orchestrate.client import open_client

    return open_client(
        mission=args.mission,
        domain=args.domain,
        timeout_s=args.timeout,
        operator=args.operator,
        identity=getattr(args, "identity", None),
    )


def cmd_status(args: argparse.Namespace) -> int:
    with _client(args) as client:
        status = client.status()
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        print(_status_table_text(status))
    return 0


def cmd_simple(args: argparse.Namespace) -> int:
    target = getattr(args, "target", None) or getattr(args, "cluster", None) or args.phase
    with _client(args) as client:
        if args.verb == "scale":
            client.scale(args.cluster, args.size)
            print(f"cluster {args.cluster!r} → {args.size} workers")
        else:
            result = client.call(args.verb, target)
            print(f"{args.verb} {target}: ok" + (f" ({', '.join(result)})" if result else ""))
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    with _client(args) as client:
        result = client.logs(args.target, lines=args.lines)
    path = Path(result["path"])
    if not args.follow or not path.exists():
        print("\n".join(result["lines"]))
        return 0
    with path.open(errors="replace") as log:  # a log on this host: tail it
        lines = log.read().splitlines()[-args.lines :]
        print("\n".join(lines), flush=True)
        try:
            while True:
                line = log.readline()
                if line:
                    print(line, end="", flush=True)
                else:
                    time.sleep(0.2)
        except KeyboardInterrupt:
            return 0


def cmd_down(args: argparse.Namespace) -> int:
    with _client(args) as client:
        stopped = client.down(wait_s=None if args.no_wait else max(args.timeout, 30.0))
    if not stopped:
        print("mcc down: asked; the mission has not reported STOPPED yet", file=sys.stderr)
        return 1
    print("mcc down: stopped")
    return 0


def _status_table_text(status: dict[str, Any]) -> str:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"mission {status['mission']} · phase {status['phase']} · {status['state']} · "
        f"backend {status['backend']} · domain {status['domain']}",
        title_justify="left",
    )
    for column in (
        "instance",
        "state",
        "node",
        "host",
        "pid",
        "cpus",
        "device",
        "restarts",
        "note",
    ):
        table.add_column(column)
    for inst in status["instances"]:
        table.add_row(
            inst["id"].split("/", 1)[1],
            inst["state"],
            inst["node"],
            inst["host"],
            str(inst["pid"] or "-"),
            inst["cpus"] or "-",
            inst["device"],
            str(inst["restarts"]),
            inst["reason"],
        )
    columns = external().columns
    console = Console(width=140 if columns is None else columns, record=True)
    with console.capture() as capture:
        console.print(table)
        if status["clusters"]:
            sizes = ", ".join(
                f"{name} {c['size']} (min {c['min']}, max {c['max']}, {c['placement']})"
                for name, c in status["clusters"].items()
            )
            console.print(f"virtual clusters: {sizes}")
        console.print(f"run folder: {status['run_dir']}")
        supervisors = status.get("supervisors") or []
        if supervisors:
            console.print(
                "supervisors: "
                + "; ".join(
                    f"{s['role']} pid {s['pid']}@{s['host']} epoch {s['epoch']}"
                    + ("" if s["healthy"] else f" (silent {s['beat_age_s']:g} s)")
                    for s in supervisors
                )
            )
        if status.get("security") == "none":
            console.print(
                "security: NONE: this mission runs without DDS Security; anyone who can reach "
                "its domain can read its data and command it (manifest `security: none`)"
            )
        else:
            console.print("security: on (DDS Security: authenticated, access control, encrypted)")
    return capture.get()
