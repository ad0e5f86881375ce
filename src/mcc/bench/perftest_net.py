"""Where the perftest's processes run (``mcc.bench.perftest``): `Node` and `open_network`
(loopback or the hosts of a `mcc.netlab.NetLab`), the transports of each side, and the worker
processes (`workers`) that print one ``RESULT {json}`` line each.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, cast

from mcc import settings
from mcc.bench.anchor_tools import Background, background
from mcc.bench.perftest_options import (
    NETS,
    RESULT_PREFIX,
    PerfOptions,
    perf_qos_file,
)
from mcc.bus.transport import Transport, TransportKind
from mcc.errors import MccError

# -- networks -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    """Where one benchmark process runs: this network namespace or a lab host's."""

    name: str
    address: str
    netns: str | None = None

    def argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run in this node's namespace."""
        return ["ip", "netns", "exec", self.netns, *argv] if self.netns else list(argv)

    @property
    def interface(self) -> str:
        """The interface (name or address) Cyclone should use here."""
        return "lo" if self.netns is None else self.address


@contextlib.contextmanager
def open_network(net: str, hosts: int, *, name: str = "perf") -> Iterator[list[Node]]:
    """``hosts`` nodes on ``net``: loopback of this host, or a fresh NetLab (removed after)."""
    if net == "host":
        yield [Node(f"h{i + 1}", "127.0.0.1") for i in range(hosts)]
        return
    if net != "netns":
        raise MccError(f"--net {net!r}: use one of {', '.join(NETS)}")
    try:
        from mcc.netlab import NetLab, netns_available
    except ImportError as exc:
        raise MccError(f"--net netns needs mcc.netlab, which is missing here ({exc})") from None
    reason = netns_available()
    if reason is not None:
        raise MccError(f"--net netns is not available: {reason}; run as root or use --net host")
    lab_name = f"{name}{os.getpid() % 100000}"
    with NetLab([f"h{i + 1}" for i in range(hosts)], name=lab_name) as lab:
        yield [Node(h.name, h.address, h.netns) for h in lab.hosts]


def node_transport(
    options: PerfOptions,
    node: Node,
    nodes: Sequence[Node],
    *,
    tag: str,
    tcp_port: int | None = None,
    tcp_peers: Sequence[str] = (),
    extra_xml: str = "",
) -> Transport:
    """The Cyclone transport of a process on ``node`` talking to the others in ``nodes``.

    UDP: unicast discovery to every node's address (multicast off, the default) or multicast
    on the node's interface. TCP: the process listens on ``tcp_port`` (None: it only connects)
    and connects to ``tcp_peers`` (``address:port``). SHM: as UDP, plus iceoryx shared memory
    between the processes of the host.
    """
    tcp = options.transport == "tcp"
    unicast = not tcp and not options.multicast
    peers = tcp_peers if tcp else sorted({n.address for n in nodes}) if unicast else ()
    return Transport(
        kind=cast(TransportKind, options.transport),
        multicast=not tcp and options.multicast,
        peers=tuple(peers),
        interface=node.interface,
        discovery_tag=tag,
        max_participant_index=99 if unicast else None,
        tcp_port=(tcp_port or 0) if tcp else None,
        extra_xml=extra_xml,
    )


def pair_transports(
    options: PerfOptions, nodes: Sequence[Node], *, tag: str, extra_xml: str = ""
) -> tuple[Transport, Transport]:
    """The transports of a process on ``nodes[0]`` and one on ``nodes[-1]`` talking together.

    For TCP the second listens (a free port on the host, 7410 in a lab namespace) and the
    first connects to it; otherwise each gets `node_transport`.
    """
    first, second = nodes[0], nodes[-1]
    if options.security:
        plain = dataclasses.replace(options, security=False)
        a, b = pair_transports(plain, nodes, tag=tag, extra_xml=extra_xml)
        return secured(a, "first"), secured(b, "second")
    if options.transport != "tcp":
        return (
            node_transport(options, first, nodes, tag=tag, extra_xml=extra_xml),
            node_transport(options, second, nodes, tag=tag, extra_xml=extra_xml),
        )
    port = free_port(socket.SOCK_STREAM) if second.netns is None else 7410
    listen = node_transport(options, second, nodes, tag=tag, tcp_port=port, extra_xml=extra_xml)
    connect = node_transport(
        options, first, nodes, tag=tag, tcp_peers=(f"{second.address}:{port}",), extra_xml=extra_xml
    )
    return connect, listen


def secured(transport: Transport, side: str) -> Transport:
    """``transport`` with the bench identity of ``side`` (``first`` or ``second``): signed and
    encrypted DDS Security, every topic allowed (the cost measured is the cryptography)."""
    identity = bench_keystore().existing(f"bench-{side}")
    return dataclasses.replace(transport, extra_xml=transport.extra_xml + identity.security_xml())


@cache
def bench_keystore() -> Any:
    """A keystore for this process's secured rows: governance ENCRYPT on every domain, two
    identities allowed every topic. Removed at exit."""
    import atexit
    import shutil

    from mcc.security import MAX_SECURE_DOMAIN, Grant, Keystore

    folder = Path(tempfile.mkdtemp(prefix="mcc-bench-keystore-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    keystore = Keystore.init(folder / "ks", mission="bench")
    domains = tuple(range(0, MAX_SECURE_DOMAIN + 1))
    keystore.write_governance(domains, protect="ENCRYPT")
    for side in ("first", "second"):
        keystore.identity(
            f"bench-{side}", (Grant(publish=("*",), subscribe=("*",)),), domains=domains
        )
    return keystore


def anchor_configs(
    options: PerfOptions, nodes: Sequence[Node], *, extra_xml: str = ""
) -> tuple[str | None, str | None]:
    """CYCLONEDDS_URI of ddsperf's first and second process (None: the anchors' loopback).

    On loopback over UDP without ``extra_xml`` the anchors keep their own configuration
    (unicast: ddsperf 0.10 does not multicast over ``lo``); otherwise (TCP, lab networks, extra
    settings such as `queue_xml`) they get the same transport as MCC's processes. For TCP the
    second process listens and the first connects to it.
    """
    tag = run_tag("anchor")
    first, second = nodes[0], nodes[-1]
    if options.transport == "shm":  # ddsperf (Debian's Cyclone 0.10) has no psmx: over UDP
        options = dataclasses.replace(options, transport="udp")
    if options.transport == "tcp":
        connect, listen = pair_transports(options, nodes, tag=tag, extra_xml=extra_xml)
        return connect.to_xml(), listen.to_xml()
    if first.netns is None and not extra_xml:
        return None, None
    # ddsperf 0.10 does not multicast over lo: on loopback the anchors stay unicast
    anchor_options = (
        dataclasses.replace(options, multicast=False) if first.netns is None else options
    )
    return (
        node_transport(anchor_options, first, nodes, tag=tag, extra_xml=extra_xml).to_xml(),
        node_transport(anchor_options, second, nodes, tag=tag, extra_xml=extra_xml).to_xml(),
    )


def free_port(kind: int = socket.SOCK_DGRAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env(transport: Transport, options: PerfOptions) -> dict[str, str]:
    """Environment of a benchmark child process: transport, perf QoS library, no tag override."""
    # No discovery tag of its own: the transport carries the run's.
    return settings.child_env(
        transport.apply_to_env(settings.environ()),
        qos_file=perf_qos_file(options.send_queue),
        discovery_tag=None,
    )


def run_tag(what: str) -> str:
    """A discovery tag unique to one row of this run."""
    return f"mcc-perf-{what}-{os.getpid()}-{time.monotonic_ns() % 10**9}"


# -- worker processes ---------------------------------------------------------------------------


class Worker:
    """A ``python -m mcc.bench.perftest ROLE`` process (or a module's) on a node."""

    def __init__(self, name: str, bg: Background) -> None:
        self.name = name
        self.bg = bg

    def result(self, timeout_s: float) -> dict[str, Any]:
        """Wait for the process to exit (at most ``timeout_s``); its ``RESULT`` object."""
        try:
            rc = self.bg.proc.wait(timeout=timeout_s)
        except Exception:
            self.bg.stop()
            raise MccError(
                f"{self.name} did not finish within {timeout_s:.0f} s:\n{_tail(self.bg.output())}"
            ) from None
        out = self.bg.output()
        for line in reversed(out.splitlines()):
            if line.startswith(RESULT_PREFIX):
                return dict(json.loads(line[len(RESULT_PREFIX) :]))
        raise MccError(f"{self.name} exited {rc} without a result:\n{_tail(out)}")


class WorkerSet(contextlib.ExitStack):
    """Workers started inside its ``with`` block; all are stopped (and reaped) when it ends."""

    def start(self, name: str, node: Node, argv: Sequence[str], *, env: dict[str, str]) -> Worker:
        return Worker(name, self.enter_context(background(node.argv(argv), env=env)))

    def start_role(
        self, name: str, node: Node, role: str, spec: Any, *, env: dict[str, str]
    ) -> Worker:
        """``python -m mcc.bench.perftest ROLE`` with ``spec`` (a `PubSpec` or `SubSpec`)."""
        spec_json = json.dumps(dataclasses.asdict(spec))
        argv = [sys.executable, "-m", "mcc.bench.perftest", role, "--spec", spec_json]
        return self.start(name, node, argv, env=env)


workers = WorkerSet  # ``with workers() as ws``


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])
