"""``python -m mcc.persist serve|inspect …``: ``mcc persist`` without the rest of the CLI.

The full ``mcc`` command imports every sub-command's package (seconds); a replica started by
a script or a test only needs this one.
"""

from __future__ import annotations

import argparse
import sys

from mcc.errors import MccError
from mcc.persist.cli import add_parser


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcc.persist")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["persist", *(sys.argv[1:] if argv is None else argv)])
    try:
        return int(args.func(args))
    except MccError as exc:
        print(f"mcc: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
