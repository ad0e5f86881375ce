"""Node-to-node streaming on the bus: a large buffer sent to a peer and back.

Two apps, as two nodes would run them:

* ``mcc.hpc.stream:source`` fills a buffer (seeded random bytes), waits for the echo's hello
  (a ``WorkResult`` with ``item_id`` = ``CONTROL_ID``), sends the buffer as one bulk transfer
  (``mcc.bus.bulk``: one call, chunked and written by the bus's native core) on ``Bulk``,
  receives it back on ``BulkReturn`` into a buffer of its own and checks it byte for byte. It
  writes ``hpc-<job>.json`` (a ``JobResult``) to the run folder, and tells the echo it is over
  (a ``WorkItem`` with ``CONTROL_ID``).
* ``mcc.hpc.stream:echo`` receives each transfer into a buffer of the transfer's size (at most
  its ``max_bytes``: a larger one is dropped, counted and logged) and sends it back in the
  chunks it came in.

Reliability and flow control are the bus's: the ``bulk`` profile is RELIABLE with KEEP_ALL
history bounded by resource limits, so a writer whose reader falls behind waits
(``max_blocking_time``, retried for a minute) instead of dropping. The clock is
the source's, after one untimed round trip of ``WARMUP_BYTES``: the first block sent → the last
block back; one-way MB/s = 2 × size / that time
(10^6 bytes/s), the same as the MPI baseline (``mcc.hpc.mpi stream``).

``BULK_TRANSPORT_XML`` tunes Cyclone for large samples (UDP datagrams up to 64 KB, each
holding a whole block, instead of 1.4 KB fragments; a larger unacknowledged window);
``bulk_transport`` adds it to a transport (a job hands that to its supervisor).
"""

from __future__ import annotations

import logging
import secrets
import sys
import threading
import time
from dataclasses import replace

import numpy as np
from pydantic import Field

from mcc.bus import Bus, ReaderLoop, Transport
from mcc.bus.bulk import BLOCK_CDR_BYTES, BulkHeader, BulkReader, BulkWriter
from mcc.errors import MccError, PeerLostError, WriteTimeoutError
from mcc.hpc.base import (
    CONTROL_ID,
    WARMUP_BYTES,
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
#: are 14 KB messages of 1.4 KB fragments) that hold a whole ``BulkBlock`` (fragments of
#: ``BLOCK_CDR_BYTES``: a block goes out unfragmented, one datagram; with 63 000-byte fragments
#: a 64 KiB block took two, and one way 256 MiB transfers, this host quiet, ran at 1.75-1.93
#: GB/s, 0.44-0.48 CPU-s a GB sending and 0.40-0.43 receiving, against 2.20-2.29 GB/s, 0.38
#: and 0.31-0.32 unfragmented), socket buffers up to 8 MB where the kernel allows
#: (``net.core.rmem_max``/``wmem_max``: 4 MB on our hosts), and 2 MB of unacknowledged data
#: from the first block on. Cyclone's own window starts at 30 kB and adapts up to 500 kB:
#: one way, 32 MiB in 64 KiB blocks, this host quiet, 1.2-1.4 GB/s as Cyclone has it, 1.6-1.8
#: with 500 kB from the first block, 1.8-2.3 with 1-2 MB (ddsperf 2.8 beside them); 2 MB was
#: the best of 0.5-4 MB quiet and under CPU load on both cores (benchmarks/README.md). It stays
#: adaptive: retransmissions (a receiver whose socket buffer is smaller) shrink it again.
BULK_TRANSPORT_XML = (
    "<General><MaxMessageSize>65500B</MaxMessageSize>"
    f"<FragmentSize>{BLOCK_CDR_BYTES}B</FragmentSize>"
    '</General><Internal><SocketReceiveBufferSize max="8MB"/>'
    '<SocketSendBufferSize max="8MB"/>'
    "<Watermarks><WhcHigh>2MB</WhcHigh><WhcHighInit>2MB</WhcHighInit></Watermarks></Internal>"
)

_PATIENCE_S = 60.0  # a peer that takes or sends nothing for a minute failed
_ECHO_IDLE_S = 10.0  # an echo forgets a transfer whose chunks stopped coming for that long

#: The largest buffer a stream carries (what an echo allocates for it) and the largest chunk.
MAX_STREAM_BYTES = 1 << 32
MAX_CHUNK_BYTES = 64 << 20


def bulk_transport(transport: Transport) -> Transport:
    """``transport`` with ``BULK_TRANSPORT_XML`` added (once)."""
    if BULK_TRANSPORT_XML in transport.extra_xml:
        return transport
    return replace(transport, extra_xml=transport.extra_xml + BULK_TRANSPORT_XML)


def check_stream_sizes(size_bytes: int, chunk_bytes: int) -> None:
    """`HpcError` unless a DDS stream can carry ``size_bytes`` in ``chunk_bytes`` chunks."""
    if not 1 <= size_bytes <= MAX_STREAM_BYTES or not 1 <= chunk_bytes <= MAX_CHUNK_BYTES:
        raise HpcError(
            f"stream: size {size_bytes} B, chunk {chunk_bytes} B: the size is 1 to "
            f"{MAX_STREAM_BYTES} B, the chunk 1 to {MAX_CHUNK_BYTES} B"
        )


def _send(writer: BulkWriter, transfer: int, data: np.ndarray) -> None:
    try:
        writer.send(transfer, data, patience_s=_PATIENCE_S)
    except WriteTimeoutError as exc:
        raise HpcError(f"stream: the peer took no block for {_PATIENCE_S:g} s") from exc


def _receive(
    reader: BulkReader, head: int | BulkHeader, out: np.ndarray, idle_s: float = _PATIENCE_S
) -> None:
    try:
        receipt = reader.receive(head, out, idle_s=idle_s)
    except PeerLostError as exc:
        raise HpcError(f"stream: {exc}") from exc
    if receipt.stray or receipt.bad or receipt.duplicate:
        log.warning("stream: blocks dropped on the way: %s", receipt)


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
    back = touched_buffer(size_bytes)
    transfer = secrets.randbits(64)  # this run's: a rogue cannot send its chunks in advance
    hellos: list[str] = []

    def on_results(samples: list[WorkResult]) -> None:
        for sample in samples:
            if sample.job_id == job_id and sample.item_id == CONTROL_ID and len(hellos) < 16:
                hellos.append(sample.worker_id)  # only the first is the peer; hellos repeat

    control = bus.writer("WorkItem")
    with (
        BulkWriter(bus, "Bulk") as writer,
        BulkReader(bus, "BulkReturn") as returned,
        ReaderLoop(bus, batch=64).add(bus.reader("WorkResult"), on_results),
    ):
        _wait_for_echo(writer, hellos, job_id, stop, start_timeout_s)
        # One untimed round trip first, as MPI benchmarks warm up: the transport's first
        # megabytes (buffer pools, socket buffers) are not the stream's rate.
        warm = data[: min(size_bytes, WARMUP_BYTES)]
        _send(writer, transfer ^ 1, warm)
        _receive(returned, transfer ^ 1, np.empty_like(warm))
        first_ns = time.time_ns()
        _send(writer, transfer, data)
        _receive(returned, transfer, back)
        last_ns = time.time_ns()
        shared_memory = writer.shared_memory
    runtime_s = (last_ns - first_ns) / 1e9
    verified = buffers_equal(back, data)
    control.write_blocking(
        WorkItem(job_id=job_id, item_id=CONTROL_ID, worker_id="", lo=0, hi=0, payload=b""),
        timeout_s=_PATIENCE_S,
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
        extra={
            "first_item_ns": first_ns,
            "last_result_ns": last_ns,
            "peer": hellos[0],
            "shared_memory": shared_memory,
        },
    )


def _wait_for_echo(
    writer: BulkWriter,
    hellos: list[str],
    job_id: str,
    stop: threading.Event,
    start_timeout_s: float,
) -> None:
    """Until the echo said hello and its bulk reader matched ``writer``."""
    deadline = time.monotonic() + start_timeout_s
    while not hellos or not writer.wait_matched(1, timeout_s=0.01):
        if stop.is_set() or time.monotonic() > deadline:
            raise HpcError(
                f"stream {job_id}: no echo said hello within {start_timeout_s:g} s; is "
                "mcc.hpc.stream:echo running on this domain and discovery tag?"
            )
        time.sleep(0.01)


@app(
    topics=Topics(publish=("WorkItem", "Bulk"), subscribe=("WorkResult", "BulkReturn")),
    config=SourceConfig,
)
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
    expect_bytes: int | None = Field(
        default=None,
        ge=1,
        le=MAX_STREAM_BYTES,
        description="a buffer of this size allocated before the first hello (as an MPI "
        "receiver posts its buffer before the transfer)",
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
    expect_bytes: int | None = None,
) -> int:
    """Receive a buffer, send it back; repeat until the source says it is over
    (``CONTROL_ID``) or ``stop``. The bytes echoed. A buffer is at most ``max_bytes`` (what
    the echo allocates): a larger transfer is dropped, counted and logged. With
    ``expect_bytes``, a buffer of that size is ready before the first hello; a buffer is kept
    for the next transfer of its size."""
    over = threading.Event()
    spare = touched_buffer(min(expect_bytes, max_bytes)) if expect_bytes else None

    def on_items(items: list[WorkItem]) -> None:
        if any(item.job_id == job_id and item.item_id == CONTROL_ID for item in items):
            over.set()

    hello = bus.writer("WorkResult")
    with (
        BulkWriter(bus, "BulkReturn") as back,
        BulkReader(bus, "Bulk") as incoming,
        ReaderLoop(bus, batch=64).add(bus.reader("WorkItem"), on_items),
    ):
        if not hello.wait_for_readers(1, timeout_s=start_timeout_s):
            raise HpcError(f"stream {job_id}: no source read WorkResult in {start_timeout_s:g} s")
        echoed = refused = broken = 0
        while not stop.is_set() and not over.is_set():
            if not echoed:
                hello.write(
                    WorkResult(job_id=job_id, item_id=CONTROL_ID, worker_id=echo_id, payload=b"")
                )
            head = incoming.peek(timeout_s=hello_interval_s)
            if head is None:
                continue
            if not 0 < head.total <= max_bytes:
                refused += 1
                if refused == 1:
                    log.warning(
                        "stream %s: transfer dropped: a stream of %d bytes (at most %d); "
                        "further ones are counted, not logged",
                        job_id,
                        head.total,
                        max_bytes,
                    )
                incoming.discard(head)
                continue
            if spare is not None and spare.size == head.total:
                buffer = spare
            else:
                buffer = touched_buffer(head.total)
            try:
                _receive(incoming, head, buffer, idle_s=_ECHO_IDLE_S)
            except HpcError as exc:  # a sender that stopped half-way: forget its transfer
                broken += 1
                if broken == 1:
                    log.warning("stream %s: %s; further ones are counted, not logged", job_id, exc)
                continue
            _send(back, head.transfer, buffer)
            echoed += head.total
            spare = buffer if spare is None else spare  # the expected size's stays
    return echoed


@app(
    topics=Topics(publish=("WorkResult", "BulkReturn"), subscribe=("WorkItem", "Bulk")),
    config=EchoConfig,
)
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
        expect_bytes=args.expect_bytes,
    )
    ctx.log.info("stream %s: echoed %d bytes", job_id, echoed)
    return 0
