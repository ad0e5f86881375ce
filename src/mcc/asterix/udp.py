"""UDP for ASTERIX: addresses as ``host:port``, a receiver (unicast or a multicast group) and
a sender, with a token bucket to bound what a flood costs.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import time
from dataclasses import dataclass, field

__all__ = ["RateLimit", "check_address", "open_receiver", "open_sender", "parse_address"]

MAX_DATAGRAM = 65_535


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` (an IPv4 address or a name) as ``(host, port)``; ``ValueError`` saying
    what is wrong (the caller names the value) when it is not one."""
    host, sep, port = str(text).rpartition(":")
    if not sep or not host:
        raise ValueError("expected HOST:PORT, e.g. 239.255.48.1:30048")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"the port must be 1..65535, not {port!r}")
    return host, int(port)


def check_address(text: str) -> str:
    """``text`` when it is a ``host:port`` (pydantic validator: the message is the problem)."""
    parse_address(text)
    return text


def check_ipv4(text: str) -> str:
    """``text`` when it is an IPv4 address."""
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        raise ValueError("expected an IPv4 address, e.g. 127.0.0.1") from None
    return text


def is_multicast(host: str) -> bool:
    try:
        return ipaddress.IPv4Address(host).is_multicast
    except ValueError:
        return False


def open_receiver(
    listen: str, *, group: str | None = None, interface: str = "0.0.0.0", buffer_octets: int = 0
) -> socket.socket:
    """A UDP socket bound to ``listen`` (``host:port``); with ``group`` it joins that multicast
    group on ``interface`` (bound to the group's address, so other traffic to the port stays
    out). ``buffer_octets``: the receive buffer asked of the kernel (0: its default)."""
    host, port = parse_address(listen)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if buffer_octets:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_octets)
        if group is not None:
            sock.bind((group, port))
            mreq = struct.pack("4s4s", socket.inet_aton(group), socket.inet_aton(interface))
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
        else:
            sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def open_sender(to: str, *, interface: str | None = None, ttl: int = 1) -> socket.socket:
    """A UDP socket connected to ``to`` (``host:port``); to a multicast group it sends on
    ``interface`` (default: the kernel's route) with ``ttl`` hops, and loops back to this host."""
    host, port = parse_address(to)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        if is_multicast(host):
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, ttl)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
            if interface is not None:
                sock.setsockopt(
                    socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(interface)
                )
        sock.connect((host, port))
    except OSError:
        sock.close()
        raise
    return sock


@dataclass
class RateLimit:
    """A token bucket: at most ``per_s`` units a second, bursts of one second's worth. Time
    that runs backwards (a clock stepped back) adds nothing and takes nothing."""

    per_s: float
    tokens: float = field(init=False)
    last: float | None = None

    def __post_init__(self) -> None:
        self.tokens = self.per_s

    def take(self, n: float = 1.0, now: float | None = None) -> bool:
        """True when ``n`` units may pass at ``now`` (seconds; default the monotonic clock),
        and they are taken."""
        now = time.monotonic() if now is None else now
        if self.last is not None and now > self.last:
            self.tokens = min(self.per_s, self.tokens + (now - self.last) * self.per_s)
        if self.last is None or now > self.last:
            self.last = now
        if self.tokens >= n:
            self.tokens -= n
            return True
        return False
