"""Reader loop, heartbeats and the ready-made helpers, in one process."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from mcc.bus import Bus, HeartbeatPublisher, ReaderLoop
from mcc.types import SystemState, Track
from tests.conftest import wait_for


def test_reader_loop_dispatches_batches_and_stops_promptly(
    bus_env: dict[str, str], domain_id: int
) -> None:
    with Bus(domain_id) as bus:
        writer, reader = bus.writer("Track"), bus.reader("Track")
        got: list[int] = []
        done = threading.Event()

        def handle(samples: list[Track]) -> None:
            got.extend(s.track_id for s in samples)
            if len(got) >= 50:
                done.set()

        loop = ReaderLoop(bus, batch=16, idle_timeout_s=30.0).add(reader, handle).start()
        assert writer.wait_for_readers(1, timeout_s=10)
        for i in range(1, 51):
            writer.write(Track(track_id=i))
        assert done.wait(10), got
        start = time.monotonic()
        loop.stop()
        assert time.monotonic() - start < 2.0  # woken by the guard condition, not the timeout
    assert sorted(got) == list(range(1, 51))
    assert loop.wakeups < 50 * 2  # batched, not one wake-up per sample


def test_heartbeat_carries_identity_load_rates_and_latency(
    bus_env: dict[str, str], domain_id: int
) -> None:
    with Bus(domain_id) as bus:
        reader = bus.reader("Heartbeat")
        hb = HeartbeatPublisher(bus, "m/tracker/0", period_s=0.2, device="cpu")
        with hb:
            hb.count_in(100)
            for latency in (1_000, 2_000, 3_000, 100_000):
                hb.record_latency_ns(latency)
            beats = reader.take_until(3, timeout_s=10)
        final = reader.take_until(1, timeout_s=5)
    assert beats[0].system_id == "m/tracker/0" and beats[0].pid > 0 and beats[0].rss_bytes > 0
    assert any(b.msgs_in_per_s > 0 for b in beats)
    assert any(b.latency_p99_us > b.latency_p50_us > 0 for b in beats)
    assert [b.seq for b in beats] == sorted(b.seq for b in beats)
    assert final[-1].state is SystemState.SYSTEM_STOPPED


def test_heartbeat_period_must_be_positive(bus_env: dict[str, str], domain_id: int) -> None:
    with Bus(domain_id) as bus, pytest.raises(ValueError, match="period_s"):
        HeartbeatPublisher(bus, "x", period_s=0)


def test_heartbeat_releases_free_memory_on_its_own_period(
    bus_env: dict[str, str], domain_id: int
) -> None:
    with Bus(domain_id) as bus:
        with pytest.raises(ValueError, match="trim_every_s"):
            HeartbeatPublisher(bus, "x", trim_every_s=0)
        trimming = HeartbeatPublisher(bus, "m/a/0", period_s=0.05, trim_every_s=0.1)
        never = HeartbeatPublisher(bus, "m/b/0", period_s=0.05, trim_every_s=None)
        with trimming, never:
            # The first trim comes trim_every_s after the fast start-up beats (STARTUP_S).
            wait_for(lambda: trimming.trims >= 3, 10, "three trims")
    assert trimming.trims >= 3
    assert never.trims == 0


# A fresh process: 64 MB of 32 KiB blocks (below glibc's mmap threshold: from the heap), all
# freed but the last, which pins the top of the heap so that free() itself cannot shrink it.
_FRAGMENTED_HEAP = """
import ctypes, json
from mcc.bus.heartbeat import release_free_memory
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
blocks = [libc.malloc(32768) for _ in range(2048)]
for b in blocks:
    ctypes.memset(b, 1, 32768)
for b in blocks[:-1]:
    libc.free(b)
before = rss()
released = release_free_memory()
print(json.dumps({"before": before, "after": rss(), "released": released}))
"""


def test_release_free_memory_hands_back_the_free_pages_inside_the_heap() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _FRAGMENTED_HEAP],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    got = json.loads(out.stdout)
    assert got["released"] is True
    assert got["before"] - got["after"] > 48e6, got  # most of the 64 MB freed in the middle


# A fork server's child, with or without the server's objects frozen: the file-backed pages a
# full collection in the child maps (the extensions' traverse functions) are measured.
_FORKED_COLLECTION = """
import gc, json, os, sys
import mcc.orchestrate.runtime, mcc.apps.launcher, mcc.apps.tewa  # what a node agent preloads
from mcc.bus.heartbeat import freeze_startup_objects
if sys.argv[1] == "freeze":
    freeze_startup_objects(collect=True)
def rss_file():
    for line in open("/proc/self/status"):
        if line.startswith("RssFile:"):
            return int(line.split()[1]) * 1024
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    before = rss_file()
    gc.collect()
    got = {"mapped": rss_file() - before, "frozen": gc.get_freeze_count()}
    os.write(w, json.dumps(got).encode())
    os._exit(0)
os.waitpid(pid, 0)
print(os.read(r, 4096).decode())
"""


def test_frozen_start_up_objects_keep_a_forked_childs_collection_off_the_libraries() -> None:
    def child_collection(mode: str) -> dict[str, int]:
        out = subprocess.run(
            [sys.executable, "-c", _FORKED_COLLECTION, mode],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        return json.loads(out.stdout)  # type: ignore[no-any-return]

    plain, frozen = child_collection("plain"), child_collection("freeze")
    assert plain["frozen"] == 0 and frozen["frozen"] > 10_000
    # Without: the child's first full collection maps library code it never ran (~1-2 MB).
    assert plain["mapped"] > 300_000, plain
    assert frozen["mapped"] < plain["mapped"] / 3, (plain, frozen)
