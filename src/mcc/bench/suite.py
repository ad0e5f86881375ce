"""``mcc bench latency|throughput|scale|blocked|load|all``: the perftest modes registered on
``mcc bench``, and ``all`` that runs them one after the other."""

from __future__ import annotations

import argparse
from types import ModuleType
from typing import Any

from mcc.bench import report, runner
from mcc.bench.runner import PERFTEST_MODES, TARGET_COLUMNS, command_line
from mcc.errors import MccError


def _module(mode: str) -> ModuleType:
    """``mcc.bench.MODE``, the module of a perftest mode (imported here, where it is used)."""
    from mcc.bench import blocked, latency, load, scale, throughput

    modules = (latency, throughput, scale, blocked, load)
    return {m.__name__.rsplit(".", 1)[1]: m for m in modules}[mode]


def add_parsers(bench_subparsers: Any) -> None:
    """Register the perftest modes and ``all`` on the ``mcc bench`` sub-command parsers."""
    for mode in PERFTEST_MODES:
        _module(mode).add_parser(bench_subparsers)
    add_all_parser(bench_subparsers)


def add_all_parser(bench_subparsers: Any) -> argparse.ArgumentParser:
    """Register ``all``: every perftest mode in one invocation."""
    from mcc.bench import perftest

    p: argparse.ArgumentParser = bench_subparsers.add_parser(
        "all",
        help="the whole perftest: latency, throughput, scale, blocked writes, load",
        description="Run every perftest mode with its defaults (or --quick) and the anchors, "
        "then the targets table of all of them.",
    )
    p.add_argument(
        "--modes",
        default=",".join(PERFTEST_MODES),
        help="modes to run, comma-separated (default %(default)s)",
    )
    perftest.add_common_options(p)
    p.set_defaults(func=cmd_all)
    return p


def cmd_all(args: argparse.Namespace) -> int:
    from mcc.bench import perftest

    modes = runner.parse_names(args.modes)
    unknown = sorted(set(modes) - set(PERFTEST_MODES))
    if unknown or not modes:
        raise MccError(f"--modes {args.modes!r}: choose from {', '.join(PERFTEST_MODES)}")
    options = perftest.options_from_args(args)
    per_mode = argparse.Namespace(**{**vars(args), "json": None})
    all_rows: list[dict[str, Any]] = []
    all_targets: list[dict[str, Any]] = []
    for mode in modes:
        module = _module(mode)
        defaults = module.add_parser(argparse.ArgumentParser().add_subparsers()).parse_args(
            ["--quick"] if args.quick else []
        )
        mode_args = argparse.Namespace(**{**vars(defaults), **vars(per_mode)})
        doc = module.MODE.run_mode(mode_args, options)
        all_rows += [{"mode": mode, **r} for r in doc["rows"]]
        all_targets += doc["targets"]
    report.print_table("perftest: targets (this run)", all_targets, TARGET_COLUMNS)
    doc = report.document("perftest", all_rows, command=command_line("all"))
    doc["targets"] = all_targets
    if args.json:
        report.write_json(doc, args.json)
    if args.record:
        report.record(
            doc,
            (),
            notes="Each target from the mode sections above, all measured in one "
            "`mcc bench all` run:\n\n" + report.markdown_table(all_targets, TARGET_COLUMNS),
            table=False,
        )
    return 0
