"""What every perftest mode shares: options, QoS, networks and the publisher/subscriber processes.

The modes (``latency``, ``throughput``, ``scale``, ``blocked``, ``load``) measure MCC's bus the
way RTI Perftest and Cyclone's ``ddsperf`` measure theirs, with the anchors in the same run:

- :class:`PerfOptions` holds the knobs every mode takes: transport (udp | tcp), reliability,
  keyed or not, multicast, send-queue depth and network (``host`` loopback or ``netns``, two
  network namespaces on a bridge, from :mod:`mcc.netlab`).
- :func:`perf_qos_file` derives the profile library the processes use from ``qos/mcc.xml``:
  the perf profiles sized to ``send_queue`` plus ``perf_reliable_stream``, RTI Perftest's
  *send queue* for the publisher/subscriber modes (a reliable writer keeps all samples, at
  most ``send_queue`` of them unacknowledged: a write beyond that blocks until
  acknowledgements come, up to the profile's ``max_blocking_time``; the reader keeps all).
- :func:`open_network` places the processes: on loopback, or on the hosts of a
  :class:`mcc.netlab.NetLab` created for the run and removed after it.
- ``python -m mcc.bench.perftest pub|sub --spec JSON`` are the measuring processes of the
  throughput, scale, blocked and load modes; each prints one ``RESULT {json}`` line.
"""

# No `from __future__ import annotations` here: cyclonedds resolves PerfKeyedSample's field
# types from real annotations, not strings.
import argparse
import contextlib
import ctypes
import dataclasses
import json
import os
import re
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import cyclonedds.idl as idl
import cyclonedds.idl.annotations as annotate
import cyclonedds.idl.types as types

from mcc.bench.anchors import Background, background
from mcc.bench.stats import LatencyRecorder
from mcc.bus.transport import ScratchDomains, Transport, TransportKind, tcp_supported
from mcc.errors import MccError, TransportError
from mcc.resources import qos_file

__all__ = [
    "NETS",
    "TRANSPORTS",
    "Node",
    "PerfKeyedSample",
    "PerfOptions",
    "Worker",
    "add_common_options",
    "open_network",
    "nets_from_args",
    "options_from_args",
    "perf_qos_file",
    "require_mcc_transport",
]

TRANSPORTS = ("udp", "tcp", "shm")
NETS = ("host", "netns")
DEFAULT_SEND_QUEUE = 50
"""Samples a reliable writer may have unacknowledged before a write blocks (the paper's 50)."""
DATA_TOPIC = "PerfData"
RESULT_PREFIX = "RESULT "
READY_LINE = "READY"
FLOWING_LINE = "FLOWING"
WRITE_BATCH_XML = "<Internal><WriteBatch>true</WriteBatch></Internal>"
QUEUE_SAMPLE_OVERHEAD_BYTES = 512
"""Per queued sample on top of its payload (header, key, RTPS submessage) in `queue_xml`."""
"""Cyclone's write batching: samples queue in the writer until a packet fills or a flush."""

_QOS_SOURCE = qos_file()
_MATCH_TIMEOUT_S = 30.0
_END_REPEATS = 5


@dataclass
@annotate.final
@annotate.autoid("sequential")
class PerfKeyedSample(idl.IdlStruct, typename="mcc.PerfKeyedSample"):
    """``PerfSample`` with a key, for keyed rows (like ddsperf's KS topic, one instance)."""

    instance: types.uint32 = 0
    annotate.key("instance")
    writer_id: str = ""
    seq: types.uint64 = 0
    send_ns: types.int64 = 0
    payload: bytes = b""


def stream_profile(reliable: bool) -> str:
    """The profile of the publisher/subscriber modes."""
    return STREAM_PROFILE if reliable else "perf_best_effort"


def sample_type(keyed: bool) -> type:
    """The sample type of a perftest topic: ``PerfKeyedSample`` or the IDL's ``PerfSample``."""
    from mcc.types import PerfSample

    return PerfKeyedSample if keyed else PerfSample


@dataclass(frozen=True)
class PerfOptions:
    """The knobs every perftest mode takes.

    Attributes:
        transport: ``"udp"`` or ``"tcp"`` (TCP needs a Cyclone library built with it, as
            MCC's is; see :func:`require_mcc_transport`).
        reliable: reliable (default) or best-effort writers and readers.
        keyed: samples of a keyed type (``PerfKeyedSample``) instead of ``PerfSample``.
        multicast: multicast discovery and data; off = unicast to the peers' addresses.
        send_queue: samples a reliable writer may have unacknowledged (default 50).
        net: ``"host"`` (loopback) or ``"netns"`` (network namespaces on a bridge; root).
    """

    transport: str = "udp"
    reliable: bool = True
    keyed: bool = False
    multicast: bool = False
    send_queue: int = DEFAULT_SEND_QUEUE
    net: str = "host"
    security: bool = False  # DDS Security on both sides (signed and encrypted)

    def __post_init__(self) -> None:
        if self.transport not in TRANSPORTS:
            raise MccError(f"--transport {self.transport!r}: use one of {', '.join(TRANSPORTS)}")
        if self.net not in NETS:
            raise MccError(f"--net {self.net!r}: use one of {', '.join(NETS)}")
        if isinstance(self.send_queue, bool) or not 1 <= self.send_queue <= 1_000_000:
            raise MccError(f"--send-queue {self.send_queue}: use 1 .. 1000000 samples")
        if self.transport == "tcp" and self.multicast:
            raise MccError("--multicast with --transport tcp: TCP has no multicast; drop one")

    @property
    def profile(self) -> str:
        """The QoS profile of the ping-pong (keep-last ``send_queue``)."""
        return "perf_reliable" if self.reliable else "perf_best_effort"

    @property
    def stream_profile(self) -> str:
        """The QoS profile of the publishers and subscribers (the send queue when reliable)."""
        return stream_profile(self.reliable)

    def row(self) -> dict[str, Any]:
        """These options as benchmark-row fields."""
        return {
            "transport": self.transport,
            "reliable": self.reliable,
            "keyed": self.keyed,
            "multicast": self.multicast,
            "send_queue": self.send_queue,
            "net": self.net,
        }


def add_common_options(parser: argparse.ArgumentParser) -> None:
    """The options every perftest mode takes (``--transport``, ``--reliable`` …)."""
    group = parser.add_argument_group("bus")
    group.add_argument(
        "--transport",
        choices=TRANSPORTS,
        default="udp",
        help="DDS transport (default udp); tcp runs the anchors only when the cyclonedds "
        "wheel lacks TCP, and says so",
    )
    rel = group.add_mutually_exclusive_group()
    rel.add_argument(
        "--reliable", dest="reliable", action="store_true", default=True, help="(default)"
    )
    rel.add_argument("--best-effort", dest="reliable", action="store_false")
    group.add_argument("--keyed", action="store_true", help="keyed samples (PerfKeyedSample)")
    group.add_argument(
        "--multicast",
        action="store_true",
        help="multicast discovery and data (default: unicast to the peers)",
    )
    group.add_argument(
        "--send-queue",
        type=int,
        default=DEFAULT_SEND_QUEUE,
        help="unacknowledged samples a reliable writer may hold before a write blocks "
        "(default %(default)s, as in the paper)",
    )
    group.add_argument(
        "--net",
        default="host",
        help="host: loopback; netns: two network namespaces joined by a bridge (root); "
        "host,netns: both, with the virtualisation efficiency netns/host (default host)",
    )
    out = parser.add_argument_group("output")
    out.add_argument("--quick", action="store_true", help="tiny counts (smoke check, < 1 min)")
    out.add_argument("--json", metavar="FILE", help="write the results as JSON")
    out.add_argument("--plot", metavar="DIR", help="write PNG plots into DIR")
    out.add_argument(
        "--record",
        action="store_true",
        help="replace this bench's section of benchmarks/README.md with this run",
    )


def nets_from_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The networks ``--net`` names, in order (``host,netns`` runs both)."""
    nets = tuple(dict.fromkeys(n.strip() for n in str(args.net).split(",") if n.strip()))
    bad = [n for n in nets if n not in NETS]
    if bad or not nets:
        raise MccError(f"--net {args.net!r}: use host, netns or host,netns")
    return nets


def options_from_args(args: argparse.Namespace) -> PerfOptions:
    """The options of the first network ``--net`` names (see `nets_from_args`)."""
    return PerfOptions(
        transport=args.transport,
        reliable=args.reliable,
        keyed=args.keyed,
        multicast=args.multicast,
        send_queue=args.send_queue,
        net=nets_from_args(args)[0],
    )


@cache
def _host_roudi() -> Any:
    """The RouDi this process started for ``--transport shm`` rows (None: one ran already)."""
    import atexit

    from mcc.bus.shm import RouDi

    roudi = RouDi.ensure()
    if roudi is not None:
        atexit.register(roudi.stop)
    return roudi


def require_mcc_transport(options: PerfOptions) -> str | None:
    """None when MCC's own processes can run with ``options``, else why not (for the row).

    MCC's Cyclone (native/build-cyclone.sh) has TCP; a library built without it (the PyPI
    wheel's) gets ``--transport tcp`` rows of MCC refused with this reason while the anchors run.
    ``--transport shm`` needs the host's iceoryx daemon: one is started for this run (and
    stopped at exit) unless one runs already.
    """
    if options.transport == "shm":
        try:
            _host_roudi()
        except MccError as exc:
            return f"shared memory unavailable: {exc}"
    if options.transport == "tcp" and not tcp_supported():
        return (
            "TCP not supported by the Cyclone library that cyclonedds-python loaded; the "
            "anchors ran over TCP, MCC did not: run `make`, which builds MCC's Cyclone with "
            "TCP (docs/transport.md)"
        )
    return None


# -- QoS ----------------------------------------------------------------------------------------


STREAM_PROFILE = "perf_reliable_stream"
"""The reliable profile of the publisher/subscriber modes: RTI Perftest's send queue."""


@cache
def perf_qos_file(send_queue: int = DEFAULT_SEND_QUEUE) -> Path:
    """A profile library: ``qos/mcc.xml`` with the perf profiles sized to ``send_queue``.

    - ``perf_reliable`` and ``perf_best_effort`` (the ping-pong's) keep the last
      ``send_queue`` samples, as in ``qos/mcc.xml`` (depth 50). A ping-pong has one sample in
      flight, so its queue never fills; and a reliable keep-all writer that writes from a
      Cyclone listener (as ddsperf's pong does) cannot take in the acknowledgements it
      waits for: fragmented samples then time out.
    - ``perf_reliable_stream`` (added; the publishers' and subscribers') is RTI Perftest's
      send queue: the writer keeps all samples, at most ``send_queue`` unacknowledged, and a
      write beyond that blocks until acknowledgements free a slot (at most the profile's
      max_blocking_time); the reader keeps all, so nothing is dropped.

    Written once per process into a temporary folder removed at exit; children get it through
    ``MCC_QOS_FILE``. The other profiles are the repository's, unchanged.
    """
    text = _QOS_SOURCE.read_text()
    profiles = {}
    for name in ("perf_reliable", "perf_best_effort"):
        match = re.search(rf'<qos_profile name="{name}">.*?</qos_profile>', text, flags=re.DOTALL)
        depth = re.compile(r"<depth>\d+</depth>")
        if match is None or len(depth.findall(match[0])) != 1:
            raise MccError(
                f"{_QOS_SOURCE}: profile {name!r} not found with one history <depth>; the "
                "perftest derives its send queue from it"
            )
        profiles[name] = depth.sub(f"<depth>{send_queue}</depth>", match[0])
        text = text.replace(match[0], profiles[name])
    stream = profiles["perf_reliable"].replace('name="perf_reliable"', f'name="{STREAM_PROFILE}"')
    endpoints = re.compile(r"<datareader_qos/>\s*<datawriter_qos/>")
    if not endpoints.search(stream):
        raise MccError(
            f"{_QOS_SOURCE}: profile 'perf_reliable' has endpoint QoS of its own; the perftest "
            "expects empty <datareader_qos/> and <datawriter_qos/> to derive its send queue"
        )
    stream = endpoints.sub(
        "<datareader_qos><history><kind>KEEP_ALL_HISTORY_QOS</kind></history></datareader_qos>"
        "<datawriter_qos><history><kind>KEEP_ALL_HISTORY_QOS</kind></history>"
        f"<resource_limits><max_samples>{send_queue}</max_samples></resource_limits>"
        "</datawriter_qos>",
        stream,
    )
    end = text.rindex("</qos_library>")
    text = text[:end] + stream + "\n  " + text[end:]
    folder = Path(tempfile.mkdtemp(prefix="mcc-perf-qos-"))
    _remove_at_exit(folder)
    path = folder / f"perf-queue{send_queue}.xml"
    path.write_text(text)
    return path


def queue_xml(send_queue: int, size_bytes: int) -> str:
    """Cyclone configuration that makes a queue of ``send_queue`` samples of ``size_bytes``
    the writer's limit in bytes too.

    Cyclone throttles a writer on unacknowledged *bytes* as well: an adaptive high watermark
    from 30 kB (WhcHighInit) up to 500 kB (WhcHigh), i.e. a queue of a few samples of
    kilobytes, far below the paper's 50. Fixing it far above the queue is no better: Cyclone
    asks for acknowledgements as the bytes approach the watermark, so a full queue then waits
    for the periodic heartbeat (measured: 100 ms stalls and write timeouts at 4 KiB flat out).
    So the watermark is the queue's size in bytes, not adaptive; the publishers and the ddsperf
    throughput anchor (like for like) get it.
    """
    high = send_queue * (size_bytes + QUEUE_SAMPLE_OVERHEAD_BYTES)
    return (
        f"<Internal><Watermarks><WhcHigh>{high}B</WhcHigh><WhcHighInit>{high}B</WhcHighInit>"
        "<WhcAdaptive>false</WhcAdaptive></Watermarks></Internal>"
    )


def _remove_at_exit(folder: Path) -> None:
    import atexit
    import shutil

    atexit.register(shutil.rmtree, folder, True)


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
    if options.transport == "tcp":
        return Transport(
            kind="tcp",
            multicast=False,
            peers=tuple(tcp_peers),
            interface=node.interface,
            discovery_tag=tag,
            tcp_port=tcp_port if tcp_port is not None else 0,
            extra_xml=extra_xml,
        )
    kind: TransportKind = "shm" if options.transport == "shm" else "udp"
    if options.multicast:
        return Transport(
            kind=kind,
            multicast=True,
            interface=node.interface,
            discovery_tag=tag,
            extra_xml=extra_xml,
        )
    peers = tuple(sorted({n.address for n in nodes}))
    return Transport(
        kind=kind,
        multicast=False,
        peers=peers,
        interface=node.interface,
        discovery_tag=tag,
        max_participant_index=99,
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
    import tempfile

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
    env = transport.apply_to_env(os.environ)
    env["MCC_QOS_FILE"] = str(perf_qos_file(options.send_queue))
    env.pop("MCC_DISCOVERY_TAG", None)  # the transport carries the run's own tag
    return env


def run_tag(what: str) -> str:
    """A discovery tag unique to one row of this run."""
    return f"mcc-perf-{what}-{os.getpid()}-{time.monotonic_ns() % 10**9}"


# -- worker processes ---------------------------------------------------------------------------


class Worker:
    """A ``python -m mcc.bench.perftest ROLE`` process (or a module's) on a node."""

    def __init__(self, name: str, bg: Background) -> None:
        self.name = name
        self.bg = bg

    def ready(self) -> bool:
        return READY_LINE in self.bg.output()

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


@contextlib.contextmanager
def workers() -> Iterator["WorkerSet"]:
    """Start workers inside the block; all are stopped (and reaped) when it ends."""
    with contextlib.ExitStack() as stack:
        yield WorkerSet(stack)


class WorkerSet:
    def __init__(self, stack: contextlib.ExitStack) -> None:
        self._stack = stack
        self.all: list[Worker] = []

    def start(self, name: str, node: Node, argv: Sequence[str], *, env: dict[str, str]) -> Worker:
        bg = self._stack.enter_context(background(node.argv(argv), env=env))
        worker = Worker(name, bg)
        self.all.append(worker)
        return worker

    def start_role(
        self, name: str, node: Node, role: str, spec: dict[str, Any], *, env: dict[str, str]
    ) -> Worker:
        argv = [sys.executable, "-m", "mcc.bench.perftest", role, "--spec", json.dumps(spec)]
        return self.start(name, node, argv, env=env)

    def wait_ready(self, group: Sequence[Worker], *, timeout_s: float = _MATCH_TIMEOUT_S) -> None:
        """Wait until every worker in ``group`` printed READY; MccError if one dies first."""
        deadline = time.monotonic() + timeout_s
        while not all(w.ready() for w in group):
            for w in group:
                rc = w.bg.proc.poll()
                if rc is not None and not w.ready():
                    raise MccError(
                        f"{w.name} exited {rc} before it was ready:\n{_tail(w.bg.output())}"
                    )
            if time.monotonic() > deadline:
                late = [w.name for w in group if not w.ready()]
                raise MccError(f"{', '.join(late)} not ready within {timeout_s:.0f} s")
            time.sleep(0.02)


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


# -- publisher and subscriber processes ---------------------------------------------------------


@dataclass
class PubSpec:
    """What one publisher process does (JSON on its command line)."""

    domain: int
    writer_id: str
    size_bytes: int
    keyed: bool = False
    reliable: bool = True
    readers: int = 1
    rate_hz: float = 0.0  # 0: as fast as possible
    duration_s: float = 5.0
    max_samples: int = 10**9
    batch: int = 1  # app-level: logical samples per written sample
    flush: bool = False  # Cyclone write batching: flush when idle and at the end
    block_threshold_us: float = 1000.0
    count_throttles: bool = False  # read Cyclone's throttle count after every write


@dataclass
class SubSpec:
    """What one subscriber process does."""

    domain: int
    keyed: bool = False
    reliable: bool = True
    writers: int = 1
    batch: int = 1
    max_s: float = 60.0
    idle_s: float = 3.0
    latency: bool = True
    warmup_samples: int = 100  # per writer, left out of the latency: discovery settles


@dataclass
class _WriterTally:
    received: int = 0
    last_seq: int = 0
    gaps: int = 0
    ended: bool = False


def run_pub(spec: PubSpec) -> dict[str, Any]:
    """Publish ``PerfData`` at ``rate_hz`` (0: flat out) for ``duration_s``; time every write.

    A write that takes at least ``block_threshold_us`` counts as blocked (the send queue was
    full); blocked and steady writes are recorded in separate histograms. A write that fails
    after the profile's max_blocking_time (DDS timeout) counts in ``timeouts``.
    """
    from cyclonedds.core import DDSException

    from mcc.bus import Bus

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    kind = sample_type(spec.keyed)
    profile = stream_profile(spec.reliable)
    with Bus(spec.domain, name=f"mcc-perf-{spec.writer_id}", monitor_qos=False) as bus:
        writer = bus.writer(DATA_TOPIC, type=kind, profile=profile, validate=False)
        print(READY_LINE, flush=True)
        if not writer.wait_for_readers(spec.readers, timeout_s=_MATCH_TIMEOUT_S):
            raise MccError(
                f"publisher {spec.writer_id}: {writer.matched()} of {spec.readers} readers "
                f"matched within {_MATCH_TIMEOUT_S:.0f} s"
            )
        flush = writer.flush if spec.flush else None
        sample = kind(
            writer_id=spec.writer_id, seq=0, send_ns=0, payload=bytes(spec.size_bytes * spec.batch)
        )
        write = writer.write
        clock = time.perf_counter_ns
        monotonic = time.monotonic_ns
        steady_ns: list[int] = []
        blocked_ns: list[int] = []
        stall_ns: list[int] = []
        throttles = _Throttles(writer.dds) if spec.count_throttles else None
        threshold_ns = int(spec.block_threshold_us * 1000)
        timeouts = 0
        interval_ns = int(1e9 / spec.rate_hz) if spec.rate_hz > 0 else 0
        # spinning costs a core; only short intervals need the precision
        spin_ns = 200_000 if 0 < interval_ns < 500_000 else 0
        start = monotonic()
        end = start + int(spec.duration_s * 1e9)
        next_ns = start
        sent = 0
        while sent < spec.max_samples and not stop.is_set():
            now = monotonic()
            if now >= end:
                break
            if interval_ns:
                if now < next_ns:
                    if flush is not None:
                        flush()
                    sleep_until(next_ns, spin_ns=spin_ns)
                next_ns += interval_ns
                if monotonic() - next_ns > 100 * interval_ns:
                    next_ns = monotonic()  # fell far behind (stalled): do not burst to catch up
            sample.seq = sent + 1
            t0 = clock()
            sample.send_ns = monotonic()
            try:
                write(sample)
            except DDSException:
                timeouts += 1
                continue
            dt = clock() - t0
            if throttles is not None and throttles.rose():
                blocked_ns.append(dt)
            elif dt >= threshold_ns:
                stall_ns.append(dt)
            else:
                steady_ns.append(dt)
            sent += 1
        elapsed_s = (monotonic() - start) / 1e9
        if flush is not None:
            flush()
        _send_end(writer, sample, spec, flush)
        with contextlib.suppress(DDSException):
            writer.dds.wait_for_acks(_duration_s(10.0))
        steady = LatencyRecorder()
        steady.record_many_ns(steady_ns)
        blocked = LatencyRecorder()
        blocked.record_many_ns(blocked_ns)
        stalled = LatencyRecorder()
        stalled.record_many_ns(stall_ns)
    return {
        "writer_id": spec.writer_id,
        "sent": sent,
        "sent_samples": sent * spec.batch,
        "seconds": elapsed_s,
        "timeouts": timeouts,
        "blocked": len(blocked_ns),
        "stalls": len(stall_ns),
        "throttle_count": throttles.count() if throttles is not None else None,
        "throttle_ms": throttles.time_ns() / 1e6 if throttles is not None else None,
        "steady_hist": steady.encode() if steady.count else None,
        "blocked_hist": blocked.encode() if blocked.count else None,
        "stall_hist": stalled.encode() if stalled.count else None,
    }


def _send_end(writer: Any, sample: Any, spec: PubSpec, flush: Any) -> None:
    """Tell the readers this writer is done: seq 0, repeated for best effort."""
    from cyclonedds.core import DDSException

    sample.seq = 0
    sample.payload = b""
    for _ in range(1 if spec.reliable else _END_REPEATS):
        with contextlib.suppress(DDSException):
            writer.write(sample)
        if flush is not None:
            flush()
        if not spec.reliable:
            time.sleep(0.02)


def sleep_until(deadline_ns: int, *, spin_ns: int = 200_000) -> None:
    """Sleep until ``deadline_ns`` (monotonic), spinning the last ``spin_ns``: time.sleep
    alone overshoots by 50-100 µs, which matters at sub-millisecond intervals only."""
    left = deadline_ns - time.monotonic_ns()
    if left > spin_ns + 50_000:
        time.sleep((left - spin_ns) / 1e9)
    while time.monotonic_ns() < deadline_ns:
        pass


def _duration_s(seconds: float) -> Any:
    from cyclonedds.util import duration

    return duration(seconds=seconds)


@cache
def _libddsc() -> ctypes.CDLL:
    """The process's Cyclone library (the one the bus core links), for writer statistics."""
    from mcc.bus import _native

    return ctypes.CDLL(_native.LIBRARY)


class _StatKeyValue(ctypes.Structure):
    """``struct dds_stat_keyvalue``: name, kind, then a union of uint32/uint64."""

    _fields_ = [("name", ctypes.c_char_p), ("kind", ctypes.c_int), ("value", ctypes.c_uint64)]


_STAT_UINT32 = 0


class _Throttles:
    """Cyclone's own count of the times a writer was throttled (``throttle_count``: a write
    waited because the writer's history was full of unacknowledged samples) and the time it
    spent so (``time_throttle``), read through ``dds_create_statistics`` as ddsperf does."""

    def __init__(self, dds_writer: Any) -> None:
        lib = _libddsc()
        lib.dds_create_statistics.restype = ctypes.c_void_p
        lib.dds_create_statistics.argtypes = [ctypes.c_int32]
        lib.dds_refresh_statistics.argtypes = [ctypes.c_void_p]
        lib.dds_refresh_statistics.restype = ctypes.c_int32
        lib.dds_lookup_statistic.restype = ctypes.POINTER(_StatKeyValue)
        lib.dds_lookup_statistic.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.dds_delete_statistics.argtypes = [ctypes.c_void_p]
        self._stats = lib.dds_create_statistics(int(dds_writer._ref))
        if not self._stats:
            raise MccError("dds_create_statistics failed for the perf writer")
        self._refresh = lib.dds_refresh_statistics
        self._count_kv = lib.dds_lookup_statistic(self._stats, b"throttle_count")
        self._time_kv = lib.dds_lookup_statistic(self._stats, b"time_throttle")
        if not self._count_kv or not self._time_kv:
            raise MccError("this libddsc has no throttle_count/time_throttle writer statistics")
        self._last = 0

    def _value(self, kv: Any) -> int:
        value = int(kv.contents.value)
        return value & 0xFFFFFFFF if kv.contents.kind == _STAT_UINT32 else value

    def rose(self) -> bool:
        """Whether the writer was throttled since the previous call."""
        self._refresh(self._stats)
        now = self._value(self._count_kv)
        rose, self._last = now > self._last, now
        return rose

    def count(self) -> int:
        self._refresh(self._stats)
        return self._value(self._count_kv)

    def time_ns(self) -> int:
        self._refresh(self._stats)
        return self._value(self._time_kv)


def run_sub(spec: SubSpec) -> dict[str, Any]:
    """Take ``PerfData`` until every writer sent its end, ``idle_s`` pass without data after
    some arrived, or ``max_s`` pass; count samples and bytes and record one-way latency
    (monotonic clock: both processes on one kernel, namespaces included)."""
    from mcc.bus import Bus

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    kind = sample_type(spec.keyed)
    profile = stream_profile(spec.reliable)
    tallies: dict[str, _WriterTally] = {}
    latencies: list[int] = []
    received = size = 0
    first_ns = last_ns = 0
    monotonic = time.monotonic_ns
    with Bus(spec.domain, name="mcc-perf-sub", monitor_qos=False) as bus:
        reader = bus.reader(DATA_TOPIC, type=kind, profile=profile)
        print(READY_LINE, flush=True)
        deadline = time.monotonic() + spec.max_s
        while not stop.is_set():
            now_s = time.monotonic()
            if now_s > deadline:
                break
            if received and (monotonic() - last_ns) / 1e9 > spec.idle_s:
                break
            batch = reader.take_wait(1024, timeout_s=0.2)
            if not batch:
                continue
            now = monotonic()
            for s in batch:
                tally = tallies.get(s.writer_id)
                if tally is None:
                    tally = tallies[s.writer_id] = _WriterTally()
                if s.seq == 0:
                    tally.ended = True
                    continue
                if s.seq != tally.last_seq + 1:
                    tally.gaps += 1
                tally.last_seq = s.seq
                tally.received += 1
                received += 1
                size += len(s.payload)
                if spec.latency and s.seq > spec.warmup_samples:
                    latencies.append(now - s.send_ns)
            if received and not first_ns:
                first_ns = now
                print(FLOWING_LINE, flush=True)
            last_ns = now if received else last_ns
            if len(tallies) >= spec.writers and all(t.ended for t in tallies.values()):
                break
    recorder = LatencyRecorder()
    if latencies:
        recorder.record_many_ns([max(0, v) for v in latencies])
    return {
        "received": received,
        "received_samples": received * spec.batch,
        "bytes": size,
        "seconds": (last_ns - first_ns) / 1e9,
        "writers": {k: dataclasses.asdict(v) for k, v in tallies.items()},
        "latency_hist": recorder.encode() if recorder.count else None,
    }


@dataclass
class ThroughputResult:
    """What a subscriber measured, with the publishers' counts for the loss."""

    samples_per_s: float
    mb_per_s: float
    received: int
    lost: int
    latency: LatencyRecorder | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def throughput_of(sub: dict[str, Any], sent_samples: int, batch: int = 1) -> ThroughputResult:
    """Samples/s and MB/s at the subscriber (first to last sample) and samples lost."""
    seconds = sub["seconds"]
    got = sub["received"]
    rate = (got - 1) * batch / seconds if seconds > 0 and got > 1 else 0.0
    mb = (sub["bytes"] * (got - 1) / got) / seconds / 1e6 if seconds > 0 and got > 1 else 0.0
    hist = sub.get("latency_hist")
    return ThroughputResult(
        samples_per_s=rate,
        mb_per_s=mb,
        received=got * batch,
        lost=max(0, sent_samples - got * batch),
        latency=LatencyRecorder.decode(hist) if hist else None,
    )


_in_process_domains: set[int] = set()
_domains = ScratchDomains(avoid=_in_process_domains)


def next_domain() -> int:
    """A scratch DDS domain for the next row (fresh per row, no leftovers), never one this
    process has a participant on already (a process configures each domain once)."""
    return next(_domains)


def claim_in_process(domain: int) -> None:
    """Note that this process configured ``domain`` (``next_domain`` skips it from now on)."""
    _in_process_domains.add(domain)


@dataclass
class PubSubRun:
    """The results of one publishers → subscribers run of MCC processes."""

    pubs: list[dict[str, Any]]
    subs: list[dict[str, Any]]

    @property
    def sent_samples(self) -> int:
        return sum(p["sent_samples"] for p in self.pubs)


def run_pubsub(
    options: PerfOptions,
    nodes: Sequence[Node],
    pubs: Sequence[PubSpec],
    *,
    subscribers: int = 1,
    batch: int = 1,
    write_batching: bool = False,
    latency: bool = True,
    timeout_s: float = 120.0,
) -> PubSubRun:
    """Run ``pubs`` on ``nodes[0]`` and ``subscribers`` subscriber processes on ``nodes[-1]``
    (all on the first publisher's domain, one discovery tag); wait for all and return what
    each measured.

    The subscribers start first; each publisher waits until all of them matched, so every
    subscriber sees every sample. ``write_batching`` turns on Cyclone's write batching in
    every process (the publishers flush when idle and at the end).
    """
    reason = require_mcc_transport(options)
    if reason is not None:
        raise MccError(reason)
    domain = pubs[0].domain
    tag = run_tag("ps")
    largest = max(p.size_bytes * batch for p in pubs)
    extra = queue_xml(options.send_queue, largest) + (WRITE_BATCH_XML if write_batching else "")
    if options.transport == "tcp" and subscribers > 1:
        raise MccError("--transport tcp runs one subscriber process (it listens on one port)")
    pub_t, sub_t = pair_transports(options, nodes, tag=tag, extra_xml=extra)
    pub_env, sub_env = child_env(pub_t, options), child_env(sub_t, options)
    max_s = max(p.duration_s for p in pubs) + _MATCH_TIMEOUT_S + 30
    with workers() as ws:
        subs = [
            ws.start_role(
                f"sub{i + 1}",
                nodes[-1],
                "sub",
                dataclasses.asdict(
                    SubSpec(
                        domain=domain,
                        keyed=options.keyed,
                        reliable=options.reliable,
                        writers=len(pubs),
                        batch=batch,
                        max_s=max_s,
                        latency=latency,
                    )
                ),
                env=sub_env,
            )
            for i in range(subscribers)
        ]
        # publishers start at once: each waits until every subscriber has matched
        pub_workers = [
            ws.start_role(
                f"pub-{spec.writer_id}",
                nodes[0],
                "pub",
                dataclasses.asdict(
                    dataclasses.replace(
                        spec,
                        domain=domain,
                        keyed=options.keyed,
                        reliable=options.reliable,
                        readers=subscribers,
                        batch=batch,
                        flush=write_batching,
                    )
                ),
                env=pub_env,
            )
            for spec in pubs
        ]
        pub_results = [w.result(timeout_s) for w in pub_workers]
        sub_results = [w.result(timeout_s) for w in subs]
    return PubSubRun(pub_results, sub_results)


def _spec_from(cls: type, text: str) -> Any:
    try:
        data = json.loads(text)
        return cls(**data)
    except (ValueError, TypeError) as exc:
        raise MccError(f"--spec {text[:200]!r} is not a {cls.__name__} ({exc})") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcc.bench.perftest")
    parser.add_argument("role", choices=["pub", "sub"])
    parser.add_argument("--spec", required=True, help="JSON of PubSpec or SubSpec")
    args = parser.parse_args(argv)
    try:
        if args.role == "pub":
            result = run_pub(_spec_from(PubSpec, args.spec))
        else:
            result = run_sub(_spec_from(SubSpec, args.spec))
    except (MccError, TransportError) as exc:
        print(f"mcc.bench.perftest {args.role}: {exc}", file=sys.stderr, flush=True)
        return 2
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
