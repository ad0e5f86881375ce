"""HPC on the bus: a fault-tolerant task farm (primes), node-to-node streaming, MPI baselines.

>>> from mcc.hpc import run_primes, run_stream, KillPlan
>>> run_primes("dds", n=10**8, workers=3, kill=KillPlan(worker=1)).count
5761455
>>> run_stream("mpi", size_bytes=2**30, chunk_bytes=2**20).mb_per_s

Apps (``AppContext``): ``mcc.hpc.farm:master``, ``mcc.hpc.farm:worker`` (missions/hpc-primes.yaml),
``mcc.hpc.stream:source``, ``mcc.hpc.stream:echo``; the MPI versions are ``python -m
mcc.hpc.mpi primes|stream`` under mpiexec. docs/hpc.md tells the story. Names are imported on
first use, so the ``mcc`` command line stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcc.hpc.base import CONTROL_ID, HpcError, JobResult
    from mcc.hpc.farm import FarmMaster, FarmWorker
    from mcc.hpc.jobs import KillPlan, primes_mission, run_primes, run_stream
    from mcc.hpc.primes import PrimeCount, PrimeScan, base_primes, count_primes, split_range

_WHERE = {
    "CONTROL_ID": "base",
    "HpcError": "base",
    "JobResult": "base",
    "FarmMaster": "farm",
    "FarmWorker": "farm",
    "KillPlan": "jobs",
    "primes_mission": "jobs",
    "run_primes": "jobs",
    "run_stream": "jobs",
    "PrimeCount": "primes",
    "PrimeScan": "primes",
    "base_primes": "primes",
    "count_primes": "primes",
    "split_range": "primes",
}
__all__ = [
    "CONTROL_ID",
    "FarmMaster",
    "FarmWorker",
    "HpcError",
    "JobResult",
    "KillPlan",
    "PrimeCount",
    "PrimeScan",
    "base_primes",
    "count_primes",
    "primes_mission",
    "run_primes",
    "run_stream",
    "split_range",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'mcc.hpc' has no attribute {name!r}")
    return getattr(importlib.import_module(f"mcc.hpc.{module}"), name)
