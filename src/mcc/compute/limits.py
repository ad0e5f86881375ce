"""How much one request may ask of the compute service, and a compute-time budget for kernels.

`ServiceLimits` bounds each ``ComputeRequest`` (bytes, arrays, identifier and parameter
lengths), the replies, the queue (in all and per client) and the compute time of each call.
A kernel's parameters have their own ranges (`mcc.compute.registry.ParamSpec`) and its spec
estimates the time of a call (`mcc.compute.registry.KernelSpec.estimate_s`): the service
refuses up front what cannot fit its budget, and runs the rest under `compute_budget`, which
the iterative kernels (Monte Carlo chunks, HotSpot steps, Needleman–Wunsch anti-diagonals)
check with `check_budget` as they go. Outside a budget (a local call) the check costs a lookup.

>>> with compute_budget(2.0):
...     result = rodinia.hotspot(temp, power, iterations=10**7)   # ComputeBudgetError after 2 s
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import time
from collections.abc import Iterator

from mcc.errors import ComputeError

__all__ = [
    "ComputeBudgetError",
    "QueueFullError",
    "ServiceLimits",
    "check_budget",
    "compute_budget",
]

_MiB = 1 << 20


class ComputeBudgetError(ComputeError):
    """A call would take, or took, longer than its compute budget."""


class QueueFullError(ComputeError):
    """The compute service's queue (or a client's share of it) is full."""


@dataclasses.dataclass(frozen=True)
class ServiceLimits:
    """Bounds of a `mcc.compute.remote.ComputeService`; every one is refused with a reply that
    names it, except over-long identifiers (a reply would echo them): those are dropped."""

    budget_s: float = 30.0
    """Compute time of one call, s. A request's deadline can only shorten it."""
    max_request_bytes: int = 64 * _MiB
    """Array bytes of one request."""
    max_reply_bytes: int = 64 * _MiB
    """Array bytes of one reply (results larger than this are not sent)."""
    max_id_chars: int = 256
    """Characters of ``request_id`` and of ``client_id``."""
    max_params_chars: int = 4096
    """Characters of ``params_json``."""
    max_queued: int = 1024
    """Requests waiting, all clients together."""
    max_queued_bytes: int = 512 * _MiB
    """Array bytes waiting, all clients together."""
    max_queued_per_client: int = 64
    """Requests waiting from one client (one DDS participant)."""
    max_queued_bytes_per_client: int = 128 * _MiB
    """Array bytes waiting from one client."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "budget_s":
                ok = isinstance(value, int | float) and math.isfinite(value) and value > 0
            else:
                ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
            if not ok:
                raise ComputeError(
                    f"ServiceLimits.{f.name}={value!r}: must be a "
                    f"{'finite number of seconds > 0' if f.name == 'budget_s' else 'count >= 1'}"
                )


# The monotonic deadline of the kernel call running in this thread (None: no budget).
_DEADLINE: contextvars.ContextVar[tuple[float, float] | None] = contextvars.ContextVar(
    "mcc_compute_budget", default=None
)


@contextlib.contextmanager
def compute_budget(seconds: float) -> Iterator[None]:
    """Run the block under a budget of ``seconds``: `check_budget` raises once it is spent."""
    token = _DEADLINE.set((time.monotonic() + max(seconds, 0.0), seconds))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def check_budget() -> None:
    """`ComputeBudgetError` when the budget of the current call is spent; else nothing."""
    budget = _DEADLINE.get()
    if budget is not None and time.monotonic() > budget[0]:
        raise ComputeBudgetError(
            f"stopped after its compute budget of {budget[1]:.3g} s "
            "(ServiceLimits.budget_s, or the request's deadline): ask for less per call"
        )
