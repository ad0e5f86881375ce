"""The perftest's measuring processes (``python -m mcc.bench.perftest pub|sub``): what a
publisher (`run_pub`) and a subscriber (`run_sub`) do, and the throughput a subscriber saw.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import signal
import threading
import time
from dataclasses import dataclass
from functools import cache
from typing import Any

from mcc.bench.perftest_options import (
    DATA_TOPIC,
    FLOWING_LINE,
    MATCH_TIMEOUT_S,
    READY_LINE,
    sample_type,
    stream_profile,
)
from mcc.bench.stats import LatencyRecorder
from mcc.errors import MccError

_END_REPEATS = 5  # a best-effort end marker is sent this many times


# -- publisher and subscriber processes ---------------------------------------------------------


@dataclass
class PubSpec:
    """What one publisher process does (JSON on its command line)."""

    domain: int
    writer_id: str
    size_bytes: int
    keyed: bool = False
    reliable: bool = True
    readers: int = 1
    rate_hz: float = 0.0  # 0: as fast as possible
    duration_s: float = 5.0
    max_samples: int = 10**9
    batch: int = 1  # app-level: logical samples per written sample
    flush: bool = False  # Cyclone write batching: flush when idle and at the end
    block_threshold_us: float = 1000.0
    count_throttles: bool = False  # read Cyclone's throttle count after every write


@dataclass
class SubSpec:
    """What one subscriber process does."""

    domain: int
    keyed: bool = False
    reliable: bool = True
    writers: int = 1
    batch: int = 1
    max_s: float = 60.0
    idle_s: float = 3.0
    latency: bool = True
    warmup_samples: int = 100  # per writer, left out of the latency: discovery settles


@dataclass
class _WriterTally:
    received: int = 0
    last_seq: int = 0
    gaps: int = 0
    ended: bool = False


def run_pub(spec: PubSpec) -> dict[str, Any]:
    """Publish ``PerfData`` at ``rate_hz`` (0: flat out) for ``duration_s``; time every write.

    A write that takes at least ``block_threshold_us`` counts as blocked (the send queue was
    full); blocked and steady writes are recorded in separate histograms. A write that fails
    after the profile's max_blocking_time (DDS timeout) counts in ``timeouts``.
    """
    from cyclonedds.core import DDSException
    from cyclonedds.util import duration

    from mcc.bus import Bus

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    kind = sample_type(spec.keyed)
    profile = stream_profile(spec.reliable)
    with Bus(spec.domain, name=f"mcc-perf-{spec.writer_id}", monitor_qos=False) as bus:
        writer = bus.writer(DATA_TOPIC, type=kind, profile=profile, validate=False)
        print(READY_LINE, flush=True)
        if not writer.wait_for_readers(spec.readers, timeout_s=MATCH_TIMEOUT_S):
            raise MccError(
                f"publisher {spec.writer_id}: {writer.matched()} of {spec.readers} readers "
                f"matched within {MATCH_TIMEOUT_S:.0f} s"
            )
        flush = writer.flush if spec.flush else None
        sample = kind(
            writer_id=spec.writer_id, seq=0, send_ns=0, payload=bytes(spec.size_bytes * spec.batch)
        )
        write = writer.write
        clock = time.perf_counter_ns
        monotonic = time.monotonic_ns
        steady_ns: list[int] = []
        blocked_ns: list[int] = []
        stall_ns: list[int] = []
        throttles = _Throttles(writer.dds) if spec.count_throttles else None
        threshold_ns = int(spec.block_threshold_us * 1000)
        timeouts = 0
        interval_ns = int(1e9 / spec.rate_hz) if spec.rate_hz > 0 else 0
        # spinning costs a core; only short intervals need the precision
        spin_ns = 200_000 if 0 < interval_ns < 500_000 else 0
        start = monotonic()
        end = start + int(spec.duration_s * 1e9)
        next_ns = start
        sent = 0
        while sent < spec.max_samples and not stop.is_set():
            now = monotonic()
            if now >= end:
                break
            if interval_ns:
                if now < next_ns:
                    if flush is not None:
                        flush()
                    sleep_until(next_ns, spin_ns=spin_ns)
                next_ns += interval_ns
                if monotonic() - next_ns > 100 * interval_ns:
                    next_ns = monotonic()  # fell far behind (stalled): do not burst to catch up
            sample.seq = sent + 1
            t0 = clock()
            sample.send_ns = monotonic()
            try:
                write(sample)
            except DDSException:
                timeouts += 1
                continue
            dt = clock() - t0
            if throttles is not None and throttles.rose():
                blocked_ns.append(dt)
            elif dt >= threshold_ns:
                stall_ns.append(dt)
            else:
                steady_ns.append(dt)
            sent += 1
        elapsed_s = (monotonic() - start) / 1e9
        if flush is not None:
            flush()
        _send_end(writer, sample, spec, flush)
        with contextlib.suppress(DDSException):
            writer.dds.wait_for_acks(duration(seconds=10.0))
    return {
        "writer_id": spec.writer_id,
        "sent": sent,
        "sent_samples": sent * spec.batch,
        "seconds": elapsed_s,
        "timeouts": timeouts,
        "blocked": len(blocked_ns),
        "stalls": len(stall_ns),
        "throttle_count": throttles.read(throttles.count_kv) if throttles else None,
        "throttle_ms": throttles.read(throttles.time_kv) / 1e6 if throttles else None,
        "steady_hist": _hist(steady_ns),
        "blocked_hist": _hist(blocked_ns),
        "stall_hist": _hist(stall_ns),
    }


def _hist(values_ns: list[int]) -> str | None:
    """``values_ns`` as an encoded `LatencyRecorder` (None when empty)."""
    recorder = LatencyRecorder()
    recorder.record_many_ns(values_ns)
    return recorder.encode() if recorder.count else None


def _send_end(writer: Any, sample: Any, spec: PubSpec, flush: Any) -> None:
    """Tell the readers this writer is done: seq 0, repeated for best effort."""
    from cyclonedds.core import DDSException

    sample.seq = 0
    sample.payload = b""
    for _ in range(1 if spec.reliable else _END_REPEATS):
        with contextlib.suppress(DDSException):
            writer.write(sample)
        if flush is not None:
            flush()
        if not spec.reliable:
            time.sleep(0.02)


def sleep_until(deadline_ns: int, *, spin_ns: int = 200_000) -> None:
    """Sleep until ``deadline_ns`` (monotonic), spinning the last ``spin_ns``: time.sleep
    alone overshoots by 50-100 µs, which matters at sub-millisecond intervals only."""
    left = deadline_ns - time.monotonic_ns()
    if left > spin_ns + 50_000:
        time.sleep((left - spin_ns) / 1e9)
    while time.monotonic_ns() < deadline_ns:
        pass


@cache
def _libddsc() -> ctypes.CDLL:
    """The process's Cyclone library (the one the bus core links), for writer statistics."""
    from mcc.bus import _native

    return ctypes.CDLL(_native.LIBRARY)


class _StatKeyValue(ctypes.Structure):
    """``struct dds_stat_keyvalue``: name, kind, then a union of uint32/uint64."""

    _fields_ = [("name", ctypes.c_char_p), ("kind", ctypes.c_int), ("value", ctypes.c_uint64)]


_STAT_UINT32 = 0


class _Throttles:
    """Cyclone's own count of the times a writer was throttled (``throttle_count``: a write
    waited because the writer's history was full of unacknowledged samples) and the time it
    spent so (``time_throttle``), read through ``dds_create_statistics`` as ddsperf does."""

    def __init__(self, dds_writer: Any) -> None:
        lib = _libddsc()
        lib.dds_create_statistics.restype = ctypes.c_void_p
        lib.dds_create_statistics.argtypes = [ctypes.c_int32]
        lib.dds_refresh_statistics.argtypes = [ctypes.c_void_p]
        lib.dds_refresh_statistics.restype = ctypes.c_int32
        lib.dds_lookup_statistic.restype = ctypes.POINTER(_StatKeyValue)
        lib.dds_lookup_statistic.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.dds_delete_statistics.argtypes = [ctypes.c_void_p]
        self._stats = lib.dds_create_statistics(int(dds_writer._ref))
        if not self._stats:
            raise MccError("dds_create_statistics failed for the perf writer")
        self._refresh = lib.dds_refresh_statistics
        self.count_kv = lib.dds_lookup_statistic(self._stats, b"throttle_count")
        self.time_kv = lib.dds_lookup_statistic(self._stats, b"time_throttle")
        if not self.count_kv or not self.time_kv:
            raise MccError("this libddsc has no throttle_count/time_throttle writer statistics")
        self._last = 0

    def read(self, kv: Any) -> int:
        """The statistic ``kv`` (``self.count_kv``, ``self.time_kv``) now."""
        self._refresh(self._stats)
        value = int(kv.contents.value)
        return value & 0xFFFFFFFF if kv.contents.kind == _STAT_UINT32 else value

    def rose(self) -> bool:
        """Whether the writer was throttled since the previous call."""
        now = self.read(self.count_kv)
        rose, self._last = now > self._last, now
        return rose


def run_sub(spec: SubSpec) -> dict[str, Any]:
    """Take ``PerfData`` until every writer sent its end, ``idle_s`` pass without data after
    some arrived, or ``max_s`` pass; count samples and bytes and record one-way latency
    (monotonic clock: both processes on one kernel, namespaces included)."""
    from mcc.bus import Bus

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    kind = sample_type(spec.keyed)
    profile = stream_profile(spec.reliable)
    tallies: dict[str, _WriterTally] = {}
    latencies: list[int] = []
    received = size = 0
    first_ns = last_ns = 0
    monotonic = time.monotonic_ns
    with Bus(spec.domain, name="mcc-perf-sub", monitor_qos=False) as bus:
        reader = bus.reader(DATA_TOPIC, type=kind, profile=profile)
        print(READY_LINE, flush=True)
        deadline = time.monotonic() + spec.max_s
        while not stop.is_set():
            now_s = time.monotonic()
            if now_s > deadline:
                break
            if received and (monotonic() - last_ns) / 1e9 > spec.idle_s:
                break
            batch = reader.take_wait(1024, timeout_s=0.2)
            if not batch:
                continue
            now = monotonic()
            for s in batch:
                tally = tallies.get(s.writer_id)
                if tally is None:
                    tally = tallies[s.writer_id] = _WriterTally()
                if s.seq == 0:
                    tally.ended = True
                    continue
                if s.seq != tally.last_seq + 1:
                    tally.gaps += 1
                tally.last_seq = s.seq
                tally.received += 1
                received += 1
                size += len(s.payload)
                if spec.latency and s.seq > spec.warmup_samples:
                    latencies.append(now - s.send_ns)
            if received and not first_ns:
                first_ns = now
                print(FLOWING_LINE, flush=True)
            last_ns = now if received else last_ns
            if len(tallies) >= spec.writers and all(t.ended for t in tallies.values()):
                break
    return {
        "received": received,
        "received_samples": received * spec.batch,
        "bytes": size,
        "seconds": (last_ns - first_ns) / 1e9,
        "writers": {k: dataclasses.asdict(v) for k, v in tallies.items()},
        "latency_hist": _hist([max(0, v) for v in latencies]),
    }


@dataclass
class ThroughputResult:
    """What a subscriber measured, with the publishers' counts for the loss."""

    samples_per_s: float
    mb_per_s: float
    received: int
    lost: int
    latency: LatencyRecorder | None = None


def throughput_of(sub: dict[str, Any], sent_samples: int, batch: int = 1) -> ThroughputResult:
    """Samples/s and MB/s at the subscriber (first to last sample) and samples lost."""
    seconds = sub["seconds"]
    got = sub["received"]
    rate = (got - 1) * batch / seconds if seconds > 0 and got > 1 else 0.0
    mb = (sub["bytes"] * (got - 1) / got) / seconds / 1e6 if seconds > 0 and got > 1 else 0.0
    hist = sub.get("latency_hist")
    return ThroughputResult(
        samples_per_s=rate,
        mb_per_s=mb,
        received=got * batch,
        lost=max(0, sent_samples - got * batch),
        latency=LatencyRecorder.decode(hist) if hist else None,
    )
