"""Reader loop, heartbeats and the ready-made helpers, in one process."""

from __future__ import annotations

import threading
import time

import pytest

from mcc.bus import Bus, HeartbeatPublisher, ReaderLoop
from mcc.types import SystemState, Track


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
