"""Node-to-node streaming on the bus: a large buffer sent in chunks to a peer and back.

Two apps, as two nodes would run them:

* ``mcc.hpc.stream:source`` fills a buffer (seeded random bytes), waits for the echo's hello,
  sends the buffer as ``WorkItem`` chunks (``item_id`` = chunk index, ``lo`` = offset, ``hi`` =
  total size, ``payload`` = the bytes), receives it back as ``WorkResult`` chunks and checks it
  byte for byte. It writes ``hpc-<job>.json`` (a ``JobResult``) to the run folder.
* ``mcc.hpc.stream:echo`` stores the chunks at their offsets and, once it has the whole
  buffer, sends it back chunk by chunk.

Reliability and flow control are the bus's: the ``bulk`` profile is RELIABLE with KEEP_ALL
history bounded by resource limits, so a writer whose reader falls behind blocks in ``write``
(``max_blocking_time``) instead of dropping; a write that times out is retried. The clock is
the source's: the first chunk sent → the last chunk back; one-way MB/s = 2 × size / that time
(10^6 bytes/s), the same as the MPI baseline (``mcc.hpc.mpi stream``).

``BULK_TRANSPORT_XML`` tunes Cyclone for large samples (UDP datagrams up to 64 KB instead of
1.4 KB fragments, a larger unacknowledged window); ``bulk_transport`` adds it to a transport
(a job hands that to its supervisor).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
from pydantic import Field

from mcc.bus import Bus, ReaderLoop, Transport, Writer
from mcc.errors import MccError, WriteTimeoutError
from mcc.hpc.base import (
    CONTROL_ID,
    HpcError,
    JobResult,
    buffers_equal,
    default_job_id,
    random_buffer,
    touched_buffer,
    write_result,
)
from mcc.hpc.farm_protocol import result_path
from mcc.orchestrate.appconfig import AppConfig, Positive, app_config
from mcc.orchestrate.appspec import app
from mcc.orchestrate.runtime import AppContext
from mcc.security.mission import Topics
from mcc.types import WorkItem, WorkResult

log = logging.getLogger("mcc.hpc.stream")

__all__ = [
    "BLOCK_BYTES",
    "BULK_TRANSPORT_XML",
    "MAX_CHUNK_BYTES",
    "MAX_STREAM_BYTES",
    "bulk_transport",
    "check_stream_sizes",
    "echo",
    "run_echo",
    "run_source",
    "source",
]

#: Cyclone settings for bulk transfers: 64 KB datagrams (the loopback MTU; Cyclone's defaults
#: are 14 KB messages of 1.4 KB fragments) and socket buffers up to 8 MB where the kernel allows.
#: The unacknowledged window stays Cyclone's (500 kB): larger ones (1-4 MB, measured) overran
#: the receiver's socket buffer and its 256-sample cache on a busy host, and retransmissions
#: cost more than the window gained.
BULK_TRANSPORT_XML = (
    "<General><MaxMessageSize>65500B</MaxMessageSize><FragmentSize>63000B</FragmentSize>"
    '</General><Internal><SocketReceiveBufferSize max="8MB"/>'
    '<SocketSendBufferSize max="8MB"/></Internal>'
)

_WRITE_PATIENCE_S = 60.0  # a peer that takes nothing for a minute failed

#: The largest buffer a stream carries (what an echo allocates for it), the largest chunk, and
#: the alignment of chunks (offsets and lengths, but the last chunk's): the receiver tracks
#: which blocks arrived, so a chunk sent twice is not counted twice.
MAX_STREAM_BYTES = 1 << 32
MAX_CHUNK_BYTES = 64 << 20
BLOCK_BYTES = 4096


def bulk_transport(transport: Transport) -> Transport:
    """``transport`` with ``BULK_TRANSPORT_XML`` added (once)."""
    if BULK_TRANSPORT_XML in transport.extra_xml:
        return transport
    return replace(transport, extra_xml=transport.extra_xml + BULK_TRANSPORT_XML)


def _write(writer: Writer[Any], sample: Any) -> None:
    """Write, waiting while the peer holds back (flow control), failing after a minute."""
    try:
        writer.write_blocking(sample, timeout_s=_WRITE_PATIENCE_S)
    except WriteTimeoutError as exc:
        raise HpcError(f"stream: the peer took no chunk for {_WRITE_PATIENCE_S:g} s") from exc


class _Assembly:
    """Chunks arriving into a buffer at their offsets, in the reader's loop.

    A chunk is taken only where it fits: inside a buffer of at most ``max_bytes`` (the first
    chunk's ``total`` sizes it), of that same total, aligned to ``BLOCK_BYTES``; the buffer is
    complete once every block arrived (a chunk sent twice counts once). Others are dropped and
    counted (``dropped``).
    """

    def __init__(
        self, job_id: str, size_bytes: int | None = None, *, max_bytes: int = MAX_STREAM_BYTES
    ) -> None:
        self.job_id = job_id
        self.max_bytes = max_bytes
        self.buffer: np.ndarray | None = None
        self.blocks = np.zeros(0, dtype=bool)
        self.size_bytes = 0
        self.received_bytes = 0
        self.chunk_bytes = 0
        self.dropped = 0
        self.complete = threading.Event()
        self.first = threading.Event()
        self.last_ns = 0
        if size_bytes is not None:
            self._allocate(size_bytes)

    def _allocate(self, size_bytes: int) -> None:
        self.buffer = touched_buffer(size_bytes)
        self.blocks = np.zeros(-(-size_bytes // BLOCK_BYTES), dtype=bool)
        self.size_bytes = size_bytes

    def _refuse(self, offset: int, total: int, payload: bytes) -> str:
        """Why the chunk does not fit ("" when it does)."""
        n = len(payload)
        if self.buffer is None and not 0 < total <= self.max_bytes:
            return f"a stream of {total} bytes (at most {self.max_bytes})"
        if self.buffer is not None and total != self.size_bytes:
            return f"total {total} while this stream has {self.size_bytes} bytes"
        if not 0 < n <= MAX_CHUNK_BYTES or not 0 <= offset <= total - n:
            return f"{n} bytes at {offset} do not fit {total} bytes"
        if offset % BLOCK_BYTES or (n % BLOCK_BYTES and offset + n != total):
            return f"{n} bytes at {offset}: chunks are aligned to {BLOCK_BYTES} bytes"
        return ""

    def add(self, offset: int, total: int, payload: bytes) -> bool:
        """Put a chunk in place; False (counted, the first logged) when it does not fit."""
        why = self._refuse(offset, total, payload)
        if why:
            self.dropped += 1
            if self.dropped == 1:
                log.warning(
                    "stream %s: chunk dropped: %s; further ones are counted, not logged",
                    self.job_id,
                    why,
                )
            return False
        if self.buffer is None:
            self._allocate(total)
        assert self.buffer is not None
        self.buffer[offset : offset + len(payload)] = np.frombuffer(payload, dtype=np.uint8)
        first, last = offset // BLOCK_BYTES, -(-(offset + len(payload)) // BLOCK_BYTES)
        self.received_bytes += int(np.count_nonzero(~self.blocks[first:last])) * BLOCK_BYTES
        self.blocks[first:last] = True
        self.chunk_bytes = max(self.chunk_bytes, len(payload))
        self.first.set()
        if self.blocks.all():
            self.received_bytes = self.size_bytes
            self.last_ns = time.time_ns()
            self.complete.set()
        return True


def check_stream_sizes(size_bytes: int, chunk_bytes: int) -> None:
    """`HpcError` unless a DDS stream can carry ``size_bytes`` in ``chunk_bytes`` chunks."""
    if not 1 <= size_bytes <= MAX_STREAM_BYTES or not 1 <= chunk_bytes <= MAX_CHUNK_BYTES:
        raise HpcError(
            f"stream: size {size_bytes} B, chunk {chunk_bytes} B: the size is 1 to "
            f"{MAX_STREAM_BYTES} B, the chunk 1 to {MAX_CHUNK_BYTES} B"
        )
    if chunk_bytes % BLOCK_BYTES and chunk_bytes < size_bytes:
        raise HpcError(
            f"stream: chunk {chunk_bytes} B: use a multiple of {BLOCK_BYTES} B (or the whole "
            "buffer in one chunk)"
        )


def _send_chunks(
    writer: Writer[Any],
    buffer: Any,
    size_bytes: int,
    chunk_bytes: int,
    sample: Callable[[int, int, bytes], Any],
    stop: threading.Event | None = None,
    job_id: str = "",
) -> None:
    """Write ``buffer[:size_bytes]`` in ``chunk_bytes`` chunks, ``sample(k, offset, payload)``
    each (flow-controlled, `_write`); `HpcError` when ``stop`` is set on the way."""
    for k, offset in enumerate(range(0, size_bytes, chunk_bytes)):
        if stop is not None and stop.is_set():
            raise HpcError(f"stream {job_id}: stopped while sending")
        _write(writer, sample(k, offset, buffer[offset : offset + chunk_bytes].tobytes()))


# -- source --------------------------------------------------------------------------------------


class SourceConfig(AppConfig):
    """The stream source's ``config:`` block (``bytes`` required)."""

    bytes: int = Field(ge=1, le=MAX_STREAM_BYTES, description="buffer size, bytes")
    chunk: int = Field(default=1 << 20, ge=1, le=MAX_CHUNK_BYTES, description="chunk, bytes")
    seed: int = Field(default=1, description="seed of the random buffer")
    job: str | None = Field(default=None, description="job id (default stream-<mission epoch>)")
    start_timeout_s: Positive = Field(default=120.0, description="wait for the echo, s")


def run_source(
    bus: Bus,
    *,
    job_id: str,
    size_bytes: int,
    chunk_bytes: int,
    seed: int = 1,
    stop: threading.Event | None = None,
    start_timeout_s: float = 120.0,
) -> JobResult:
    """Send ``size_bytes`` in ``chunk_bytes`` chunks to the echo and get them back, checked."""
    check_stream_sizes(size_bytes, chunk_bytes)
    stop = stop or threading.Event()
    data = random_buffer(size_bytes, seed)
    back = _Assembly(job_id, size_bytes)
    hellos: list[str] = []

    def on_results(samples: list[WorkResult]) -> None:
        for sample in samples:
            if sample.job_id != job_id:
                continue
            if sample.item_id == CONTROL_ID:
                if len(hellos) < 16:  # only the first is the peer; hellos repeat
                    hellos.append(sample.worker_id)
            else:
                back.add(int(sample.value), size_bytes, sample.payload)

    writer = bus.writer("WorkItem")
    with ReaderLoop(bus, batch=64).add(bus.reader("WorkResult"), on_results):
        first_ns = _send(writer, data, chunk_bytes, job_id, hellos, stop, start_timeout_s)
        while not back.complete.wait(0.1):
            if stop.is_set():
                raise HpcError(
                    f"stream {job_id}: stopped with {back.received_bytes}/{size_bytes} bytes back"
                )
    runtime_s = (back.last_ns - first_ns) / 1e9
    assert back.buffer is not None
    verified = buffers_equal(back.buffer, data)
    _write(
        writer,
        WorkItem(job_id=job_id, item_id=CONTROL_ID, worker_id="", lo=0, hi=0, payload=b""),
    )
    return JobResult(
        app="stream",
        impl="dds",
        workers=1,
        job_id=job_id,
        size_bytes=size_bytes,
        chunk_bytes=chunk_bytes,
        verified=verified,
        runtime_s=runtime_s,
        mb_per_s=2 * size_bytes / runtime_s / 1e6,
        extra={"first_item_ns": first_ns, "last_result_ns": back.last_ns, "peer": hellos[0]},
    )


def _send(
    writer: Writer[WorkItem],
    data: np.ndarray,
    chunk_bytes: int,
    job_id: str,
    hellos: list[str],
    stop: threading.Event,
    start_timeout_s: float,
) -> int:
    """Wait for the echo's hello, send ``data`` to it in chunks; when the first one went."""
    size_bytes = len(data)
    deadline = time.monotonic() + start_timeout_s
    while not hellos:
        if stop.is_set() or time.monotonic() > deadline:
            raise HpcError(
                f"stream {job_id}: no echo said hello within {start_timeout_s:g} s; is "
                "mcc.hpc.stream:echo running on this domain and discovery tag?"
            )
        time.sleep(0.01)
    peer = hellos[0]
    first_ns = time.time_ns()
    _send_chunks(
        writer,
        data,
        size_bytes,
        chunk_bytes,
        lambda k, offset, payload: WorkItem(
            job_id=job_id,
            item_id=k,
            worker_id=peer,
            lo=offset,
            hi=size_bytes,
            payload=payload,
            issue_ns=0,
        ),
        stop,
        job_id,
    )
    return first_ns


@app(topics=Topics(publish=("WorkItem",), subscribe=("WorkResult",)), config=SourceConfig)
def source(ctx: AppContext) -> int:
    """App ``mcc.hpc.stream:source``: stream, check, write ``hpc-<job>.json``; 1 if corrupted."""
    try:
        args = app_config(ctx, SourceConfig)
    except MccError as exc:  # a bad config: block, as `mcc validate` says it
        print(f"mcc: error: {exc}", file=sys.stderr)
        return 2
    job_id = args.job or default_job_id("stream")
    result = run_source(
        ctx.bus,
        job_id=job_id,
        size_bytes=args.bytes,
        chunk_bytes=args.chunk,
        seed=args.seed,
        stop=ctx.stop,
        start_timeout_s=args.start_timeout_s,
    )
    write_result(result, result_path(ctx.run_dir, job_id))
    ctx.log.info(
        "stream %s: %d bytes there and back in %.3f s, %.1f MB/s one-way, verified %s",
        job_id,
        args.bytes,
        result.runtime_s or 0.0,
        result.mb_per_s or 0.0,
        result.verified,
    )
    return 0 if result.verified else 1


# -- echo ----------------------------------------------------------------------------------------


class EchoConfig(AppConfig):
    """The stream echo's ``config:`` block (every field optional)."""

    job: str | None = Field(default=None, description="job id (default stream-<mission epoch>)")
    start_timeout_s: Positive = Field(default=120.0, description="wait for the source, s")
    max_bytes: int = Field(
        default=MAX_STREAM_BYTES, ge=1, le=MAX_STREAM_BYTES, description="largest buffer accepted"
    )


def run_echo(
    bus: Bus,
    *,
    job_id: str,
    echo_id: str,
    stop: threading.Event,
    start_timeout_s: float = 120.0,
    hello_interval_s: float = 0.25,
    max_bytes: int = MAX_STREAM_BYTES,
) -> int:
    """Receive the buffer, send it back; repeat for every stream of ``job_id`` until told to
    stop (``CONTROL_ID``) or ``stop``. The bytes echoed. A buffer is at most ``max_bytes``
    (what the echo allocates); chunks that do not fit are dropped (`_Assembly`)."""
    over = threading.Event()
    state = {"assembly": _Assembly(job_id, max_bytes=max_bytes)}

    def on_items(items: list[WorkItem]) -> None:
        for item in items:
            if item.job_id != job_id:
                continue
            if item.item_id == CONTROL_ID:
                over.set()
            elif item.worker_id == echo_id:
                state["assembly"].add(int(item.lo), int(item.hi), item.payload)

    writer = bus.writer("WorkResult")
    with ReaderLoop(bus, batch=64).add(bus.reader("WorkItem"), on_items):
        if not writer.wait_for_readers(1, timeout_s=start_timeout_s):
            raise HpcError(f"stream {job_id}: no source read WorkResult in {start_timeout_s:g} s")
        return _echo_until_over(writer, state, echo_id, job_id, over, stop, hello_interval_s)


def _echo_until_over(
    writer: Writer[WorkResult],
    state: dict[str, _Assembly],
    echo_id: str,
    job_id: str,
    over: threading.Event,
    stop: threading.Event,
    hello_interval_s: float,
) -> int:
    echoed = 0
    while not stop.is_set() and not over.is_set():
        assembly = state["assembly"]
        if not assembly.first.is_set():
            writer.write(
                WorkResult(job_id=job_id, item_id=CONTROL_ID, worker_id=echo_id, payload=b"")
            )
        if not assembly.complete.wait(hello_interval_s):
            continue
        state["assembly"] = _Assembly(job_id, max_bytes=assembly.max_bytes)
        assert assembly.buffer is not None
        buffer = assembly.buffer
        chunk = assembly.chunk_bytes  # back in the chunks it came in
        _send_chunks(
            writer,
            buffer,
            assembly.size_bytes,
            chunk,
            lambda k, offset, payload: WorkResult(
                job_id=job_id,
                item_id=k,
                worker_id=echo_id,
                count=k,
                value=offset,
                payload=payload,
            ),
        )
        echoed += assembly.size_bytes
    return echoed


@app(topics=Topics(publish=("WorkResult",), subscribe=("WorkItem",)), config=EchoConfig)
def echo(ctx: AppContext) -> int:
    """App ``mcc.hpc.stream:echo``: send every buffer it receives back to its source."""
    try:
        args = app_config(ctx, EchoConfig)
    except MccError as exc:  # a bad config: block, as `mcc validate` says it
        print(f"mcc: error: {exc}", file=sys.stderr)
        return 2
    job_id = args.job or default_job_id("stream")
    echoed = run_echo(
        ctx.bus,
        job_id=job_id,
        echo_id=ctx.identity.id,
        stop=ctx.stop,
        start_timeout_s=args.start_timeout_s,
        max_bytes=min(args.max_bytes, MAX_STREAM_BYTES),
    )
    ctx.log.info("stream %s: echoed %d bytes", job_id, echoed)
    return 0
