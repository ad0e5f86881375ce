"""Bulk transfers: a buffer sent to a peer in one call, received into the receiver's buffer.

As MPI's ``Send``/``Recv`` of a buffer is one call, ``BulkWriter.send`` hands a whole buffer
(bytes, a numpy array: anything C-contiguous) to the bus's native core, which cuts it into
63 KiB ``BulkBlock`` samples and writes them with the GIL released, waiting while flow control
holds the writer back (over UDP each block is serialized around the caller's bytes: one copy);
``BulkReader.receive`` takes the blocks into a writable buffer of the transfer's size, each
copied straight to its offset from the block as it came (over UDP its serialized form). The
copying is done by the reader's listener on Cyclone's receive thread as the blocks arrive,
and the receiving thread is woken once, when the transfer is whole: one receive at a time per
reader. No Python object is made per block, so a transfer does not compete with the process's
other threads for the GIL.

The endpoints are the native core's, made with the C type Cyclone's ``idlc`` generates (a
fixed-size type): on the ``shm`` transport a block between two processes of one host is a loan
of iceoryx shared memory, filled in place by the sender and read in place by the receiver
(``BulkWriter.shared_memory`` says whether that path is open); to other hosts, or on ``udp``,
Cyclone sends it over the network. A Python reader or writer of the same topic and type
(``mcc.types.BulkBlock``) in another process interoperates with them.

A transfer is named by a 64-bit ``transfer`` id (``transfer_id`` of a name); blocks of another
transfer, blocks that fit no buffer and repeats are taken, counted and dropped
(`BulkReceipt`). The topics are ``Bulk`` and ``BulkReturn`` (one a direction: a participant's
reader would be handed its own writer's blocks), on the ``bulk_transfer`` QoS profile.

>>> reader = BulkReader(bus, "Bulk")                       # the receiving side
>>> head = reader.peek(timeout_s=10)
>>> out = np.empty(head.total, np.uint8)
>>> receipt = reader.receive(head, out)
>>> BulkWriter(peer_bus, "Bulk").send(transfer, buffer)     # the sending side
"""

from __future__ import annotations

import ctypes
import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cyclonedds.core import DDSException

from mcc.bus import _native
from mcc.bus.endpoints import poll_until
from mcc.bus.topics import topic_spec
from mcc.errors import PeerLostError, TopicError, WriteTimeoutError
from mcc.lifecycle import Closeable

if TYPE_CHECKING:
    from mcc.bus.core import Bus

__all__ = [
    "BLOCK_BYTES",
    "BLOCK_CDR_BYTES",
    "BULK_TOPICS",
    "BulkHeader",
    "BulkReader",
    "BulkReceipt",
    "BulkWriter",
    "transfer_id",
]

#: The topics whose type is ``BulkBlock``.
BULK_TOPICS = ("Bulk", "BulkReturn", "ComputeBulk", "ComputeBulkReturn")
#: The data a block carries (``BulkBlock.data``): 63 KiB, so that a block fits one UDP datagram.
BLOCK_BYTES = 64512
#: A block serialized: the encapsulation header, the header fields and the data. Cyclone sends
#: a sample of at most its ``FragmentSize`` unfragmented, so bulk settings use this (and room
#: for the RTPS headers in ``MaxMessageSize``) to send a block in one datagram.
BLOCK_CDR_BYTES = 4 + 36 + BLOCK_BYTES

_TIMEOUT = DDSException.DDS_RETCODE_TIMEOUT


@dataclass(frozen=True)
class BulkHeader:
    """What the first block in a reader's cache says of its transfer."""

    transfer: int
    total: int  #: bytes
    count: int  #: blocks
    bad: int  #: blocks fitting no transfer, taken and dropped before it
    instance: int  #: the reader's instance handle of the transfer (its key)


@dataclass(frozen=True)
class BulkReceipt:
    """The outcome of ``receive``: the bytes and blocks placed, and what was dropped."""

    transfer: int
    received_bytes: int
    blocks: int
    stray: int  #: blocks of other transfers
    bad: int  #: not fitting the buffer or the transfer
    duplicate: int  #: blocks that arrived twice (placed once)


def transfer_id(name: str) -> int:
    """A 64-bit transfer id for ``name`` (both peers derive the same one)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")


def _error(what: str, ret: int) -> str:
    return f"bulk: {what} failed: {DDSException(ret)}"


class _Endpoint(Closeable):
    def __init__(self, bus: Bus, topic: str, *, writer: bool) -> None:
        from cyclonedds.qos import _CQos  # the C QoS of a cyclonedds-python Qos

        if topic not in BULK_TOPICS:
            raise TopicError(f"bulk: {topic!r} is not a bulk topic (use one of {BULK_TOPICS})")
        self.topic_name = topic
        group = bus.group(None, writer=writer)
        cqos = _CQos.qos_to_cqos(bus.endpoint_qos(topic_spec(topic).profile, writer=writer))
        try:
            address = ctypes.cast(cqos, ctypes.c_void_p).value or 0
            ref = _native.bulk_endpoint(int(group._ref), topic, address, writer)
        finally:
            _CQos.cqos_destroy(cqos)
        if ref < 0:
            raise TopicError(_error(f"the {topic!r} {'writer' if writer else 'reader'}", ref))
        self._ref = ref

    def wait_matched(self, count: int = 1, *, timeout_s: float) -> bool:
        """Whether at least ``count`` peers (readers of a writer, writers of a reader) matched
        within ``timeout_s``."""

        def matched() -> bool:
            got = _native.matched_count(self._ref, isinstance(self, BulkWriter))
            if got < 0:
                raise PeerLostError(_error("the matched status", got))
            return got >= count

        return poll_until(matched, timeout_s, 0.005)

    @property
    def shared_memory(self) -> bool:
        """Whether this endpoint exchanges through iceoryx shared memory (transport ``shm``)."""
        return _native.shm_available(self._ref)

    def close(self) -> None:
        if self._ref:
            _native.delete(self._ref)
            self._ref = 0


class BulkWriter(_Endpoint):
    """The native writer of a bulk topic (``Bulk`` or ``BulkReturn``) on ``bus``."""

    def __init__(self, bus: Bus, topic: str = "Bulk") -> None:
        super().__init__(bus, topic, writer=True)

    def send(self, transfer: int, buffer: Any, *, patience_s: float = 60.0) -> int:
        """Send ``buffer`` as transfer ``transfer``; the bytes sent. Each block waits while
        flow control holds it back, ``WriteTimeoutError`` after ``patience_s`` (the peer took
        nothing for that long)."""
        sent, ret = _native.send_bulk(self._ref, transfer, buffer, int(patience_s * 1e9))
        if ret == _TIMEOUT:
            raise WriteTimeoutError(
                f"bulk: the peer took no block for {patience_s:g} s ({sent} bytes sent)"
            )
        if ret < 0:
            raise PeerLostError(_error(f"sending transfer {transfer:#x} ({sent} bytes sent)", ret))
        return int(sent)


class BulkReader(_Endpoint):
    """The native reader of a bulk topic (``Bulk`` or ``BulkReturn``) on ``bus``."""

    def __init__(self, bus: Bus, topic: str = "Bulk") -> None:
        super().__init__(bus, topic, writer=False)

    def peek(self, *, timeout_s: float) -> BulkHeader | None:
        """The header of the first transfer waiting (left there), or None when no block came
        within ``timeout_s``."""
        got = _native.peek_bulk(self._ref, int(timeout_s * 1e9))
        if isinstance(got, int):
            if got == _TIMEOUT:
                return None
            raise PeerLostError(_error("peek", got))
        return BulkHeader(*got)

    def receive(self, transfer: int | BulkHeader, out: Any, *, idle_s: float = 60.0) -> BulkReceipt:
        """Take ``transfer`` (an id, or what ``peek`` said) into ``out`` (writable,
        C-contiguous, the transfer's size). Given a header, only that transfer's blocks are
        taken; given an id, other transfers' blocks are taken and dropped (counted ``stray``).

        ``PeerLostError`` when no block came for ``idle_s`` before the transfer was whole, or
        when its blocks did not cover ``out`` (a sender of another size)."""
        transfer, instance = (
            (transfer.transfer, transfer.instance)
            if isinstance(transfer, BulkHeader)
            else (transfer, 0)
        )
        received, blocks, stray, bad, duplicate, ret = _native.receive_bulk(
            self._ref, transfer, out, int(idle_s * 1e9), instance
        )
        receipt = BulkReceipt(transfer, received, blocks, stray, bad, duplicate)
        size = memoryview(out).nbytes
        if ret == _TIMEOUT:
            raise PeerLostError(
                f"bulk: transfer {transfer:#x}: no block for {idle_s:g} s with {received} of "
                f"{size} bytes received ({receipt})"
            )
        if ret < 0:
            raise PeerLostError(_error(f"receiving transfer {transfer:#x}", ret))
        if received != size:
            raise PeerLostError(
                f"bulk: transfer {transfer:#x}: its blocks held {received} bytes for a buffer "
                f"of {size} ({receipt})"
            )
        return receipt

    def discard(self, head: BulkHeader, *, idle_s: float = 0.5) -> BulkReceipt:
        """Take and drop the blocks of the transfer ``peek`` said until none came for
        ``idle_s`` (a transfer refused, so that it does not sit before the next one); other
        transfers' blocks stay."""
        received, blocks, stray, bad, duplicate, ret = _native.receive_bulk(
            self._ref, head.transfer, None, int(idle_s * 1e9), head.instance
        )
        if ret < 0:
            raise PeerLostError(_error(f"discarding transfer {head.transfer:#x}", ret))
        return BulkReceipt(head.transfer, received, blocks, stray, bad, duplicate)
