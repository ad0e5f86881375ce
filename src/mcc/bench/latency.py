"""``mcc bench latency``: ping-pong one-way latency (RTT/2) of MCC's bus beside its anchors.

MCC's side: the ping process writes a ``PerfSample`` (or ``PerfKeyedSample`` with ``--keyed``)
on ``PerfPing`` and takes the echo on ``PerfPong``; the pong process echoes every sample it
takes. Both use the perftest profiles (``perf_reliable`` / ``perf_best_effort``, with the send
queue of :func:`mcc.bench.perftest.perf_qos_file`) and the same transport as the anchors, so
rows compare like with like. RTT is measured with the ping process's monotonic clock; the
first ``warmup`` round trips are not recorded. With a send interval the next ping leaves at
the next multiple of the interval (or right after the echo when that is later); without, right
after the echo.

Anchors in the same run, per size and interval: Cyclone's C ``ddsperf`` ping/pong, ``sockperf``
UDP (or TCP) ping-pong and an MPI ping-pong (``mpi4py``, host network, flat out only). With
``--peer fastdds|cyclone-c`` a row of mcc pinging the echo of a foreign peer (``make interop``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cyclonedds.core import DDSException, WaitSet
from cyclonedds.util import duration

from mcc.bench import perftest
from mcc.bench.perftest import Node, PerfOptions
from mcc.bench.stats import LatencyRecorder, LatencyStats
from mcc.bus import Bus, Reader, Transport, Writer
from mcc.errors import MccError

__all__ = [
    "COLUMNS",
    "DEFAULT_IMPLS",
    "DEFAULT_INTERVALS_MS",
    "DEFAULT_SIZES",
    "IMPLS",
    "PingPong",
    "add_parser",
    "mcc_pingpong",
    "run_latency",
    "run_mcc_pingpong",
    "run_pong",
]

PING, PONG = "PerfPing", "PerfPong"
DEFAULT_SIZES = (1, 64, 256, 1024, 4096, 10240, 65536)
QUICK_SIZES = (64,)
DEFAULT_INTERVALS_MS = (0.0, 1.0, 0.1)
QUICK_INTERVALS_MS = (0.0, 1.0)
IMPLS = (
    "mcc",
    "mcc-waitset",
    "ddsperf",
    "sockperf",
    "mpi",
    "mcc-secure",  # mcc with DDS Security, signed and encrypted
    "ddsperf-11",  # ddsperf of MCC's own Cyclone build (11.0.1), the secured anchor's baseline
    "ddsperf-secure",  # that ddsperf with the same governance as mcc-secure
    "fastdds",  # mcc pinging the Fast DDS peer's echo (interop/fastdds, make interop)
    "cyclone-c",  # mcc pinging the Cyclone C peer's echo (interop/c, make interop)
)
#: ``--peer NAME``: the foreign echoes mcc pings (docs/interop.md), and their executables
#: under the build folder of `make interop` (``$MCC_INTEROP_BUILD``, default ./build).
PEERS = {
    "fastdds": ("interop-fastdds/mcc-fastdds-peer", "echo"),
    "cyclone-c": ("interop/mcc-c-peer", "echo"),
}
SECURITY_IMPLS = ("mcc-secure", "ddsperf-11", "ddsperf-secure")
DEFAULT_IMPLS = ("mcc", "ddsperf", "sockperf", "mpi")
DEFAULT_COUNT = 100_000
QUICK_COUNT = 2_000
DEFAULT_MAX_DURATION_S = 5.0
QUICK_MAX_DURATION_S = 1.0
COLUMNS = (
    "impl",
    "size_bytes",
    "interval_ms",
    "count",
    "lost",
    "p50_us",
    "p90_us",
    "p99_us",
    "p999_us",
    "max_us",
    "mean_us",
    "stdev_us",
    "ratio_p50_vs_ddsperf",
    "ratio_p99_vs_ddsperf",
    "ping_timeouts",
    "net",
    "efficiency_vs_host",
    "error",
)
# No echo after this long: the ping (or its echo) was lost. Best effort: 100 ms. Reliable: a
# late echo still comes and its round trip belongs in the tail, so wait much longer.
_LOSS_TIMEOUT_BEST_EFFORT_NS = 100_000_000
_LOSS_TIMEOUT_RELIABLE_NS = 2_000_000_000


def _profile(reliable: bool) -> str:
    return "perf_reliable" if reliable else "perf_best_effort"


# -- MCC ping-pong ------------------------------------------------------------------------------


def run_pong(
    domain_id: int,
    *,
    reliable: bool,
    tag: str | None = None,
    mode: str = "listener",
    keyed: bool = False,
) -> int:
    """Echo every ``PerfPing`` sample on ``PerfPong`` until a sample with seq 0 arrives.

    ``tag`` confines the bus to loopback with that discovery tag; without it the transport
    comes from the environment (``MCC_TRANSPORT``, set by the benchmark).
    """
    done = threading.Event()
    kind = perftest.sample_type(keyed)
    transport = Transport.loopback(tag) if tag else None
    with Bus(domain_id, transport=transport, name="mcc-bench-pong", monitor_qos=False) as bus:
        writer = bus.writer(PONG, type=kind, profile=_profile(reliable), validate=False)
        write = writer.write

        def echo(reader: Reader[Any]) -> None:
            for sample in reader.take(64):
                if sample.seq == 0:
                    done.set()
                else:
                    write(sample)

        if mode == "listener":
            reader = bus.reader(PING, type=kind, profile=_profile(reliable), on_data=echo)
            done.wait()
            del reader
        else:
            reader = bus.reader(PING, type=kind, profile=_profile(reliable))
            waitset = WaitSet(bus.participant)
            waitset.attach(reader.condition)
            forever = duration(seconds=5)
            while not done.is_set():
                waitset.wait(forever)
                echo(reader)
    return 0


@dataclass
class PingPong:
    """One MCC ping-pong run: one-way latencies (RTT/2) and the pings never answered."""

    recorder: LatencyRecorder
    lost: int

    def stats(self) -> LatencyStats:
        return self.recorder.stats(lost=self.lost)


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
    interval_ms: float = 0.0,
    keyed: bool = False,
) -> LatencyStats:
    """Ping-pong on loopback for ``duration_s`` seconds (or ``max_samples`` round trips);
    one-way latency statistics in microseconds.

    ``mode="listener"`` handles each sample in ``Reader.on_data`` (the bus's dispatcher
    thread); ``mode="waitset"`` in a waitset loop of the bench's own. Both wake a Python thread
    per hop, where ``ddsperf`` handles samples on Cyclone's receive thread.
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
    mode: str = "listener",
    interval_ms: float = 0.0,
    tag: str | None = None,
) -> PingPong:
    """MCC ping-pong from ``nodes[0]`` (ping) to ``nodes[-1]`` (pong) with ``options``.

    The ping side runs in this process on the host network and in a child process in the
    ping node's namespace otherwise.
    """
    if mode not in ("listener", "waitset"):
        raise MccError(f"mode = {mode!r}: use 'listener' or 'waitset'")
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
    pong_argv = [
        sys.executable,
        "-m",
        "mcc.bench.latency",
        "pong",
        "--domain",
        str(domain_id),
        "--mode",
        mode,
        *([] if options.reliable else ["--best-effort"]),
        *(["--keyed"] if options.keyed else []),
    ]
    spec = _PingSpec(
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
    with perftest.workers() as ws:
        pong = ws.start("pong", pong_node, pong_argv, env=pong_env)
        if ping_node.netns is None:
            perftest.claim_in_process(domain_id)
            try:
                result = _ping(spec, ping_transport, perftest.perf_qos_file(options.send_queue))
            except MccError as exc:
                said = pong.bg.output()[-2000:]
                raise MccError(f"{exc}\n--- the pong process said:\n{said}") from None
        else:
            ping_env = perftest.child_env(ping_transport, options)
            ping_argv = [
                sys.executable,
                "-m",
                "mcc.bench.latency",
                "ping",
                "--spec",
                json.dumps(dataclasses.asdict(spec)),
            ]
            raw = ws.start("ping", ping_node, ping_argv, env=ping_env).result(duration_s + 120)
            result = PingPong(LatencyRecorder.decode(raw["hist"]), int(raw["lost"]))
        with contextlib.suppress(subprocess.TimeoutExpired):
            pong.bg.proc.wait(timeout=10)  # it ends on the seq-0 sample; else stopped below
    return result


@dataclass
class _PingSpec:
    domain_id: int
    size_bytes: int
    duration_s: float
    reliable: bool
    keyed: bool
    warmup: int
    max_samples: int
    mode: str
    interval_ms: float


def _ping(spec: _PingSpec, transport: Transport | None, qos_file: Any) -> PingPong:
    """The ping side, in this process: ping-pong until done, then tell the pong to stop."""
    from mcc.bus import QosLibrary

    kind = perftest.sample_type(spec.keyed)
    profile = _profile(spec.reliable)
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
            on_data=ping.on_echo if spec.mode == "listener" else None,
        )
        if not (
            writer.wait_for_readers(1, timeout_s=30) and reader.wait_for_writers(1, timeout_s=30)
        ):
            raise MccError("the pong process did not appear on the bus within 30 s")
        if not ping.prime(reader if spec.mode == "waitset" else None, timeout_s=30):
            raise MccError("the pong process matched but echoed nothing within 30 s")
        ping.end = time.monotonic() + spec.duration_s  # from now: discovery took its time
        ping.warmup_end_ns = time.perf_counter_ns() + int(spec.duration_s * 0.1e9)
        if spec.mode == "listener":
            ping.run_listener()
        else:
            ping.run_waitset(bus, reader)
        recorder = LatencyRecorder()
        recorder.record_many_ns([rtt // 2 for rtt in ping.rtts_ns])
        writer.dds.write(kind(writer_id="ping", seq=0, send_ns=0, payload=b""))
        with contextlib.suppress(Exception):
            writer.dds.wait_for_acks(duration(seconds=2))
        if recorder.count == 0:
            raise MccError(
                f"no round trip completed in {spec.duration_s:g} s ({ping.lost} pings lost)"
            )
        return PingPong(recorder, ping.lost)


class _Pinger:
    """The ping side: send, take the echo, record the round trip, send the next."""

    def __init__(self, writer: Writer[Any], kind: type, spec: _PingSpec) -> None:
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
            if self._priming:
                if any(s.seq == self.sample.seq for s in echoes):
                    self.echoed.set()
                return
            if any(s.seq == self.sample.seq for s in echoes) and not self.done.is_set():
                if self.sample.seq > self.warmup or now > self.warmup_end_ns:
                    self.rtts_ns.append(now - self._start_ns)
                if self.interval_ns:
                    self.echoed.set()
                else:
                    self.send_next()

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

    def _run_paced(self, wait_echo: Any) -> None:
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
                    if self.sample.seq > self.warmup or now > self.warmup_end_ns:
                        self.rtts_ns.append(now - self._start_ns)
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
                if self.sample.seq > self.warmup or now > self.warmup_end_ns:
                    self.rtts_ns.append(now - self._start_ns)
                self.send_next()


# -- the bench: MCC and the anchors, row by row ---------------------------------------------------


@dataclass(frozen=True)
class LatencyPlan:
    """What ``mcc bench latency`` runs."""

    sizes: tuple[int, ...] = DEFAULT_SIZES
    intervals_ms: tuple[float, ...] = DEFAULT_INTERVALS_MS
    impls: tuple[str, ...] = DEFAULT_IMPLS
    count: int = DEFAULT_COUNT
    max_duration_s: float = DEFAULT_MAX_DURATION_S
    options: PerfOptions = PerfOptions()

    def __post_init__(self) -> None:
        unknown = sorted(set(self.impls) - set(IMPLS))
        if unknown or not self.impls:
            raise MccError(
                f"--impl: unknown implementation(s) {unknown}; choose from {list(IMPLS)}"
            )
        if not self.sizes or any(s < 1 or s > 1 << 24 for s in self.sizes):
            raise MccError(f"--sizes {list(self.sizes)}: use byte counts from 1 to 16 MiB")
        if not self.intervals_ms or any(not i >= 0 for i in self.intervals_ms):
            raise MccError(
                f"--intervals {list(self.intervals_ms)}: use milliseconds >= 0 (0 = flat out)"
            )
        if self.count < 1:
            raise MccError(f"--count {self.count}: use 1 or more round trips")
        if not self.max_duration_s > 0:
            raise MccError(f"--duration {self.max_duration_s}: use seconds > 0")

    @property
    def rows(self) -> int:
        per_size = sum(
            1
            for interval in self.intervals_ms
            for impl in self.impls
            if impl != "mpi" or _mpi_meaningful(self.options, interval)
        )
        return len(self.sizes) * per_size


def run_latency(
    plan: LatencyPlan, *, progress: Any = None, nodes: Sequence[Node] | None = None
) -> list[dict[str, Any]]:
    """Rows of one-way latency for every size, interval and implementation, side by side.

    ``progress(text)`` is called before each row. ``nodes`` (two) place the processes; by
    default the plan's network is opened here (a NetLab for ``netns``) and closed after.
    """
    if nodes is None:
        with perftest.open_network(plan.options.net, 2, name="lat") as opened:
            return run_latency(plan, progress=progress, nodes=opened)
    rows: list[dict[str, Any]] = []
    for size in plan.sizes:
        for interval in plan.intervals_ms:
            group = []
            for impl in plan.impls:
                if impl == "mpi" and not _mpi_meaningful(plan.options, interval):
                    continue
                if progress is not None:
                    progress(f"latency {impl} {size} B every {_interval_text(interval)}")
                row = _latency_row(plan, impl, size, interval, nodes)
                group.append(row)
                rows.append(row)
            _add_ratios(group)
    return rows


def _interval_text(interval_ms: float) -> str:
    return "ASAP" if interval_ms == 0 else f"{interval_ms:g} ms"


def _latency_row(
    plan: LatencyPlan, impl: str, size: int, interval_ms: float, nodes: Sequence[Node]
) -> dict[str, Any]:
    options = plan.options
    row: dict[str, Any] = {
        "impl": impl,
        "size_bytes": size,
        "interval_ms": interval_ms,
        **options.row(),
    }
    domain = perftest.next_domain()
    duration_s = plan.max_duration_s
    try:
        if impl in ("mcc", "mcc-waitset", "mcc-secure"):
            if impl == "mcc-secure":
                options = dataclasses.replace(options, security=True)
            result = mcc_pingpong(
                options,
                nodes,
                size_bytes=size,
                duration_s=duration_s,
                domain_id=domain,
                max_samples=plan.count,
                mode="waitset" if impl == "mcc-waitset" else "listener",
                interval_ms=interval_ms,
            )
            row.update(result.stats().as_row())
            row["cdf_us"] = result.recorder.cdf()
        elif impl in ("ddsperf", "ddsperf-11", "ddsperf-secure"):
            row["keyed"] = True  # ddsperf's sized topic (KS) is keyed; one instance
            if impl != "ddsperf":
                options = dataclasses.replace(options, security=impl == "ddsperf-secure")
            own = impl != "ddsperf"  # MCC's Cyclone build: the same library as mcc's rows
            row.update(_ddsperf_row(options, nodes, size, interval_ms, duration_s, domain, own))
        elif impl in PEERS:
            result = _peer_pingpong(
                impl, options, nodes, size, interval_ms, duration_s, domain, plan.count
            )
            row.update({"multicast": False, **result.stats().as_row()})
            row["cdf_us"] = result.recorder.cdf()
        elif impl == "sockperf":
            row.update({"reliable": None, "keyed": None, "multicast": None, "send_queue": None})
            row.update(_sockperf_row(options, nodes, size, interval_ms, duration_s))
        else:
            row.update({"reliable": None, "keyed": None, "multicast": None, "send_queue": None})
            row.update(_mpi_row(options, size, interval_ms, duration_s, plan.count))
    except MccError as exc:
        row["error"] = str(exc).splitlines()[0][:300]
    return row


def _peer_pingpong(
    peer: str,
    options: PerfOptions,
    nodes: Sequence[Node],
    size: int,
    interval_ms: float,
    duration_s: float,
    domain: int,
    count: int,
) -> PingPong:
    """mcc (this process) pinging a foreign echo: loopback unicast without a discovery tag
    (other vendors never see Cyclone's), XCDR1 as the profile says, QoS from the same
    profiles (the Fast DDS echo loads `mcc qos export --vendor fastdds`)."""
    import tempfile

    from mcc.bus.qos import default_library, export_profiles

    if any(node.netns is not None for node in nodes):
        raise MccError(f"--peer {peer}: host network only (the peer knows no namespaces)")
    if options.keyed or (peer == "cyclone-c" and not options.reliable):
        raise MccError(f"--peer {peer}: reliable, keyless PerfSample only")
    if options.security:
        raise MccError(f"--peer {peer}: not over DDS Security (docs/interop.md)")
    path, role = PEERS[peer]
    exe = Path(os.environ.get("MCC_INTEROP_BUILD", "build")) / path
    if not os.access(exe, os.X_OK):
        raise MccError(f"--peer {peer}: {exe} not built; run `make interop` in the repository")
    transport = Transport.loopback(None)
    env = transport.apply_to_env({k: v for k, v in os.environ.items() if k != "MCC_DISCOVERY_TAG"})
    with tempfile.TemporaryDirectory(prefix="mcc-peer-") as tmp:
        qos = Path(tmp) / "fastdds.xml"
        qos.write_text(export_profiles(default_library(), "fastdds"))
        env.update(MCC_DOMAIN=str(domain), MCC_FASTDDS_PEERS="127.0.0.1", MCC_FASTDDS_QOS=str(qos))
        argv = [str(exe), role]
        if peer == "fastdds":
            argv += ["--profile", _profile(options.reliable)]
        echo = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        spec = _PingSpec(
            domain_id=domain,
            size_bytes=size,
            duration_s=duration_s,
            reliable=options.reliable,
            keyed=False,
            warmup=200,
            max_samples=count,
            mode="listener",
            interval_ms=interval_ms,
        )
        saved = os.environ.pop("MCC_DISCOVERY_TAG", None)  # _ping's bus would take it
        try:
            perftest.claim_in_process(domain)
            return _ping(spec, transport, perftest.perf_qos_file(options.send_queue))
        except MccError as exc:
            echo.kill()
            said = echo.communicate(timeout=10)[0][-2000:]
            raise MccError(f"{exc}\n--- the {peer} echo said:\n{said}") from None
        finally:
            if saved is not None:
                os.environ["MCC_DISCOVERY_TAG"] = saved
            try:
                echo.communicate(timeout=10)  # it ends on the seq-0 sample
            except subprocess.TimeoutExpired:
                echo.kill()
                echo.communicate()


def _ddsperf_row(
    options: PerfOptions,
    nodes: Sequence[Node],
    size: int,
    interval_ms: float,
    duration_s: float,
    domain: int,
    own_build: bool = False,
) -> dict[str, Any]:
    from mcc.bench.anchors import DDSPERF_MIN_SIZE_BYTES, run_ddsperf_pingpong
    from mcc.bus import _native

    sent = max(size, DDSPERF_MIN_SIZE_BYTES)
    ping_config: str | None
    pong_config: str | None
    if options.security:
        tag = perftest.run_tag("anchor")
        ping_t, pong_t = perftest.pair_transports(options, nodes, tag=tag)
        ping_config, pong_config = ping_t.to_xml(), pong_t.to_xml()
    else:
        ping_config, pong_config = perftest.anchor_configs(options, nodes)
    own = Path(_native.LIBRARY).resolve().parent.parent / "bin" / "ddsperf"
    stats = run_ddsperf_pingpong(
        size_bytes=sent,
        duration_s=duration_s,
        domain_id=domain,
        reliable=options.reliable,
        rate_hz=1000.0 / interval_ms if interval_ms else 0.0,
        ping_config=ping_config,
        pong_config=pong_config,
        ping_prefix=nodes[0].argv([]),
        pong_prefix=nodes[-1].argv([]),
        executable=str(own) if own_build else None,
    )
    unicast: dict[str, Any] = {"multicast": False} if ping_config is None else {}
    # ddsperf counts a "ping timed out" when a pong is not back by the next ping: at a rate
    # that is a late pong (it still comes), and reliable pongs are never lost. Only best
    # effort flat out (1 s without a pong) is a loss.
    lost = stats.lost if not options.reliable and not interval_ms else None
    return {
        **stats.as_row(),
        "lost": lost,
        "ping_timeouts": stats.lost,
        **unicast,
        **({"sent_size_bytes": sent} if sent != size else {}),
    }


def _sockperf_row(
    options: PerfOptions,
    nodes: Sequence[Node],
    size: int,
    interval_ms: float,
    duration_s: float,
) -> dict[str, Any]:
    from mcc.bench.anchors import (
        SOCKPERF_MAX_SIZE_BYTES,
        SOCKPERF_MIN_SIZE_BYTES,
        run_sockperf_pingpong,
    )

    sent = min(max(size, SOCKPERF_MIN_SIZE_BYTES), SOCKPERF_MAX_SIZE_BYTES)
    tcp = options.transport == "tcp"
    server = nodes[-1]
    port = perftest.free_port(socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM)
    stats = run_sockperf_pingpong(
        size_bytes=sent,
        duration_s=duration_s,
        port=port,
        address=server.address,
        tcp=tcp,
        mps=round(1000.0 / interval_ms) if interval_ms else None,
        server_prefix=server.argv([]),
        client_prefix=nodes[0].argv([]),
    )
    return {**stats.as_row(), **({"sent_size_bytes": sent} if sent != size else {})}


def _mpi_meaningful(options: PerfOptions, interval_ms: float) -> bool:
    """MPICH moves bytes through shared memory between ranks on one host: it has no DDS
    transport, network namespace or send interval, so it anchors host, UDP, flat-out rows."""
    return options.net == "host" and options.transport == "udp" and not interval_ms


def _mpi_row(
    options: PerfOptions, size: int, interval_ms: float, duration_s: float, count: int
) -> dict[str, Any]:
    from mcc.bench.anchors import run_mpi_pingpong

    if not _mpi_meaningful(options, interval_ms):
        raise MccError("the MPI anchor runs on the host network, UDP, flat out only")
    stats = run_mpi_pingpong(size_bytes=size, duration_s=duration_s, max_samples=count)
    return stats.as_row()


def _add_ratios(group: list[dict[str, Any]]) -> None:
    def measured(impl: str) -> dict[str, Any] | None:
        return next((r for r in group if r["impl"] == impl and r.get("p50_us")), None)

    # The secured rows against their unsecured selves: the cost of security.
    for secure, plain in (("mcc-secure", "mcc"), ("ddsperf-secure", "ddsperf-11")):
        a, b = measured(secure), measured(plain)
        if a is not None and b is not None:
            a["ratio_p50_vs_unsecured"] = round(a["p50_us"] / b["p50_us"], 2)
            a["ratio_p99_vs_unsecured"] = round(a["p99_us"] / b["p99_us"], 2)
    anchor = measured("ddsperf")
    if anchor is None:
        return
    for row in group:
        if row.get("p50_us"):
            row["ratio_p50_vs_ddsperf"] = round(row["p50_us"] / anchor["p50_us"], 2)
            row["ratio_p99_vs_ddsperf"] = round(row["p99_us"] / anchor["p99_us"], 2)


# -- targets and the command --------------------------------------------------------------------

P50_TARGET = 1.5
P99_TARGET = 1.5
TARGET_SIZE_BYTES = 64
TARGET_INTERVALS_MS = (0.0, 1.0)  # flat out and one ping a millisecond


def targets(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The latency targets, met or missed, from the 64 B rows of this run (flat out and at
    a 1 ms interval)."""
    from mcc.bench.runner import target_row

    out = []
    for interval in TARGET_INTERVALS_MS:
        mcc = _find(rows, "mcc", TARGET_SIZE_BYTES, interval)
        when = "flat out" if not interval else f"every {interval:g} ms"
        for pct, target in (("p50", P50_TARGET), ("p99", P99_TARGET)):
            out.append(
                target_row(
                    f"latency {pct} at {TARGET_SIZE_BYTES} B {when} ≤ {target:g}× ddsperf's",
                    mcc.get(f"ratio_{pct}_vs_ddsperf") if mcc else None,
                    target,
                    unit="×",
                )
            )
    reliable = [r for r in rows if r["impl"] == "mcc" and r.get("reliable") and r.get("count")]
    if reliable:
        lost = sum(r["lost"] for r in reliable)
        out.append(
            target_row(
                "zero lost samples when reliable (all mcc latency rows)", lost, 0, unit=" lost"
            )
        )
    return out


def _find(rows: Sequence[dict[str, Any]], impl: str, size: int, interval: float) -> Any:
    return next(
        (
            r
            for r in rows
            if r["impl"] == impl and r["size_bytes"] == size and r["interval_ms"] == interval
        ),
        None,
    )


def notes(rows: Sequence[dict[str, Any]], options: PerfOptions) -> str:
    return (
        "One-way latency = RTT/2 (µs). interval_ms 0 = next ping right after the echo. "
        "mcc: PerfSample"
        + (" (keyed: PerfKeyedSample)" if options.keyed else "")
        + f" on profile {options.profile} (send queue {options.send_queue}), echo in a "
        "listener; ddsperf: KS topic (keyed, one instance; sizes below 12 B sent as 12 B), "
        "percentiles per second combined count-weighted; sockperf: "
        f"{options.transport.upper()} ping-pong (sizes below 14 B sent as 14 B); mpi: mpi4py "
        "Send/Recv between two ranks (MPICH, shared memory). count may stop short of --count "
        "when a row reaches --duration. ratio_* = this row's percentile / ddsperf's, same "
        "size and interval. lost: pings without an echo after 2 s (reliable; a later echo "
        "is waited for and counted) or 100 ms (best effort); ping_timeouts: ddsperf's count of "
        "pongs not back when the next ping was due (at a rate, late pongs; not losses)."
    )


def add_parser(bench_subparsers: Any) -> argparse.ArgumentParser:
    """Register ``latency`` on the ``mcc bench`` sub-command parsers."""
    p: argparse.ArgumentParser = bench_subparsers.add_parser(
        "latency",
        help="one-way latency (RTT/2): mcc vs ddsperf vs sockperf vs MPI",
        description="Ping-pong between two processes over mcc.bus, Cyclone's ddsperf, "
        "sockperf and MPI, in the same run: per size and send interval, percentiles from an "
        "HDR histogram and the ratio to ddsperf.",
    )
    p.add_argument(
        "--sizes",
        help="payload sizes in bytes, comma-separated (default "
        f"{','.join(map(str, DEFAULT_SIZES))}; quick {','.join(map(str, QUICK_SIZES))})",
    )
    p.add_argument(
        "--intervals",
        help="send intervals in ms, 0 = as fast as possible (default 0,1,0.1; quick 0,1)",
    )
    p.add_argument(
        "--count",
        type=int,
        help=f"round trips per row (default {DEFAULT_COUNT}, quick {QUICK_COUNT})",
    )
    p.add_argument(
        "--duration",
        type=float,
        help=f"at most this many seconds per row (default {DEFAULT_MAX_DURATION_S:g}, quick "
        f"{QUICK_MAX_DURATION_S:g}); anchors run this long",
    )
    p.add_argument(
        "--impl",
        default=",".join(DEFAULT_IMPLS),
        help=f"implementations (default %(default)s; also mcc-waitset); choose from "
        f"{','.join(IMPLS)}",
    )
    p.add_argument(
        "--security",
        action="store_true",
        help="add rows over DDS Security (signed and encrypted): mcc-secure beside mcc, "
        "and ddsperf-secure beside ddsperf-11 (MCC's own Cyclone build), same governance",
    )
    p.add_argument(
        "--peer",
        action="append",
        choices=sorted(PEERS),
        default=[],
        help="add a row of mcc pinging a foreign echo: the Fast DDS or Cyclone C peer of "
        "`make interop` (host network, loopback; docs/interop.md)",
    )
    perftest.add_common_options(p)
    p.set_defaults(func=cmd_latency)
    return p


def plan_from_args(args: argparse.Namespace) -> LatencyPlan:
    from mcc.bench.runner import parse_floats, parse_ints

    return LatencyPlan(
        sizes=parse_ints("--sizes", args.sizes) or (QUICK_SIZES if args.quick else DEFAULT_SIZES),
        intervals_ms=parse_floats("--intervals", args.intervals)
        or (QUICK_INTERVALS_MS if args.quick else DEFAULT_INTERVALS_MS),
        impls=tuple(i.strip() for i in args.impl.split(",") if i.strip())
        + (SECURITY_IMPLS if args.security else ())
        + tuple(getattr(args, "peer", None) or ()),
        count=args.count or (QUICK_COUNT if args.quick else DEFAULT_COUNT),
        max_duration_s=args.duration
        or (QUICK_MAX_DURATION_S if args.quick else DEFAULT_MAX_DURATION_S),
        options=perftest.options_from_args(args),
    )


def cmd_latency(args: argparse.Namespace) -> int:
    run_mode(args, perftest.options_from_args(args))
    return 0


def run_mode(args: argparse.Namespace, options: PerfOptions) -> dict[str, Any]:
    """Run the latency bench as ``args`` ask, report it; the JSON document."""
    from mcc.bench import runner

    plan = dataclasses.replace(plan_from_args(args), options=options)
    return runner.run_perf_mode(
        "latency",
        args,
        plan,
        lambda p, step: run_latency(p, progress=step),
        rows=plan.rows,
        key=("impl", "size_bytes", "interval_ms"),
        metric="p50_us",
        higher_is_better=False,
        columns=COLUMNS,
        title=lambda nets: f"one-way latency (RTT/2), {nets} network, {options.transport}, µs",
        notes=lambda rows: notes(rows, options),
        targets=targets,
    )


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m mcc.bench.latency")
    parser.add_argument("role", choices=["pong", "ping"])
    parser.add_argument("--domain", type=int)
    parser.add_argument("--tag")
    parser.add_argument("--best-effort", action="store_true")
    parser.add_argument("--keyed", action="store_true")
    parser.add_argument("--mode", choices=["listener", "waitset"], default="listener")
    parser.add_argument("--spec", help="ping: JSON of the run")
    args = parser.parse_args()
    if args.role == "ping":
        spec = _PingSpec(**json.loads(args.spec))
        try:
            result = _ping(spec, None, os.environ.get("MCC_QOS_FILE"))
        except MccError as exc:
            print(f"mcc.bench.latency ping: {exc}", file=sys.stderr, flush=True)
            return 2
        out = {"hist": result.recorder.encode(), "lost": result.lost}
        print(perftest.RESULT_PREFIX + json.dumps(out), flush=True)
        return 0
    if args.domain is None:
        parser.error("pong needs --domain")
    return run_pong(
        args.domain,
        reliable=not args.best_effort,
        tag=args.tag,
        mode=args.mode,
        keyed=args.keyed,
    )


if __name__ == "__main__":
    sys.exit(main())
