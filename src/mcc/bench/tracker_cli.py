"""The ``mcc bench tracker`` command: its options, and which bench of `mcc.bench.tracker` (the
classic 2-D data, a mission scenario), `mcc.bench.tracker_families` or
`mcc.bench.tracker_scenarios` they run. The method is in `mcc.bench.tracker`'s docstring."""

from __future__ import annotations

import argparse
from typing import Any

from mcc.bench import runner
from mcc.bench.tracker import (
    COLUMNS,
    DEFAULT_SCANS,
    DEFAULT_TARGETS,
    QUICK_SCANS,
    QUICK_TARGETS,
    SCENARIO_COLUMNS,
    STONESOUP_LARGE_SCANS,
    STONESOUP_MAX_TARGETS,
    publish,
    run_scenario_bench,
    run_tracker_bench,
    say,
)
from mcc.errors import MccError

__all__ = ["FAMILY_COLUMNS", "add_parser", "cmd_tracker"]


def add_parser(bench_subparsers: Any) -> None:
    parser = bench_subparsers.add_parser(
        "tracker",
        help="multi-target tracker vs Stone Soup on the classic 2-D benchmark (ms/scan, GOSPA)",
        description="MCC's tracker and Stone Soup on the same classic 2-D scenario and "
        "detections: time per scan and GOSPA (c=100 m, p=2, alpha=2); or MCC alone on a "
        "mission scenario (--scenario). Method: the module docstring of mcc.bench.tracker.",
    )
    parser.add_argument("--quick", action="store_true", help="10 and 100 targets, 20 scans")
    parser.add_argument("--targets", help="comma-separated target counts (default 10,100,1000)")
    parser.add_argument("--scans", type=int, help="scans per run (default 100, quick 20)")
    parser.add_argument("--impl", default="mcc,stonesoup", help="implementations (%(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="classic_2d seed (%(default)s)")
    parser.add_argument("--scenario", metavar="FILE", help="a mission scenario (MCC alone, 3-D)")
    parser.add_argument(
        "--families",
        metavar="NAMES",
        help="hard families beside Stone Soup (all = the six and manoeuvre@200,manoeuvre@1000; "
        "or some of polar,manoeuvre,crossing,slow1,slow5,slow12, each optionally NAME@TARGETS; "
        "method: mcc.bench.tracker_families)",
    )
    parser.add_argument(
        "--stonesoup-variants",
        default="ekf-cv,ukf-cv,ekf-ct",
        help="Stone Soup variants for --families (%(default)s; also jpda-ekf-cv, very slow)",
    )
    parser.add_argument(
        "--stonesoup-max-targets",
        type=int,
        default=STONESOUP_MAX_TARGETS,
        help="above this, Stone Soup runs only --stonesoup-large-scans scans (%(default)s)",
    )
    parser.add_argument(
        "--stonesoup-large-scans", type=int, default=STONESOUP_LARGE_SCANS, help="(%(default)s)"
    )
    parser.add_argument(
        "--stonesoup-assoc",
        choices=("kdtree", "plain"),
        default="kdtree",
        help="GNNWith2DAssignment with Stone Soup's kd-tree pre-selection, or plain",
    )
    parser.add_argument(
        "--scenarios",
        metavar="NAMES",
        help="seeded random scenario families beside Stone Soup searched per family (all, or "
        "some of straight,slow,bearing,crossing,formation,formation-turn,manoeuvre,multiradar; "
        "method: mcc.bench.tracker_scenarios)",
    )
    parser.add_argument(
        "--seeds", default="report", help="--scenarios: report, train or a list (%(default)s)"
    )
    parser.add_argument(
        "--search",
        action="store_true",
        help="--scenarios: search Stone Soup's components per family on the training seeds "
        "(continues the search recorded in --search-json: its candidates are not run again)",
    )
    parser.add_argument(
        "--search-json",
        metavar="FILE",
        help="--scenarios: the search's JSON (benchmarks/results/tracker-stonesoup-search.json)",
    )
    parser.add_argument(
        "--scale-targets",
        type=int,
        default=1000,
        help="--scenarios: MCC's time per scan at this many targets, 0 = none (%(default)s)",
    )
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON")
    parser.add_argument("--record", action="store_true", help="append to benchmarks/README.md")
    parser.set_defaults(func=cmd_tracker)


def cmd_tracker(args: argparse.Namespace) -> int:
    if args.scenarios:
        from mcc.bench.tracker_scenarios import cmd_scenarios

        return cmd_scenarios(args, runner.command_line("tracker"))
    if args.families:
        return _cmd_families(args)
    if args.scenario:
        rows = run_scenario_bench(args.scenario, progress=True)
        return publish(
            args,
            "tracker",
            rows,
            SCENARIO_COLUMNS,
            f"tracker on scenario {rows[0]['scenario']} (3-D, MCC)",
            "GOSPA c=500 m, p=2, alpha=2 (3-D) against the targets in radar coverage.",
        )
    try:
        targets = (
            [int(t) for t in args.targets.split(",") if t]
            if args.targets
            else list(QUICK_TARGETS if args.quick else DEFAULT_TARGETS)
        )
    except ValueError:
        raise MccError(f"--targets {args.targets!r}: use counts like 10,100,1000") from None
    rows = run_tracker_bench(
        targets=targets,
        scans=args.scans or (QUICK_SCANS if args.quick else DEFAULT_SCANS),
        impls=[i.strip() for i in args.impl.split(",") if i.strip()],
        seed=args.seed,
        stonesoup_max_targets=args.stonesoup_max_targets,
        stonesoup_large_scans=args.stonesoup_large_scans,
        stonesoup_assoc=args.stonesoup_assoc,
        progress=True,
    )
    notes = [f"{r['impl']} at {r['targets']} targets: {r['note']}." for r in rows if r.get("note")]
    return publish(
        args,
        "tracker",
        rows,
        COLUMNS,
        "multi-target tracker, classic 2-D benchmark (ms per scan, GOSPA m)",
        "Same classic_2d data for both; GOSPA c=100 m, p=2, alpha=2, mean over scans; "
        "ms_per_scan median. Method: mcc.bench.tracker docstring."
        + "".join(f"\n{line}" for line in notes),
    )


FAMILY_COLUMNS = (
    "impl",
    "family",
    "variant",
    "targets",
    "period_s",
    "scans",
    "ms_per_scan",
    "cpu_ms_per_scan",
    "gospa_m",
    "gospa_loc_m",
    "gospa_missed",
    "gospa_false",
    "track_ids",
    "id_switches",
    "gospa_ratio",
    "speedup_vs_stonesoup",
)


def _cmd_families(args: argparse.Namespace) -> int:
    from mcc.bench.tracker_families import FAMILIES, SCALE_RUNS, run_families

    names = [*FAMILIES, *SCALE_RUNS] if args.families == "all" else args.families.split(",")
    variants = [v.strip() for v in args.stonesoup_variants.split(",") if v.strip()]
    rows = run_families(
        [n.strip() for n in names if n.strip()],
        variants=variants if "stonesoup" in args.impl else [],
        seed=args.seed,
        quick=args.quick,
        progress=lambda text: say(True, text),
    )
    return publish(
        args,
        "tracker-families",
        rows,
        FAMILY_COLUMNS,
        "tracker on hard families, defaults vs Stone Soup",
        "MCC with its defaults (variant jpda: association jpda), Stone Soup variants on "
        "the same detections; GOSPA c=500 m, p=2, alpha=2, mean over scans; gospa_ratio = "
        "MCC / best Stone Soup row of the family, speedup = median Stone Soup ms/scan / "
        "MCC's. Stone Soup's own JPDA is not in this run: 5 scans of the crossing family "
        "took more than 300 s, 3 scans more than 400 s. Method: "
        "mcc.bench.tracker_families docstring."
        + "".join(
            f"\n{r['impl']} {r['variant']}, {r['family']} at {r['targets']} targets: {r['note']}."
            for r in rows
            if r.get("note")
        ),
        where=lambda r: f"{r['impl']} {r['variant']}, {r['family']}@{r['targets']}",
    )
