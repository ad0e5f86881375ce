"""Real separate processes on the bus: every topic type, late joiners, QoS, request/reply."""

from __future__ import annotations

import logging
import os
import signal
import time

import pytest

from mcc.bus import TOPICS, Bus, Requester
from mcc.errors import RequestTimeoutError, WriteTimeoutError
from mcc.types import Command, PerfSample
from tests.conftest import peer, read_line
from tests.integration.bus_peer import sample_for

pytestmark = pytest.mark.slow


def test_every_topic_type_crosses_between_processes(
    bus_env: dict[str, str], domain_id: int
) -> None:
    with Bus(domain_id) as bus:
        readers = {name: bus.reader(name) for name in TOPICS}
        received: dict[str, object] = {}
        with peer("write-all", env=bus_env) as proc:
            for reader in readers.values():
                assert reader.wait_for_writers(1, timeout_s=20), reader.topic_name
            deadline = time.monotonic() + 30
            while len(received) < len(readers) and time.monotonic() < deadline:
                proc.stdin.write("go\n")
                proc.stdin.flush()
                assert read_line(proc, 20).strip() == "wrote"
                for name, reader in readers.items():
                    for sample in reader.take_wait(16, timeout_s=0.2):
                        received.setdefault(name, sample)
    assert set(received) == set(TOPICS)
    for name, sample in received.items():
        expected = sample_for(name)
        got = {k: v for k, v in vars(sample).items() if k != "sample_info"}
        assert got == vars(expected), name


def test_late_joiner_gets_latest_state_per_instance(
    bus_env: dict[str, str], domain_id: int
) -> None:
    with peer("write-state", env=bus_env), Bus(domain_id) as bus:
        reader = bus.reader("Track")  # created after the samples were written
        samples = reader.take_until(2, timeout_s=20)
        assert sorted((s.track_id, s.x_m) for s in samples) == [(1, 11.0), (2, 20.0)]


def test_incompatible_qos_is_reported_naming_both_profiles(
    bus_env: dict[str, str], domain_id: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="mcc.bus")
    with (
        peer("write", "--topic", "Track", "--profile", "sensor_stream", env=bus_env),
        Bus(domain_id) as bus,
    ):
        reader = bus.reader("Track")  # profile "state": reliable + transient-local
        deadline = time.monotonic() + 20
        while not bus.qos_events("requested_incompatible_qos") and time.monotonic() < deadline:
            time.sleep(0.05)
        events = bus.qos_events("requested_incompatible_qos")
        assert reader.matched() == 0
    assert events, "no incompatible-QoS event within 20 s"
    assert events[0].local_profile == "state"
    assert events[0].remote_profiles == ("sensor_stream",)
    assert bus.stats.incompatible_qos >= 1
    text = caplog.text
    assert "'state'" in text and "'sensor_stream'" in text and "incompatible QoS" in text


def test_request_reply_across_processes(bus_env: dict[str, str], domain_id: int) -> None:
    with peer("reply", env=bus_env), Bus(domain_id) as bus, Requester(bus) as requester:
        reply = requester.request(Command(verb="scale", target="mc"), timeout_s=20)
        assert reply.ok and reply.message == "scale mc"
        assert reply.replier_id == "peer/replier/0"
        assert reply.client_id == requester.client_id
        failed = requester.request(Command(verb="fail"), timeout_s=10)
        assert not failed.ok and "asked to fail" in failed.message
        again = requester.request(Command(verb="status"), timeout_s=10)  # replier survived
        assert again.ok


def test_request_without_replier_times_out_clearly(bus_env: dict[str, str], domain_id: int) -> None:
    with Bus(domain_id) as bus, Requester(bus) as requester:
        start = time.monotonic()
        with pytest.raises(RequestTimeoutError, match="no replier on topic 'Command'"):
            requester.request(Command(verb="status"), timeout_s=0.5)
        assert time.monotonic() - start < 5


def test_write_blocking_waits_out_flow_control_and_says_when_it_gave_up(
    bus_env: dict[str, str], domain_id: int
) -> None:
    """A reliable reader that stops acknowledging (SIGSTOP) fills the writer's queue: plain
    writes time out after max_blocking_time; `write_blocking` retries, then names the cause."""
    topic = ("PerfSample", "--profile", "command")
    with peer("read", "--topic", *topic, env=bus_env) as proc, Bus(domain_id) as bus:
        writer = bus.writer("PerfSample", profile="command")
        assert writer.wait_for_readers(1, timeout_s=20)
        # 16 KiB: the queue (Cyclone's WHC, adaptive up to 500 kB) fills well within the
        # stopped reader's lease (10 s), after which the writer would drop it and go on
        sample = PerfSample(writer_id="w", seq=0, send_ns=0, payload=b"x" * 16384)
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            with pytest.raises(WriteTimeoutError, match="flow control kept refusing"):
                for seq in range(1000):  # 16 MB: far past the writer's queue limit
                    sample.seq = seq
                    writer.write_blocking(sample, timeout_s=0.5)
            refused_at = sample.seq
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        assert refused_at < 1000
        writer.write_blocking(sample, timeout_s=30)  # the reader acknowledges again
