"""Link faults on the bus between two netns hosts: reliable streams survive 10 % loss intact
and in order; best-effort streams lose samples but keep flowing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from mcc.netlab import NetLab
from tests.conftest import REPO


def stream(lab: NetLab, profile: str, *, domain_id: int, count: int) -> dict[str, object]:
    """``count`` samples from host a to host b with ``profile``; what b received."""
    common = ["--domain", str(domain_id), "--tag", f"lf-{os.getpid()}-{profile}"]
    common += ["--profile", profile, "--count", str(count)]
    peer = [sys.executable, "-m", "tests.netns.stream_peer"]
    recv = lab.popen("b", [*peer, "recv", *common], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert recv.stdout is not None and recv.stdout.readline().strip() == "ready"
        subprocess.run(
            lab.exec_argv("a", [*peer, "send", *common]), cwd=REPO, check=True, timeout=120
        )
        out, _ = recv.communicate(timeout=60)
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.communicate()
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


def test_reliable_loses_nothing_and_best_effort_degrades_without_stalling(
    lab: NetLab, domain_id: int
) -> None:
    lab.netem("a", loss_pct=10)
    lab.netem("b", loss_pct=10)  # the acknowledgements and repairs cross a lossy link too
    count = 300
    reliable = stream(lab, "command", domain_id=domain_id, count=count)
    assert reliable["seqs"] == list(range(1, count + 1))  # all of them, in order
    best_effort = stream(lab, "sensor_stream", domain_id=domain_id, count=count)
    seqs = best_effort["seqs"]
    assert isinstance(seqs, list)
    assert 0.75 * count <= len(seqs) < count, len(seqs)  # ~10 % lost, none repaired
    assert seqs == sorted(seqs) and seqs[-1] >= count - 10  # still flowing to the end
    assert isinstance(best_effort["max_gap_s"], float) and best_effort["max_gap_s"] < 1.0
