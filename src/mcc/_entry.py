"""Run one parsed ``mcc`` command: the bottom of every command line.

``mcc.cli`` and each package's own ``python -m`` entry point (``mcc.persist``,
``mcc.console``, ``mcc.compute.remote``) call this, so no package imports ``mcc.cli``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from mcc.errors import MccError
from mcc.settings import SettingsError, current

EXIT_USAGE = 2


def main_for(
    command: str, add_parsers: Callable[[Any], None], argv: Sequence[str] | None = None
) -> int:
    """``mcc COMMAND ARGS`` with only that command's parser: ``python -m mcc.persist`` and the
    like start without importing every other sub-command's package."""
    if not settings_ok():
        return EXIT_USAGE
    parser = argparse.ArgumentParser(prog="mcc")
    add_parsers(parser.add_subparsers(dest="command", required=True))
    return dispatch(parser.parse_args([command, *(sys.argv[1:] if argv is None else argv)]))


def settings_ok() -> bool:
    """Read this process's ``MCC_*`` settings before any parser takes a default from them;
    False (the message printed) when one is bad: the command stops with exit status 2."""
    try:
        current()
    except SettingsError as exc:
        print(f"mcc: error: {exc}", file=sys.stderr)
        return False
    return True


def dispatch(args: argparse.Namespace) -> int:
    """Call ``args.func``; an `MccError` is a one-line message and exit status 2."""
    try:
        return int(args.func(args))
    except MccError as exc:
        print(f"mcc: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
