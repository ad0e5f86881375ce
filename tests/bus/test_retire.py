"""Instances a writer is done with leave every cache: a keyed topic whose keys keep coming
(tracks, threats, orders) grew each process by ~1.1 KB an instance for as long as it ran."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mcc.bus import Bus
from mcc.types import Threat
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
