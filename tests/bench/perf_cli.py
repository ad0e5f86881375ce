"""Run a perftest mode in this process, as `mcc bench MODE ARGS` would (without the ~5 s start
of a fresh `mcc` process, which loads every subsystem); returns its JSON document."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from mcc.bench import suite


def bench_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mcc bench")
    suite.add_parsers(parser.add_subparsers(dest="bench_name", required=True))
    return parser


def run_mode(tmp_path: Path, *argv: str) -> dict[str, Any]:
    """Run ``mcc bench ARGV --json FILE`` in-process; the document it wrote."""
    out = tmp_path / f"{argv[0]}.json"
    args = bench_parser().parse_args([*argv, "--json", str(out)])
    assert args.func(args) == 0
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc
