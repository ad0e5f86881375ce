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

import math
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO
from xml.sax.saxutils import quoteattr

from mcc.bench.stats import LatencyStats
from mcc.errors import MccError

__all__ = [
    "DDSPERF_MIN_SIZE_BYTES",
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

_INSTALL_HINTS = {
    "ddsperf": "apt-get install cyclonedds-tools",
    "sockperf": "apt-get install sockperf",
}
_DISCOVERY_TIMEOUT_S = 10
_READY_TIMEOUT_S = 10.0
_STOP_TIMEOUT_S = 5.0
_SLACK_S = 15
# sockperf drops the first 400 ms and the last 50 ms of its run from the statistics.
_SOCKPERF_WARMUP_S = 0.45
_LOCALHOST = "127.0.0.1"


def tool_path(name: str) -> str:
    """The absolute path of anchor tool `name`, or `MccError` saying how to install it."""
    path = shutil.which(name)
    if path is None:
        hint = _INSTALL_HINTS.get(name)
        how = f"install it with `{hint}`" if hint else "install it and put it on PATH"
        raise MccError(f"benchmark anchor tool {name!r} was not found on PATH; {how}")
    return path


# --------------------------------------------------------------------------------------------
# ddsperf


def run_ddsperf_pingpong(
    *,
    size_bytes: int,
    duration_s: float,
    domain_id: int,
    reliable: bool = True,
    interface: str | None = None,
) -> LatencyStats:
    """Cyclone DDS ping-pong latency between two `ddsperf` processes (one-way, µs).

    `size_bytes` is the serialized sample size including ddsperf's 12-byte fixed part.
    `reliable=False` runs both sides best-effort (`-u`). With `interface=None` (or "lo") the
    processes are confined to loopback with multicast off and unicast discovery via 127.0.0.1;
    another interface name uses that interface with Cyclone's default multicast discovery.
    Either way a per-run discovery tag keeps other DDS participants in `domain_id` out.

    The ping side waits (at most 10 s) for the pong side to match, starts pinging one second
    later and prints one summary per second; see `parse_ddsperf_ping` for how they are combined.
    """
    if size_bytes < DDSPERF_MIN_SIZE_BYTES:
        raise MccError(
            f"ddsperf cannot send {size_bytes}-byte samples; its KS topic needs at least "
            f"{DDSPERF_MIN_SIZE_BYTES} bytes (size includes the fixed part)"
        )
    if not 0 <= domain_id <= MAX_DOMAIN_ID:
        raise MccError(f"DDS domain id {domain_id} is out of range; use 0 .. {MAX_DOMAIN_ID}")
    intervals = _whole_seconds(_positive_duration(duration_s))
    exe = tool_path("ddsperf")
    tag = f"mcc-bench-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "CYCLONEDDS_URI": _cyclone_config(interface=interface, tag=tag)}
    common = [exe, "-i", str(domain_id), *([] if reliable else ["-u"])]
    # Pinging starts 1 s after the ping process's clock starts, so one extra second yields
    # `intervals` full one-second summaries.
    ping_run_s = intervals + 1
    ping_argv = [
        *common,
        "-Qminmatch:1",
        f"-Qinitwait:{_DISCOVERY_TIMEOUT_S}",
        "-D",
        str(ping_run_s),
        "ping",
        "size",
        str(size_bytes),
    ]
    # -D bounds the pong even if we are killed before we can stop it.
    pong_argv = [*common, "-D", str(ping_run_s + _DISCOVERY_TIMEOUT_S + 2 * _SLACK_S), "pong"]
    with _background(pong_argv, env=env) as pong:
        rc, output = _run(
            ping_argv, env=env, timeout_s=ping_run_s + _DISCOVERY_TIMEOUT_S + _SLACK_S
        )
        if rc != 0:
            raise MccError(
                f"ddsperf ping exited with status {rc} ({_describe(ping_argv)}):\n{_tail(output)}"
                f"\n--- ddsperf pong said:\n{_tail(pong.output())}"
            )
    return parse_ddsperf_ping(output)


@dataclass(frozen=True)
class _DdsperfInterval:
    peer: str
    count: int
    mean_us: float
    min_us: float
    p50_us: float
    p90_us: float
    p99_us: float
    max_us: float


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
    intervals = [
        _DdsperfInterval(
            peer=m["peer"],
            count=int(m["cnt"]),
            mean_us=float(m["mean"]),
            min_us=float(m["min"]),
            p50_us=float(m["p50"]),
            p90_us=float(m["p90"]),
            p99_us=float(m["p99"]),
            max_us=float(m["max"]),
        )
        for m in _DDSPERF_LINE.finditer(text)
    ]
    intervals = [i for i in intervals if i.count > 0]
    if not intervals:
        raise MccError(f"ddsperf ping reported no round trips:\n{_tail(text)}")
    peers = sorted({i.peer for i in intervals})
    if len(peers) > 1:
        raise MccError(
            f"ddsperf ping heard {len(peers)} pong peers ({', '.join(peers)}), expected one; "
            "another ddsperf shares the domain and discovery tag"
        )
    count = sum(i.count for i in intervals)

    def weighted(field: str) -> float:
        # ddsperf prints whole nanoseconds; more digits would be noise.
        return round(sum(getattr(i, field) * i.count for i in intervals) / count, 3)

    timeouts = [int(n) for n in _DDSPERF_TIMEOUTS.findall(text)]
    return LatencyStats(
        count=count,
        lost=max(timeouts, default=0),
        mean_us=weighted("mean_us"),
        stdev_us=None,
        stderr_us=None,
        min_us=min(i.min_us for i in intervals),
        p50_us=weighted("p50_us"),
        p90_us=weighted("p90_us"),
        p99_us=weighted("p99_us"),
        p999_us=None,
        max_us=max(i.max_us for i in intervals),
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


def run_sockperf_pingpong(*, size_bytes: int, duration_s: float, port: int) -> LatencyStats:
    """UDP ping-pong latency between `sockperf server` and `sockperf ping-pong` (one-way, µs).

    Both ends use 127.0.0.1:`port`. `size_bytes` must be 14 .. 65507 (sockperf's header is 14
    bytes). sockperf runs whole seconds and discards its first 400 ms and last 50 ms, so it is
    run for `ceil(duration_s + 0.45)` s. The server counts as ready once it has bound the port
    (seen in /proc/net/udp; datagrams sent after that are queued), so this needs Linux.
    """
    if not SOCKPERF_MIN_SIZE_BYTES <= size_bytes <= SOCKPERF_MAX_SIZE_BYTES:
        raise MccError(
            f"sockperf cannot send {size_bytes}-byte messages; use "
            f"{SOCKPERF_MIN_SIZE_BYTES} .. {SOCKPERF_MAX_SIZE_BYTES} bytes"
        )
    if not 1 <= port <= 65535:
        raise MccError(f"UDP port {port} is out of range; use 1 .. 65535")
    seconds = _whole_seconds(_positive_duration(duration_s) + _SOCKPERF_WARMUP_S)
    exe = tool_path("sockperf")
    if _udp_port_bound(port):
        raise MccError(f"UDP port {port} on {_LOCALHOST} is already in use; pick another port")
    server_argv = [exe, "server", "-i", _LOCALHOST, "-p", str(port)]
    client_argv = [
        exe,
        "ping-pong",
        "-i",
        _LOCALHOST,
        "-p",
        str(port),
        "-m",
        str(size_bytes),
        "-t",
        str(seconds),
    ]
    with _background(server_argv) as server:
        server.wait_until(lambda: _udp_port_bound(port), what=f"bind UDP port {port}")
        rc, output = _run(client_argv, timeout_s=seconds + _SLACK_S)
        if rc != 0:
            raise MccError(
                f"sockperf ping-pong exited with status {rc} ({_describe(client_argv)}):\n"
                f"{_tail(output)}\n--- sockperf server said:\n{_tail(server.output())}"
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
        raise MccError(f"sockperf measured nothing; is the server reachable?\n{_tail(text)}")
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
            f"percentiles 50/90/99):\n{_tail(text)}"
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
    try:
        with open("/proc/net/udp", encoding="ascii") as f:
            lines = f.readlines()[1:]
    except OSError as exc:
        raise MccError(
            f"cannot read /proc/net/udp ({exc}); the sockperf anchor needs Linux"
        ) from exc
    wanted = {f"0100007F:{port:04X}", f"00000000:{port:04X}"}
    return any(line.split()[1] in wanted for line in lines if line.strip())


# --------------------------------------------------------------------------------------------
# processes


class _Background:
    """A started child process whose combined output goes to a temporary file."""

    def __init__(self, argv: list[str], proc: subprocess.Popen[bytes], log: IO[bytes]) -> None:
        self.argv = argv
        self.proc = proc
        self._log = log

    def output(self) -> str:
        """Everything the process has written so far."""
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def wait_until(self, ready: Callable[[], bool], *, what: str) -> None:
        """Poll `ready` until it holds; raise if the process exits or 10 s pass first."""
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while not ready():
            rc = self.proc.poll()
            if rc is not None:
                raise MccError(
                    f"{_describe(self.argv)} exited with status {rc} before it could {what}:\n"
                    f"{_tail(self.output())}"
                )
            if time.monotonic() > deadline:
                raise MccError(
                    f"{_describe(self.argv)} did not {what} within {_READY_TIMEOUT_S:g} s:\n"
                    f"{_tail(self.output())}"
                )
            time.sleep(0.01)

    def stop(self) -> None:
        """Terminate, then kill if it lingers; always reaps the process."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextmanager
def _background(argv: list[str], *, env: Mapping[str, str] | None = None) -> Iterator[_Background]:
    """Run `argv` for the duration of the block; it is stopped on exit, whatever happened."""
    with tempfile.TemporaryFile() as log:
        # Its own session: a Ctrl-C reaches only us, and we decide how the child ends.
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        child = _Background(argv, proc, log)
        try:
            yield child
        finally:
            child.stop()


def _run(
    argv: list[str], *, timeout_s: float, env: Mapping[str, str] | None = None
) -> tuple[int, str]:
    """Run `argv` to completion; returns (exit status, combined output). Killed on timeout."""
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            timeout=timeout_s,
            start_new_session=True,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.output.decode(errors="replace") if isinstance(exc.output, bytes) else ""
        raise MccError(
            f"{_describe(argv)} did not finish within {timeout_s:g} s:\n{_tail(out)}"
        ) from None
    return done.returncode, done.stdout.decode(errors="replace")


def _positive_duration(duration_s: float) -> float:
    if not (duration_s > 0 and math.isfinite(duration_s)):
        raise MccError(f"benchmark duration must be a positive number of seconds, not {duration_s}")
    return duration_s


def _whole_seconds(duration_s: float) -> int:
    return max(1, math.ceil(duration_s))


def _describe(argv: list[str]) -> str:
    return " ".join([os.path.basename(argv[0]), *argv[1:]])


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])
