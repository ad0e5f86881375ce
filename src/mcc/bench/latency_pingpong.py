"""MCC's side of ``mcc bench latency`` (``mcc.bench.latency``): the pong process that echoes
every ``PerfPing`` on ``PerfPong``, the ping side that measures the round trips, and
``python -m mcc.bench.latency_pingpong ping|pong``, the entry of those processes.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cyclonedds.core import DDSException, WaitSet
from cyclonedds.util import duration

from mcc.bench import perftest
from mcc.bench.perftest import Node, PerfOptions
from mcc.bench.perftest_net import Worker, WorkerSet
from mcc.bench.stats import LatencyRecorder, LatencyStats
from mcc.bus import Bus, Reader, Transport, Writer
from mcc.errors import MccError
from mcc.settings import current

log = logging.getLogger("mcc.bench.latency")

__all__ = ["PingPong", "PingSpec", "mcc_pingpong", "ping_here", "run_mcc_pingpong", "run_pong"]

PING, PONG = "PerfPing", "PerfPong"
# No echo after this long: the ping (or its echo) was lost. Best effort: 100 ms. Reliable: a
# late echo still comes and its round trip belongs in the tail, so wait much longer.
_LOSS_TIMEOUT_BEST_EFFORT_NS = 100_000_000
_LOSS_TIMEOUT_RELIABLE_NS = 2_000_000_000


#: How a side handles a sample: an inline on_data (Cyclone's receive thread), an on_data on the
#: bus's dispatcher thread, or a waitset loop of the bench's own.
MODES = ("inline", "listener", "waitset")


def perf_profile(reliable: bool) -> str:
    return "perf_reliable" if reliable else "perf_best_effort"


# -- MCC ping-pong ------------------------------------------------------------------------------


def run_pong(
    domain_id: int,
    *,
    reliable: bool,
    tag: str | None = None,
    mode: str = "inline",
    keyed: bool = False,
) -> int:
    """Echo every ``PerfPing`` sample on ``PerfPong`` until a sample with seq 0 arrives.

    ``tag`` confines the bus to loopback with that discovery tag; without it the transport
    comes from the environment (``MCC_TRANSPORT``, set by the benchmark).
    """
    done = threading.Event()
    kind = perftest.sample_type(keyed)
    transport = Transport.loopback(tag) if tag else None
    profile = perf_profile(reliable)
    with Bus(domain_id, transport=transport, name="mcc-bench-pong", monitor_qos=False) as bus:
        write = bus.writer(PONG, type=kind, profile=profile, validate=False).write

        def echo(reader: Reader[Any]) -> None:
            for sample in reader.take(64):
                if sample.seq == 0:
                    done.set()
                else:
                    write(sample)

        on_data = echo if mode != "waitset" else None
        reader = bus.reader(
            PING, type=kind, profile=profile, on_data=on_data, inline=mode == "inline"
        )
        if mode == "waitset":
            waitset = WaitSet(bus.participant)
            waitset.attach(reader.condition)
            forever = duration(seconds=5)
            while not done.is_set():
                waitset.wait(forever)
                echo(reader)
        done.wait()
    return 0


@dataclass
class PingPong:
    """One MCC ping-pong run: one-way latencies (RTT/2) and the pings never answered."""

    recorder: LatencyRecorder
    lost: int
    crashes: int = 0  # attempts lost to a process that died of a signal (run again)

    def stats(self) -> LatencyStats:
        return self.recorder.stats(lost=self.lost)

    @classmethod
    def of(cls, raw: dict[str, Any]) -> PingPong:
        """The run a ping child reported (`main`'s RESULT object)."""
        return cls(LatencyRecorder.decode(raw["hist"]), int(raw["lost"]))


def run_mcc_pingpong(
    *,
    size_bytes: int,
    duration_s: float,
    domain_id: int,
    reliable: bool = True,
    warmup: int = 200,
    max_samples: int = 1_000_000,
    tag: str | None = None,
    mode: str = "inline",
    interval_ms: float = 0.0,
    keyed: bool = False,
) -> LatencyStats:
    """Ping-pong on loopback for ``duration_s`` seconds (or ``max_samples`` round trips);
    one-way latency statistics in microseconds.

    ``mode="inline"`` handles each sample in an inline ``Reader.on_data`` (on Cyclone's
    receive thread, as ``ddsperf`` does: no thread wakes but the receive thread);
    ``mode="listener"`` in ``Reader.on_data`` on the bus's dispatcher thread;
    ``mode="waitset"`` in a waitset loop of the bench's own. The last two wake a Python
    thread per hop besides the receive thread.
    """
    options = PerfOptions(reliable=reliable, keyed=keyed)
    with perftest.open_network("host", 2) as nodes:
        return mcc_pingpong(
            options,
            nodes,
            size_bytes=size_bytes,
            duration_s=duration_s,
            domain_id=domain_id,
            warmup=warmup,
            max_samples=max_samples,
            mode=mode,
            interval_ms=interval_ms,
            tag=tag,
        ).stats()


def mcc_pingpong(
    options: PerfOptions,
    nodes: Sequence[Node],
    *,
    size_bytes: int,
    duration_s: float,
    domain_id: int,
    warmup: int = 200,
    max_samples: int = 1_000_000,
    mode: str = "inline",
    interval_ms: float = 0.0,
    tag: str | None = None,
) -> PingPong:
    """MCC ping-pong from ``nodes[0]`` (ping) to ``nodes[-1]`` (pong) with ``options``.

    The ping side runs in this process on the host network over UDP, and in a child process
    in the ping node's namespace or over TCP. Over TCP, Cyclone DDS 11.0.1's receive thread
    can crash its process with SIGSEGV (in ``do_packet``; eclipse-cyclonedds#2010, TCP
    connections that drop): in a child, such a crash fails one attempt, not the benchmark.
    A run in which a process died of a signal is run again, up to `MAX_ATTEMPTS` in all; the
    result counts the lost attempts (``PingPong.crashes``, the row's ``crashes``).
    """
    if mode not in MODES:
        raise MccError(f"mode = {mode!r}: use one of {', '.join(MODES)}")
    if size_bytes < 0:
        raise MccError(f"size_bytes = {size_bytes}: must be >= 0")
    if not interval_ms >= 0:
        raise MccError(f"interval_ms = {interval_ms}: must be >= 0 (0 = as fast as possible)")
    reason = perftest.require_mcc_transport(options)
    if reason is not None:
        raise MccError(reason)
    tag = tag or perftest.run_tag("lat")
    ping_node, pong_node = nodes[0], nodes[-1]
    ping_transport, pong_transport = perftest.pair_transports(options, nodes, tag=tag)
    pong_env = perftest.child_env(pong_transport, options)
    pong_argv = [sys.executable, "-m", "mcc.bench.latency_pingpong", "pong"]
    pong_argv += ["--domain", str(domain_id), "--mode", mode]
    pong_argv += [] if options.reliable else ["--best-effort"]
    pong_argv += ["--keyed"] if options.keyed else []
    spec = PingSpec(
        domain_id=domain_id,
        size_bytes=size_bytes,
        duration_s=duration_s,
        reliable=options.reliable,
        keyed=options.keyed,
        warmup=warmup,
        max_samples=max_samples,
        mode=mode,
        interval_ms=interval_ms,
    )
    in_process = ping_node.netns is None and options.transport != "tcp"

    def once() -> PingPong:
        with perftest.workers() as ws:
            pong = ws.start("pong", pong_node, pong_argv, env=pong_env)
            if in_process:
                perftest.claim_in_process(domain_id)
                try:
                    qos_file = perftest.perf_qos_file(options.send_queue)
                    result = ping_here(spec, ping_transport, qos_file)
                except MccError as exc:
                    _raise_if_crashed(pong)
                    said = pong.bg.output()[-2000:]
                    raise MccError(f"{exc}\n--- the pong process said:\n{said}") from None
            else:
                env = perftest.child_env(ping_transport, options)
                ping = spec.start_ping(ws, ping_node, env)
                try:
                    result = PingPong.of(ping.result(duration_s + 120))
                except MccError:
                    _raise_if_crashed(ping, pong)
                    raise
                if (rc := ping.bg.proc.returncode) is not None and rc < 0:
                    log.warning(  # its result came first: the measurement stands
                        "latency %s: the ping died of signal %d after reporting its result "
                        "(Cyclone's TCP teardown, eclipse-cyclonedds#2010)",
                        options.transport,
                        -rc,
                    )
            with contextlib.suppress(subprocess.TimeoutExpired):
                pong.bg.proc.wait(timeout=10)  # it ends on the seq-0 sample; else stopped below
        return result

    crashes = 0
    while True:
        try:
            result = once()
            result.crashes = crashes
            return result
        except _Crashed as crash:
            crashes += 1
            log.warning("latency %s: %s; running it again", options.transport, crash)
            if crashes >= MAX_ATTEMPTS:
                raise MccError(f"{crash} ({crashes} attempts, each crashed)") from None


#: Attempts of a ping-pong whose processes die of a signal (measured here: about one TCP
#: attempt in four crashes, so two in a row failed one CI run in three; four in a row, expected
#: ~0.4 %, failed one CI run of the 2026-11-27 stop, whose machine was loaded: eight).
MAX_ATTEMPTS = 8


class _Crashed(MccError):
    """A ping or pong process died of a signal (a crash of the DDS library, not of MCC)."""


def _raise_if_crashed(*procs: Worker) -> None:
    """`_Crashed` naming the processes of ``procs`` that died of a signal, if any did (a
    dead process is a zombie until reaped, so `poll` sees it: nothing to wait for)."""
    died = [
        f"{w.name} died of signal {-rc}"
        for w in procs
        if (rc := w.bg.proc.poll()) is not None and rc < 0
    ]
    if died:
        raise _Crashed("; ".join(died))


@dataclass
class PingSpec:
    domain_id: int
    size_bytes: int
    duration_s: float
    reliable: bool
    keyed: bool
    warmup: int
    max_samples: int
    mode: str
    interval_ms: float

    def start_ping(self, ws: WorkerSet, node: Node, env: dict[str, str]) -> Worker:
        """``python -m mcc.bench.latency_pingpong ping`` of this spec on ``node``: it prints
        its histogram and losses as one RESULT line (`PingPong.of` reads it)."""
        spec = json.dumps(dataclasses.asdict(self))
        argv = [sys.executable, "-m", "mcc.bench.latency_pingpong", "ping", "--spec", spec]
        return ws.start("ping", node, argv, env=env)


def ping_here(
    spec: PingSpec,
    transport: Transport | None,
    qos_file: Any,
    on_result: Callable[[PingPong], None] | None = None,
) -> PingPong:
    """The ping side, in this process: ping-pong until done, then tell the pong to stop.
    ``on_result`` gets the result before the pong is told to stop and the bus closes: over
    TCP, Cyclone 11.0.1's receive thread can crash the process as the pong's connection drops
    (eclipse-cyclonedds#2010), and a child that reported first loses nothing to it."""
    from mcc.bus import QosLibrary

    kind = perftest.sample_type(spec.keyed)
    profile = perf_profile(spec.reliable)
    qos = QosLibrary.load(qos_file) if qos_file else None
    tag = transport.discovery_tag if transport is not None else None
    with Bus(
        spec.domain_id,
        transport=transport,
        discovery_tag=tag,  # not the environment's: the pong has the run's tag
        qos=qos,
        name="mcc-bench-ping",
        monitor_qos=False,
    ) as bus:
        writer = bus.writer(PING, type=kind, profile=profile, validate=False)
        ping = _Pinger(writer, kind, spec)
        reader = bus.reader(
            PONG,
            type=kind,
            profile=profile,
            on_data=ping.on_echo if spec.mode != "waitset" else None,
            inline=spec.mode == "inline",
        )
        if not (
            writer.wait_for_readers(1, timeout_s=30) and reader.wait_for_writers(1, timeout_s=30)
        ):
            raise MccError("the pong process did not appear on the bus within 30 s")
        if not ping.prime(reader if spec.mode == "waitset" else None, timeout_s=30):
            raise MccError("the pong process matched but echoed nothing within 30 s")
        ping.end = time.monotonic() + spec.duration_s  # from now: discovery took its time
        ping.warmup_end_ns = time.perf_counter_ns() + int(spec.duration_s * 0.1e9)
        if spec.mode != "waitset":
            ping.run_listener()
        else:
            ping.run_waitset(bus, reader)
        recorder = LatencyRecorder()
        recorder.record_many_ns([rtt // 2 for rtt in ping.rtts_ns])
        result = PingPong(recorder, ping.lost)
        if recorder.count and on_result is not None:
            on_result(result)
        writer.write(kind(writer_id="ping", seq=0, send_ns=0, payload=b""))
        with contextlib.suppress(Exception):
            writer.dds.wait_for_acks(duration(seconds=2))
        if recorder.count == 0:
            raise MccError(
                f"no round trip completed in {spec.duration_s:g} s ({ping.lost} pings lost)"
            )
        return result


class _Pinger:
    """The ping side: send, take the echo, record the round trip, send the next."""

    def __init__(self, writer: Writer[Any], kind: type, spec: PingSpec) -> None:
        self.write = writer.write
        self.sample = kind(writer_id="ping", seq=0, send_ns=0, payload=bytes(spec.size_bytes))
        self.warmup = spec.warmup
        self.warmup_end_ns = 0  # warm-up also ends after 10 % of the run: short rows
        self.max_samples = spec.max_samples
        self.interval_ns = int(spec.interval_ms * 1e6)
        self.loss_timeout_ns = (
            _LOSS_TIMEOUT_RELIABLE_NS if spec.reliable else _LOSS_TIMEOUT_BEST_EFFORT_NS
        )
        self.end = time.monotonic() + spec.duration_s
        self.rtts_ns: list[int] = []
        self.lost = 0
        self.done = threading.Event()
        self.echoed = threading.Event()
        self._start_ns = 0
        self._lock = threading.Lock()
        self._priming = False

    def prime(self, reader: Reader[Any] | None, *, timeout_s: float) -> bool:
        """Ping until an echo comes back (None: the listener takes it), outside the record.

        Discovery is not symmetric: our reader may see the pong's writer before that writer
        sees our reader, and the first echoes would be dropped (lost, under load, for a whole
        short run).
        """
        self._priming = True
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                with self._lock:
                    self.echoed.clear()
                    self.sample.seq += 1
                    self.write(self.sample)
                if reader is None:
                    if self.echoed.wait(0.2):
                        return True
                elif reader.wait(0.2) and any(s.seq == self.sample.seq for s in reader.take(8)):
                    return True
            return False
        finally:
            self._priming = False

    def send_next(self) -> None:
        if time.monotonic() >= self.end or len(self.rtts_ns) >= self.max_samples:
            self.done.set()
            return
        self.sample.seq += 1
        self._start_ns = time.perf_counter_ns()
        self.write(self.sample)

    def on_echo(self, reader: Reader[Any]) -> None:
        now = time.perf_counter_ns()
        if self.done.is_set():
            return  # the bus may be closing: leave late echoes alone
        with self._lock:
            try:
                echoes = reader.take(8)
            except DDSException:
                if self.done.is_set():
                    return
                raise
            hit = any(s.seq == self.sample.seq for s in echoes)
            if self._priming:
                if hit:
                    self.echoed.set()
            elif hit and not self.done.is_set():
                self._record(now)
                if self.interval_ns:
                    self.echoed.set()
                else:
                    self.send_next()

    def _record(self, now: int) -> None:
        """The round trip of the ping just echoed at ``now``, unless it is a warm-up one."""
        if self.sample.seq > self.warmup or now > self.warmup_end_ns:
            self.rtts_ns.append(now - self._start_ns)

    def run_listener(self) -> None:
        """Echoes drive the next ping from the dispatcher thread (flat out), or this thread sends
        on the interval's schedule; this thread counts a ping lost after the loss timeout."""
        if self.interval_ns:
            self._run_paced(lambda timeout_ns: self.echoed.wait(timeout_ns / 1e9))
            return
        with self._lock:
            self.send_next()
        while True:
            with self._lock:
                seq = self.sample.seq
            if self.done.wait(self.loss_timeout_ns / 1e9):
                return
            with self._lock:
                if self.sample.seq == seq and not self.done.is_set():
                    self.lost += 1  # no echo within the loss timeout
                    self.send_next()

    def _run_paced(self, wait_echo: Callable[[int], bool]) -> None:
        next_ns = time.monotonic_ns()
        while not self.done.is_set():
            perftest.sleep_until(next_ns, spin_ns=200_000 if self.interval_ns < 500_000 else 0)
            next_ns += self.interval_ns
            now = time.monotonic_ns()
            if now > next_ns:
                next_ns = now  # the echo came after the next slot: send right away
            with self._lock:
                self.echoed.clear()
                self.send_next()
            if self.done.is_set():
                return
            if not wait_echo(self.loss_timeout_ns):
                with self._lock:
                    self.lost += 1

    def run_waitset(self, bus: Bus, reader: Reader[Any]) -> None:
        """Wait for each echo in this thread."""
        waitset = WaitSet(bus.participant)
        waitset.attach(reader.condition)
        timeout = duration(nanoseconds=self.loss_timeout_ns)

        def wait_echo(timeout_ns: int) -> bool:
            deadline = time.perf_counter_ns() + timeout_ns
            while True:
                left = deadline - time.perf_counter_ns()
                if left <= 0 or waitset.wait(duration(nanoseconds=left)) == 0:
                    return False
                now = time.perf_counter_ns()
                if any(s.seq == self.sample.seq for s in reader.take(8)):
                    self._record(now)
                    return True

        if self.interval_ns:
            self._run_paced(wait_echo)
            return
        self.send_next()
        while not self.done.is_set():
            if waitset.wait(timeout) == 0:
                self.lost += 1
                self.send_next()
                continue
            now = time.perf_counter_ns()
            if any(s.seq == self.sample.seq for s in reader.take(8)):
                self._record(now)
                self.send_next()


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m mcc.bench.latency_pingpong")
    parser.add_argument("role", choices=["pong", "ping"])
    parser.add_argument("--domain", type=int)
    parser.add_argument("--tag")
    parser.add_argument("--best-effort", action="store_true")
    parser.add_argument("--keyed", action="store_true")
    parser.add_argument("--mode", choices=MODES, default="inline")
    parser.add_argument("--spec", help="ping: JSON of the run")
    args = parser.parse_args()
    if args.role == "ping":
        spec = PingSpec(**json.loads(args.spec))

        def report(result: PingPong) -> None:
            out = {"hist": result.recorder.encode(), "lost": result.lost}
            print(perftest.RESULT_PREFIX + json.dumps(out), flush=True)

        try:
            ping_here(spec, None, current().qos_file, on_result=report)
        except MccError as exc:
            print(f"mcc.bench.latency_pingpong ping: {exc}", file=sys.stderr, flush=True)
            return 2
        return 0
    if args.domain is None:
        parser.error("pong needs --domain")
    reliable = not args.best_effort
    return run_pong(args.domain, reliable=reliable, tag=args.tag, mode=args.mode, keyed=args.keyed)


if __name__ == "__main__":
    sys.exit(main())
