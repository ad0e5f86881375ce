"""Inline ``on_data`` handlers: run on the thread that delivered the data (Cyclone's receive
thread), no dispatcher hop; errors counted, closing clean, misuse refused."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from mcc.bus import Bus, Reader
from mcc.bus.transport import Transport
from mcc.errors import MccError
from mcc.types import PerfSample, Track
from tests.conftest import REPO, wait_for


def test_an_inline_echo_answers_on_the_receive_thread_without_waking_the_dispatcher(
    bus_env: dict[str, str], domain_id: int
) -> None:
    """A ping-pong against a pong process whose echo is inline: every echo comes back, and
    here the handler ran on a thread Python did not start (Cyclone's), not the dispatcher."""
    tag = bus_env["MCC_DISCOVERY_TAG"]
    pong = subprocess.Popen(
        [sys.executable, "-m", "mcc.bench.latency_pingpong", "pong"]
        + ["--domain", str(domain_id), "--tag", tag, "--mode", "inline"],
        cwd=REPO,
        env=bus_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        with Bus(domain_id, transport=Transport.loopback(tag), monitor_qos=False) as bus:
            writer = bus.writer("PerfPing", type=PerfSample, profile="perf_reliable")
            echoed: list[int] = []
            threads: set[str] = set()
            done = threading.Event()

            def on_echo(reader: Reader[Any]) -> None:
                threads.add(threading.current_thread().name)
                for sample in reader.take(8):
                    echoed.append(sample.seq)
                    if sample.seq >= 500:
                        done.set()
                    else:
                        writer.write(PerfSample(writer_id="t", seq=sample.seq + 1, payload=b"x"))

            def beside(reader: Reader[Any]) -> None:  # the same echoes, on the dispatcher
                threads.add(threading.current_thread().name)
                reader.take(64)

            bus.reader("PerfPong", type=PerfSample, profile="perf_reliable", on_data=beside)
            bus.reader(
                "PerfPong", type=PerfSample, profile="perf_reliable", inline=True, on_data=on_echo
            )
            wait_for(lambda: writer.matched() >= 1, 30, "the pong's reader")
            # the pong's writer may not see our readers yet: ping until the first echo
            deadline = time.monotonic() + 30
            while not echoed and time.monotonic() < deadline:
                writer.write(PerfSample(writer_id="t", seq=1, payload=b"x"))
                time.sleep(0.2)
            assert done.wait(30), f"echoes stopped at {max(echoed, default=None)}"
            wakeups = bus.dispatcher.wakeups
            writer.write(PerfSample(writer_id="t", seq=0, payload=b""))  # the pong stops
            writer.dds.wait_for_acks(10**9)
        said = pong.communicate(timeout=15)[0]
        assert pong.returncode == 0, said
    finally:
        if pong.poll() is None:
            pong.kill()
            pong.communicate(timeout=5)
    # The dispatcher's reader ran on its thread, the inline one on Cyclone's receive thread (a
    # thread Python knows as Dummy-N), which did all the echoing.
    assert any(t.startswith("mcc-bus-dispatch") for t in threads), threads
    assert any(t.startswith("Dummy") for t in threads), threads
    assert sorted(set(echoed))[-1] == 500
    assert wakeups <= len(echoed) + 20  # the dispatcher woke for its own reader, not for both


def test_an_inline_handler_that_raises_is_counted_and_the_reader_goes_on(domain_id: int) -> None:
    with Bus(domain_id, monitor_qos=False) as bus:
        seen: list[int] = []

        def handler(reader: Reader[Any]) -> None:
            for track in reader.take():
                seen.append(track.track_id)
                if track.track_id == 1:
                    raise RuntimeError("a bug in the handler")

        bus.reader("Track", on_data=handler, inline=True)
        writer = bus.writer("Track")
        writer.wait_for_readers(1)
        writer.write(Track(track_id=1))
        writer.write(Track(track_id=2))
        wait_for(lambda: 2 in seen, 5, "the sample after the failure")
        assert bus.stats.handler_errors == 1


def test_closing_stops_an_inline_handler_and_closing_from_inside_is_refused(
    domain_id: int,
) -> None:
    with Bus(domain_id, monitor_qos=False) as bus:
        refused: list[str] = []
        calls: list[int] = []

        def handler(reader: Reader[Any]) -> None:
            calls.append(len(reader.take()))
            for close in (reader.close, bus.close):
                try:
                    close()
                except MccError as exc:
                    refused.append(str(exc))

        reader = bus.reader("Track", on_data=handler, inline=True)
        writer = bus.writer("Track")
        writer.wait_for_readers(1)
        writer.write(Track(track_id=1))
        wait_for(lambda: len(refused) >= 2, 5, "the handler's call")
        assert len(refused) == 2, refused
        assert all("from inside an inline on_data handler" in r for r in refused)
        reader.close()
        reader.close()
        before = len(calls)
        writer.write(Track(track_id=2))
        time.sleep(0.2)
        assert len(calls) == before  # closed: no more calls
        # a bus closing while an inline reader still receives closes without hanging
        bus.reader("Track", on_data=lambda r: r.take(), inline=True)
        for i in range(100):
            writer.write(Track(track_id=i))


def test_inline_without_a_handler_or_on_a_durable_profile_is_refused(domain_id: int) -> None:
    with Bus(domain_id, monitor_qos=False) as bus:
        with pytest.raises(MccError, match="inline=True needs an on_data handler"):
            bus.reader("Track", inline=True)
        assert "persistent" in bus.qos.names()
        with pytest.raises(MccError, match="inline=True is not for the durable profile"):
            bus.reader("Track", profile="persistent", on_data=lambda r: None, inline=True)
