"""`mcc hpc primes|stream`: results printed and as JSON; bad input named with its fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcc.cli import main
from tests.conftest import run_cli

from .test_primes import reference


def test_three_dds_worker_processes_find_the_primes(
    hpc_env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    out, run = tmp_path / "primes.json", tmp_path / "run"
    proc = run_cli(
        ["hpc", "primes", "--n", "300000", "--workers", "3", "--backend", "dds"]
        + ["--domain", str(domain_id), "--run-dir", str(run), "--json", str(out)],
        env=hpc_env,
        timeout_s=180,
    )
    result = json.loads(out.read_text())
    assert (result["count"], result["largest"]) == reference(300_000)
    assert result["impl"] == "dds" and result["items"] == 24
    assert (result["lost_items"], result["duplicate_results"], result["reissued_items"]) == (
        0,
        0,
        0,
    )
    assert result["extra"]["items_per_worker"] == {f"hpc-primes/worker/{i}": 8 for i in range(3)}
    assert result["launch_s"] > 0 and 0 < result["runtime_s"] < 60
    assert str(result["count"]) in proc.stdout and "runtime s" in proc.stdout
    # The master's own record in the run folder, one worker log per identity.
    assert (
        json.loads((run / f"hpc-{result['job_id']}.json").read_text())["count"] == result["count"]
    )
    assert sorted(p.name for p in (run / "logs").glob("worker-*.log")) == [
        "worker-0.log",
        "worker-1.log",
        "worker-2.log",
    ]


def test_a_kill_plan_that_never_applied_is_said(
    hpc_env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    # One item: its result is the last one, so "after half the results" never comes mid-item.
    proc = run_cli(
        ["hpc", "primes", "--n", "100000", "--workers", "1", "--items", "1", "--backend", "dds"]
        + ["--kill-worker", "0", "--kill-at", "0.5", "--domain", str(domain_id)]
        + ["--run-dir", str(tmp_path / "run")],
        env=hpc_env,
        timeout_s=120,
    )
    assert "worker 0 was never killed: the job ended before 50% of the results" in proc.stderr
    assert str(reference(100_000)[0]) in proc.stdout


def test_primes_on_mpi_from_the_command_line(
    hpc_env: dict[str, str], mpiexec: str, tmp_path: Path
) -> None:
    out = tmp_path / "primes.json"
    run_cli(
        ["hpc", "primes", "--n", "300000", "--workers", "2", "--backend", "mpi"]
        + ["--json", str(out)],
        env=hpc_env,
        timeout_s=120,
    )
    result = json.loads(out.read_text())
    assert (result["count"], result["largest"]) == reference(300_000)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["primes", "--n", "1000", "--workers", "0"], "workers = 0"),
        (["primes", "--n", "1", "--workers", "2"], "n = 1"),
        (["primes", "--n", "1000", "--workers", "2", "--kill-worker", "2"], "0..1"),
        (["primes", "--n", "1000", "--kill-worker", "0", "--kill-at", "1.5"], "at_fraction"),
        (["stream", "--gib", "0"], "--gib 0"),
    ],
)
def test_bad_input_is_refused_with_the_value(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["hpc", *args]) == 2
    assert message in capsys.readouterr().err
