"""Streaming a buffer to another process and back: the bytes are checked at the end."""

from __future__ import annotations

import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from mcc.bench.compute import BULK_EXTRA_XML
from mcc.bus import Bus
from mcc.bus.bulk import BLOCK_BYTES, BLOCK_CDR_BYTES, BulkReader, BulkWriter
from mcc.hpc.base import CONTROL_ID
from mcc.hpc.jobs import run_stream
from mcc.hpc.stream import BULK_TRANSPORT_XML, run_source
from mcc.types import BulkBlock, WorkResult


def test_dds_stream_round_trip_between_two_processes(
    hpc_env: dict[str, str], domain_id: int, tmp_path: Path
) -> None:
    size, chunk = 8 << 20, 256 << 10
    result = run_stream(
        "dds", size_bytes=size, chunk_bytes=chunk, domain=domain_id, run_dir=tmp_path / "run"
    )
    assert result.verified is True
    assert (result.size_bytes, result.chunk_bytes) == (size, chunk)
    assert result.runtime_s is not None and result.mb_per_s is not None
    assert result.mb_per_s == pytest.approx(2 * size / result.runtime_s / 1e6)
    assert result.launch_s is not None and result.launch_s > 0


def _bytes(element: ET.Element | None) -> int:
    assert element is not None and element.text is not None and element.text.endswith("B")
    return int(element.text[:-1])


@pytest.mark.parametrize("settings", [BULK_TRANSPORT_XML, BULK_EXTRA_XML], ids=["hpc", "compute"])
def test_the_bulk_settings_send_a_block_in_one_datagram(settings: str) -> None:
    """Cyclone sends a sample of at most ``FragmentSize`` bytes unfragmented: the bulk settings'
    fragment holds a whole serialized block, with room in ``MaxMessageSize`` for the RTPS
    headers and DDS Security's (a 64 KiB block took two datagrams, one of 2.5 kB)."""
    general = ET.fromstring(f"<Domain>{settings}</Domain>").find("General")
    assert general is not None
    fragment, message = _bytes(general.find("FragmentSize")), _bytes(general.find("MaxMessageSize"))
    assert len(BulkBlock().serialize()) == BLOCK_CDR_BYTES == fragment
    assert len(BulkBlock().data) == BLOCK_BYTES
    assert message - fragment >= 512 and message <= 65507  # an IPv4 UDP datagram's payload


@pytest.fixture
def buses(bus_env: dict[str, str], domain_id: int) -> Iterator[tuple[Bus, Bus]]:
    with Bus(domain_id, name="source") as source_bus, Bus(domain_id, name="echo") as echo_bus:
        yield source_bus, echo_bus


def test_a_corrupted_byte_on_the_way_back_is_caught(buses: tuple[Bus, Bus]) -> None:
    source_bus, echo_bus = buses
    stop = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(
            run_source,
            source_bus,
            job_id="corrupt",
            size_bytes=1 << 20,
            chunk_bytes=64 << 10,
            stop=stop,
            start_timeout_s=30,
        )
        hello = echo_bus.writer("WorkResult")
        back, incoming = BulkWriter(echo_bus, "BulkReturn"), BulkReader(echo_bus, "Bulk")
        assert hello.wait_for_readers(1, timeout_s=20)
        hello.write(WorkResult(job_id="corrupt", item_id=CONTROL_ID, worker_id="bad-echo"))
        assert back.wait_matched(1, timeout_s=20)
        blocks = -(-(1 << 20) // BLOCK_BYTES)
        for corrupt in (False, True):  # the source's untimed warm-up, then the stream
            head = incoming.peek(timeout_s=30)
            assert head is not None and (head.total, head.count) == (1 << 20, blocks)
            buffer = np.empty(head.total, np.uint8)
            assert incoming.receive(head, buffer, idle_s=30).blocks == blocks
            if corrupt:
                buffer[5 * (64 << 10) + 100] ^= 0xFF  # one bit pattern flipped in one block
            back.send(head.transfer, buffer)
        try:
            result = future.result(timeout=60)
        finally:
            stop.set()
    assert result.verified is False
    assert result.extra["peer"] == "bad-echo"
