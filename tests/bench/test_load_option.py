"""``--load`` of the benches: the CPU load of ``mcc bench load`` beside a block, rows labelled."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from mcc.bench import runner
from tests.conftest import wait_for


def _burners() -> list[int]:
    """This process's children that run the CPU load's busy loop."""
    me = str(os.getpid())
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[1] == me and b"getppid" in cmdline:
            found.append(int(pid))
    return found


def test_beside_load_runs_one_busy_process_per_core_and_stops_them() -> None:
    with runner.beside_load("cpu") as label:
        burners = _burners()
        assert len(burners) == (os.cpu_count() or 1)
        ticks = sum(int(Path(f"/proc/{p}/stat").read_text().split()[13]) for p in burners)
        time.sleep(0.5)
        busy = sum(int(Path(f"/proc/{p}/stat").read_text().split()[13]) for p in burners)
        assert busy > ticks  # they burn CPU (user ticks rose)
    assert label([{"impl": "mcc"}]) == [{"impl": "mcc", "load": "cpu"}]
    wait_for(lambda: not _burners(), 5, "the burners to stop")


def test_without_load_nothing_runs_and_rows_stay_unlabelled() -> None:
    parser = argparse.ArgumentParser()
    runner.add_load_option(parser)
    quiet, loaded = parser.parse_args([]), parser.parse_args(["--load"])
    assert runner.load_passes(quiet) == (None,)
    assert runner.load_passes(loaded) == ("none", "cpu")
    with runner.beside_load(quiet) as label:
        assert not _burners()
        assert label([{"impl": "mcc"}]) == [{"impl": "mcc"}]
    with runner.beside_load("none") as label:
        assert label([{}]) == [{"load": "none"}]
