"""The DDS task farm as a mission: real worker processes under the supervisor, a real kill -9."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcc.hpc.jobs import KillPlan, run_primes
from mcc.hpc.primes import PrimeCount


def test_a_killed_worker_is_replaced_under_its_identity_and_resumes_from_its_checkpoint(
    hpc_env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    # Items of 2.5e8 numbers (0.3-1 s each): checkpoints inside an item for the kill to wait
    # for, however fast the host is today.
    n, items = 10**9, 4
    expected = PrimeCount(50_847_534, 999_999_937)  # pi(10^9) and the largest prime below it
    undisturbed = run_primes("dds", n=n, workers=2, items=items, domain=domain_id, timeout_s=180)
    run = tmp_path / "run"
    killed = run_primes(
        "dds",
        n=n,
        workers=2,
        items=items,
        kill=KillPlan(worker=1, at_fraction=0.25, mid_item=True),
        checkpoint_interval_s=0.05,
        run_dir=run,
        domain=domain_id,
        timeout_s=180,
    )
    assert (undisturbed.count, undisturbed.largest) == (expected.count, expected.largest)
    assert (killed.count, killed.largest) == (undisturbed.count, undisturbed.largest)
    assert (killed.lost_items, killed.duplicate_results) == (0, 0)
    assert "kill" in killed.extra, "the kill plan never applied: the job ended first"
    kill = killed.extra["kill"]
    assert kill["worker"] == "hpc-primes/worker/1"
    assert killed.extra["restarts"] == {"hpc-primes/worker/1": 1}
    (replacement,) = killed.replacements
    assert replacement["worker_id"] == "hpc-primes/worker/1"
    assert replacement["old_pid"] == kill["pid"] != replacement["new_pid"]
    assert replacement["reissued"] >= 1 and killed.reissued_items == replacement["reissued"]
    assert 0 < kill["replacement_s"] < 30
    # The replacement read its predecessor's mid-item checkpoint through the persistence
    # service and went on from there.
    log = (run / "logs" / "worker-1.log").read_text()
    assert "restored checkpoint" in log and " resumes at " in log, log[-3000:]


@pytest.mark.slow
def test_a_killed_master_is_restarted_by_the_supervisor_and_takes_the_job_over(
    hpc_env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    """missions/hpc-primes.yaml as shipped (master/0 leading, master/1 standing by, restart
    on failure): kill -9 of master/0 once 30 % of the results are in."""
    run = tmp_path / "run"
    result = run_primes(
        "dds",
        n=10**9,
        workers=2,
        items=64,
        kill=KillPlan(system="master", at_fraction=0.3),
        domain=domain_id,
        timeout_s=180,
        run_dir=run,
    )
    assert (result.count, result.largest, result.lost_items) == (50_847_534, 999_999_937, 0)
    assert "kill" in result.extra, "the kill plan never applied: the job ended first"
    assert result.extra["kill"]["worker"] == "hpc-primes/master/0"
    # One restart: the kill's. Another means master/0 failed on its own: its log says why.
    assert result.extra["restarts"] == {"hpc-primes/master/0": 1}, (
        run / "logs" / "master-0.log"
    ).read_text()[-4000:]
    journal = result.extra["journal"]
    assert journal["records_per_item_max"] == 1 and journal["items_journaled"] == 64
    (takeover,) = journal["takeovers"]
    assert takeover["from_epoch"] == 1 and takeover["epoch"] == 2
    assert takeover["adopted_results"] + takeover["reissued"] == 64
    assert 0 < result.extra["kill"]["replacement_s"] < 30
