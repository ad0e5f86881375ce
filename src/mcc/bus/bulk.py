"""Bulk transfers: a buffer sent to a peer in one call, received into the receiver's buffer.

As MPI's ``Send``/``Recv`` of a buffer is one call, ``send`` hands a whole buffer (bytes, a
numpy array: anything C-contiguous) to the bus's native core, which cuts it into ``BulkChunk``
samples and writes them with the GIL released, waiting while flow control holds the writer
back; ``receive`` takes the chunks into a writable buffer of the transfer's size, each copied
from the received sample straight to its offset. No Python object is made per chunk, so a
transfer does not compete with the process's other threads for the GIL (a chunk written from
Python cost ~10x more: the figures are in benchmarks/README.md, `mcc bench hpc`).

A transfer is named by a 64-bit ``transfer`` id (``transfer_id`` of a name); chunks of another
transfer, malformed ones and repeats are taken, counted and dropped (`BulkReceipt`). The
topics are ``Bulk`` and ``BulkReturn`` (one a direction: a participant's reader would be
handed its own writer's chunks), on the ``bulk`` QoS profile: reliable, KEEP_ALL bounded by
resource limits, so a writer whose reader falls behind waits instead of dropping.

>>> reader = bus.reader("Bulk")                        # the receiving side
>>> head = bulk.peek(reader, timeout_s=10)
>>> out = np.empty(head.total, np.uint8)
>>> receipt = bulk.receive(reader, head, out)
>>> bulk.send(peer_bus.writer("Bulk"), transfer, buffer, 1 << 20)   # the sending side
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from cyclonedds.core import DDSException

from mcc.bus import _native
from mcc.bus.endpoints import Reader, Writer
from mcc.errors import PeerLostError, TopicError, WriteTimeoutError

__all__ = [
    "BULK_TOPICS",
    "BulkHeader",
    "BulkReceipt",
    "discard",
    "peek",
    "receive",
    "send",
    "transfer_id",
]

#: The topics whose type is ``BulkChunk``.
BULK_TOPICS = ("Bulk", "BulkReturn")

_TIMEOUT = DDSException.DDS_RETCODE_TIMEOUT


@dataclass(frozen=True)
class BulkHeader:
    """What the first chunk in a reader's cache says of its transfer."""

    transfer: int
    total: int  #: bytes
    count: int  #: chunks
    bad: int  #: malformed samples taken and dropped before it
    instance: int  #: the reader's instance handle of the transfer (its key)


@dataclass(frozen=True)
class BulkReceipt:
    """The outcome of ``receive``: the bytes and chunks placed, and what was dropped."""

    transfer: int
    received_bytes: int
    chunks: int
    stray: int  #: chunks of other transfers
    bad: int  #: malformed, or not fitting the buffer
    duplicate: int  #: chunks that arrived twice (placed once)


def transfer_id(name: str) -> int:
    """A 64-bit transfer id for ``name`` (both peers derive the same one)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")


def _check(endpoint: Writer[Any] | Reader[Any]) -> int:
    if endpoint.topic_name not in BULK_TOPICS:
        raise TopicError(
            f"bulk: {endpoint.topic_name!r} is not a bulk topic (use one of {BULK_TOPICS})"
        )
    return endpoint._ref


def _error(what: str, ret: int) -> str:
    return f"bulk: {what} failed: {DDSException(ret)}"


def send(
    writer: Writer[Any], transfer: int, buffer: Any, chunk_bytes: int, *, patience_s: float = 60.0
) -> int:
    """Send ``buffer`` as transfer ``transfer`` in chunks of ``chunk_bytes``; the bytes sent.

    Each chunk waits while flow control holds it back, ``WriteTimeoutError`` after
    ``patience_s`` (the peer took nothing for that long)."""
    sent, ret = _native.send_bulk(
        _check(writer), transfer, buffer, chunk_bytes, int(patience_s * 1e9)
    )
    if ret == _TIMEOUT:
        raise WriteTimeoutError(
            f"bulk: the peer took no chunk for {patience_s:g} s ({sent} bytes sent)"
        )
    if ret < 0:
        raise PeerLostError(_error(f"sending transfer {transfer:#x} ({sent} bytes sent)", ret))
    return int(sent)


def peek(reader: Reader[Any], *, timeout_s: float) -> BulkHeader | None:
    """The header of the first transfer waiting in ``reader`` (left there), or None when no
    chunk came within ``timeout_s``."""
    got = _native.peek_bulk(_check(reader), int(timeout_s * 1e9))
    if isinstance(got, int):
        if got == _TIMEOUT:
            return None
        raise PeerLostError(_error("peek", got))
    return BulkHeader(*got)


def _transfer(transfer: int | BulkHeader) -> tuple[int, int]:
    if isinstance(transfer, BulkHeader):
        return transfer.transfer, transfer.instance
    return transfer, 0


def receive(
    reader: Reader[Any], transfer: int | BulkHeader, out: Any, *, idle_s: float = 60.0
) -> BulkReceipt:
    """Take ``transfer`` (an id, or what ``peek`` said) into ``out`` (writable, C-contiguous,
    the transfer's size). Given a header, only that transfer's chunks are taken; given an id,
    other transfers' chunks are taken and dropped (counted ``stray``).

    ``PeerLostError`` when no chunk came for ``idle_s`` before the transfer was whole, or when
    its chunks did not cover ``out`` (a sender of another size)."""
    transfer, instance = _transfer(transfer)
    received, chunks, stray, bad, duplicate, ret = _native.receive_bulk(
        _check(reader), transfer, out, int(idle_s * 1e9), instance
    )
    receipt = BulkReceipt(transfer, received, chunks, stray, bad, duplicate)
    size = memoryview(out).nbytes
    if ret == _TIMEOUT:
        raise PeerLostError(
            f"bulk: transfer {transfer:#x}: no chunk for {idle_s:g} s with {received} of "
            f"{size} bytes received ({receipt})"
        )
    if ret < 0:
        raise PeerLostError(_error(f"receiving transfer {transfer:#x}", ret))
    if received != size:
        raise PeerLostError(
            f"bulk: transfer {transfer:#x}: its chunks held {received} bytes for a buffer of "
            f"{size} ({receipt})"
        )
    return receipt


def discard(reader: Reader[Any], head: BulkHeader, *, idle_s: float = 0.5) -> BulkReceipt:
    """Take and drop the chunks of the transfer ``peek`` said until none came for ``idle_s``
    (a transfer refused, so that it does not sit before the next one); other transfers'
    chunks stay."""
    received, chunks, stray, bad, duplicate, ret = _native.receive_bulk(
        _check(reader), head.transfer, None, int(idle_s * 1e9), head.instance
    )
    if ret < 0:
        raise PeerLostError(_error(f"discarding transfer {head.transfer:#x}", ret))
    return BulkReceipt(head.transfer, received, chunks, stray, bad, duplicate)
