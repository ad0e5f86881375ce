"""Which extra of the ``mcc`` package brings an optional dependency, and the ``mcc`` console
script, which names that extra when a command needs one that is not installed.

The core install (``pip install mcc``) runs missions; each role adds an extra:
``mcc[console]`` the web console, ``mcc[observe]`` OpenTelemetry traces, ``mcc[bench]`` the
benchmarks and their anchors, ``mcc[ray]`` the Ray backend, ``mcc[gpu]`` CuPy kernels.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["EXTRA_OF", "main", "missing_extra"]

EXTRA_OF = {
    "fastapi": "console",
    "starlette": "console",
    "uvicorn": "console",
    "websockets": "console",
    "opentelemetry": "observe",
    "hdrh": "bench",
    "matplotlib": "bench",
    "stonesoup": "bench",
    "filterpy": "bench",
    "mpi4py": "bench",
    "ray": "ray",
    "cupy": "gpu",
}
"""Top-level module name → the extra that installs it."""


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """What to tell the user when ``exc`` is an optional dependency missing, else None."""
    root = (exc.name or "").partition(".")[0]
    extra = EXTRA_OF.get(root)
    if extra is None:
        return None
    return f"this command needs {root!r}, from the extra {extra!r}: pip install 'mcc[{extra}]'"


def main(argv: Sequence[str] | None = None) -> int:
    """The ``mcc`` console script: `mcc.cli.main`, with a missing extra named instead of a
    traceback (exit 2, as for any usage error), and JSON logs when ``MCC_LOG_FORMAT=json``."""
    from mcc.cli import main as cli_main
    from mcc.settings import SettingsError, current

    try:
        json_logs = current().log_format == "json"
    except SettingsError:
        json_logs = False  # `cli_main` names the bad variable and exits 2
    from mcc.observe.logs import clip_log_messages, configure_logging

    if json_logs:
        configure_logging("json")
    clip_log_messages()

    try:
        return cli_main(argv)
    except ModuleNotFoundError as exc:
        hint = missing_extra(exc)
        if hint is None:
            raise
        print(f"mcc: error: {hint}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
