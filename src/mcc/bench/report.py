"""Benchmark results in one shape for every bench: JSON, a terminal table, a Markdown table.

``{"bench": NAME, "created": ISO-8601, "host": {...}, "command": "...", "rows": [...]}``
with units in the key names (`p50_us`, `msgs_per_s`, `ms_per_scan`; docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from mcc.resources import checkout_root

REPO_ROOT = checkout_root() or Path.cwd()  # an installed wheel records into the cwd
BENCH_README = REPO_ROOT / "benchmarks" / "README.md"


def add_bench_parser(
    bench_subparsers: Any,
    name: str,
    *,
    help: str,
    description: str | None,
    func: Callable[[argparse.Namespace], int],
    plot: bool = False,
) -> argparse.ArgumentParser:
    """Register ``mcc bench NAME`` with the outputs every bench has (``--json FILE``,
    ``--record``, and ``--plot DIR`` when ``plot``); the caller adds its own options."""
    parser: argparse.ArgumentParser = bench_subparsers.add_parser(
        name, help=help, description=description
    )
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON")
    parser.add_argument("--record", action="store_true", help="append to benchmarks/README.md")
    if plot:
        parser.add_argument("--plot", metavar="DIR", help="write PNG plots into DIR")
    parser.set_defaults(func=func)
    return parser


def host_info() -> dict[str, Any]:
    """What ran the benchmark: CPU, cores, Python and the versions of the implementations."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions: dict[str, str] = {}
    for dist in ("cyclonedds", "numpy"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[dist] = metadata.version(dist)
    for deb in ("cyclonedds-tools", "sockperf"):
        if version := _deb_version(deb):
            versions[deb] = version
    load: list[float] | None = None
    with contextlib.suppress(OSError):
        load = [round(x, 2) for x in os.getloadavg()]  # other work on the machine meanwhile
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "load_avg": load,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "versions": versions,
    }


def _deb_version(package: str) -> str | None:
    if shutil.which("dpkg-query") is None:
        return None
    proc = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True, check=False
    )
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def document(bench: str, rows: Sequence[dict[str, Any]], *, command: str) -> dict[str, Any]:
    """The JSON document for one benchmark run."""
    return {
        "bench": bench,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host": host_info(),
        "command": command,
        "rows": list(rows),
    }


def write_json(doc: dict[str, Any], path: str | Path) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    return out


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.1f}" if abs(value) >= 100 else f"{value:.2f}"
    return "-" if value is None else str(value)


def _short(text: str, limit: int = 60) -> str:
    """Long text (an error) cut for a terminal cell; the JSON keeps all of it."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def print_table(title: str, rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for c in columns:
        table.add_column(c, justify="left" if c == "impl" else "right")
    for r in rows:
        table.add_row(*(_short(_fmt(r.get(c))) for c in columns))
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)  # a log file or pipe: do not squeeze wide tables to 80
    console.print(table)


HEADER = (
    "# MCC benchmarks\n\nEach `mcc bench NAME --record` replaces the section of its bench with "
    "its newest run; the other sections stay. Method: docs/benchmarks.md.\n"
)
_OLD_HEADER_LINE = (
    "Tables appended by `mcc bench NAME --record`; the newest run of each bench is last. "
    "Method: docs/benchmarks.md."
)


def record(
    doc: dict[str, Any],
    columns: Sequence[str],
    *,
    notes: str = "",
    readme: Path = BENCH_README,
    table: bool = True,
) -> None:
    """Put this run's section (command, host, table, notes) into ``benchmarks/README.md``.

    The section of the same bench (``## NAME — …`` up to the next ``## ``) is replaced where it
    was; a bench without one gets it appended. Other benches' sections are kept as they are.
    """
    readme.parent.mkdir(parents=True, exist_ok=True)
    text = readme.read_text() if readme.exists() else HEADER
    text = text.replace(_OLD_HEADER_LINE, HEADER.split("\n\n", 1)[1].rstrip("\n"))
    host = doc["host"]
    versions = ", ".join(f"{k} {v}" for k, v in host["versions"].items())
    body = f"\n\n{markdown_table(doc['rows'], columns)}\n" if table else "\n"
    load_text = ""
    if load := host.get("load_avg"):
        load_text = "; load average {:g} / {:g} / {:g} (1 / 5 / 15 min) at the end".format(*load)
    section = (
        f"## {doc['bench']} — {doc['created']}\n\n"
        f"`{doc['command']}` on {host['cpu']} ({host['cores']} cores), Python {host['python']}, "
        f"{versions}{load_text}.{body}" + (f"\n{notes}\n" if notes else "")
    )
    readme.write_text(replace_section(text, doc["bench"], section))


def replace_section(text: str, bench: str, section: str) -> str:
    """``text`` with the ``## BENCH — …`` section replaced by ``section`` (or it appended)."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.startswith(f"## {bench} — ")), None)
    if start is None:
        return text.rstrip("\n") + "\n\n" + section
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    tail = "".join(lines[end:])
    return "".join(lines[:start]) + section + ("\n" + tail if tail else "")
