"""A flood of made-up keys on a keyed topic: one identity's writer beats as 200 000 system ids.
The reader's memory stays bounded (the heartbeat profile's instance limit), the beats of an
instance it already knows keep coming, and the rejections are counted and logged a few times,
not once each."""

from __future__ import annotations

import logging
import subprocess
import sys
import time

import pytest

from mcc.bus import Bus, Transport
from mcc.types import Heartbeat
from tests.conftest import REPO

FLOOD = """
import sys, time
from mcc.bus import Bus, Transport
from mcc.types import Heartbeat
domain, tag, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
with Bus(domain, transport=Transport.loopback(tag), name="flood") as bus:
    writer = bus.writer("Heartbeat")
    writer.wait_for_readers(1, timeout_s=10)
    for i in range(n):
        writer.write(Heartbeat(system_id=f"m/made-up/{i}"))
    time.sleep(1)  # best effort has no acks: give the last samples time to leave before exit
"""


def _rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


@pytest.mark.slow
def test_a_key_flood_fills_the_table_not_the_memory(
    domain_id: int, caplog: pytest.LogCaptureFixture
) -> None:
    tag = f"flood-{domain_id}"
    transport = Transport.loopback(tag)
    with (
        Bus(domain_id, transport=transport, name="supervisor") as bus,
        Bus(domain_id, transport=transport, name="tracker") as tracker,
    ):
        beats, own = bus.reader("Heartbeat"), tracker.writer("Heartbeat")
        own.wait_for_readers(1, timeout_s=10)
        own.write(Heartbeat(system_id="m/tracker/0", seq=0))
        assert [b.system_id for b in beats.take_until(1, timeout_s=5)] == ["m/tracker/0"]
        before = _rss_mib()
        caplog.set_level(logging.WARNING, logger="mcc.bus")
        flood = subprocess.Popen(
            [sys.executable, "-c", FLOOD, str(domain_id), tag, "200000"], cwd=REPO
        )
        heard, seq, last = 0, 0, -1
        deadline = time.monotonic() + 120
        try:
            while flood.poll() is None and time.monotonic() < deadline:
                seq += 1
                own.write(Heartbeat(system_id="m/tracker/0", seq=seq))
                for beat in beats.take():
                    if beat.system_id == "m/tracker/0":
                        heard, last = heard + 1, beat.seq
                time.sleep(0.05)  # the tracker's beat period here, not a synchronisation
            assert flood.wait(1) == 0, "the flood did not end within 120 s"
        finally:
            flood.kill()
        # the beats written last: until the newest arrived (best effort: at most 2 s)
        settle = time.monotonic() + 2
        while last < seq and time.monotonic() < settle:
            for beat in beats.take_wait(64, timeout_s=0.1):
                if beat.system_id == "m/tracker/0":
                    heard, last = heard + 1, beat.seq
        grown = _rss_mib() - before
        rejected = bus.stats.samples_rejected
    # Without the limit this reader grew by about 150 MiB (measured with the same flood).
    assert grown < 40, f"the reader grew by {grown:.0f} MiB"
    assert heard >= seq // 2, f"the known instance's beats: {heard} of {seq}"
    assert rejected >= 1
    warnings = [r for r in caplog.records if "sample rejected" in r.getMessage()]
    assert 1 <= len(warnings) <= 8, len(warnings)
