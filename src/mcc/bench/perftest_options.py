"""The perftest's options and QoS (``mcc.bench.perftest``): `PerfOptions` and its command-line
options, the sample types and constants of the measuring processes, and `perf_qos_file`, the
profile library the processes use, derived from ``qos/mcc.xml``.
"""

# No `from __future__ import annotations` here: cyclonedds resolves PerfKeyedSample's field
# types from real annotations, not strings.
import argparse
import atexit
import dataclasses
import re
import shutil
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import cyclonedds.idl as idl
import cyclonedds.idl.annotations as annotate
import cyclonedds.idl.types as types

from mcc.bus.transport import tcp_supported
from mcc.errors import MccError
from mcc.resources import qos_file

TRANSPORTS = ("udp", "tcp", "shm")
NETS = ("host", "netns")
DEFAULT_SEND_QUEUE = 50
"""Samples a reliable writer may have unacknowledged before a write blocks (the paper's 50)."""
DATA_TOPIC = "PerfData"
RESULT_PREFIX = "RESULT "
READY_LINE = "READY"
FLOWING_LINE = "FLOWING"
WRITE_BATCH_XML = "<Internal><WriteBatch>true</WriteBatch></Internal>"
"""Cyclone's write batching: samples queue in the writer until a packet fills or a flush."""
QUEUE_SAMPLE_OVERHEAD_BYTES = 512
"""Per queued sample on top of its payload (header, key, RTPS submessage) in `queue_xml`."""

_QOS_SOURCE = qos_file()
MATCH_TIMEOUT_S = 30.0


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
        """These options as benchmark-row fields (all but ``security``)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "security"}


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
    given = {k: getattr(args, k) for k in ("transport", "reliable", "keyed", "multicast")}
    return PerfOptions(**given, send_queue=args.send_queue, net=nets_from_args(args)[0])


@cache
def _host_roudi() -> Any:
    """The RouDi this process started for ``--transport shm`` rows (None: one ran already)."""
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
    atexit.register(shutil.rmtree, folder, True)
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
