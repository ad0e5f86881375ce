"""Heartbeats: each system instance says it is alive, and how loaded it is, once a period."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import resource
import socket
import threading
import time
from collections.abc import Callable

import numpy as np

from mcc.bus.core import Bus
from mcc.lifecycle import Service
from mcc.types import Heartbeat, SystemState

_PAGE = os.sysconf("SC_PAGE_SIZE")
#: How often the heartbeat thread hands the C heap's free pages back to the kernel
#: (`release_free_memory`).
TRIM_EVERY_S = 60.0
#: A new instance beats every STARTUP_INTERVAL_S for its first STARTUP_S (see `_run`).
STARTUP_S = 1.0
STARTUP_INTERVAL_S = 0.02


def rss_bytes() -> int:
    """Resident set size of this process."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim: Callable[[int], int] = libc.malloc_trim
        return trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim): nothing to do
        return None


_TRIM = _malloc_trim()


def release_free_memory() -> bool:
    """Hand the free pages of the C heap (every glibc arena) back to the kernel:
    ``malloc_trim(0)``, with the GIL released (ctypes). False where the C library has none.

    Why a long-running process needs it: Cyclone's receive thread takes its packets from 1 MiB
    buffers, a new one when the last is full (every few minutes of a mission's traffic). glibc
    maps the first ones apart and unmaps them when done, but each unmap raises its threshold
    for mapping apart (the dynamic mmap threshold); from then on the buffers come from the
    receive thread's arena, where a freed one stays resident. Every process of the 2-hour soaks
    grew ~2.3 MB that way in its first 45 minutes, as one step per buffer (measured with
    ``/proc/PID/smaps`` and ``perf record`` of the mmap calls: ``ddsi_rmsg_new`` on the
    ``recv`` thread). A fixed threshold instead (``mallopt(M_MMAP_THRESHOLD)``) maps every
    buffer apart, which cost bulk transfers a third of their rate (1.0 vs 1.45 GB/s, 64 MiB
    one way); trimming once a minute costs 0.2-1 ms on the heartbeat thread."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


def freeze_startup_objects(*, collect: bool = False) -> int:
    """Put every object alive now out of the garbage collector's sight (``gc.freeze``), after
    a full collection with ``collect``; how many are frozen. For a long-running process once
    its start-up is done (a fork server before it forks, an instance before its app runs, the
    supervisor before it serves): what it imported and built then lives as long as it does.

    Why: a full collection visits every module and every Cython function object, calling each
    extension's traverse function; in a process forked from the node agent those functions'
    pages of ~30 shared libraries were never mapped in the child, so its first full collection,
    which a steady load brings after an hour or more, put ~1.3 MB of library code into its RSS
    at once (the launcher with the most engagements, at ~96 minutes of each 2-hour soak:
    ``/proc/PID/smaps``, file-backed pages of scipy, numpy.random, yaml, _ssl, _pickle…, 64 KB
    each, the kernel's fault-around). Frozen objects are not visited, and a fork shares them
    without the collector writing to their pages. Cycles among them are never collected: call
    it once, not per request."""
    if collect:
        gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


class HeartbeatPublisher(Service):
    """Publish a ``Heartbeat`` for ``system_id`` every ``period_s`` from a daemon thread.

    The owner reports its traffic with ``count_in``/``count_out`` and its end-to-end
    latencies with ``record_latency_ns``; each heartbeat carries the rates and the p50/p99 of
    the latencies seen since the previous one.
    """

    def __init__(
        self,
        bus: Bus,
        system_id: str,
        *,
        period_s: float = 1.0,
        device: str = "cpu",
        state: SystemState = SystemState.SYSTEM_RUNNING,
        trim_every_s: float | None = TRIM_EVERY_S,
    ) -> None:
        if period_s <= 0:
            raise ValueError(f"period_s = {period_s}: must be > 0")
        if trim_every_s is not None and trim_every_s <= 0:
            raise ValueError(f"trim_every_s = {trim_every_s}: must be > 0 (None: never)")
        #: Every this often the beat also releases the C heap's free pages
        #: (`release_free_memory`); None: never.
        self.trim_every_s = trim_every_s
        self.trims = 0  # times the free pages were released
        self.system_id = system_id
        self.period_s = period_s
        self.device = device
        self.state = state
        self.message = ""
        self._writer = bus.writer("Heartbeat")
        self._lock = threading.Lock()
        self._in = self._out = 0
        self._latencies_ns: list[int] = []
        self._seq = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_wall = time.monotonic()
        self._last_cpu = _cpu_seconds()
        np.percentile([0.0], [50, 99])  # numpy's first call costs ~30 ms with the GIL held

    def count_in(self, n: int = 1) -> None:
        with self._lock:
            self._in += n

    def count_out(self, n: int = 1) -> None:
        with self._lock:
            self._out += n

    def record_latency_ns(self, latency_ns: int) -> None:
        with self._lock:
            if len(self._latencies_ns) < 100_000:
                self._latencies_ns.append(latency_ns)

    def beat(self) -> Heartbeat:
        """Build and publish one heartbeat now."""
        now, cpu = time.monotonic(), _cpu_seconds()
        elapsed = max(now - self._last_wall, 1e-6)
        with self._lock:
            n_in, n_out, lat = self._in, self._out, self._latencies_ns
            self._in = self._out = 0
            self._latencies_ns = []
        p50, p99 = (np.percentile(lat, [50, 99]) / 1e3) if lat else (0.0, 0.0)
        self._seq += 1
        hb = Heartbeat(
            system_id=self.system_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            state=self.state,
            device=self.device,
            cpu_percent=100.0 * (cpu - self._last_cpu) / elapsed,
            rss_bytes=rss_bytes(),
            msgs_in_per_s=n_in / elapsed,
            msgs_out_per_s=n_out / elapsed,
            latency_p50_us=float(p50),
            latency_p99_us=float(p99),
            seq=self._seq,
            time_ns=time.time_ns(),
            message=self.message,
        )
        self._last_wall, self._last_cpu = now, cpu
        self._writer.write(hb)
        return hb

    def _run(self, wait_for_reader_s: float) -> None:
        if wait_for_reader_s > 0:
            self._writer.wait_for_readers(1, timeout_s=wait_for_reader_s)
        if self._stop.is_set():
            return
        self.beat()
        # A reader that matched this writer may not have discovered it yet (discovery is not
        # symmetric in time) and drops its best-effort beats until it has: the first beat was
        # lost that way in about one failover of two, and the supervisor then waited a whole
        # period (1 s) for the next. Beating every 20 ms for the first second closes that gap.
        fast_until = time.monotonic() + STARTUP_S
        next_trim = None if self.trim_every_s is None else fast_until + self.trim_every_s
        while not self._stop.wait(
            min(STARTUP_INTERVAL_S, self.period_s)
            if time.monotonic() < fast_until
            else self.period_s
        ):
            self.beat()
            if next_trim is not None and time.monotonic() >= next_trim:
                next_trim = time.monotonic() + (self.trim_every_s or 0.0)
                self.trims += release_free_memory()

    def start(self, *, wait_for_reader_s: float = 0.0) -> HeartbeatPublisher:
        """Beat at once and every period, on a thread of its own; with ``wait_for_reader_s``
        the first beat waits up to that long for a reader to match, so it is not lost to
        discovery (the supervisor marks an instance running on its first beat). The caller
        does not wait: an instance's app starts while its heartbeat is being discovered."""
        self._thread = threading.Thread(
            target=self._run, args=(wait_for_reader_s,), name="mcc-heartbeat", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, *, final_state: SystemState = SystemState.SYSTEM_STOPPED) -> None:
        """Stop beating, after one last heartbeat with ``final_state``."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.period_s + 1.0)
        self.state = final_state
        self.beat()

    def __exit__(self, *exc_info: object) -> None:
        # Service's exit, saying how it ended: a block left by an exception ends FAILED.
        failed = exc_info[1] is not None
        self.stop(final_state=SystemState.SYSTEM_FAILED if failed else SystemState.SYSTEM_STOPPED)


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system
