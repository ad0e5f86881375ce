"""HPC test fixtures: a private MCC_HOME (run registry), MPI found or skipped (failed in CI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcc.hpc.base import HpcError
from tests.conftest import IN_CI


@pytest.fixture
def hpc_env(
    bus_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """``bus_env`` plus an MCC_HOME of the test's own (``mcc up``'s registry of missions)."""
    monkeypatch.setenv("MCC_HOME", str(tmp_path / "home"))
    return {**bus_env, "MCC_HOME": str(tmp_path / "home")}


@pytest.fixture
def mpiexec() -> str:
    """The mpich wheel's mpiexec; a missing MPI fails the test in CI and skips it elsewhere."""
    from mcc.hpc.mpi import find_mpiexec

    try:
        return find_mpiexec()
    except HpcError as exc:
        if IN_CI:
            pytest.fail(str(exc))
        pytest.skip(str(exc))
