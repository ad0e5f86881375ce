"""Real separate processes on the bus: every topic type, late joiners, QoS, request/reply."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from mcc.bus import TOPICS, Bus, Requester
from mcc.errors import RequestTimeoutError
from mcc.types import Command
from tests.conftest import REPO
from tests.integration.bus_peer import sample_for

pytestmark = pytest.mark.slow


@contextmanager
def peer(*args: str, env: dict[str, str], ready_timeout_s: float = 30.0) -> Iterator[subprocess.Popen[str]]:
    """Start ``bus_peer ARGS``; wait for its ``ready`` line; stop it at the end."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.integration.bus_peer", *args], cwd=REPO,
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = _readline(proc, ready_timeout_s)
        if line.strip() != "ready":
            proc.kill()
            pytest.fail(f"peer {args} did not start: {line!r}\n{proc.stderr.read()}")
        yield proc
    finally:
        try:
            proc.stdin.close()
            proc.wait(10)
        except (subprocess.TimeoutExpired, BrokenPipeError):
            proc.kill()
            proc.wait(5)
        proc.stdout.close()
        proc.stderr.close()


def _readline(proc: subprocess.Popen[str], timeout_s: float) -> str:
    import selectors

    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        ready = sel.select(timeout_s)
    if not ready:
        proc.kill()
        pytest.fail(f"peer silent for {timeout_s} s; stderr:\n{proc.stderr.read()}")
    return proc.stdout.readline()


def test_every_topic_type_crosses_between_processes(bus_env: dict[str, str], domain_id: int) -> None:
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
                assert _readline(proc, 20).strip() == "wrote"
                for name, reader in readers.items():
                    for sample in reader.take_wait(16, timeout_s=0.2):
                        received.setdefault(name, sample)
    assert set(received) == set(TOPICS)
    for name, sample in received.items():
        expected = sample_for(name)
        got = {k: v for k, v in vars(sample).items() if k != "sample_info"}
        assert got == vars(expected), name


def test_late_joiner_gets_latest_state_per_instance(bus_env: dict[str, str], domain_id: int) -> None:
    with peer("write-state", env=bus_env), Bus(domain_id) as bus:
        reader = bus.reader("Track")        # created after the samples were written
        samples = reader.take_until(2, timeout_s=20)
        assert sorted((s.track_id, s.x_m) for s in samples) == [(1, 11.0), (2, 20.0)]


def test_incompatible_qos_is_reported_naming_both_profiles(
    bus_env: dict[str, str], domain_id: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="mcc.bus")
    with peer("write", "--topic", "Track", "--profile", "sensor_stream", env=bus_env), \
            Bus(domain_id) as bus:
        reader = bus.reader("Track")        # profile "state": reliable + transient-local
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
