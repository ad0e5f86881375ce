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
import time

from cyclonedds.core import WaitSet
from cyclonedds.util import duration

from mcc.bench.stats import LatencyRecorder, LatencyStats
from mcc.bus import Bus, Transport
from mcc.errors import MccError
from mcc.types import PerfSample

PING, PONG = "PerfPing", "PerfPong"


def _profile(reliable: bool) -> str:
    return "perf_reliable" if reliable else "perf_best_effort"


def run_pong(domain_id: int, *, reliable: bool, tag: str) -> int:
    """Echo every ``PerfPing`` sample on ``PerfPong`` until a sample with seq 0 arrives."""
    with Bus(domain_id, transport=Transport.loopback(tag), name="mcc-bench-pong",
             monitor_qos=False) as bus:
        reader = bus.reader(PING, type=PerfSample, profile=_profile(reliable))
        writer = bus.writer(PONG, type=PerfSample, profile=_profile(reliable), validate=False)
        waitset = WaitSet(bus.participant)
        waitset.attach(reader.condition)
        take, write = reader.dds.take, writer.dds.write
        forever = duration(seconds=5)
        while True:
            waitset.wait(forever)
            for sample in take(64):
                if not sample.sample_info.valid_data:
                    continue
                if sample.seq == 0:
                    return 0
                write(sample)


def run_mcc_pingpong(*, size_bytes: int, duration_s: float, domain_id: int,
                     reliable: bool = True, warmup: int = 200, max_samples: int = 1_000_000,
                     tag: str | None = None) -> LatencyStats:
    """Ping-pong for ``duration_s`` seconds; one-way latency statistics in microseconds."""
    if size_bytes < 0:
        raise MccError(f"size_bytes = {size_bytes}: must be >= 0")
    tag = tag or f"mcc-bench-{os.getpid()}"
    pong = subprocess.Popen(
        [sys.executable, "-m", "mcc.bench.latency", "pong", "--domain", str(domain_id),
         "--tag", tag, *([] if reliable else ["--best-effort"])],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        with Bus(domain_id, transport=Transport.loopback(tag), name="mcc-bench-ping",
                 monitor_qos=False) as bus:
            writer = bus.writer(PING, type=PerfSample, profile=_profile(reliable), validate=False)
            reader = bus.reader(PONG, type=PerfSample, profile=_profile(reliable))
            if not (writer.wait_for_readers(1, timeout_s=20) and reader.wait_for_writers(1, timeout_s=20)):
                raise MccError("the pong process did not appear on the bus within 20 s")
            recorder = LatencyRecorder()
            lost = _ping_loop(bus, writer, reader, recorder, size_bytes=size_bytes,
                              duration_s=duration_s, warmup=warmup, max_samples=max_samples)
            writer.dds.write(PerfSample(writer_id="ping", seq=0, send_ns=0, payload=b""))
            return recorder.stats(lost=lost)
    finally:
        try:
            pong.wait(5)
        except subprocess.TimeoutExpired:
            pong.kill()
            pong.wait(5)


def _ping_loop(bus: Bus, writer: object, reader: object, recorder: LatencyRecorder, *,
               size_bytes: int, duration_s: float, warmup: int, max_samples: int) -> int:
    """The hot loop: write, wait for the echo, record RTT/2. Returns samples lost."""
    waitset = WaitSet(bus.participant)
    waitset.attach(reader.condition)  # type: ignore[attr-defined]
    write, take = writer.dds.write, reader.dds.take  # type: ignore[attr-defined]
    sample = PerfSample(writer_id="ping", seq=0, send_ns=0, payload=bytes(size_bytes))
    clock = time.perf_counter_ns
    timeout = duration(milliseconds=100)
    rtts: list[int] = []
    lost = 0
    seq = 0
    end = time.monotonic() + duration_s
    while time.monotonic() < end and len(rtts) < max_samples:
        seq += 1
        sample.seq = seq
        start = clock()
        write(sample)
        while True:
            if waitset.wait(timeout) == 0:
                lost += 1          # best effort: the ping or its echo was dropped
                break
            got = [s for s in take(8) if s.sample_info.valid_data and s.seq == seq]
            if got:
                if seq > warmup:
                    rtts.append(clock() - start)
                break
    recorder.record_many_ns([rtt // 2 for rtt in rtts])
    return lost


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m mcc.bench.latency")
    parser.add_argument("role", choices=["pong"])
    parser.add_argument("--domain", type=int, required=True)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--best-effort", action="store_true")
    args = parser.parse_args()
    return run_pong(args.domain, reliable=not args.best_effort, tag=args.tag)


if __name__ == "__main__":
    sys.exit(main())
