"""Instances a writer is done with leave every cache: a keyed topic whose keys keep coming
(tracks, threats, orders) grew each process by ~1.1 KB an instance for as long as it ran."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from cyclonedds.core import InstanceState

from mcc.bus import Bus, Linger
from mcc.types import Checkpoint, Threat
from tests.conftest import wait_for


@pytest.fixture
def pair(bus_env: dict[str, str], domain_id: int) -> Iterator[tuple[Bus, Bus]]:
    with Bus(domain_id, name="writer") as a, Bus(domain_id, name="reader") as b:
        yield a, b


def _known(endpoint: object, track_id: int) -> bool:
    """Whether the endpoint still holds the instance (Cyclone's instance lookup)."""
    return bool(endpoint._dds.lookup_instance(Threat(track_id=track_id)))  # type: ignore[attr-defined]


def test_a_retired_instance_is_freed_by_writer_and_reader_a_disposed_one_is_not(
    pair: tuple[Bus, Bus],
) -> None:
    a, b = pair
    writer, reader = a.writer("Threat"), b.reader("Threat")
    assert writer.wait_for_readers(1, timeout_s=20)
    for track_id in (1, 2):
        writer.write(Threat(track_id=track_id))
    wait_for(lambda: _known(reader, 1) and _known(reader, 2), 20, "both threats")
    reader.take()
    writer.dispose(Threat(track_id=1))  # disposed only: both caches keep it
    writer.retire(Threat(track_id=2))  # disposed and unregistered

    def freed() -> bool:
        reader.take_cdr()  # the notices
        return not _known(reader, 2)

    wait_for(freed, 20, "the reader to free the retired instance")
    assert not _known(writer, 2)
    assert _known(writer, 1) and _known(reader, 1)


@pytest.mark.parametrize(("topic", "profile"), [("Threat", "state"), ("Checkpoint", "durable")])
def test_a_retired_instance_reads_as_disposed_whether_or_not_the_writer_autodisposes(
    pair: tuple[Bus, Bus], topic: str, profile: str
) -> None:
    """``state`` writers autodispose (one message: the unregister, flagged a dispose too);
    ``durable`` ones do not (a dead writer must not dispose what the store keeps), so their
    retire disposes first. Either way a reader sees the instance disposed, not merely left."""
    a, b = pair
    sample = Threat(track_id=5) if topic == "Threat" else Checkpoint(job_id="j", worker_id="w")
    writer = a.writer(topic, profile=profile)
    reader = b.reader(topic, profile=profile, history=False)
    assert writer.wait_for_readers(1, timeout_s=20)
    writer.write(sample)
    wait_for(lambda: bool(reader.take_cdr()), 20, "the sample")
    writer.retire(sample)
    states: list[InstanceState] = []

    def noticed() -> bool:
        states.extend(info.instance_state for _, info in reader.take_cdr())
        return bool(states)

    wait_for(noticed, 20, "the retirement")
    assert states == [InstanceState.NotAliveDisposed], states


def test_linger_unregisters_each_instance_its_time_after_its_last_write_unless_kept(
    pair: tuple[Bus, Bus],
) -> None:
    """Orders and their outcomes: no one event ends an instance for every reader, so each goes
    a fixed time after its last write (a write re-arms it; one still held is kept)."""
    a, b = pair
    writer, reader = a.writer("Threat"), b.reader("Threat")
    held = {3}
    linger = Linger(writer, 0.5, lambda k: Threat(track_id=k), keep=held.__contains__)
    assert writer.wait_for_readers(1, timeout_s=20)
    t0 = time.monotonic_ns()
    for track_id in (1, 2, 3):
        writer.write(Threat(track_id=track_id))
        linger.wrote(track_id, t0)
    wait_for(lambda: all(_known(reader, k) for k in (1, 2, 3)), 20, "three threats")
    reader.take()

    def gone(*track_ids: int) -> bool:
        """Freed by the reader (once it took the notices) and so by the whole domain (the
        lookup of an instance is the domain's key map: writer and reader share it here)."""
        reader.take_cdr()
        return not any(_known(reader, k) or _known(writer, k) for k in track_ids)

    writer.write(Threat(track_id=2))
    linger.wrote(2, t0 + 300_000_000)  # written again 0.3 s later: due then + 0.5 s
    assert linger.expire(t0 + 400_000_000) == 0 and len(linger) == 3
    assert linger.expire(t0 + 600_000_000) == 1  # 1 went; 3 is held: re-armed, kept
    wait_for(lambda: gone(1), 20, "instance 1 to be freed")
    assert _known(reader, 2) and _known(reader, 3) and len(linger) == 2
    assert linger.expire(t0 + 900_000_000) == 1  # 2, 0.5 s after its second write
    wait_for(lambda: gone(2), 20, "instance 2 to be freed")
    assert _known(reader, 3)
    held.clear()
    linger.wrote(9, t0 + 10**9)  # never written: its unregister fails quietly, nothing held
    assert linger.expire(t0 + 2 * 10**9) == 2 and not len(linger)
    wait_for(lambda: gone(3), 20, "instance 3 to be freed")
    assert linger.unregistered == 4
