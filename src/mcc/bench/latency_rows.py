"""The rows of ``mcc bench latency`` (``mcc.bench.latency``) that are not MCC's own ping-pong:
Cyclone's ``ddsperf``, ``sockperf``, MPI, and mcc pinging a foreign peer's echo.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcc.bench import perftest
from mcc.bench.latency_pingpong import PingPong, PingSpec, perf_profile
from mcc.bench.perftest import Node, PerfOptions
from mcc.bus import Transport
from mcc.errors import MccError
from mcc.settings import child_env, current

#: ``--peer NAME``: the foreign echoes mcc pings (docs/interop.md), and their executables
#: under the build folder of `make interop` (``$MCC_INTEROP_BUILD``, default ./build).
PEERS = {
    "fastdds": ("interop-fastdds/mcc-fastdds-peer", "echo"),
    "cyclone-c": ("interop/mcc-c-peer", "echo"),
}


@dataclass(frozen=True)
class RowSpec:
    """One row of the latency bench: where, what size, how often, how long, which domain."""

    options: PerfOptions
    nodes: Sequence[Node]
    size: int
    interval_ms: float
    duration_s: float
    domain: int


def peer_pingpong(r: RowSpec, peer: str, count: int) -> PingPong:
    """mcc (a ping process) pinging a foreign echo: loopback unicast without a discovery tag
    (other vendors never see Cyclone's), XCDR1 as the profile says, QoS from the same
    profiles (the Fast DDS echo loads `mcc qos export --vendor fastdds`)."""
    import tempfile

    from mcc.bus.qos import default_library
    from mcc.bus.qos_export import export_profiles

    if any(node.netns is not None for node in r.nodes):
        raise MccError(f"--peer {peer}: host network only (the peer knows no namespaces)")
    if r.options.keyed or (peer == "cyclone-c" and not r.options.reliable):
        raise MccError(f"--peer {peer}: reliable, keyless PerfSample only")
    if r.options.security:
        raise MccError(f"--peer {peer}: not over DDS Security (docs/interop.md)")
    path, role = PEERS[peer]
    exe = current().interop_build / path
    if not os.access(exe, os.X_OK):
        raise MccError(f"--peer {peer}: {exe} not built; run `make interop` in the repository")
    transport = Transport.loopback(None)
    env = transport.apply_to_env(child_env(discovery_tag=None, domain=r.domain))
    with tempfile.TemporaryDirectory(prefix="mcc-peer-") as tmp:
        qos = Path(tmp) / "fastdds.xml"
        qos.write_text(export_profiles(default_library(), "fastdds"))
        env.update(MCC_FASTDDS_PEERS="127.0.0.1", MCC_FASTDDS_QOS=str(qos))  # the peer's own
        argv = [str(exe), role]
        if peer == "fastdds":
            argv += ["--profile", perf_profile(r.options.reliable)]
        echo = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        spec = PingSpec(
            domain_id=r.domain,
            size_bytes=r.size,
            duration_s=r.duration_s,
            reliable=r.options.reliable,
            keyed=False,
            warmup=200,
            max_samples=count,
            mode="inline",
            interval_ms=r.interval_ms,
        )
        # The ping runs in a child whose environment has no discovery tag (a bus in this
        # process would take this process's).
        ping_env = child_env(env, qos_file=perftest.perf_qos_file(r.options.send_queue))
        try:
            with perftest.workers() as ws:
                raw = spec.start_ping(ws, r.nodes[0], ping_env).result(r.duration_s + 120)
            return PingPong.of(raw)
        except MccError as exc:
            echo.kill()
            said = echo.communicate(timeout=10)[0][-2000:]
            raise MccError(f"{exc}\n--- the {peer} echo said:\n{said}") from None
        finally:
            try:
                echo.communicate(timeout=10)  # it ends on the seq-0 sample
            except subprocess.TimeoutExpired:
                echo.kill()
                echo.communicate()


def ddsperf_row(r: RowSpec, own_build: bool = False) -> dict[str, Any]:
    from mcc.bench.anchors import DDSPERF_MIN_SIZE_BYTES, run_ddsperf_pingpong
    from mcc.bus import _native

    sent = max(r.size, DDSPERF_MIN_SIZE_BYTES)
    ping_config: str | None
    pong_config: str | None
    if r.options.security:
        tag = perftest.run_tag("anchor")
        ping_t, pong_t = perftest.pair_transports(r.options, r.nodes, tag=tag)
        ping_config, pong_config = ping_t.to_xml(), pong_t.to_xml()
    else:
        ping_config, pong_config = perftest.anchor_configs(r.options, r.nodes)
    own = Path(_native.LIBRARY).resolve().parent.parent / "bin" / "ddsperf"
    stats = run_ddsperf_pingpong(
        size_bytes=sent,
        duration_s=r.duration_s,
        domain_id=r.domain,
        reliable=r.options.reliable,
        rate_hz=1000.0 / r.interval_ms if r.interval_ms else 0.0,
        ping_config=ping_config,
        pong_config=pong_config,
        ping_prefix=r.nodes[0].argv([]),
        pong_prefix=r.nodes[-1].argv([]),
        executable=str(own) if own_build else None,
    )
    unicast: dict[str, Any] = {"multicast": False} if ping_config is None else {}
    # ddsperf counts a "ping timed out" when a pong is not back by the next ping: at a rate
    # that is a late pong (it still comes), and reliable pongs are never lost. Only best
    # effort flat out (1 s without a pong) is a loss.
    lost = stats.lost if not r.options.reliable and not r.interval_ms else None
    return {
        **stats.as_row(),
        "lost": lost,
        "ping_timeouts": stats.lost,
        **unicast,
        **({"sent_size_bytes": sent} if sent != r.size else {}),
    }


def sockperf_row(r: RowSpec) -> dict[str, Any]:
    from mcc.bench.anchors import (
        SOCKPERF_MAX_SIZE_BYTES,
        SOCKPERF_MIN_SIZE_BYTES,
        run_sockperf_pingpong,
    )

    sent = min(max(r.size, SOCKPERF_MIN_SIZE_BYTES), SOCKPERF_MAX_SIZE_BYTES)
    tcp = r.options.transport == "tcp"
    server = r.nodes[-1]
    port = perftest.free_port(socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM)
    stats = run_sockperf_pingpong(
        size_bytes=sent,
        duration_s=r.duration_s,
        port=port,
        address=server.address,
        tcp=tcp,
        mps=round(1000.0 / r.interval_ms) if r.interval_ms else None,
        server_prefix=server.argv([]),
        client_prefix=r.nodes[0].argv([]),
    )
    return {**stats.as_row(), **({"sent_size_bytes": sent} if sent != r.size else {})}


def mpi_meaningful(options: PerfOptions, interval_ms: float) -> bool:
    """MPICH moves bytes through shared memory between ranks on one host: it has no DDS
    transport, network namespace or send interval, so it anchors host, UDP, flat-out rows."""
    return options.net == "host" and options.transport == "udp" and not interval_ms


def mpi_row(r: RowSpec, count: int) -> dict[str, Any]:
    from mcc.bench.anchors import run_mpi_pingpong

    if not mpi_meaningful(r.options, r.interval_ms):
        raise MccError("the MPI anchor runs on the host network, UDP, flat out only")
    stats = run_mpi_pingpong(size_bytes=r.size, duration_s=r.duration_s, max_samples=count)
    return stats.as_row()
