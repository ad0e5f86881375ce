"""Bulk transfers: a buffer in one call each way, placed at its offsets; strays, forgeries and
repeats counted and dropped, other transfers left for later; shared memory on `shm`."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from mcc.bus import Bus, shm
from mcc.bus.bulk import BLOCK_BYTES, BulkReader, BulkWriter
from mcc.bus.shm import RouDi
from mcc.bus.transport import Transport
from mcc.errors import PeerLostError, TopicError, TransportError
from mcc.types import BulkBlock
from tests.conftest import REPO, wait_for


@pytest.fixture
def pair(bus_env: dict[str, str], domain_id: int) -> Iterator[tuple[Bus, Bus]]:
    with Bus(domain_id, name="sender") as a, Bus(domain_id, name="receiver") as b:
        yield a, b


def _round_trip(a: Bus, b: Bus, data: np.ndarray) -> tuple[BulkWriter, np.ndarray, object]:
    writer, reader = BulkWriter(a, "Bulk"), BulkReader(b, "Bulk")
    assert writer.wait_matched(1, timeout_s=20) and reader.wait_matched(1, timeout_s=20)
    sent: list[int] = []
    sender = threading.Thread(target=lambda: sent.append(writer.send(42, data)))
    sender.start()
    head = reader.peek(timeout_s=20)
    assert head is not None
    assert (head.transfer, head.total, head.bad) == (42, data.size, 0)
    assert head.count == -(-data.size // BLOCK_BYTES)
    out = np.zeros(head.total, np.uint8)
    receipt = reader.receive(head, out, idle_s=20)
    sender.join(20)
    assert sent == [data.size]
    return writer, out, receipt


def test_a_buffer_arrives_whole_at_its_offsets(pair: tuple[Bus, Bus]) -> None:
    data = np.random.default_rng(3).integers(0, 256, 3_000_001, dtype=np.uint8)  # short last
    writer, out, receipt = _round_trip(*pair, data)
    assert np.array_equal(out, data)
    assert receipt == dataclasses.replace(receipt, received_bytes=data.size, bad=0, duplicate=0)
    assert writer.shared_memory is False  # the loopback transport is UDP


def test_a_block_the_sender_serializes_itself_reads_as_the_type_says(
    pair: tuple[Bus, Bus],
) -> None:
    """Over UDP the native sender builds each block's CDR around the caller's bytes, not through
    Cyclone's serializer: cyclonedds-python's own deserializer of the type reads every member
    and the zeroed tail of a short last block."""
    a, b = pair
    reader = b.reader("Bulk")
    data = np.random.default_rng(5).integers(0, 256, BLOCK_BYTES + 5, dtype=np.uint8)
    with BulkWriter(a, "Bulk") as writer:
        assert writer.wait_matched(1, timeout_s=20) and reader.wait_for_writers(1, timeout_s=20)
        assert writer.send(0x0102030405060708, data) == data.size
        raw: list[bytes] = []

        def both_taken() -> bool:
            raw.extend(cdr for cdr, info in reader.take_cdr() if info.valid_data)
            return len(raw) >= 2

        wait_for(both_taken, what="both blocks at the Python reader")
    blocks = sorted((BulkBlock.deserialize(cdr) for cdr in raw), key=lambda blk: blk.index)
    heads = [(x.transfer, x.index, x.count, x.offset, x.total, x.length) for x in blocks]
    total = data.size
    assert heads == [
        (0x0102030405060708, 0, 2, 0, total, BLOCK_BYTES),
        (0x0102030405060708, 1, 2, BLOCK_BYTES, total, 5),
    ]
    assert bytes(blocks[0].data) == data[:BLOCK_BYTES].tobytes()
    assert bytes(blocks[1].data) == data[BLOCK_BYTES:].tobytes() + bytes(BLOCK_BYTES - 5)


_SHM_ROUND_TRIP = """
import dataclasses, json, sys
import numpy as np
from mcc.bus import Bus, Transport
from tests.bus.test_bulk import _round_trip
domain, tag = int(sys.argv[1]), sys.argv[2]
shm = dataclasses.replace(Transport.loopback(tag), kind="shm")
with Bus(domain, transport=shm) as a, Bus(domain, transport=shm) as b:
    data = np.random.default_rng(4).integers(0, 256, 40 << 20, dtype=np.uint8)
    writer, out, _ = _round_trip(a, b, data)  # more blocks than iceoryx's pool: flow control
    print(json.dumps({"shared_memory": writer.shared_memory, "equal": bool((out == data).all())}))
"""


def test_on_shm_a_block_is_a_loan_of_shared_memory(domain_id: int) -> None:
    # In a process of its own: an iceoryx runtime stays registered with RouDi for the life of
    # its process, and this test stops the RouDi it started.
    roudi = RouDi.ensure()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _SHM_ROUND_TRIP, str(domain_id), f"bulk-shm-{os.getpid()}"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
        )
    finally:
        if roudi is not None:
            roudi.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {
        "shared_memory": True,
        "equal": True,
    }


def test_shm_without_a_roudi_fails_at_once(domain_id: int) -> None:
    """No daemon on the host: a clear error before any iceoryx runtime registers (iceoryx
    itself would wait 60 s, then abort the whole process)."""
    wait_for(lambda: not shm.running(), what="no RouDi on this host (another test's stopped)")
    transport = dataclasses.replace(Transport.loopback(f"no-roudi-{os.getpid()}"), kind="shm")
    started = time.monotonic()
    with pytest.raises(TransportError, match=r"needs this host's iceoryx daemon .*`mcc shm`"):
        Bus(domain_id, transport=transport)
    assert time.monotonic() - started < 5


def _block(transfer: int, index: int, count: int, total: int, data: bytes) -> BulkBlock:
    return BulkBlock(
        transfer=transfer,
        index=index,
        count=count,
        offset=index * 4,
        total=total,
        length=len(data),
        data=list(data.ljust(BLOCK_BYTES, b"\0")),
    )


def test_strays_forgeries_and_repeats_are_counted_and_another_transfer_waits(
    pair: tuple[Bus, Bus],
) -> None:
    a, b = pair
    writer = a.writer("Bulk")  # a Python writer of the same type: a foreign sender
    reader = BulkReader(b, "Bulk")
    assert writer.wait_for_readers(1, timeout_s=20)
    writer.write(_block(7, 0, 2, 8, b"abcd"))
    writer.write(_block(9, 0, 1, 4, b"wxyz"))  # another transfer: left in the cache
    writer.write(_block(7, 0, 2, 8, b"abcd"))  # a repeat
    writer.write(_block(7, 5, 2, 8, b"abcd"))  # index past count: forged
    writer.write(_block(7, 1, 2, 9, b"efgh"))  # another size than the first block said
    writer.write(_block(7, 1, 2, 8, b"efgh"))
    head = reader.peek(timeout_s=20)
    assert head is not None and (head.transfer, head.total) == (7, 8)
    out = bytearray(8)
    receipt = reader.receive(head, out, idle_s=20)
    assert bytes(out) == b"abcdefgh"
    assert (receipt.blocks, receipt.duplicate, receipt.bad, receipt.stray) == (2, 1, 2, 0)
    other = reader.peek(timeout_s=20)
    assert other is not None and (other.transfer, other.total) == (9, 4)
    assert reader.discard(other, idle_s=0.2).blocks == 1
    assert reader.peek(timeout_s=0.2) is None


def test_an_unfinished_transfer_times_out_with_what_came(pair: tuple[Bus, Bus]) -> None:
    a, b = pair
    writer, reader = a.writer("Bulk"), BulkReader(b, "Bulk")
    assert writer.wait_for_readers(1, timeout_s=20)
    writer.write(_block(1, 0, 2, 8, b"abcd"))
    with pytest.raises(PeerLostError, match="no block for 0.3 s with 4 of 8 bytes"):
        reader.receive(1, bytearray(8), idle_s=0.3)


def test_only_bulk_topics_and_sane_buffers(pair: tuple[Bus, Bus]) -> None:
    a, _ = pair
    with pytest.raises(TopicError, match="'WorkResult' is not a bulk topic"):
        BulkWriter(a, "WorkResult")
    with BulkWriter(a, "Bulk") as writer, pytest.raises(ValueError, match="non-empty buffer"):
        writer.send(1, b"")


def test_a_receive_ends_when_its_reader_is_closed_and_one_receive_at_a_time(
    pair: tuple[Bus, Bus],
) -> None:
    """Blocks are placed by the reader's listener while ``receive`` waits: a second receive on
    the same reader meanwhile is refused, and closing the reader ends the waiting one at once
    (not after its idle time)."""
    a, b = pair
    writer, reader = a.writer("Bulk"), BulkReader(b, "Bulk")
    assert writer.wait_for_readers(1, timeout_s=20)
    writer.write(_block(3, 0, 2, 8, b"abcd"))  # half a transfer: the receive keeps waiting
    failures: list[Exception] = []

    def receive() -> None:
        try:
            reader.receive(3, bytearray(8), idle_s=30)
        except PeerLostError as exc:
            failures.append(exc)

    waiting = threading.Thread(target=receive, daemon=True)
    waiting.start()
    wait_for(lambda: _taken(reader), what="the first block taken by the waiting receive")
    with pytest.raises(PeerLostError, match="receiving transfer 0x4"):
        reader.receive(4, bytearray(4), idle_s=0.1)
    started = time.monotonic()
    reader.close()
    waiting.join(10)
    assert not waiting.is_alive() and time.monotonic() - started < 5
    assert len(failures) == 1 and "receiving transfer 0x3" in str(failures[0])


def _taken(reader: BulkReader) -> bool:
    """Whether the reader's cache is empty (a waiting receive took what came)."""
    return reader.peek(timeout_s=0) is None
