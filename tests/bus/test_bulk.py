"""Bulk transfers: a buffer in one call each way, placed at its offsets; strays, forgeries and
repeats counted and dropped, other transfers left for later."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest

from mcc.bus import Bus, bulk
from mcc.errors import PeerLostError, TopicError
from mcc.types import BulkChunk


@pytest.fixture
def pair(bus_env: dict[str, str], domain_id: int) -> Iterator[tuple[Bus, Bus]]:
    with Bus(domain_id, name="sender") as a, Bus(domain_id, name="receiver") as b:
        yield a, b


def test_a_buffer_arrives_whole_at_its_offsets(pair: tuple[Bus, Bus]) -> None:
    a, b = pair
    writer, reader = a.writer("Bulk"), b.reader("Bulk")
    assert writer.wait_for_readers(1, timeout_s=20)
    data = np.random.default_rng(3).integers(0, 256, 3_000_001, dtype=np.uint8)
    chunk = 65_537  # not a multiple of 4; the last chunk is short
    sent: list[int] = []
    sender = threading.Thread(target=lambda: sent.append(bulk.send(writer, 42, data, chunk)))
    sender.start()
    head = bulk.peek(reader, timeout_s=20)
    assert head is not None
    assert (head.transfer, head.total, head.count, head.bad) == (42, data.size, 46, 0)
    out = np.zeros(head.total, np.uint8)
    receipt = bulk.receive(reader, head, out, idle_s=20)
    sender.join(20)
    assert sent == [data.size]
    assert (receipt.received_bytes, receipt.chunks, receipt.bad, receipt.duplicate) == (
        data.size,
        46,
        0,
        0,
    )
    assert np.array_equal(out, data)


def test_strays_forgeries_and_repeats_are_counted_and_another_transfer_waits(
    pair: tuple[Bus, Bus],
) -> None:
    a, b = pair
    writer, reader = a.writer("Bulk"), b.reader("Bulk")
    assert writer.wait_for_readers(1, timeout_s=20)

    def chunk(transfer: int, index: int, count: int, total: int, data: bytes) -> BulkChunk:
        return BulkChunk(
            transfer=transfer, index=index, count=count, offset=index * 4, total=total, data=data
        )

    writer.write(chunk(7, 0, 2, 8, b"abcd"))
    writer.write(chunk(9, 0, 1, 4, b"wxyz"))  # another transfer: left in the cache
    writer.write(chunk(7, 0, 2, 8, b"abcd"))  # a repeat
    writer.write(chunk(7, 5, 2, 8, b"abcd"))  # index past count: forged
    writer.write(chunk(7, 1, 2, 9, b"efgh"))  # another size than the first chunk said
    writer.write(chunk(7, 1, 2, 8, b"efgh"))
    head = bulk.peek(reader, timeout_s=20)
    assert head is not None and (head.transfer, head.total) == (7, 8)
    out = bytearray(8)
    receipt = bulk.receive(reader, head, out, idle_s=20)
    assert bytes(out) == b"abcdefgh"
    assert (receipt.chunks, receipt.duplicate, receipt.bad, receipt.stray) == (2, 1, 2, 0)
    other = bulk.peek(reader, timeout_s=20)
    assert other is not None and (other.transfer, other.total) == (9, 4)
    assert bulk.discard(reader, other, idle_s=0.2).chunks == 1
    assert bulk.peek(reader, timeout_s=0.2) is None


def test_an_unfinished_transfer_times_out_with_what_came(pair: tuple[Bus, Bus]) -> None:
    a, b = pair
    writer, reader = a.writer("Bulk"), b.reader("Bulk")
    assert writer.wait_for_readers(1, timeout_s=20)
    writer.write(BulkChunk(transfer=1, index=0, count=2, offset=0, total=8, data=b"abcd"))
    with pytest.raises(PeerLostError, match="no chunk for 0.3 s with 4 of 8 bytes"):
        bulk.receive(reader, 1, bytearray(8), idle_s=0.3)


def test_only_bulk_topics_and_sane_buffers(pair: tuple[Bus, Bus]) -> None:
    a, _ = pair
    with pytest.raises(TopicError, match="'WorkResult' is not a bulk topic"):
        bulk.send(a.writer("WorkResult"), 1, b"x", 1)
    with pytest.raises(ValueError, match="want a non-empty buffer"):
        bulk.send(a.writer("Bulk"), 1, b"", 1)
