"""What the HPC jobs share: the job result record, the error, the farm's control item ids.

A job (``primes`` or ``stream``) runs on one of two implementations, ``dds`` (the task farm on
the bus, ``mcc.hpc.farm`` / ``mcc.hpc.stream``) or ``mpi`` (``mcc.hpc.mpi``, mpi4py), and both
report a ``JobResult`` with the same clocks:

- ``launch_s``: from asking for the job (``mcc hpc …``, the supervisor or ``mpiexec`` started)
  to the first work item sent: processes, bus or MPI start-up, workers ready;
- ``runtime_s``: from the first work item sent to the last result received (primes), or from
  the first chunk sent to the last chunk back (stream): the job itself.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mcc.errors import HpcError
from mcc.files import write_atomic
from mcc.settings import current

__all__ = [
    "CONTROL_ID",
    "WARMUP_BYTES",
    "HpcError",
    "JobResult",
    "buffers_equal",
    "default_job_id",
    "random_buffer",
    "read_result",
    "touched_buffer",
    "write_result",
]

#: ``item_id`` of control samples: a ``WorkResult`` with it is a worker's hello (I am ready,
#: ``value`` = my pid), a ``WorkItem`` with it tells the workers the job is over.
CONTROL_ID = 2**64 - 1

#: A stream's untimed round trip before its timed one, of the stream's size but at most this,
#: the same for DDS and MPI: the pools, socket buffers and allocator heaps a transfer of that
#: size grows are not its rate (as OSU's MPI benchmarks warm up at the size they measure).
WARMUP_BYTES = 32 << 20

#: Large buffers are made and compared 16 MiB at a time: one NumPy call on a GiB holds the GIL
#: for seconds, long enough to starve an app's heartbeat thread (the supervisor then kills it).
_SLICE_BYTES = 1 << 24


def default_job_id(app: str) -> str:
    """``APP-<mission epoch>``: the same in every instance of one mission run, new per run."""
    epoch = current().epoch_ns
    return f"{app}-{epoch if epoch is not None else time.time_ns()}"


@dataclass
class JobResult:
    """What a job computed and how long it took (see the module doc for the clocks)."""

    app: str  # primes | stream
    impl: str  # dds | mpi | mpi-tcp
    workers: int
    job_id: str = ""
    n: int | None = None  # primes: the range [1, n]
    items: int | None = None  # primes: work items
    count: int | None = None  # primes: primes found
    largest: int | None = None  # primes: the largest
    size_bytes: int | None = None  # stream: bytes sent each way
    chunk_bytes: int | None = None  # stream
    verified: bool | None = None  # stream: what came back is what was sent
    launch_s: float | None = None
    runtime_s: float | None = None
    mb_per_s: float | None = None  # stream: one-way, 10^6 bytes/s
    reissued_items: int = 0  # primes: items sent again to a replacement
    duplicate_results: int = 0  # results received for an item already counted (dropped)
    lost_items: int = 0  # items without a result at the end
    replacements: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobResult:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


def write_result(result: JobResult, path: Path) -> Path:
    """Write ``result`` as JSON, atomically (a reader never sees half a file). Several
    writers may race for one result, a standby master beside the one that finished the job:
    each writes a temporary file of its own, and the last complete one stays."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(result.as_dict(), indent=2) + "\n")
    return path


def read_result(path: Path) -> JobResult | None:
    """The result at ``path``, or None while it is not there."""
    try:
        return JobResult.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def random_buffer(size_bytes: int, seed: int) -> np.ndarray:
    """``size_bytes`` seeded random bytes (uint8), made slice by slice."""
    out = np.empty(size_bytes, dtype=np.uint8)
    rng = np.random.default_rng(seed)
    for offset in range(0, size_bytes, _SLICE_BYTES):
        end = min(offset + _SLICE_BYTES, size_bytes)
        out[offset:end] = rng.integers(0, 256, end - offset, dtype=np.uint8)
    return out


def touched_buffer(size_bytes: int) -> np.ndarray:
    """A uint8 buffer whose pages are all mapped (written once): no page faults while timed."""
    out = np.empty(size_bytes, dtype=np.uint8)
    for offset in range(0, size_bytes, _SLICE_BYTES):
        out[offset : offset + _SLICE_BYTES] = 1
    return out


def buffers_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two byte buffers are equal, compared slice by slice."""
    if a.shape != b.shape:
        return False
    return all(
        np.array_equal(a[o : o + _SLICE_BYTES], b[o : o + _SLICE_BYTES])
        for o in range(0, len(a), _SLICE_BYTES)
    )
