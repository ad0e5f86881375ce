"""`mcc bench hpc --quick`: DDS and MPI rows side by side, in the shared JSON shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcc.hpc.base import HpcError
from mcc.hpc.mpi import find_mpiexec
from tests.conftest import IN_CI, run_cli


@pytest.mark.slow
def test_bench_hpc_quick_rows(tmp_path: Path, bus_env: dict[str, str]) -> None:
    try:
        find_mpiexec()
    except HpcError as exc:
        if IN_CI:
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    out = tmp_path / "hpc.json"
    env = {**bus_env, "MCC_HOME": str(tmp_path / "home")}
    proc = run_cli(["bench", "hpc", "--quick", "--json", str(out)], env=env, timeout_s=300)
    doc = json.loads(out.read_text())
    assert doc["bench"] == "hpc" and doc["host"]["cores"] >= 1
    rows = doc["rows"]
    by_app: dict[str, set[str]] = {}
    for row in rows:
        by_app.setdefault(row["app"], set()).add(row["impl"])
        assert row["correct"] is True, row
    assert by_app == {
        "primes": {"dds", "mpi"},
        "stream": {
            "dds",
            "dds-plain",
            "dds-shm",
            "mpi",
            "mpi-tcp",
            "ddsperf",
            "ddsperf-11",
            "ddsperf-secure",
        },  # fmt: skip
        "primes-kill": {"dds", "mpi"},
    }
    primes = [r for r in rows if r["app"] == "primes"]
    assert {r["workers"] for r in primes} == {1, 2}
    for row in primes:
        assert row["runtime_s"] > 0 and row["launch_s"] > 0
        assert row["lost_items"] == 0 and row["duplicate_items"] == 0
    assert all(
        r["ratio_vs_mpi"] > 0 for r in rows if r["impl"] == "dds" and r["app"] != "primes-kill"
    )
    for row in rows:
        if row["app"] == "stream":
            assert row["mb_per_s"] > 0
            if row["impl"] in ("dds-plain", "dds-shm"):  # beside its anchors, same run
                assert row["ratio_vs_ddsperf"] > 0 and row["ratio_vs_mpi_tcp"] > 0, row
            if row["impl"] == "dds":  # secured: beside ddsperf secured alike
                assert row["ratio_vs_ddsperf_secure"] > 0 and row["secured_vs_plain"] > 0, row
            if row["impl"] == "ddsperf-secure":
                assert row["secured_vs_plain"] > 0, row
    assert "stream over UDP / ddsperf (both unsecured)" in proc.stdout
    assert "stream rate kept under DDS Security, MCC vs ddsperf" in proc.stdout
    dds_kill, mpi_kill = sorted(
        (r for r in rows if r["app"] == "primes-kill"), key=lambda r: r["impl"]
    )
    assert dds_kill["lost_items"] == 0 and dds_kill["duplicate_items"] == 0
    assert "error" not in dds_kill, dds_kill  # the victim was killed inside an item
    assert dds_kill["replacement_s"] > 0 and dds_kill["reissued_items"] >= 1
    assert mpi_kill["results_thrown_away"] >= 1  # MPI ran the whole job again
    assert "primes DDS/MPI runtime" in proc.stdout
