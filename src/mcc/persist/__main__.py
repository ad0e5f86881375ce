"""``python -m mcc.persist serve|inspect …``: ``mcc persist`` without the rest of the CLI.

The full ``mcc`` command imports every sub-command's package (seconds); a replica started by
a script or a test only needs this one.
"""

from __future__ import annotations

import sys

from mcc._entry import main_for
from mcc.persist.cli import add_parser


def main(argv: list[str] | None = None) -> int:
    return main_for("persist", add_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
