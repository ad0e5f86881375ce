"""The ddsperf and sockperf anchors: parsers on captured output, and short live runs."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import NoReturn

import pytest

from mcc.bench import anchors
from mcc.bench.anchors import (
    parse_ddsperf_ping,
    parse_ddsperf_sub,
    parse_sockperf_pingpong,
    run_ddsperf_pingpong,
    run_ddsperf_throughput,
    run_mpi_pingpong,
    run_sockperf_pingpong,
    tool_path,
)
from mcc.bench.stats import LatencyStats
from mcc.errors import MccError
from tests.conftest import IN_CI, require_tool

# Captured on the development VM: `ddsperf -Qminmatch:1 -Qinitwait:10 -D 4 -i 93 ping size 64`
# against `ddsperf -i 93 pong` on loopback (cyclonedds-tools 0.10.2).
DDSPERF_PING_64 = """\
[7386] participant vm:7386: new (self)
[7386] participant vm:7385: new
[7386] 2.000  vm:7385 size 64 mean 20.312us min 13.881us 50% 19.432us 90% 23.272us \
99% 30.779us max 1587.110us cnt 24446
[7386] 2.000  rss:7.6MB vcsw:23690 ivcsw:841 recvUC:19%+31%
[7386] 3.000  vm:7385 size 64 mean 20.160us min 15.303us 50% 19.408us 90% 23.393us \
99% 29.712us max 1542.480us cnt 24653
[7386] 3.000  rss:7.9MB vcsw:24668 ivcsw:186 ddsperf:1%+0% recvUC:23%+30%
[7386] 4.000  vm:7385 size 64 mean 19.022us min 13.601us 50% 19.128us 90% 23.264us \
99% 29.990us max 1928.985us cnt 26105
[7386] 4.000  rss:7.9MB vcsw:17604 ivcsw:8520 recvUC:28%+23%
"""

# Captured on the development VM: `sockperf ping-pong -i 127.0.0.1 -p 23481 -m 64 -t 2`
# (sockperf 3.7), colour escapes included.
SOCKPERF_PINGPONG_64 = """\
sockperf: \x1b[2;35m== version #3.7-no.git == \x1b[0m
sockperf[CLIENT] send on:sockperf: using recvfrom() to block on socket(s)

[ 0] IP = 127.0.0.1       PORT = 23481 # UDP
sockperf: Warmup stage (sending a few dummy messages)...
sockperf: Starting test...
sockperf: Test end (interrupted by timer)
sockperf: Test ended
sockperf: [Total Run] RunTime=2.000 sec; Warm up time=400 msec; SentMessages=90122; \
ReceivedMessages=90121
sockperf: ========= Printing statistics for Server No: 0
sockperf: [Valid Duration] RunTime=1.549 sec; SentMessages=70237; ReceivedMessages=70237
sockperf: \x1b[2;35m====> avg-latency=10.983 (std-dev=7.563)\x1b[0m
sockperf: # dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0
sockperf: Summary: Latency is 10.983 usec
sockperf: \x1b[2;35mTotal 70237 observations\x1b[0m; each percentile contains 702.37 observations
sockperf: ---> <MAX> observation = 1728.373
sockperf: ---> percentile 99.999 =  587.414
sockperf: ---> percentile 99.990 =   80.090
sockperf: ---> percentile 99.900 =   24.491
sockperf: ---> percentile 99.000 =   17.359
sockperf: ---> percentile 90.000 =   12.498
sockperf: ---> percentile 75.000 =   11.533
sockperf: ---> percentile 50.000 =   10.577
sockperf: ---> percentile 25.000 =    9.881
sockperf: ---> <MIN> observation =    6.577
"""


# Captured on the development VM: `ddsperf -i 62 -D 7 sub` against `ddsperf -i 62
# -Qminmatch:1 -Qinitwait:5 -D 6 pub size 1k` on loopback (cyclonedds-tools 0.10.2).
DDSPERF_SUB_1K = """\
[29433] participant vm:29433: new (self)
[29433] participant vm:29434: new
[29433] 1.001  size 1024 total 184008 lost 0 delta 184008 lost 0 rate 183.91 kS/s \
1506.56 Mb/s (18.39 kS/s 150.66 Mb/s)
[29433] 1.001  rss:7.3MB vcsw:11565 ivcsw:929 ddsperf:1%+0% tev:1%+1% recvUC:45%+5%
[29433] 2.000  size 1024 total 406954 lost 0 delta 222946 lost 0 rate 222.99 kS/s \
1826.70 Mb/s (40.70 kS/s 333.44 Mb/s)
[29433] 3.002  size 1024 total 544358 lost 0 delta 137404 lost 0 rate 137.22 kS/s \
1124.12 Mb/s (54.36 kS/s 445.34 Mb/s)
[29433] 4.000  size 1024 total 729013 lost 2 delta 184655 lost 2 rate 184.96 kS/s \
1515.19 Mb/s (73.02 kS/s 598.19 Mb/s)
[29433] participant vm:29434: gone
[29433] 5.001  size 1024 total 760269 lost 2 delta 31256 lost 0 rate 31.24 kS/s \
255.90 Mb/s (106.51 kS/s 872.51 Mb/s)
[29433] 6.001  size 1024 total 760269 lost 2 delta 0 lost 0 rate 0.00 kS/s \
0.00 Mb/s (106.51 kS/s 872.51 Mb/s)
"""

# -- parsers ----------------------------------------------------------------------------------


def test_ddsperf_sub_steady_rate_leaves_out_ramp_up_and_the_last_second() -> None:
    t = parse_ddsperf_sub(DDSPERF_SUB_1K, size_bytes=1024)
    steady = [222.99e3, 137.22e3, 184.96e3]  # seconds 2-4; 1 is ramp-up, 5 partial, 6 idle
    assert t.samples_per_s == pytest.approx(sum(steady) / 3, abs=0.1)
    assert t.mb_per_s == pytest.approx(t.samples_per_s * 1024 / 1e6, abs=1e-3)
    assert (t.received, t.lost) == (760269, 2)


def test_ddsperf_sub_without_data_is_an_error() -> None:
    with pytest.raises(MccError, match="received nothing"):
        parse_ddsperf_sub("[1] participant vm:1: new (self)\n", size_bytes=64)


def test_ddsperf_intervals_are_combined_by_count() -> None:
    s = parse_ddsperf_ping(DDSPERF_PING_64)
    assert s.count == 24446 + 24653 + 26105 == 75204
    assert s.lost == 0
    # count-weighted: e.g. mean = (20.312 * 24446 + 20.160 * 24653 + 19.022 * 26105) / 75204
    assert (s.mean_us, s.p50_us, s.p99_us) == (19.814, 19.319, 30.155)
    assert 23.264 <= s.p90_us <= 23.393
    assert (s.min_us, s.max_us) == (13.601, 1928.985)
    assert (s.stdev_us, s.stderr_us, s.p999_us) == (None, None, None)


def test_ddsperf_ping_timeouts_count_as_lost() -> None:
    # The line format of ddsperf's maybe_send_new_ping; it repeats with a running total.
    text = (
        "[7386] ping timed out (total 1 times) ... sending new ping\n"
        + DDSPERF_PING_64
        + "[7386] ping timed out (total 3 times) ... sending new ping\n"
    )
    assert parse_ddsperf_ping(text).lost == 3


def test_ddsperf_without_round_trips_is_an_error() -> None:
    text = "[7505] participant vm:7505: new (self)\n[7505] 2.000  rss:7.6MB vcsw:1 ivcsw:2\n"
    with pytest.raises(MccError, match="no round trips"):
        parse_ddsperf_ping(text)


def test_ddsperf_with_two_pong_peers_is_an_error() -> None:
    other = DDSPERF_PING_64.replace("vm:7385 size", "vm:9999 size", 1)
    with pytest.raises(MccError, match="2 pong peers"):
        parse_ddsperf_ping(other)


def test_sockperf_summary_is_read() -> None:
    s = parse_sockperf_pingpong(SOCKPERF_PINGPONG_64)
    assert (s.count, s.lost) == (70237, 0)
    assert (s.mean_us, s.stdev_us) == (10.983, 7.563)
    assert s.stderr_us == pytest.approx(7.563 / 70237**0.5)
    assert (s.min_us, s.p50_us, s.p90_us, s.p99_us, s.p999_us, s.max_us) == (
        6.577,
        10.577,
        12.498,
        17.359,
        24.491,
        1728.373,
    )


def test_sockperf_dropped_messages_count_as_lost() -> None:
    text = SOCKPERF_PINGPONG_64.replace("# dropped messages = 0", "# dropped messages = 5")
    assert parse_sockperf_pingpong(text).lost == 5


def test_sockperf_round_trip_output_is_refused() -> None:
    text = SOCKPERF_PINGPONG_64.replace("avg-latency=", "avg-rtt=")
    with pytest.raises(MccError, match="round-trip"):
        parse_sockperf_pingpong(text)


def test_sockperf_without_server_is_an_error() -> None:
    text = "sockperf: No messages were received from the server. Is the server down?\n"
    with pytest.raises(MccError, match="measured nothing"):
        parse_sockperf_pingpong(text)


def test_sockperf_truncated_summary_is_an_error() -> None:
    text = SOCKPERF_PINGPONG_64.split("---> percentile 99.000")[0]
    with pytest.raises(MccError, match="lacks its summary"):
        parse_sockperf_pingpong(text)


# -- arguments and tool lookup ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "hint"), [("ddsperf", "cyclonedds-tools"), ("sockperf", "sockperf")]
)
def test_missing_tool_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, tool: str, hint: str
) -> None:
    monkeypatch.setattr(anchors.shutil, "which", lambda name: None)
    with pytest.raises(MccError, match=f"apt-get install {hint}"):
        tool_path(tool)


def test_unknown_tool_is_an_mcc_error() -> None:
    with pytest.raises(MccError, match="not found on PATH"):
        tool_path("mcc-no-such-tool-4711")


@pytest.mark.parametrize("size", [0, 13, 65508])
def test_sockperf_size_limits(size: int) -> None:
    with pytest.raises(MccError, match="14 .. 65507"):
        run_sockperf_pingpong(size_bytes=size, duration_s=1, port=free_udp_port())


def test_ddsperf_argument_limits() -> None:
    with pytest.raises(MccError, match="at least 12"):
        run_ddsperf_pingpong(size_bytes=8, duration_s=1, domain_id=0)
    with pytest.raises(MccError, match="domain id 233"):
        run_ddsperf_pingpong(size_bytes=64, duration_s=1, domain_id=233)
    with pytest.raises(MccError, match="positive number of seconds"):
        run_ddsperf_pingpong(size_bytes=64, duration_s=0, domain_id=0)


# -- live runs ----------------------------------------------------------------------------------


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fresh_domain() -> int:
    """A DDS domain id unlikely to be shared with a concurrent test run (tags isolate anyway)."""
    return 100 + os.getpid() % 100


def child_pids() -> set[int]:
    """Our direct child processes, zombies included (Linux /proc)."""
    pids: set[int] = set()
    for path in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
        pids.update(int(pid) for pid in path.read_text().split())
    return pids


def assert_plausible(s: LatencyStats) -> None:
    assert s.count > 100
    assert 0 < s.min_us <= s.p50_us <= s.p90_us <= s.p99_us <= s.max_us
    assert s.p50_us < 5000  # loopback: well under 5 ms
    assert s.min_us <= s.mean_us <= s.max_us


@pytest.mark.tool
@pytest.mark.parametrize("reliable", [True, False], ids=["reliable", "best-effort"])
def test_ddsperf_live(reliable: bool) -> None:
    require_tool("ddsperf")
    before = child_pids()
    s = run_ddsperf_pingpong(
        size_bytes=64, duration_s=1, domain_id=fresh_domain(), reliable=reliable
    )
    assert_plausible(s)
    assert child_pids() <= before, "a ddsperf process was left behind"


@pytest.mark.tool
def test_ddsperf_pong_is_stopped_when_ping_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    require_tool("ddsperf")

    before: set[int] = child_pids()
    background: set[int] = set()

    def broken_run(*args: object, **kwargs: object) -> NoReturn:
        background.update(child_pids() - before)
        assert background, "the ddsperf pong should be running now"
        raise RuntimeError("ping side blew up")

    monkeypatch.setattr(anchors, "run_tool", broken_run)
    with pytest.raises(RuntimeError, match="blew up"):
        run_ddsperf_pingpong(size_bytes=64, duration_s=1, domain_id=fresh_domain())
    assert not child_pids() & background, "the ddsperf pong was left behind"


@pytest.mark.tool
def test_sockperf_live() -> None:
    require_tool("sockperf")
    port = free_udp_port()
    s = run_sockperf_pingpong(size_bytes=64, duration_s=1, port=port)
    assert_plausible(s)
    assert s.p999_us is not None and s.p99_us <= s.p999_us <= s.max_us
    assert s.stdev_us is not None and s.stdev_us > 0
    assert not anchors._udp_port_bound(port), "sockperf server still holds the port"


@pytest.mark.tool
def test_sockperf_server_is_stopped_when_client_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    require_tool("sockperf")

    before: set[int] = child_pids()
    background: set[int] = set()

    def broken_run(*args: object, **kwargs: object) -> NoReturn:
        background.update(child_pids() - before)
        assert background, "the sockperf server should be running now"
        raise RuntimeError("client blew up")

    monkeypatch.setattr(anchors, "run_tool", broken_run)
    port = free_udp_port()
    with pytest.raises(RuntimeError, match="blew up"):
        run_sockperf_pingpong(size_bytes=64, duration_s=1, port=port)
    assert not anchors._udp_port_bound(port)
    assert not child_pids() & background, "the sockperf server was left behind"


@pytest.mark.tool
def test_sockperf_port_in_use_is_reported() -> None:
    require_tool("sockperf")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(MccError, match=f"port {port} .* already in use"):
            run_sockperf_pingpong(size_bytes=64, duration_s=1, port=port)


@pytest.mark.tool
def test_ddsperf_throughput_live() -> None:
    require_tool("ddsperf")
    before = child_pids()
    t = run_ddsperf_throughput(size_bytes=1024, duration_s=1, domain_id=fresh_domain())
    assert t.samples_per_s > 1000 and t.received > t.samples_per_s / 2
    assert t.mb_per_s == pytest.approx(t.samples_per_s * 1024 / 1e6, rel=1e-3)
    assert t.lost == 0
    assert child_pids() <= before, "a ddsperf process was left behind"


def test_mpi_pingpong_live() -> None:
    try:
        anchors.mpiexec_path()
        import mpi4py  # noqa: F401
    except (MccError, ImportError) as exc:
        if IN_CI:
            pytest.fail(f"the MPI anchor needs mpich and mpi4py: {exc}")
        pytest.skip(f"the MPI anchor needs mpich and mpi4py: {exc}")
    s = run_mpi_pingpong(size_bytes=64, duration_s=1, max_samples=2000, warmup=50)
    assert s.count == 2000 and s.lost == 0
    assert 0 < s.min_us <= s.p50_us <= s.p99_us <= s.max_us < 1_000_000


def test_tcp_port_check_sees_only_listening_sockets() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        assert not anchors._port_bound(port, tcp=True)  # bound, not listening yet
        s.listen()
        assert anchors._port_bound(port, tcp=True)
        assert anchors._port_bound(port, tcp=True, pid=os.getpid())
    assert not anchors._port_bound(port, tcp=True)
