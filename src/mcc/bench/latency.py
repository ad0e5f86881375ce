"""MCC's own ping-pong: one-way latency (RTT/2) between two processes over ``mcc.bus``.

The ping side (this process) writes a ``PerfSample`` on ``PerfPing`` and waits in a waitset
for the echo on ``PerfPong``; the pong side (a child process) echoes every sample it takes.
Both use the profile library (``perf_reliable`` or ``perf_best_effort``) and the same loopback
transport as the ``ddsperf`` anchor, so the rows compare like with like. RTT is measured with
the ping process's monotonic clock; the first ``warmup`` round trips are not recorded.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time

from cyclonedds.core import WaitSet
from cyclonedds.util import duration

from mcc.bench.stats import LatencyRecorder, LatencyStats
from mcc.bus import Bus, Reader, Transport, Writer
from mcc.errors import MccError
from mcc.types import PerfSample

PING, PONG = "PerfPing", "PerfPong"


def _profile(reliable: bool) -> str:
    return "perf_reliable" if reliable else "perf_best_effort"


def run_pong(domain_id: int, *, reliable: bool, tag: str, mode: str = "listener") -> int:
    """Echo every ``PerfPing`` sample on ``PerfPong`` until a sample with seq 0 arrives."""
    done = threading.Event()
    with Bus(
        domain_id, transport=Transport.loopback(tag), name="mcc-bench-pong", monitor_qos=False
    ) as bus:
        writer = bus.writer(PONG, type=PerfSample, profile=_profile(reliable), validate=False)
        write = writer.write

        def echo(reader: Reader[PerfSample]) -> None:
            for sample in reader.take(64):
                if sample.seq == 0:
                    done.set()
                else:
                    write(sample)

        if mode == "listener":
            reader = bus.reader(PING, type=PerfSample, profile=_profile(reliable), on_data=echo)
            done.wait()
            del reader
        else:
            reader = bus.reader(PING, type=PerfSample, profile=_profile(reliable))
            waitset = WaitSet(bus.participant)
            waitset.attach(reader.condition)
            forever = duration(seconds=5)
            while not done.is_set():
                waitset.wait(forever)
                echo(reader)
    return 0


def run_mcc_pingpong(
    *,
    size_bytes: int,
    duration_s: float,
    domain_id: int,
    reliable: bool = True,
    warmup: int = 200,
    max_samples: int = 1_000_000,
    tag: str | None = None,
    mode: str = "listener",
) -> LatencyStats:
    """Ping-pong for ``duration_s`` seconds; one-way latency statistics in microseconds.

    ``mode="listener"`` handles each sample on Cyclone's receive thread (``Reader.on_data``,
    as ``ddsperf`` does by default); ``mode="waitset"`` wakes an application thread per sample
    (``ReaderLoop``'s way), one thread switch more per hop.
    """
    if mode not in ("listener", "waitset"):
        raise MccError(f"mode = {mode!r}: use 'listener' or 'waitset'")
    if size_bytes < 0:
        raise MccError(f"size_bytes = {size_bytes}: must be >= 0")
    tag = tag or f"mcc-bench-{os.getpid()}"
    pong = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mcc.bench.latency",
            "pong",
            "--domain",
            str(domain_id),
            "--tag",
            tag,
            "--mode",
            mode,
            *([] if reliable else ["--best-effort"]),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with Bus(
            domain_id, transport=Transport.loopback(tag), name="mcc-bench-ping", monitor_qos=False
        ) as bus:
            writer = bus.writer(PING, type=PerfSample, profile=_profile(reliable), validate=False)
            ping = _Pinger(
                writer,
                size_bytes=size_bytes,
                duration_s=duration_s,
                warmup=warmup,
                max_samples=max_samples,
            )
            reader = bus.reader(
                PONG,
                type=PerfSample,
                profile=_profile(reliable),
                on_data=ping.on_echo if mode == "listener" else None,
            )
            if not (
                writer.wait_for_readers(1, timeout_s=20)
                and reader.wait_for_writers(1, timeout_s=20)
            ):
                raise MccError("the pong process did not appear on the bus within 20 s")
            if mode == "listener":
                ping.run_listener()
            else:
                ping.run_waitset(bus, reader)
            recorder = LatencyRecorder()
            recorder.record_many_ns([rtt // 2 for rtt in ping.rtts_ns])
            lost = ping.lost
            writer.dds.write(PerfSample(writer_id="ping", seq=0, send_ns=0, payload=b""))
            return recorder.stats(lost=lost)
    finally:
        try:
            pong.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            pong.kill()
            pong.communicate(timeout=5)


class _Pinger:
    """The ping side: send, take the echo, record the round trip, send the next."""

    def __init__(
        self,
        writer: Writer[PerfSample],
        *,
        size_bytes: int,
        duration_s: float,
        warmup: int,
        max_samples: int,
    ) -> None:
        self.write = writer.write
        self.sample = PerfSample(writer_id="ping", seq=0, send_ns=0, payload=bytes(size_bytes))
        self.warmup = warmup
        self.max_samples = max_samples
        self.end = time.monotonic() + duration_s
        self.rtts_ns: list[int] = []
        self.lost = 0
        self.done = threading.Event()
        self._start_ns = 0
        self._lock = threading.Lock()

    def send_next(self) -> None:
        if time.monotonic() >= self.end or len(self.rtts_ns) >= self.max_samples:
            self.done.set()
            return
        self.sample.seq += 1
        self._start_ns = time.perf_counter_ns()
        self.write(self.sample)

    def on_echo(self, reader: Reader[PerfSample]) -> None:
        now = time.perf_counter_ns()
        with self._lock:
            if any(s.seq == self.sample.seq for s in reader.take(8)) and not self.done.is_set():
                if self.sample.seq > self.warmup:
                    self.rtts_ns.append(now - self._start_ns)
                self.send_next()

    def run_listener(self) -> None:
        """Echoes drive the next ping from the receive thread; this thread watches for losses."""
        with self._lock:
            self.send_next()
        while True:
            with self._lock:
                seq = self.sample.seq
            if self.done.wait(0.1):
                return
            with self._lock:
                if self.sample.seq == seq and not self.done.is_set():
                    self.lost += 1  # no echo for 100 ms: lost (best effort)
                    self.send_next()

    def run_waitset(self, bus: Bus, reader: Reader[PerfSample]) -> None:
        """Wait for each echo in this thread."""
        waitset = WaitSet(bus.participant)
        waitset.attach(reader.condition)
        timeout = duration(milliseconds=100)
        self.send_next()
        while not self.done.is_set():
            if waitset.wait(timeout) == 0:
                self.lost += 1
                self.send_next()
                continue
            now = time.perf_counter_ns()
            if any(s.seq == self.sample.seq for s in reader.take(8)):
                if self.sample.seq > self.warmup:
                    self.rtts_ns.append(now - self._start_ns)
                self.send_next()


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m mcc.bench.latency")
    parser.add_argument("role", choices=["pong"])
    parser.add_argument("--domain", type=int, required=True)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--best-effort", action="store_true")
    parser.add_argument("--mode", choices=["listener", "waitset"], default="listener")
    args = parser.parse_args()
    return run_pong(args.domain, reliable=not args.best_effort, tag=args.tag, mode=args.mode)


if __name__ == "__main__":
    sys.exit(main())
