"""Polling until a condition holds: one loop for the code and tests that wait on something they
cannot be told about (a process's status, a file appearing on a container host, a log line).

``wait_for(condition, timeout_s, what)`` returns ``condition()``'s first truthy value, calling
it every ``period_s``; past ``timeout_s`` it raises `WaitTimeoutError` naming ``what``. A caller
that reports timeouts its own way (a bench's prefix, a test's failure) catches that error.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from mcc.errors import MccError

__all__ = ["WaitTimeoutError", "wait_for"]


class WaitTimeoutError(MccError, TimeoutError):
    """A polled condition did not hold before its deadline."""


def wait_for(
    condition: Callable[[], Any], timeout_s: float, what: str, *, period_s: float = 0.05
) -> Any:
    """``condition()``'s first truthy value, polled every ``period_s`` seconds;
    `WaitTimeoutError` ("timed out after T s waiting for WHAT") after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(period_s)
    raise WaitTimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
