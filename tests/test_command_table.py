"""The lazy command table of `mcc.cli`: `mcc --help` imports no command package, and the help
line it shows for each command is the package's own."""

from __future__ import annotations

import argparse
import subprocess
import sys

from mcc import cli


def _help_lines(parser: argparse.ArgumentParser) -> dict[str, str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: str(a.help) for a in sub._choices_actions}


def test_stub_help_lines_are_the_packages_own() -> None:
    lazy = _help_lines(cli.build_parser(""))
    full = _help_lines(cli.build_parser())
    assert lazy == full
    assert {"up", "console", "persist", "compute", "bench", "security"} <= set(full)


def test_help_imports_no_command_package() -> None:
    code = (
        "import sys\nfrom mcc.cli import main\ntry:\n    main(['--help'])\n"
        "except SystemExit:\n    pass\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('mcc'))), file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = set(done.stderr.split())
    assert "mcc.cli" in loaded
    assert not loaded & {"mcc.orchestrate", "mcc.bench", "mcc.console", "mcc.persist", "mcc.hpc"}


def test_a_command_loads_only_its_package() -> None:
    parser = cli.build_parser("persist")
    args = parser.parse_args(["persist", "inspect", "x.db"])
    assert args.command == "persist"
    assert "mcc.persist.cli" in sys.modules
