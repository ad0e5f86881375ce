"""Anchor latency measurements, run in the same `mcc bench latency` invocation as MCC.

Two anchors bracket MCC: `ddsperf` (Cyclone DDS ping-pong, the DDS we build on) and `sockperf`
(bare UDP ping-pong, the floor for any middleware). Each runs as two processes on loopback and is
summarised as a `LatencyStats` in microseconds of **one-way** latency, i.e. half the round trip,
which is what both tools print by default:

- ddsperf: `process_pong` records `(tnow - source_timestamp) / 2` in ns and prints it /1e3 as µs.
- sockperf: `client_statistics` stores `rtt / 2`; its `--full-rtt` switches to whole round trips
  (labelled `avg-rtt`), which we never pass and the parser refuses.

Both tools are driven with a time budget; `duration_s` is the measured window after each tool's
own warm-up, rounded up to whole seconds.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from xml.sax.saxutils import quoteattr

from mcc.bench.anchor_tools import (
    Background,
    background,
    describe,
    positive_duration,
    run_tool,
    tail,
    tool_path,
    whole_seconds,
)
from mcc.bench.stats import LatencyRecorder, LatencyStats
from mcc.errors import MccError
from mcc.settings import child_env

__all__ = [
    "DDSPERF_MIN_SIZE_BYTES",
    "Background",
    "DdsperfThroughput",
    "background",
    "parse_ddsperf_sub",
    "run_ddsperf_throughput",
    "run_mpi_pingpong",
    "SOCKPERF_MAX_SIZE_BYTES",
    "SOCKPERF_MIN_SIZE_BYTES",
    "parse_ddsperf_ping",
    "parse_sockperf_pingpong",
    "run_ddsperf_pingpong",
    "run_sockperf_pingpong",
    "tool_path",
]

DDSPERF_MIN_SIZE_BYTES = 12
"""ddsperf's KS topic has a 12-byte fixed part (seq, key, sequence length); `size` includes it."""
SOCKPERF_MIN_SIZE_BYTES = 14
"""sockperf's own message header; smaller `-m` is refused (and sockperf still exits 0)."""
SOCKPERF_MAX_SIZE_BYTES = 65507
"""Largest UDP payload over IPv4."""
MAX_DOMAIN_ID = 232
"""Highest DDS domain id whose RTPS port numbers still fit in 16 bits."""

_DISCOVERY_TIMEOUT_S = 10
_SLACK_S = 15
# sockperf drops the first 400 ms and the last 50 ms of its run from the statistics.
_SOCKPERF_WARMUP_S = 0.45
_LOCALHOST = "127.0.0.1"


# --------------------------------------------------------------------------------------------
# ddsperf


def run_ddsperf_pingpong(
    *,
    size_bytes: int,
    duration_s: float,
    domain_id: int,
    reliable: bool = True,
    interface: str | None = None,
    rate_hz: float = 0.0,
    ping_config: str | None = None,
    pong_config: str | None = None,
    executable: str | None = None,
    ping_prefix: Sequence[str] = (),
    pong_prefix: Sequence[str] = (),
) -> LatencyStats:
    """Cyclone DDS ping-pong latency between two `ddsperf` processes (one-way, µs).

    `size_bytes` is the serialized sample size including ddsperf's 12-byte fixed part.
    `reliable=False` runs both sides best-effort (`-u`). With `interface=None` (or "lo") the
    processes are confined to loopback with multicast off and unicast discovery via 127.0.0.1;
    another interface name uses that interface with Cyclone's default multicast discovery.
    Either way a per-run discovery tag keeps other DDS participants in `domain_id` out.
    `ping_config`/`pong_config` replace that configuration (a `CYCLONEDDS_URI` value each,
    e.g. `Transport.to_xml()` for TCP or a lab interface) and `ping_prefix`/`pong_prefix` run
    a side elsewhere (e.g. `ip netns exec NS`). `rate_hz` > 0 pings at that rate (`ping
    1000Hz`) instead of right after each pong.

    `executable` replaces the `ddsperf` found on PATH (e.g. the one of MCC's Cyclone build).

    The ping side waits (at most 10 s) for the pong side to match, starts pinging one second
    later and prints one summary per second; see `parse_ddsperf_ping` for how they are combined.
    """
    _check_ddsperf(size_bytes, domain_id)
    if not (rate_hz >= 0 and math.isfinite(rate_hz)):
        raise MccError(f"ping rate {rate_hz} Hz: use 0 (after each pong) or a positive rate")
    intervals = whole_seconds(positive_duration(duration_s))
    # Pinging starts 1 s after the ping process's clock starts, so one extra second yields
    # `intervals` full one-second summaries.
    with _ddsperf_pair(
        ("ping", "pong"),
        exe=executable or tool_path("ddsperf"),
        domain_id=domain_id,
        reliable=reliable,
        run_s=intervals + 1,
        rate_hz=rate_hz,
        size_bytes=size_bytes,
        configs=(ping_config, pong_config),
        prefixes=(ping_prefix, pong_prefix),
        interface=interface,
    ) as (output, _pong):
        pass
    return parse_ddsperf_ping(output)


@contextmanager
def _ddsperf_pair(
    roles: tuple[str, str],
    *,
    exe: str,
    domain_id: int,
    reliable: bool,
    run_s: int,
    rate_hz: float,
    size_bytes: int,
    configs: tuple[str | None, str | None],
    prefixes: tuple[Sequence[str], Sequence[str]],
    interface: str | None,
) -> Iterator[tuple[str, Background]]:
    """``ddsperf ACTIVE [RATE] size S`` for ``run_s`` seconds once matched, against ``ddsperf
    PASSIVE`` in the background (``roles``: ping/pong or pub/sub); yields the active side's
    output and the passive process, still running. Without a configuration, a side gets
    `_cyclone_config` with a per-run discovery tag."""
    active, passive = roles
    tag = f"mcc-bench-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    default = _cyclone_config(interface=interface, tag=tag)
    active_env, passive_env = ({**child_env(), "CYCLONEDDS_URI": c or default} for c in configs)
    common = [exe, "-i", str(domain_id), *([] if reliable else ["-u"])]
    rate = [f"{rate_hz:g}Hz"] if rate_hz > 0 else []
    active_argv = [*prefixes[0], *common, "-Qminmatch:1", f"-Qinitwait:{_DISCOVERY_TIMEOUT_S}"]
    active_argv += ["-D", str(run_s), active, *rate, "size", str(size_bytes)]
    # -D bounds the passive side even if we are killed before we can stop it.
    limit_s = run_s + _DISCOVERY_TIMEOUT_S + 2 * _SLACK_S
    passive_argv = [*prefixes[1], *common, "-D", str(limit_s), passive]
    with background(passive_argv, env=passive_env) as other:
        timeout_s = run_s + _DISCOVERY_TIMEOUT_S + _SLACK_S
        rc, output = run_tool(active_argv, env=active_env, timeout_s=timeout_s)
        if rc != 0:
            raise MccError(
                f"ddsperf {active} exited with status {rc} ({describe(active_argv)}):\n"
                f"{tail(output)}\n--- ddsperf {passive} said:\n{tail(other.output())}"
            )
        yield output, other


def _check_ddsperf(size_bytes: int, domain_id: int) -> None:
    if size_bytes < DDSPERF_MIN_SIZE_BYTES:
        raise MccError(
            f"ddsperf cannot send {size_bytes}-byte samples; its KS topic needs at least "
            f"{DDSPERF_MIN_SIZE_BYTES} bytes (size includes the fixed part)"
        )
    if not 0 <= domain_id <= MAX_DOMAIN_ID:
        raise MccError(f"DDS domain id {domain_id} is out of range; use 0 .. {MAX_DOMAIN_ID}")


@dataclass(frozen=True)
class DdsperfThroughput:
    """What `ddsperf sub` counted: steady samples/s and MB/s, total received and lost."""

    samples_per_s: float
    mb_per_s: float
    received: int
    lost: int


def run_ddsperf_throughput(
    *,
    size_bytes: int,
    duration_s: float,
    domain_id: int,
    reliable: bool = True,
    rate_hz: float = 0.0,
    pub_config: str | None = None,
    sub_config: str | None = None,
    pub_prefix: Sequence[str] = (),
    sub_prefix: Sequence[str] = (),
    executable: str | None = None,
) -> DdsperfThroughput:
    """`ddsperf pub [RATE] size S` → `ddsperf sub`: the subscriber's steady throughput.

    ddsperf's data writer always batches writes (`dds_qset_writer_batching`) and keeps all
    samples (resource limit 10000); `rate_hz` 0 publishes flat out. Configuration and
    prefixes and ``executable`` as for `run_ddsperf_pingpong`.
    """
    _check_ddsperf(size_bytes, domain_id)
    seconds = whole_seconds(positive_duration(duration_s))
    # the first second after matching is ramp-up, the last a partial one: two more seconds
    with _ddsperf_pair(
        ("pub", "sub"),
        exe=executable or tool_path("ddsperf"),
        domain_id=domain_id,
        reliable=reliable,
        run_s=seconds + 2,
        rate_hz=rate_hz,
        size_bytes=size_bytes,
        configs=(pub_config, sub_config),
        prefixes=(pub_prefix, sub_prefix),
        interface=None,
    ) as (_output, sub):
        sub.stop()
        return parse_ddsperf_sub(sub.output(), size_bytes=size_bytes)


_DDSPERF_SUB_LINE = re.compile(
    r"^\[\d+\]\s+(?P<t>[\d.]+)\s+size (?P<size>\d+) total (?P<total>\d+) lost (?P<lost>\d+)"
    r" delta (?P<delta>\d+) lost \d+ rate (?P<rate>[\d.]+) kS/s",
    re.MULTILINE,
)


def parse_ddsperf_sub(text: str, *, size_bytes: int) -> DdsperfThroughput:
    """Steady throughput from `ddsperf sub`'s per-second lines.

    Each line reports the samples of the second before it (`delta`, `rate … kS/s`) and running
    totals (`total`, `lost`). The steady rate is the mean of the lines that saw data, less the
    first (matching, ramp-up) and the last (a partial second) when there are three or more.
    """
    lines = [m for m in _DDSPERF_SUB_LINE.finditer(text) if int(m["delta"]) > 0]
    if not lines:
        raise MccError(f"ddsperf sub received nothing:\n{tail(text)}")
    steady = lines[1:-1] if len(lines) >= 3 else lines
    rate = sum(float(m["rate"]) * 1e3 for m in steady) / len(steady)
    return DdsperfThroughput(
        samples_per_s=round(rate, 1),
        mb_per_s=round(rate * size_bytes / 1e6, 3),
        received=max(int(m["total"]) for m in lines),
        lost=max(int(m["lost"]) for m in lines),
    )


_DDSPERF_LINE = re.compile(
    r"^\[\d+\]\s+[\d.]+\s+(?P<peer>\S+) size \d+"
    r" mean (?P<mean>[\d.]+)us min (?P<min>[\d.]+)us 50% (?P<p50>[\d.]+)us"
    r" 90% (?P<p90>[\d.]+)us 99% (?P<p99>[\d.]+)us max (?P<max>[\d.]+)us cnt (?P<cnt>\d+)\s*$",
    re.MULTILINE,
)
_DDSPERF_TIMEOUTS = re.compile(r"ping timed out \(total (\d+) times\)")


def parse_ddsperf_ping(text: str) -> LatencyStats:
    """Combine the per-second latency lines of `ddsperf ping` output into one `LatencyStats`.

    Each line (`[pid] T  host:pid size S mean M us min … 50% … 90% … 99% … max … cnt N`)
    covers only the second before it: ddsperf resets its statistics at every print and prints
    no cumulative or final line (the last partial second is never reported). Within a line the
    percentiles come from at most the first 20000 round trips of that second, while mean, min,
    max and cnt cover all of them. So: count, mean, min and max are exact over the run; p50,
    p90 and p99 are the count-weighted means of the per-second percentiles (an approximation
    that is close when the seconds are alike). ddsperf reports no p99.9 or deviation, so those
    are None. `lost` is the number of ping timeouts ddsperf reported.
    """
    intervals = [m for m in _DDSPERF_LINE.finditer(text) if int(m["cnt"]) > 0]
    if not intervals:
        raise MccError(f"ddsperf ping reported no round trips:\n{tail(text)}")
    peers = sorted({m["peer"] for m in intervals})
    if len(peers) > 1:
        raise MccError(
            f"ddsperf ping heard {len(peers)} pong peers ({', '.join(peers)}), expected one; "
            "another ddsperf shares the domain and discovery tag"
        )
    count = sum(int(m["cnt"]) for m in intervals)

    def weighted(field: str) -> float:
        # ddsperf prints whole nanoseconds; more digits would be noise.
        return round(sum(float(m[field]) * int(m["cnt"]) for m in intervals) / count, 3)

    timeouts = [int(n) for n in _DDSPERF_TIMEOUTS.findall(text)]
    return LatencyStats(
        count=count,
        lost=max(timeouts, default=0),
        mean_us=weighted("mean"),
        stdev_us=None,
        stderr_us=None,
        min_us=min(float(m["min"]) for m in intervals),
        p50_us=weighted("p50"),
        p90_us=weighted("p90"),
        p99_us=weighted("p99"),
        p999_us=None,
        max_us=max(float(m["max"]) for m in intervals),
    )


def _cyclone_config(*, interface: str | None, tag: str) -> str:
    """Inline Cyclone DDS configuration for `CYCLONEDDS_URI`."""
    discovery_tag = f"<Tag>{tag}</Tag>"
    if interface in (None, "lo"):
        # Multicast is not dependable on lo, so discover by unicast to 127.0.0.1; `auto`
        # participant indices give each process its own port that the peer list probes.
        return (
            '<CycloneDDS><Domain id="any"><General><Interfaces><NetworkInterface name="lo"/>'
            "</Interfaces><AllowMulticast>false</AllowMulticast></General><Discovery>"
            '<Peers><Peer address="127.0.0.1"/></Peers><ParticipantIndex>auto</ParticipantIndex>'
            f"{discovery_tag}</Discovery></Domain></CycloneDDS>"
        )
    return (
        '<CycloneDDS><Domain id="any"><General><Interfaces>'
        f"<NetworkInterface name={quoteattr(interface)}/></Interfaces></General>"
        f"<Discovery>{discovery_tag}</Discovery></Domain></CycloneDDS>"
    )


# --------------------------------------------------------------------------------------------
# sockperf


def run_sockperf_pingpong(
    *,
    size_bytes: int,
    duration_s: float,
    port: int,
    address: str = _LOCALHOST,
    tcp: bool = False,
    mps: int | None = None,
    server_prefix: Sequence[str] = (),
    client_prefix: Sequence[str] = (),
) -> LatencyStats:
    """UDP (or TCP) ping-pong latency between `sockperf server` and `sockperf ping-pong`.

    Both ends use `address`:`port` (127.0.0.1 by default). `size_bytes` must be 14 .. 65507
    (sockperf's header is 14 bytes). sockperf runs whole seconds and discards its first 400 ms
    and last 50 ms, so it is run for `ceil(duration_s + 0.45)` s. `mps` limits the messages
    per second (default: as fast as the replies come). The server counts as ready once it has
    bound the port (seen in its /proc/PID/net/udp or tcp; datagrams sent after that are
    queued), so this needs Linux. `server_prefix`/`client_prefix` run a side elsewhere (e.g.
    `ip netns exec NS`).
    """
    if not SOCKPERF_MIN_SIZE_BYTES <= size_bytes <= SOCKPERF_MAX_SIZE_BYTES:
        raise MccError(
            f"sockperf cannot send {size_bytes}-byte messages; use "
            f"{SOCKPERF_MIN_SIZE_BYTES} .. {SOCKPERF_MAX_SIZE_BYTES} bytes"
        )
    proto_name = "TCP" if tcp else "UDP"
    if not 1 <= port <= 65535:
        raise MccError(f"{proto_name} port {port} is out of range; use 1 .. 65535")
    if mps is not None and mps < 1:
        raise MccError(f"sockperf rate {mps} messages/s: use 1 or more (or None: flat out)")
    seconds = whole_seconds(positive_duration(duration_s) + _SOCKPERF_WARMUP_S)
    exe = tool_path("sockperf")
    proto = ["--tcp"] if tcp else []
    if not server_prefix and _port_bound(port, tcp=tcp):
        raise MccError(
            f"{proto_name} port {port} on {address} is already in use; pick another port"
        )
    server_argv = [*server_prefix, exe, "server", "-i", address, "-p", str(port), *proto]
    client_argv = [*client_prefix, exe, "ping-pong", "-i", address, "-p", str(port), *proto]
    client_argv += ["-m", str(size_bytes), "-t", str(seconds)]
    client_argv += ["--mps", str(mps)] if mps else []
    with background(server_argv) as server:
        server.wait_until(
            lambda: _port_bound(port, tcp=tcp, pid=server.proc.pid),
            what=f"bind {proto_name} port {port}",
        )
        rc, output = run_tool(client_argv, timeout_s=seconds + _SLACK_S)
        if rc != 0:
            raise MccError(
                f"sockperf ping-pong exited with status {rc} ({describe(client_argv)}):\n"
                f"{tail(output)}\n--- sockperf server said:\n{tail(server.output())}"
            )
    return parse_sockperf_pingpong(output)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SOCKPERF_OBSERVATIONS = re.compile(r"Total (\d+) observations")
_SOCKPERF_AVG = re.compile(r"avg-lat(?:ency)?=\s*([\d.]+) \(std-dev=([\d.]+)\)")
_SOCKPERF_DROPPED = re.compile(r"# dropped messages = (\d+)")
_SOCKPERF_MAX = re.compile(r"<MAX> observation =\s*([\d.]+)")
_SOCKPERF_MIN = re.compile(r"<MIN> observation =\s*([\d.]+)")
_SOCKPERF_PERCENTILE = re.compile(r"percentile\s+([\d.]+) =\s*([\d.]+)")


def parse_sockperf_pingpong(text: str) -> LatencyStats:
    """Read the summary that `sockperf ping-pong` prints at the end (one server, one-way µs).

    Uses `avg-latency=… (std-dev=…)`, `Total N observations`, `<MIN>`/`<MAX> observation`,
    the 50/90/99/99.9 `percentile` lines (nearest rank over all valid observations) and
    `# dropped messages` as `lost`. Colour escape codes are ignored.
    """
    text = _ANSI.sub("", text)
    if "avg-rtt=" in text:
        raise MccError("sockperf output is in round-trip time (--full-rtt); expected one-way")
    if "No messages were received" in text or "No valid observations" in text:
        raise MccError(f"sockperf measured nothing; is the server reachable?\n{tail(text)}")
    observations = _SOCKPERF_OBSERVATIONS.search(text)
    avg = _SOCKPERF_AVG.search(text)
    max_ = _SOCKPERF_MAX.search(text)
    min_ = _SOCKPERF_MIN.search(text)
    percentiles = {round(float(p), 3): float(v) for p, v in _SOCKPERF_PERCENTILE.findall(text)}
    if (
        observations is None
        or avg is None
        or max_ is None
        or min_ is None
        or not all(p in percentiles for p in (50.0, 90.0, 99.0))
    ):
        raise MccError(
            "sockperf output lacks its summary (observations, avg-latency, <MIN>, <MAX>, "
            f"percentiles 50/90/99):\n{tail(text)}"
        )
    count = int(observations[1])
    stdev_us = float(avg[2])
    dropped = _SOCKPERF_DROPPED.search(text)
    return LatencyStats(
        count=count,
        lost=int(dropped[1]) if dropped else 0,
        mean_us=float(avg[1]),
        stdev_us=stdev_us,
        stderr_us=stdev_us / math.sqrt(count),
        min_us=float(min_[1]),
        p50_us=percentiles[50.0],
        p90_us=percentiles[90.0],
        p99_us=percentiles[99.0],
        p999_us=percentiles.get(99.9),
        max_us=float(max_[1]),
    )


def _udp_port_bound(port: int) -> bool:
    """Whether an IPv4 UDP socket is bound to `port` on 127.0.0.1 or the wildcard address."""
    return _port_bound(port, tcp=False)


def _port_bound(port: int, *, tcp: bool, pid: int | None = None) -> bool:
    """Whether an IPv4 socket is bound to `port` (any local address) in the network namespace
    of process `pid` (ours by default): a TCP one listening, or a UDP one."""
    table = f"/proc/{pid or 'self'}/net/{'tcp' if tcp else 'udp'}"
    try:
        with open(table, encoding="ascii") as f:
            lines = f.readlines()[1:]
    except OSError as exc:
        if pid is not None:
            return False  # the process is gone; its exit is reported by the caller
        raise MccError(f"cannot read {table} ({exc}); the sockperf anchor needs Linux") from exc
    suffix = f":{port:04X}"
    for line in lines:
        fields = line.split()
        if len(fields) > 3 and fields[1].endswith(suffix) and (not tcp or fields[3] == "0A"):
            return True
    return False


# --------------------------------------------------------------------------------------------
# MPI (mpi4py over MPICH)


def mpiexec_path() -> str:
    """`mpiexec` of the environment running us (the mpich wheel puts it next to python)."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which("mpiexec")
    if found is None:
        raise MccError(
            "benchmark anchor tool 'mpiexec' was not found; install it with "
            "`pip install mpich mpi4py` (the extra `mcc[mpi]`)"
        )
    return found


def run_mpi_pingpong(
    *, size_bytes: int, duration_s: float, max_samples: int = 1_000_000, warmup: int = 200
) -> LatencyStats:
    """Ping-pong between two MPI ranks on this host (mpi4py `Send`/`Recv` of a byte buffer):
    one-way latency (RTT/2, µs) in the same HDR histogram as MCC's rows. MPICH moves the bytes
    through shared memory here, so this is the floor for message passing between processes on
    one host, below any network stack."""
    if size_bytes < 1:
        raise MccError(f"MPI ping-pong size {size_bytes}: use 1 byte or more")
    positive_duration(duration_s)
    argv = [mpiexec_path(), "-n", "2", sys.executable, "-m", "mcc.bench.anchors", "mpi-pingpong"]
    argv += ["--size", str(size_bytes), "--duration", str(duration_s)]
    argv += ["--max-samples", str(max_samples), "--warmup", str(warmup)]
    rc, output = run_tool(argv, timeout_s=duration_s + 60)
    for line in reversed(output.splitlines()):
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
            recorder = LatencyRecorder.decode(result["hist"])
            return recorder.stats(lost=0)
    raise MccError(
        f"MPI ping-pong exited {rc} without a result ({describe(argv)}):\n{tail(output)}"
    )


def _mpi_pingpong_rank(size_bytes: int, duration_s: float, max_samples: int, warmup: int) -> int:
    """Body of each rank: rank 0 pings and prints the result, rank 1 echoes."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    buf = bytearray(size_bytes)
    stop = bytearray(1)
    if rank == 1:
        status = MPI.Status()
        while True:
            comm.Recv([buf, MPI.BYTE], source=0, tag=MPI.ANY_TAG, status=status)
            if status.Get_tag() == 1:
                return 0
            comm.Send([buf, MPI.BYTE], dest=0, tag=0)
    rtts: list[int] = []
    clock = time.perf_counter_ns
    end = time.monotonic() + duration_s
    n = 0
    while n < max_samples + warmup and time.monotonic() < end:
        t0 = clock()
        comm.Send([buf, MPI.BYTE], dest=1, tag=0)
        comm.Recv([buf, MPI.BYTE], source=1, tag=0)
        if n >= warmup:
            rtts.append(clock() - t0)
        n += 1
    comm.Send([stop, MPI.BYTE], dest=1, tag=1)
    recorder = LatencyRecorder()
    recorder.record_many_ns([rtt // 2 for rtt in rtts])
    print("RESULT " + json.dumps({"hist": recorder.encode()}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m mcc.bench.anchors mpi-pingpong …`: one rank of the MPI anchor."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m mcc.bench.anchors")
    parser.add_argument("role", choices=["mpi-pingpong"])
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument("--max-samples", type=int, default=1_000_000)
    parser.add_argument("--warmup", type=int, default=200)
    args = parser.parse_args(argv)
    return _mpi_pingpong_rank(args.size, args.duration, args.max_samples, args.warmup)


if __name__ == "__main__":
    sys.exit(main())
