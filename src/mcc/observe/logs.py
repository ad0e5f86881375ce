"""Logs as JSON lines on request (``--log-format json``, or ``MCC_LOG_FORMAT=json`` in the
environment so that a supervisor's instances inherit it), for a log shipper to parse.

Wiring a command::

    from mcc.observe.logs import add_log_format_argument, configure_logging

    add_log_format_argument(parser)          # --log-format text|json
    configure_logging(args.log_format)       # after parse_args
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import sys
from typing import IO, Any

from mcc.settings import current, env_name

__all__ = [
    "FORMATS", "ClipFilter", "JsonFormatter", "add_log_format_argument", "clip_log_messages",
    "configure_logging",
]  # fmt: skip

FORMATS = ("text", "json")
ENV = env_name("log_format")
_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message``,
    ``pid``, the exception if any, and any ``extra=`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        return json.dumps(entry, default=str)


class ClipFilter(logging.Filter):
    """Clips a record's message to ``limit`` characters: what a log line quotes may come from
    the bus (a sensor id, a command argument), and a peer that sends 1 MiB of it must not
    write 1 MiB per line."""

    def __init__(self, limit: int = 2000) -> None:
        super().__init__()
        self.limit = limit

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and not record.args and len(record.msg) <= self.limit:
            return True  # formatted already (or nothing to format) and short
        message = record.getMessage()
        if len(message) > self.limit:
            message = f"{message[: self.limit]}… ({len(message)} characters, clipped)"
        # formatted once here: the handler's formatter (and any later handler) reuse it
        record.msg, record.args = message, None
        return True


def clip_log_messages(logger: logging.Logger | None = None) -> None:
    """Put a `ClipFilter` on every handler of ``logger`` (default: the root logger) and on
    the handler Python uses when there is none (``logging.lastResort``)."""
    handlers = list((logger or logging.getLogger()).handlers)
    if logging.lastResort is not None:
        handlers.append(logging.lastResort)
    for handler in handlers:
        if not any(isinstance(f, ClipFilter) for f in handler.filters):
            handler.addFilter(ClipFilter())


def add_log_format_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-format",
        choices=FORMATS,
        default=current().log_format,
        help=f"log records as text or JSON lines (env {ENV}; default %(default)s)",
    )


def configure_logging(
    log_format: str = "text", *, level: int = logging.INFO, stream: IO[str] | None = None
) -> logging.Handler:
    """One handler on the root logger in ``log_format``, for this process only: child
    processes log JSON when their environment says so (``MCC_LOG_FORMAT=json``, e.g. in a
    mission's ``env:`` or the environment of ``mcc up``), never because this one changed
    ``os.environ``."""
    if log_format not in FORMATS:
        raise ValueError(f"log format {log_format!r}: use one of {FORMATS}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(_TEXT))
    handler.addFilter(ClipFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_mcc", False):
            root.removeHandler(old)
    handler._mcc = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    return handler
