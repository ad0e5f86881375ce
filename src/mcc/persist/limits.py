"""Bounds of a persistence replica: what one writer may keep, what the store may hold, what a
reply may carry.

Every bound is counted against what this replica received, on its own clock: per-writer rates
use receive time, and a sample stamped further in the future than ``max_future_skew_s`` is
refused (history is ordered by source timestamp: a far-future one would sort after every real
one and never leave a keep-last instance). A sample over a bound is refused (its writer's
``PersistAck`` says why, and ``write_stored`` raises `StoreError`), counted and logged once
per writer. docs/persistence.md lists the defaults.
"""

from __future__ import annotations

import dataclasses
import math

from mcc.errors import StoreError

__all__ = ["PersistLimits", "retention_seconds"]

_MiB = 1 << 20


@dataclasses.dataclass(frozen=True)
class PersistLimits:
    """Bounds of a `mcc.persist.service.PersistService` and its `mcc.persist.store.Store`."""

    max_sample_bytes: int = 1 * _MiB
    """Serialized size of one sample."""
    max_writer_samples: int = 10_000
    """Samples kept from one writer (one GUID: one topic, one set of partitions)."""
    max_writer_bytes: int = 16 * _MiB
    """Bytes kept from one writer."""
    max_store_samples: int = 1_000_000
    """Samples kept in all, every topic and writer."""
    max_store_bytes: int = 256 * _MiB
    """Sample bytes kept in all."""
    window_s: float = 60.0
    """The window of the per-writer rates, s of this replica's receive time."""
    max_writer_samples_per_window: int = 6_000
    """Samples (and disposes) taken from one writer per window: 100/s on average."""
    max_writer_bytes_per_window: int = 64 * _MiB
    """Bytes taken from one writer per window."""
    max_future_skew_s: float = 30.0
    """How far ahead of receive time a source timestamp may be, s."""
    max_topics: int = 256
    """Durable topics kept (each is a reader of the service)."""
    max_writers: int = 100_000
    """Writers (of any topic) tracked from discovery."""
    max_requests_per_window: int = 600
    """History requests answered per requesting participant per window (10/s on average)."""
    max_reply_samples: int = 10_000
    """Samples in one history reply (the newest of each instance first; a reply cut short
    says so in its ``message``)."""
    max_reply_bytes: int = 16 * _MiB
    """Sample bytes in one history reply."""
    retention_s: float = 24 * 3600.0
    """How long a sample is kept after this replica stored it (its own clock); the newest
    sample of each instance is kept whatever its age (a keep-last state, a checkpoint written
    once a week, stays). ``math.inf``: no retention, the other bounds only."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "retention_s":
                ok = isinstance(value, int | float) and not math.isnan(value) and value > 0
            elif f.name.endswith("_s"):
                ok = isinstance(value, int | float) and math.isfinite(value) and value > 0
            else:
                ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
            if not ok:
                raise StoreError(f"PersistLimits.{f.name}={value!r}: must be {_wanted(f.name)}")


def _wanted(name: str) -> str:
    if name == "retention_s":
        return "a number of seconds > 0 (math.inf: no retention)"
    return "a finite number of seconds > 0" if name.endswith("_s") else "a count >= 1"


def retention_seconds(text: str) -> float:
    """``--retention`` of `mcc persist serve` and of the service app: seconds > 0, or ``inf``
    (no retention)."""
    import argparse

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, or inf (got {text!r})")
    return value
