"""Transport selection: a mission's choice of network, rendered as Cyclone DDS configuration.

>>> t = Transport(multicast=False, peers=("10.0.0.7", "10.0.0.8"), discovery_tag="sam-toc")
>>> env = t.apply_to_env(os.environ)             # for child processes: CYCLONEDDS_URI
>>> domain = Domain(7, t.participant_config())   # in this process, before any participant

The XML uses only elements that Cyclone DDS 0.10 and 11 both accept, so C tools such as
``ddsperf`` run with the same configuration. See docs/transport.md.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any, Literal

from mcc import settings
from mcc.errors import TransportError

if TYPE_CHECKING:
    from cyclonedds.domain import Domain

__all__ = ["ENV_VAR", "Transport", "TransportKind", "tcp_supported"]

TransportKind = Literal["udp", "tcp", "shm"]

#: Environment variable carrying the Transport (JSON) to child processes, next to CYCLONEDDS_URI.
ENV_VAR = settings.env_name("transport")

_KINDS = ("udp", "tcp", "shm")
# DDSI port mapping (7400 + 250 * domain + 10 + 2 * index): index 120 would reach the next
# domain's ports, hence Cyclone 0.10's documented limit "less than 120".
_MAX_INDEX = 119
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*\.?")
_TAG = re.compile(r"[A-Za-z0-9_.:@+/-]{1,200}")
_INTERFACE = re.compile(r"[A-Za-z0-9_.:%@-]{1,64}")


@dataclass(frozen=True)
class Transport:
    """How the bus reaches its peers: UDP (multicast or unicast peers), TCP, or shared memory.

    Attributes:
        kind: ``"udp"`` (default), ``"tcp"``, or ``"shm"``: UDP for discovery and other hosts,
            iceoryx shared memory between the processes of one host (Cyclone's ``psmx_iox``
            exchange; the host's RouDi daemon must run, see ``mcc.bus.shm``).
        multicast: UDP multicast discovery (default); ``False`` = unicast to ``peers`` only.
        peers: unicast peer addresses, ``host`` or ``host:port`` (IPv6 as ``[addr]:port``).
            A UDP peer without port is probed on every participant index's discovery port;
            a TCP peer needs the port its process listens on (``tcp_port`` there).
        interface: network interface name or address, e.g. ``"lo"``, ``"eth0"``, ``"10.0.0.1"``;
            ``None`` lets Cyclone choose.
        discovery_tag: participants with different tags ignore each other (Discovery/Tag).
        max_participant_index: highest participant index to allocate and probe with unicast
            discovery, 0..119 (Discovery/MaxAutoParticipantIndex).
        tcp_port: TCP port to accept connections on (``kind="tcp"`` only); ``None`` = connect
            out to ``peers`` only, ``0`` = any free port.
        extra_xml: more children of ``<Domain>`` (e.g. ``"<Tracing>...</Tracing>"``); a setting
            given here replaces the generated one, a ``Peer`` or ``NetworkInterface`` adds one.
    """

    kind: TransportKind = "udp"
    multicast: bool = True
    peers: tuple[str, ...] = ()
    interface: str | None = None
    discovery_tag: str | None = None
    max_participant_index: int | None = None
    tcp_port: int | None = None
    extra_xml: str = ""

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            _fail("kind", self.kind, f"use one of {', '.join(map(repr, _KINDS))}")
        if not isinstance(self.multicast, bool):
            _fail("multicast", self.multicast, "use True (multicast discovery) or False (unicast)")
        if isinstance(self.peers, str) or not isinstance(self.peers, tuple | list):
            _fail("peers", self.peers, "use a tuple of addresses, e.g. ('10.0.0.7', 'node-b:7410')")
        object.__setattr__(self, "peers", tuple(self.peers))
        for i, peer in enumerate(self.peers):
            port = _peer_port(f"peers[{i}]", peer)
            if self.kind == "tcp" and port is None:
                _fail(
                    f"peers[{i}]",
                    peer,
                    "a TCP peer needs the port it listens on (its tcp_port), e.g. 'node-b:7400'",
                )
        if self.interface is not None and (
            not isinstance(self.interface, str) or not _INTERFACE.fullmatch(self.interface)
        ):
            _fail("interface", self.interface, "use an interface name or address, e.g. 'eth0'")
        if self.discovery_tag is not None and (
            not isinstance(self.discovery_tag, str) or not _TAG.fullmatch(self.discovery_tag)
        ):
            _fail(
                "discovery_tag",
                self.discovery_tag,
                "use 1-200 characters from letters, digits and _.:@+/-, e.g. 'sam-toc-4711'",
            )
        index = self.max_participant_index
        if index is not None and (
            isinstance(index, bool) or not isinstance(index, int) or not 0 <= index <= _MAX_INDEX
        ):
            _fail("max_participant_index", index, f"use an integer from 0 to {_MAX_INDEX}")
        if self.tcp_port is not None:
            port = self.tcp_port
            if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
                _fail("tcp_port", port, "use a port number from 0 to 65535 (0 = any free port)")
            if self.kind != "tcp":
                _fail("tcp_port", port, "tcp_port applies to kind='tcp' only; remove it")
        if self.kind == "tcp":
            if self.multicast:
                _fail(
                    "multicast",
                    True,
                    "kind='tcp' has no multicast discovery; set multicast=False and list peers "
                    "(host:port) and/or tcp_port",
                )
            if not self.peers and self.tcp_port is None:
                _fail("peers", (), "a TCP transport needs peers to connect to or a tcp_port")
        elif not self.multicast and not self.peers:
            _fail(
                "peers",
                (),
                "unicast discovery (multicast=False) needs peers, e.g. peers=('127.0.0.1',)",
            )
        if not isinstance(self.extra_xml, str):
            _fail("extra_xml", self.extra_xml, "use a string of XML elements")
        _parse_extra(self.extra_xml)

    @classmethod
    def loopback(cls, tag: str | None = None) -> Transport:
        """One machine (tests, benchmarks): unicast on ``lo`` to 127.0.0.1, up to 100 processes.

        Unicast rather than multicast: ``lo`` has no MULTICAST flag; Cyclone 11 multicasts over
        it anyway, Cyclone 0.10 (e.g. Debian's ddsperf) does not. Unicast works with both.
        """
        return cls(
            multicast=False,
            peers=("127.0.0.1",),
            interface="lo",
            discovery_tag=tag,
            max_participant_index=99,
        )

    def to_xml(self) -> str:
        """The Cyclone DDS configuration (``<CycloneDDS><Domain id="any">…``) as one line."""
        root = ET.Element("CycloneDDS")
        domain = ET.SubElement(root, "Domain", id="any")
        general = ET.SubElement(domain, "General")
        if self.interface is not None or self.kind == "shm":
            interfaces = ET.SubElement(general, "Interfaces")
            if self.interface is not None:
                attr = "address" if _is_ip(self.interface) else "name"
                ET.SubElement(interfaces, "NetworkInterface", {attr: self.interface})
            if self.kind == "shm":
                ET.SubElement(
                    interfaces,
                    "PubSubMessageExchange",
                    {"type": "iox", "library": "psmx_iox", "config": "LOG_LEVEL=warn;"},
                )
        multicast = "default" if self.multicast else "false"
        ET.SubElement(general, "AllowMulticast").text = multicast
        ET.SubElement(general, "Transport").text = "udp" if self.kind == "shm" else self.kind
        discovery = ET.Element("Discovery")
        if self.discovery_tag is not None:
            ET.SubElement(discovery, "Tag").text = self.discovery_tag
        if self.kind != "tcp" and not self.multicast:
            # unicast discovery needs well-known ports, so each participant takes an index
            ET.SubElement(discovery, "ParticipantIndex").text = "auto"
        if self.kind == "tcp":
            # Participant discovery goes out at start-up and then every SPDPInterval (30 s by
            # default): a client started before its server would wait that long to connect.
            ET.SubElement(discovery, "SPDPInterval").text = "1s"
        if self.max_participant_index is not None:
            ET.SubElement(discovery, "MaxAutoParticipantIndex").text = str(
                self.max_participant_index
            )
        if self.peers:
            peers = ET.SubElement(discovery, "Peers")
            for peer in self.peers:
                ET.SubElement(peers, "Peer", address=peer)
        if len(discovery):
            domain.append(discovery)
        if self.tcp_port is not None:
            ET.SubElement(ET.SubElement(domain, "TCP"), "Port").text = str(self.tcp_port)
        for element in _parse_extra(self.extra_xml):
            _drop_overridden(domain, element)
            domain.append(element)
        return ET.tostring(root, encoding="unicode")

    def participant_config(self) -> str:
        """The ``config`` for ``cyclonedds.domain.Domain(domain_id, config)`` in this process.

        Create the Domain before any participant on that id, and keep a reference to it:
        deleting the Domain deletes its participants. Raises TransportError for ``kind="tcp"``
        when the loaded Cyclone library was built without TCP.
        """
        if self.kind == "tcp" and not tcp_supported():
            raise TransportError(
                "Transport.kind: 'tcp' is not supported by the Cyclone DDS library that the "
                "cyclonedds Python package loads (built without TCP); use kind='udp' with "
                "multicast=False and peers for networks without multicast, or build the "
                "package from source against a Cyclone DDS C library with TCP (see "
                "docs/transport.md)"
            )
        return self.to_xml()

    def configure_domain(self, domain_id: int) -> Domain:
        """Create this process's DDS domain ``domain_id`` with this transport; keep the result."""
        from cyclonedds.core import DDSException
        from cyclonedds.domain import Domain

        config = self.participant_config()
        try:
            return Domain(domain_id, config)
        except DDSException as exc:
            if exc.code == DDSException.DDS_RETCODE_PRECONDITION_NOT_MET:
                raise TransportError(
                    f"domain {domain_id} already exists in this process (a participant or "
                    "Domain was created on it first); configure each domain once, before "
                    "creating any participant on it"
                ) from exc
            raise TransportError(
                f"domain {domain_id}: Cyclone DDS refused the transport configuration (its "
                "reason is on stderr); check that the interface "
                f"{self.interface!r} exists and that the peers resolve"
                f"{port_clash_hint(domain_id)}: {self.to_xml()}"
            ) from exc

    def apply_to_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """A copy of ``env`` with CYCLONEDDS_URI (this XML) and MCC_TRANSPORT (this value) set."""
        out = dict(env)
        out["CYCLONEDDS_URI"] = self.to_xml()
        out[ENV_VAR] = json.dumps(asdict(self), sort_keys=True)
        return out

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Transport:
        """The Transport that :meth:`apply_to_env` set; ``Transport()`` without MCC_TRANSPORT."""
        text = settings.current().transport if env is None else env.get(ENV_VAR)
        if not text:
            return cls()
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise TypeError("not a JSON object")
            known = {f.name for f in fields(cls)}
            unknown = sorted(set(data) - known)
            if unknown:
                raise TypeError(f"unknown fields {unknown}")
            if isinstance(data.get("peers"), list):
                data["peers"] = tuple(data["peers"])
            return cls(**data)
        except TransportError as exc:
            raise TransportError(f"environment variable {ENV_VAR}: {exc}") from exc
        except (ValueError, TypeError) as exc:
            raise TransportError(
                f"environment variable {ENV_VAR}: {text[:200]!r} is not a Transport ({exc}); "
                "set it with Transport.apply_to_env() or unset it"
            ) from exc


@functools.cache
def tcp_supported() -> bool:
    """Whether the Cyclone library loaded by the cyclonedds package accepts the TCP transport.

    Probed once in a child process, so a refusal neither logs here nor leaves a domain behind.
    """
    xml = (
        '<CycloneDDS><Domain id="any"><General><Transport>tcp</Transport>'
        "</General></Domain></CycloneDDS>"
    )
    probe = "import sys; from cyclonedds.domain import Domain; Domain(0, sys.argv[1])"
    try:
        result = subprocess.run(
            [sys.executable, "-c", probe, xml], capture_output=True, timeout=60, check=False
        )
    except subprocess.TimeoutExpired:
        return False
    return result.returncode == 0


_PORT_BASE, _DOMAIN_GAIN, _PARTICIPANT_GAIN, _LAST_OFFSET = 7400, 250, 2, 11
"""Cyclone's default RTPS port mapping: PB, DG, PG and the largest of the offsets d0..d3."""
_EPHEMERAL_FILE = "/proc/sys/net/ipv4/ip_local_port_range"


def domain_ports(domain_id: int, max_participant_index: int = _MAX_INDEX) -> range:
    """The UDP ports RTPS may bind on ``domain_id`` (Cyclone's default port mapping)."""
    first = _PORT_BASE + _DOMAIN_GAIN * domain_id
    return range(first, first + _LAST_OFFSET + _PARTICIPANT_GAIN * max_participant_index + 1)


def ephemeral_ports() -> range:
    """The kernel's ephemeral port range (Linux's default 32768-60999 where unreadable)."""
    try:
        with open(_EPHEMERAL_FILE, encoding="ascii") as file:
            low, high = (int(x) for x in file.read().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


def ports_clash_with_ephemeral(domain_id: int) -> bool:
    """Whether some of ``domain_id``'s ports are ephemeral: any socket bound to port 0 (a
    client connection, a participant without index) may hold one, and then joining the
    domain fails with "address in use"."""
    ours, theirs = domain_ports(domain_id), ephemeral_ports()
    return ours.start < theirs.stop and theirs.start < ours.stop


@functools.cache
def scratch_domains() -> tuple[int, ...]:
    """Domain ids 1..230 whose ports fit in 16 bits and are never ephemeral (1..100 and
    215..230 with Linux's defaults): the ones to hand out for test and benchmark runs. Not
    above 230, which Cyclone's DDS Security governance parser refuses, so that any of them can
    run a secured mission."""
    return tuple(
        d
        for d in range(1, 231)
        if domain_ports(d).stop <= 65536 and not ports_clash_with_ephemeral(d)
    )


def port_clash_hint(domain_id: int) -> str:
    """``"; its ports … overlap the kernel's ephemeral range …"`` when they do, else ``""``:
    the likely cause of "address in use" when joining ``domain_id``."""
    if not ports_clash_with_ephemeral(domain_id):
        return ""
    ports, ephemeral = domain_ports(domain_id), ephemeral_ports()
    return (
        f"; its ports {ports.start}-{ports.stop - 1} overlap the kernel's ephemeral range "
        f"{ephemeral.start}-{ephemeral.stop - 1}, so any socket may hold one: use a domain id "
        f"from {_runs(scratch_domains())} or move the range (sysctl net.ipv4.ip_local_port_range)"
    )


def _runs(ids: tuple[int, ...]) -> str:
    """``"1..100, 215..231"`` for sorted integers."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(f"{a}..{b}" if a != b else str(a) for a, b in runs)


class ScratchDomains:
    """Hands out `scratch_domains` in turn from a per-process start, skipping ``avoid``."""

    def __init__(self, avoid: set[int] | None = None) -> None:
        self._pool = scratch_domains()
        self._k = os.getpid() * 7
        self.avoid = avoid if avoid is not None else set()

    def __next__(self) -> int:
        for _ in range(len(self._pool)):
            self._k += 1
            domain = self._pool[self._k % len(self._pool)]
            if domain not in self.avoid:
                return domain
        raise TransportError("no scratch DDS domain left: every one is in use in this process")

    def __iter__(self) -> ScratchDomains:
        return self


def _fail(field: str, value: Any, fix: str) -> None:
    raise TransportError(f"Transport.{field}: {value!r} is invalid; {fix}")


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _peer_port(field: str, peer: Any) -> int | None:
    """Validate one peer address; return its port, or None when it has none."""
    fix = "write host or host:port, e.g. '10.0.0.7', 'node-b:7410' or '[fd00::7]:7410'"
    if not isinstance(peer, str) or not peer:
        _fail(field, peer, fix)
    host, port = peer, None
    if peer.startswith("["):
        host, sep, rest = peer[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            _fail(field, peer, fix)
        port = rest[1:] if rest else None
        if not _is_ip(host) or ":" not in host:
            _fail(field, peer, fix)
    elif peer.count(":") > 1:
        if not _is_ip(peer):  # a bare IPv6 address, without port
            _fail(field, peer, fix)
        return None
    elif ":" in peer:
        host, port = peer.split(":")
    if not peer.startswith("[") and not (_is_ip(host) or _HOSTNAME.fullmatch(host)):
        _fail(field, peer, fix)
    if port is None:
        return None
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        _fail(field, peer, f"the port must be 1..65535; {fix}")
    return int(port)


def _parse_extra(extra_xml: str) -> list[ET.Element]:
    if not extra_xml.strip():
        return []
    if not extra_xml.isascii():
        _fail("extra_xml", extra_xml, "use ASCII only (Cyclone reads the configuration as ASCII)")
    try:
        return list(ET.fromstring(f"<Domain>{extra_xml}</Domain>"))
    except ET.ParseError as exc:
        _fail("extra_xml", extra_xml, f"it must be well-formed XML elements ({exc})")
    raise AssertionError("unreachable")


def _drop_overridden(ours: ET.Element, extra: ET.Element) -> None:
    """Remove from ``ours`` the leaf settings that ``extra`` (a child to be appended) sets again.

    Cyclone merges repeated groups (two ``<General>``) but rejects a repeated setting.
    """
    for mine in ours.findall(extra.tag):
        if len(extra) == 0:
            if len(mine) == 0 and (extra.text or "").strip():
                ours.remove(mine)
        else:
            for child in extra:
                _drop_overridden(mine, child)
