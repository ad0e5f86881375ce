"""The MPI baselines under the mpich wheel's mpiexec: the same answers as the DDS farm."""

from __future__ import annotations

import pytest

from mcc.hpc.jobs import KillPlan, run_primes, run_stream

from .test_primes import reference


@pytest.mark.parametrize("impl", ["mpi", "mpi-tcp"])
def test_mpi_primes_match_the_reference(mpiexec: str, impl: str) -> None:
    n = 1_000_000
    result = run_primes(impl, n=n, workers=2, timeout_s=120)
    assert (result.impl, result.workers, result.items) == (impl, 2, 16)
    assert (result.count, result.largest) == reference(n)
    assert result.lost_items == 0 and result.duplicate_results == 0
    assert result.launch_s is not None and result.launch_s > 0
    assert result.runtime_s is not None and result.runtime_s > 0


def test_mpi_stream_round_trip_is_verified(mpiexec: str) -> None:
    result = run_stream("mpi", size_bytes=8 << 20, chunk_bytes=256 << 10, timeout_s=120)
    assert result.verified is True and result.mb_per_s is not None and result.mb_per_s > 0


def test_mpi_job_with_a_killed_rank_aborts_and_is_run_again(mpiexec: str) -> None:
    n = 20_000_000
    result = run_primes(
        "mpi", n=n, workers=2, items=32, kill=KillPlan(worker=1, at_fraction=0.25), timeout_s=180
    )
    undisturbed = run_primes("mpi", n=n, workers=2, items=32, timeout_s=180)
    assert (result.count, result.largest) == (undisturbed.count, undisturbed.largest)
    kill = result.extra["kill"]
    assert kill["aborted_returncode"] != 0  # MPI cannot replace a rank: the job died
    assert kill["results_thrown_away"] >= 8  # a quarter of 32 results were in, then lost
    assert result.reissued_items == 32  # everything ran again
