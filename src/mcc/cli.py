"""The ``mcc`` command: thin, every sub-command delegates to a package."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from mcc import __version__
from mcc._entry import EXIT_USAGE, dispatch, settings_ok
from mcc.settings import current


def _bus_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("bus")
    group.add_argument(
        "--domain",
        type=int,
        default=current().domain,
        help="DDS domain id, 0-232 (env MCC_DOMAIN; default %(default)s)",
    )
    group.add_argument(
        "--partition",
        action="append",
        default=[],
        help="DDS partition (repeatable; a virtual cluster's name)",
    )
    group.add_argument(
        "--tag",
        default=current().discovery_tag,
        help="discovery tag: only hear participants with the same tag (env MCC_DISCOVERY_TAG)",
    )


def _open_bus(args: argparse.Namespace, name: str) -> Any:
    from mcc.bus import Bus

    return Bus(args.domain, partitions=args.partition, discovery_tag=args.tag, name=name)


def _cmd_topic_list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from mcc.bus.inspect import discover_topics

    with _open_bus(args, "mcc topic list") as bus:
        topics = discover_topics(bus, duration_s=args.wait)
    if args.json:
        print(json.dumps([{**vars(t), "profiles": sorted(t.profiles)} for t in topics], indent=2))
        return 0
    table = Table(title=f"topics on domain {args.domain} (after {args.wait:g} s of discovery)")
    for col in ("topic", "type", "writers", "readers", "profile", "QoS (first writer)"):
        table.add_column(col)
    for t in topics:
        qos = ", ".join(f"{k} {v}" for k, v in t.qos.items())
        table.add_row(
            t.name,
            t.type_name,
            str(t.writers),
            str(t.readers),
            ", ".join(sorted(t.profiles)) or "-",
            qos or "-",
        )
    Console().print(table)
    if not topics:
        print(
            "no topics seen: is anything running on this domain (and discovery tag)?",
            file=sys.stderr,
        )
    return 0


def _cmd_topic_echo(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.pretty import Pretty

    from mcc.bus.inspect import sample_to_dict

    console = Console()
    received = 0
    with _open_bus(args, "mcc topic echo") as bus:
        reader = bus.reader(args.topic, profile=args.profile)
        deadline = None if args.timeout is None else time.monotonic() + args.timeout
        while args.count is None or received < args.count:
            remaining = 1.0 if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                break
            for sample in reader.take_wait(64, timeout_s=min(remaining, 1.0)):
                view = sample_to_dict(sample, max_items=args.max_items)
                if args.json:
                    print(json.dumps(view, default=str), flush=True)
                else:
                    console.print(f"[bold]{args.topic}[/bold] #{received + 1}")
                    console.print(Pretty(view))
                received += 1
                if args.count is not None and received >= args.count:
                    break
    if received == 0:
        print(
            f"no sample on {args.topic!r} (profile {reader.profile!r}) before the timeout",
            file=sys.stderr,
        )
        return 1
    return 0


def _cmd_topic_hz(args: argparse.Namespace) -> int:
    from mcc.bus.inspect import measure_rate

    with _open_bus(args, "mcc topic hz") as bus:
        reader = bus.reader(args.topic, profile=args.profile)
        for report in measure_rate(reader, window_s=args.window, windows=args.windows):
            line = (
                f"{args.topic}: {report.rate_hz:8.2f} Hz "
                f"({report.samples} in {report.window_s:.2f} s)"
            )
            if report.latency_p50_ms is not None:
                line += (
                    f"  latency from origin_ns p50 {report.latency_p50_ms:.3f} ms"
                    f"  p99 {report.latency_p99_ms:.3f} ms  max {report.latency_max_ms:.3f} ms"
                )
            print(line, flush=True)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from mcc.demo import DEFAULT_MISSION, run_demo

    return run_demo(
        duration_s=args.duration,
        mission_file=args.mission or DEFAULT_MISSION,
        domain_id=args.domain,
        console=not args.no_console,
        console_port=args.console_port,
        transport=args.transport,
    )


def _cmd_shm(args: argparse.Namespace) -> int:
    """Run the host's iceoryx daemon in the foreground (it replaces this process)."""
    from mcc.bus import shm

    if shm.running():
        print("mcc shm: a RouDi already runs on this host", file=sys.stderr)
        return 1
    exe = shm.roudi_path()
    if not exe.exists():
        print(f"mcc shm: no {exe}; run `make` (native/build-cyclone.sh)", file=sys.stderr)
        return 2
    os.execv(exe, [str(exe), "--log-level", args.log_level])


# The commands other packages add: (module, function, ((name, help), ...)). Only the module of
# the command being run is imported; the others get a parser with their help line, enough for
# `mcc --help` (tests/test_cli.py checks that these lines match the packages' own).
_ORCHESTRATE: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = (
    (
        "mcc.orchestrate.commands",
        "add_parsers",
        (
            ("validate", "check mission manifests"),
            ("up", "run a mission (supervisor in the foreground)"),
            ("status", "show a running mission: phase, instances, where they run"),
            ("logs", "show the log of a system instance (SYSTEM or SYSTEM/INDEX)"),
            ("scale", "resize a virtual cluster"),
            ("phase", "change the mission phase (starts and stops systems)"),
            ("stop", "stop every instance of a system (until `mcc start`)"),
            ("start", "start a stopped or failed system again"),
            ("restart", "restart a system or one instance (SYSTEM/INDEX)"),
            ("down", "stop a running mission"),
        ),
    ),
)
_OTHERS: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = (
    ("mcc.tracking.replay", "add_parser", (("track", "run the tracker offline"),)),
    (
        "mcc.console.commands",
        "add_parsers",
        (
            (
                "console",
                "the web tactical console: air picture, threats, engagements, health, controls",
            ),
        ),
    ),
    (
        "mcc.orchestrate.chaos",
        "add_parser",
        (("chaos", "inject faults: link delay/loss/partition on netns nodes, kill instances"),),
    ),
    (
        "mcc.hpc.cli",
        "add_parsers",
        (("hpc", "HPC jobs on the bus (fault-tolerant task farm) or on MPI"),),
    ),
    (
        "mcc.persist.cli",
        "add_parser",
        (("persist", "persistence service for durable topics (serve, inspect)"),),
    ),
    (
        "mcc.compute.remote",
        "add_parsers",
        (("compute", "the remote compute service (serve kernels, list them)"),),
    ),
    (
        "mcc.orchestrate.security_cli",
        "add_parsers",
        (("security", "DDS Security keystores: certificate authorities, identities, permissions"),),
    ),
)


def _add_package_parsers(
    sub: Any, command: str | None, table: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...]
) -> None:
    for module, function, names in table:
        if command is None or any(command == name for name, _ in names):
            getattr(importlib.import_module(module), function)(sub)
        else:
            for name, help_line in names:
                sub.add_parser(name, help=help_line)


def _add_bench_parsers(bsub: Any) -> None:
    """``mcc bench NAME``: `mcc.bench` measures the other packages, so it imports them all."""
    from mcc.bench.asterix import add_parser as add_asterix_bench_parser
    from mcc.bench.c2loop import add_parser as add_c2loop_parser
    from mcc.bench.chaos import add_parser as add_chaos_bench_parser
    from mcc.bench.compute import add_parser as add_compute_bench_parser
    from mcc.bench.deploy import add_parser as add_deploy_parser
    from mcc.bench.hpc import add_parser as add_hpc_bench_parser
    from mcc.bench.netfault import add_parser as add_netfault_parser
    from mcc.bench.persist import add_parser as add_persist_bench_parser
    from mcc.bench.soak import add_parser as add_soak_parser
    from mcc.bench.suite import add_parsers as add_perftest_parsers
    from mcc.bench.tracker_cli import add_parser as add_tracker_parser

    add_perftest_parsers(bsub)  # latency, throughput, scale, blocked, load, all
    add_deploy_parser(bsub)
    add_tracker_parser(bsub)
    add_c2loop_parser(bsub)
    add_chaos_bench_parser(bsub)
    add_netfault_parser(bsub)
    add_hpc_bench_parser(bsub)
    add_persist_bench_parser(bsub)
    add_compute_bench_parser(bsub)
    add_asterix_bench_parser(bsub)
    add_soak_parser(bsub)


def _command_of(argv: Sequence[str]) -> str:
    """The sub-command named in ARGV, or "" when none is (``mcc --help``)."""
    return next((a for a in argv if not a.startswith("-")), "")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``mcc`` parser; with COMMAND, only that command's package is imported (the others
    show their help line), with none every command is complete."""
    parser = argparse.ArgumentParser(
        prog="mcc",
        description="MCC, the mission-critical cloud: run a Tactical Operations Center as "
        "fault-tolerant workloads on a DDS data bus.",
        epilog="Start with `mcc demo`; `mcc topic list` shows what is on the bus.",
    )
    parser.add_argument("--version", action="version", version=f"mcc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demo = sub.add_parser(
        "demo",
        help="run the SAM TOC mission for a minute and print its summary",
        description="Run missions/sam-toc.yaml on the local backend: a raid against two "
        "defended assets, two radars, a tracker, TEWA and three launchers, with live "
        "progress and a summary table (tracks, GOSPA, kills, leakers, latencies).",
    )
    demo.add_argument("--duration", type=float, default=60.0, help="seconds (default %(default)s)")
    demo.add_argument("--mission", help="mission manifest (default missions/sam-toc.yaml)")
    demo.add_argument("--domain", type=int, help="DDS domain id (default: the manifest's)")
    demo.add_argument("--no-console", action="store_true", help="do not start the web console")
    demo.add_argument(
        "--transport",
        choices=("udp", "shm"),
        help="the mission's transport (default: the manifest's; docs/transport.md)",
    )
    demo.add_argument(
        "--console-port",
        type=int,
        default=8080,
        help="console port (another free one when taken; default %(default)s)",
    )
    demo.set_defaults(func=_cmd_demo)

    topic = sub.add_parser(
        "topic",
        help="inspect topics on a live domain (list, echo, hz)",
        description="Inspect the topics of a live domain, like `ros2 topic`.",
    )
    tsub = topic.add_subparsers(dest="topic_command", metavar="ACTION", required=True)
    tlist = tsub.add_parser(
        "list",
        help="topics seen on the domain, with type and QoS",
        description="List the topics seen on the domain: type, writers, "
        "readers, QoS profile and policies.",
    )
    tlist.add_argument(
        "--wait",
        type=float,
        default=2.0,
        help="seconds to listen for discovery (default %(default)s)",
    )
    tlist.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _bus_options(tlist)
    tlist.set_defaults(func=_cmd_topic_list)

    echo = tsub.add_parser(
        "echo",
        help="print the samples of a topic",
        description="Print the samples of TOPIC (packed arrays decoded).",
    )
    echo.add_argument("topic", help="topic name, e.g. DetectionBatch, Track, Heartbeat")
    echo.add_argument("--count", type=int, help="stop after N samples")
    echo.add_argument("--timeout", type=float, help="stop after this many seconds")
    echo.add_argument("--profile", help="QoS profile of the reader (default: the topic's)")
    echo.add_argument("--max-items", type=int, default=8, help="array items shown (default 8)")
    echo.add_argument("--json", action="store_true", help="one JSON object per line")
    _bus_options(echo)
    echo.set_defaults(func=_cmd_topic_echo)

    hz = tsub.add_parser(
        "hz",
        help="rate of a topic and latency from origin_ns",
        description="Print the rate of TOPIC per window and, for samples that "
        "carry origin_ns, the end-to-end latency percentiles.",
    )
    hz.add_argument("topic")
    hz.add_argument("--window", type=float, default=1.0, help="seconds per report (default 1)")
    hz.add_argument("--windows", type=int, help="stop after N reports")
    hz.add_argument("--profile", help="QoS profile of the reader (default: the topic's)")
    _bus_options(hz)
    hz.set_defaults(func=_cmd_topic_hz)

    _add_package_parsers(sub, command, _ORCHESTRATE)
    shm_cmd = sub.add_parser(
        "shm",
        help="run this host's iceoryx daemon (RouDi) for the shared-memory transport",
        description="Run iox-roudi in the foreground, e.g. as a host service when several "
        "missions with 'transport: shm' share a host (a supervisor starts one for its mission "
        "when none runs).",
    )
    shm_cmd.add_argument(
        "--log-level",
        choices=("off", "fatal", "error", "warning", "info", "debug"),
        default="warning",
        help="RouDi's log level (default %(default)s)",
    )
    shm_cmd.set_defaults(func=_cmd_shm)

    bench = sub.add_parser(
        "bench",
        help="measure the bus against its anchors (ddsperf, sockperf)",
        description="Benchmarks; results as tables, JSON and Markdown.",
    )
    if command in (None, "bench"):
        _add_bench_parsers(bench.add_subparsers(dest="bench_name", metavar="NAME", required=True))
    _add_package_parsers(sub, command, _OTHERS)
    _add_interop_parsers(sub)
    return parser


def _add_interop_parsers(sub: Any) -> None:
    """`mcc qos export` and `mcc types`: what other DDS vendors load (docs/interop.md)."""
    qos = sub.add_parser("qos", help="the QoS profile library (qos/mcc.xml) for other tools")
    qsub = qos.add_subparsers(dest="qos_command", metavar="ACTION", required=True)
    export = qsub.add_parser(
        "export",
        help="the profiles as Fast DDS or RTI Connext XML",
        description="Write the QoS profiles of qos/mcc.xml (or $MCC_QOS_FILE) as XML that "
        "another vendor's QoS loader reads: Fast DDS data_writer/data_reader profiles named "
        "mcc::PROFILE, or an RTI Connext qos_library mcc.",
    )
    export.add_argument("--vendor", choices=("fastdds", "rti"), required=True)
    export.add_argument("-o", "--output", help="file to write (default: stdout)")
    export.set_defaults(func=_cmd_qos_export)
    types = sub.add_parser(
        "types",
        help="the IDL types for other tools (RTI Connector XML)",
        description="Write the types of idl/mcc.idl in another tool's format.",
    )
    types.add_argument(
        "--rti-xml", action="store_true", required=True, help="RTI Connector XML (<types>)"
    )
    types.add_argument("-o", "--output", help="file to write (default: stdout)")
    types.set_defaults(func=_cmd_types)


def _write_output(text: str, output: str | None) -> int:
    if output is None:
        sys.stdout.write(text)
    else:
        with open(output, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


def _cmd_qos_export(args: argparse.Namespace) -> int:
    from mcc.bus.qos import default_library
    from mcc.bus.qos_export import export_profiles

    return _write_output(export_profiles(default_library(), args.vendor), args.output)


def _cmd_types(args: argparse.Namespace) -> int:
    from mcc.types.foreign import load_module, render_rti_xml

    return _write_output(render_rti_xml(load_module()), args.output)


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not settings_ok():
        return EXIT_USAGE
    return dispatch(build_parser(_command_of(args)).parse_args(args))


if __name__ == "__main__":
    sys.exit(main())
