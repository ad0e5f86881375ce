"""What every perftest mode shares: option parsing, progress, and the outputs.

Each perftest mode module (``mcc.bench.latency`` …) measures and returns rows; this module, below
them (`mcc.bench.suite` registers the modes), turns the rows into the outputs every bench gives: a
rich table, the targets met or missed, JSON (the benches' one shape, docs/benchmarks.md, plus
``targets``), PNG plots and, with ``--record``, its section of ``benchmarks/README.md``."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import operator
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Any

from mcc.bench import report
from mcc.errors import MccError

PLOTS_DIR = report.REPO_ROOT / "benchmarks" / "plots"
RESULTS_DIR = report.REPO_ROOT / "benchmarks" / "results"
TARGET_COLUMNS = ("target", "measured", "limit", "status")
NET_COLUMNS = ("net", "efficiency_vs_host", "error")  # the last columns of every mode's table
PERFTEST_MODES = ("latency", "throughput", "scale", "blocked", "load")


# -- parsing ------------------------------------------------------------------------------------


def _parse_list(option: str, text: str | None, item: Callable[[str], Any], use: str) -> tuple:
    """``text``'s comma-separated items through ``item`` (empty → ()); a ValueError names
    ``option`` and ``use``."""
    if not text:
        return ()
    try:
        return tuple(item(x.strip()) for x in text.split(",") if x.strip())
    except ValueError:
        raise MccError(f"{option} {text!r}: use {use}") from None


def _int(item: str) -> int:
    for suffix in ("KiB", "k", "K"):
        if item.endswith(suffix):
            return int(item[: -len(suffix)]) * 1024
    return int(item)


def parse_ints(option: str, text: str | None) -> tuple[int, ...]:
    """``"64,1024"`` → (64, 1024); suffixes k/KiB multiply by 1024. Empty → ()."""
    return _parse_list(option, text, _int, "comma-separated whole numbers, e.g. 64,1024,10KiB")


def parse_floats(option: str, text: str | None) -> tuple[float, ...]:
    """``"0,1,0.1"`` → (0.0, 1.0, 0.1). Empty → ()."""
    return _parse_list(option, text, float, "comma-separated numbers, e.g. 0,1,0.1")


def parse_pairs(option: str, text: str | None) -> tuple[tuple[int, int], ...]:
    """``"1x1,4x4"`` (or ``1-1``) → ((1, 1), (4, 4)). Empty → ()."""

    def pair(item: str) -> tuple[int, int]:
        item = item.lower().replace("-", "x")
        n, m = (int(x) for x in item.split("x"))
        if n < 1 or m < 1:
            raise MccError(f"{option} {item!r}: need at least one publisher and subscriber")
        return n, m

    return _parse_list(option, text, pair, "publishers x subscribers, e.g. 1x1,2x2,4x4")


def parse_names(text: str | None) -> tuple[str, ...]:
    """``"mcc, ddsperf"`` → ("mcc", "ddsperf")."""
    return tuple(x.strip() for x in (text or "").split(",") if x.strip())


def require(ok: bool, message: str) -> None:
    """MccError(``message``) unless ``ok``: a plan's check of its options."""
    if not ok:
        raise MccError(message)


def require_choices(option: str, names: Sequence[str], allowed: Sequence[str]) -> None:
    """``names`` non-empty and all in ``allowed``, else MccError naming ``option``."""
    bad = sorted(set(names) - set(allowed))
    require(not bad and bool(names), f"{option} {bad}: choose from {', '.join(allowed)}")


# -- progress -----------------------------------------------------------------------------------


@contextlib.contextmanager
def progress(total: int, what: str) -> Iterator[Callable[[str], None]]:
    """A progress bar on stderr for ``total`` rows; yields ``step(text)``, called per row."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    bar = Progress(
        TextColumn("[bold]{task.fields[what]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=console,
        transient=not console.is_terminal,
    )
    with bar:
        task = bar.add_task("", total=total, what=what)
        done = itertools.count()  # a step's row completes when the next one starts

        def step(text: str) -> None:
            bar.update(task, completed=next(done), description=text)
            if not console.is_terminal:
                console.print(f"{what}: {text}")

        yield step
        bar.update(task, completed=total)


# -- targets ------------------------------------------------------------------------------------


def target_row(
    target: str, measured: float | None, limit: float, *, unit: str = "", at_least: bool = False
) -> dict[str, Any]:
    """One line of a targets table: met when ``measured`` ≤ ``limit`` (≥ with ``at_least``)."""
    if measured is None:
        status, shown = "not measured", "-"
    else:
        met = measured >= limit if at_least else measured <= limit
        status = "met" if met else "missed"
        shown = f"{measured:g}{unit}" if isinstance(measured, int) else f"{measured:.2f}{unit}"
    limit_text = f"{'≥' if at_least else '≤'} {limit:g}{unit}"
    return {"target": target, "measured": shown, "limit": limit_text, "status": status}


# -- networks -----------------------------------------------------------------------------------


def vs_host(
    rows: list[dict[str, Any]], key: Sequence[str], metric: str, higher_is_better: bool
) -> list[dict[str, Any]]:
    """With ``host`` and ``netns`` rows both, each netns row gets ``efficiency_vs_host``: its
    ``metric`` relative to the host row with the same ``key`` (1.0 = no loss; the papers'
    "virtualisation efficiency"). Returns ``rows``."""
    host = {tuple(r.get(k) for k in key): r for r in rows if r.get("net") == "host"}
    for row in rows:
        ref = host.get(tuple(row.get(k) for k in key))
        if row.get("net") == "netns" and ref and ref.get(metric) and row.get(metric):
            ratio = row[metric] / ref[metric] if higher_is_better else ref[metric] / row[metric]
            row["efficiency_vs_host"] = round(ratio, 3)
    return rows


@dataclass(frozen=True)
class PerfMode:
    """One perftest mode, wired: its plan from the arguments (``plan_from_args(args,
    options)``), how a plan runs (``run(plan, progress=step)``, ``rows(plan)`` progress steps,
    by default ``plan.rows``), how networks compare (``key``, ``metric``) and what its outputs
    say (``columns``, ``title(plan, nets)``, ``notes(plan, rows)``, ``targets(rows)``)."""

    name: str
    _: KW_ONLY
    plan_from_args: Callable[[argparse.Namespace, Any], Any]
    run: Callable[..., list[dict[str, Any]]]
    key: Sequence[str]
    metric: str
    higher_is_better: bool
    columns: Sequence[str]
    title: Callable[[Any, str], str]
    notes: Callable[[Any, list[dict[str, Any]]], str]
    targets: Callable[[Sequence[dict[str, Any]]], list[dict[str, Any]]]
    rows: Callable[[Any], int] = operator.attrgetter("rows")

    def add_options(
        self,
        parser: argparse.ArgumentParser,
        *,
        impls: Sequence[str] = (),
        duration_s: tuple[float, float] | None = None,
        per: str = "row",
    ) -> None:
        """The options every mode has (`mcc.bench.perftest.add_common_options`), ``--impl``
        (default ``impls``) and ``--duration`` (``(default, quick)`` seconds ``per`` row)
        when given; ``mcc bench NAME`` runs `command`."""
        from mcc.bench.perftest import add_common_options

        if impls:
            parser.add_argument(
                "--impl", default=",".join(impls), help="implementations (default %(default)s)"
            )
        if duration_s is not None:
            parser.add_argument(
                "--duration",
                type=float,
                help=f"seconds per {per} (default {duration_s[0]:g}, quick {duration_s[1]:g})",
            )
        add_common_options(parser)
        parser.set_defaults(func=self.command)

    def command(self, args: argparse.Namespace) -> int:
        """``mcc bench NAME``."""
        from mcc.bench.perftest import options_from_args

        self.run_mode(args, options_from_args(args))
        return 0

    def run_mode(self, args: argparse.Namespace, options: Any) -> dict[str, Any]:
        """Run the mode as ``args`` ask over each network of ``--net`` (quiet, then beside
        the CPU load with ``--load``), then `finish`; the JSON document."""
        from mcc.bench.perftest import nets_from_args

        plan = self.plan_from_args(args, options)
        nets = nets_from_args(args)
        passes = load_passes(args)
        out: list[dict[str, Any]] = []
        with progress(self.rows(plan) * len(nets) * len(passes), self.name) as step:
            for load in passes:
                with beside_load(load) as label:
                    rows = []
                    for net in nets:
                        on_net = dataclasses.replace(plan.options, net=net)
                        rows += self.run(dataclasses.replace(plan, options=on_net), progress=step)
                    out += label(vs_host(rows, self.key, self.metric, self.higher_is_better))
        return finish(
            self.name,
            out,
            self.columns,
            args=args,
            title=self.title(plan, " + ".join(nets)),
            notes=self.notes(plan, out),
            targets=per_net(self.targets, out),
        )


def per_net(
    targets: Callable[[Sequence[dict[str, Any]]], list[dict[str, Any]]],
    rows: Sequence[dict[str, Any]],
) -> list[dict[str, Any]]:
    """``targets(rows)`` of each network on its own; with several, each target names its net."""
    nets = list(dict.fromkeys(r.get("net") for r in rows))
    if len(nets) <= 1:
        return targets(rows)
    return [
        {**row, "target": f"{row['target']} [{net}]"}
        for net in nets
        for row in targets([r for r in rows if r.get("net") == net])
    ]


# -- --load: the benches beside a CPU load ------------------------------------------------------

#: The longest a ``--load`` CPU load runs (its processes also stop when the bench is gone).
BESIDE_MAX_S = 6 * 3600.0


def add_load_option(parser: argparse.ArgumentParser) -> None:
    """``--load``: run the bench beside ``mcc bench load``'s CPU load (`beside_load`)."""
    parser.add_argument(
        "--load",
        action="store_true",
        help="run beside the CPU load of `mcc bench load` (one busy-loop process per core): "
        "rows labelled load=cpu; latency and throughput run quiet (load=none) first, then "
        "loaded, each beside its anchor under the same load",
    )


def load_passes(args: argparse.Namespace) -> tuple[str | None, ...]:
    """The passes a bench with `add_load_option` runs: ``(None,)`` unlabelled without
    ``--load``, else quiet then loaded."""
    return ("none", "cpu") if getattr(args, "load", False) else (None,)


@contextlib.contextmanager
def beside_load(
    load: str | None | argparse.Namespace,
) -> Iterator[Callable[[list[dict[str, Any]]], list[dict[str, Any]]]]:
    """The CPU load for the duration of the block when ``load`` is ``"cpu"`` (or ``args``
    with ``--load``); yields ``label(rows)``, which sets each row's ``load`` (none when quiet;
    nothing without a load asked for) and returns the rows."""
    if isinstance(load, argparse.Namespace):
        load = "cpu" if getattr(load, "load", False) else None

    def label(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if load is not None:
            for row in rows:
                row["load"] = load
        return rows

    if load != "cpu":
        yield label
        return
    from mcc.bench.loadgen import applied_load
    from mcc.bench.perftest import Node, PerfOptions

    host = Node("host", "127.0.0.1")
    with applied_load("cpu", PerfOptions(), [host], max_s=BESIDE_MAX_S):
        yield label


# -- output -------------------------------------------------------------------------------------


def command_line(bench: str) -> str:
    """How this run was invoked, for the JSON and the README."""
    if sys.argv[1:2] == ["bench"]:
        return "mcc bench " + " ".join(sys.argv[2:])
    return f"mcc bench {bench}"


def present_columns(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> list[str]:
    """``columns`` less those no row has a value for (e.g. ``error`` when all went well)."""
    return [c for c in columns if any(r.get(c) is not None for r in rows)]


def finish(
    bench: str,
    rows: list[dict[str, Any]],
    columns: Sequence[str],
    *,
    args: argparse.Namespace,
    title: str,
    notes: str = "",
    targets: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """Print the table and targets; write JSON, plots and the README section as asked."""
    from mcc.bench import plots

    shown = present_columns(rows, columns)
    report.print_table(title, rows, shown)
    if targets:
        report.print_table(f"{bench}: targets (this run)", list(targets), TARGET_COLUMNS)
    doc = report.document(bench, rows, command=command_line(bench))
    doc["targets"] = list(targets)
    if args.json:
        report.write_json(doc, args.json)
    plot_dir = Path(args.plot) if args.plot else (PLOTS_DIR if args.record else None)
    if plot_dir is not None:
        for path in plots.plot_bench(bench, rows, plot_dir):
            print(f"plot: {path}", file=sys.stderr)
    if args.record:
        if not args.json:
            report.write_json(doc, RESULTS_DIR / f"{bench}.json")
        extra = ""
        if targets:
            extra = "Targets (ratios from this run):\n\n" + report.markdown_table(
                list(targets), TARGET_COLUMNS
            )
        report.record(doc, shown, notes="\n\n".join(x for x in (notes, extra) if x))
    return doc
