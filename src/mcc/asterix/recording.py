"""ASTERIX recordings: raw concatenated data blocks, or UDP captured in pcap / pcapng.

`datagrams` yields what a recording holds as ``(source, payload)``: for a raw file, one data
block at a time (``source`` its octet offset); for a capture, each UDP payload (``source`` the
sender's ``ip:port``). Link types read: Ethernet (with 802.1Q / QinQ tags), Linux cooked
(SLL, SLL2), raw IP, BSD loopback; IPv4 (fragments are counted, not reassembled) and IPv6
without extension headers. A capture cut short, a packet whose lengths lie, a frame of another
protocol: counted in `RecordingStats` and skipped, never an exception past the reader.

`radar_scans` decodes a recording with the gateway's own `RadarStream` and `ScanAssembler`,
per data source (SAC/SIC), for ``mcc track replay``.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mcc.asterix.blocks import InputStats
from mcc.asterix.cat034 import Marker
from mcc.asterix.cat048 import Plot
from mcc.asterix.scans import ScanAssembler, ScanBatch
from mcc.asterix.stream import RadarStream
from mcc.asterix.tod import unix_ns

__all__ = ["RecordingStats", "datagrams", "radar_scans", "recording_kind"]

_PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", 1_000),  # little-endian, microseconds
    b"\xa1\xb2\xc3\xd4": (">", 1_000),
    b"\x4d\x3c\xb2\xa1": ("<", 1),  # nanoseconds
    b"\xa1\xb2\x3c\x4d": (">", 1),
}
_PCAPNG_SHB = b"\x0a\x0d\x0d\x0a"
LINK_NULL, LINK_ETHERNET, LINK_RAW, LINK_SLL, LINK_IPV4, LINK_IPV6, LINK_SLL2 = (
    0, 1, 101, 113, 228, 229, 276,
)  # fmt: skip
_RAW_LINKS = {LINK_RAW, 12, 14, LINK_IPV4, LINK_IPV6}


@dataclass
class RecordingStats:
    """What a recording held besides the ASTERIX read from it."""

    packets: int = 0
    udp: int = 0
    skipped: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, object]:
        return {"packets": self.packets, "udp": self.udp, "skipped": dict(self.skipped)}


def recording_kind(head: bytes) -> str:
    """``pcap``, ``pcapng`` or ``raw`` from a file's first octets."""
    if head[:4] in _PCAP_MAGICS:
        return "pcap"
    if head[:4] == _PCAPNG_SHB:
        return "pcapng"
    return "raw"


def datagrams(data: bytes, stats: RecordingStats | None = None) -> Iterator[tuple[str, bytes]]:
    """``(source, payload)`` of each datagram (or raw data block) of recording ``data``."""
    stats = stats if stats is not None else RecordingStats()
    kind = recording_kind(data[:4])
    if kind == "pcap":
        yield from _pcap(data, stats)
    elif kind == "pcapng":
        yield from _pcapng(data, stats)
    else:
        yield from _raw(data, stats)


def _raw(data: bytes, stats: RecordingStats) -> Iterator[tuple[str, bytes]]:
    pos, end = 0, len(data)
    while pos < end:
        length = (data[pos + 1] << 8 | data[pos + 2]) if end - pos >= 3 else 0
        if length < 3 or pos + length > end:
            # framing lost: the rest is one piece, which the decoder counts and drops
            stats.packets += 1
            yield f"octet {pos}", data[pos:]
            return
        stats.packets += 1
        yield f"octet {pos}", data[pos : pos + length]
        pos += length


def _pcap(data: bytes, stats: RecordingStats) -> Iterator[tuple[str, bytes]]:
    if len(data) < 24:
        stats.skipped["truncated capture"] += 1
        return
    order, _ = _PCAP_MAGICS[data[:4]]
    link = struct.unpack_from(order + "I", data, 20)[0] & 0x0FFFFFFF
    pos = 24
    while pos < len(data):
        if len(data) - pos < 16:
            stats.skipped["truncated capture"] += 1
            return
        incl = struct.unpack_from(order + "I", data, pos + 8)[0]
        start = pos + 16
        if start + incl > len(data):
            stats.skipped["truncated capture"] += 1
            return
        stats.packets += 1
        found = _udp_of_frame(data[start : start + incl], link, order, stats)
        if found is not None:
            yield found
        pos = start + incl


def _pcapng(data: bytes, stats: RecordingStats) -> Iterator[tuple[str, bytes]]:
    pos, order = 0, "<"
    links: list[int] = []
    while pos < len(data):
        if len(data) - pos < 12:
            stats.skipped["truncated capture"] += 1
            return
        if data[pos : pos + 4] == _PCAPNG_SHB:
            magic = data[pos + 8 : pos + 12]
            if magic == b"\x4d\x3c\x2b\x1a":
                order = "<"
            elif magic == b"\x1a\x2b\x3c\x4d":
                order = ">"
            else:
                stats.skipped["bad section header"] += 1
                return
            links = []  # interface ids are per section
        kind, length = struct.unpack_from(order + "II", data, pos)
        if length < 12 or length % 4 or pos + length > len(data):
            stats.skipped["truncated capture"] += 1
            return
        body = data[pos + 8 : pos + length - 4]
        if kind == 1 and len(body) >= 2:  # interface description
            links.append(struct.unpack_from(order + "H", body, 0)[0])
        elif kind in (6, 2) and len(body) >= 20:  # enhanced packet, (obsolete) packet
            interface = struct.unpack_from(order + ("I" if kind == 6 else "H"), body, 0)[0]
            captured = struct.unpack_from(order + "I", body, 12)[0]
            stats.packets += 1
            if interface >= len(links) or 20 + captured > len(body):
                stats.skipped["bad packet block"] += 1
            else:
                found = _udp_of_frame(body[20 : 20 + captured], links[interface], order, stats)
                if found is not None:
                    yield found
        elif kind == 3 and len(body) >= 4:  # simple packet: interface 0
            stats.packets += 1
            if not links:
                stats.skipped["bad packet block"] += 1
            else:
                size = min(struct.unpack_from(order + "I", body, 0)[0], len(body) - 4)
                found = _udp_of_frame(body[4 : 4 + size], links[0], order, stats)
                if found is not None:
                    yield found
        pos += length


def _udp_of_frame(
    frame: bytes, link: int, order: str, stats: RecordingStats
) -> tuple[str, bytes] | None:
    """``(ip:port, payload)`` of the UDP datagram in one captured frame, else None (counted)."""
    if link == LINK_ETHERNET:
        if len(frame) < 14:
            stats.skipped["short frame"] += 1
            return None
        ethertype, pos = frame[12] << 8 | frame[13], 14
        while ethertype in (0x8100, 0x88A8, 0x9100) and len(frame) >= pos + 4:
            ethertype, pos = frame[pos + 2] << 8 | frame[pos + 3], pos + 4
        return _ip(frame, pos, ethertype, stats)
    if link == LINK_SLL:
        if len(frame) < 16:
            stats.skipped["short frame"] += 1
            return None
        return _ip(frame, 16, frame[14] << 8 | frame[15], stats)
    if link == LINK_SLL2:
        if len(frame) < 20:
            stats.skipped["short frame"] += 1
            return None
        return _ip(frame, 20, frame[0] << 8 | frame[1], stats)
    if link == LINK_NULL:
        if len(frame) < 4:
            stats.skipped["short frame"] += 1
            return None
        family = struct.unpack_from(order + "I", frame, 0)[0]
        return _ip(frame, 4, 0x0800 if family == 2 else 0x86DD, stats)
    if link in _RAW_LINKS:
        version = frame[0] >> 4 if frame else 0
        return _ip(frame, 0, 0x0800 if version == 4 else 0x86DD, stats)
    stats.skipped[f"link type {link}"] += 1
    return None


def _ip(frame: bytes, pos: int, ethertype: int, stats: RecordingStats) -> tuple[str, bytes] | None:
    if ethertype == 0x0800:
        if len(frame) < pos + 20 or frame[pos] >> 4 != 4:
            stats.skipped["bad IPv4 header"] += 1
            return None
        ihl = (frame[pos] & 0x0F) * 4
        total = frame[pos + 2] << 8 | frame[pos + 3]
        flags_offset = frame[pos + 6] << 8 | frame[pos + 7]
        if frame[pos + 9] != 17:
            stats.skipped["not UDP"] += 1
            return None
        if flags_offset & 0x3FFF:  # more fragments, or not the first one
            stats.skipped["IPv4 fragment"] += 1
            return None
        if ihl < 20 or total < ihl + 8 or len(frame) < pos + ihl + 8:
            stats.skipped["bad IPv4 header"] += 1
            return None
        source = ".".join(str(b) for b in frame[pos + 12 : pos + 16])
        return _udp(frame, pos + ihl, pos + total, source, stats)
    if ethertype == 0x86DD:
        if len(frame) < pos + 48:
            stats.skipped["bad IPv6 header"] += 1
            return None
        if frame[pos + 6] != 17:
            stats.skipped["not UDP"] += 1
            return None
        payload = frame[pos + 4] << 8 | frame[pos + 5]
        words = struct.unpack_from(">8H", frame, pos + 8)
        source = ":".join(f"{w:x}" for w in words)
        return _udp(frame, pos + 40, pos + 40 + payload, f"[{source}]", stats)
    stats.skipped["not IP"] += 1
    return None


def _udp(
    frame: bytes, pos: int, ip_end: int, source: str, stats: RecordingStats
) -> tuple[str, bytes] | None:
    length = frame[pos + 4] << 8 | frame[pos + 5]
    end = pos + length
    if length < 8 or end > ip_end or end > len(frame):
        stats.skipped["bad UDP length"] += 1
        return None
    stats.udp += 1
    port = frame[pos] << 8 | frame[pos + 1]
    return f"{source}:{port}", bytes(frame[pos + 8 : end])


@dataclass
class SourceScans:
    """One data source's scans read from a recording; times are the ASTERIX time of day in
    seconds, continued past midnight (+86 400 s)."""

    sac: int
    sic: int
    scans: list[ScanBatch] = field(default_factory=list)
    assembler: ScanAssembler = field(default_factory=ScanAssembler)
    last_ns: int | None = None


def radar_scans(
    path: str | Path, *, per: str = "scan", max_scan_s: float = 15.0
) -> tuple[dict[tuple[int, int], SourceScans], InputStats, RecordingStats]:
    """The scans of every radar (SAC/SIC) of the recording at ``path``, with the counts of
    what was dropped (`InputStats`) and skipped (`RecordingStats`). ``OSError`` when the file
    cannot be read."""
    data = Path(path).read_bytes()
    stats = InputStats()
    recording = RecordingStats()
    stream = RadarStream(stats)
    sources: dict[tuple[int, int], SourceScans] = {}
    for source, payload in datagrams(data, recording):
        for _, item in stream.decode(payload, f"{path} {source}"):
            key = (item.sac, item.sic)
            found = sources.get(key)
            if found is None:
                found = sources[key] = SourceScans(
                    *key,
                    assembler=ScanAssembler(per=per, max_scan_s=max_scan_s),  # type: ignore[arg-type]
                )
            _take(found, item)
    for found in sources.values():
        closed = found.assembler.flush()
        if closed is not None:
            found.scans.append(closed)
    return sources, stats, recording


def _take(found: SourceScans, item: Plot | Marker) -> None:
    if item.tod_s != item.tod_s:  # a marker without a time: it still closes a scan
        closed = found.assembler.add_marker(item, None) if isinstance(item, Marker) else None
    else:
        # Continue the time of day past midnight: the day is the one nearest the last time.
        near = found.last_ns if found.last_ns is not None else round(item.tod_s * 1e9)
        t_ns = unix_ns(item.tod_s, near)
        found.last_ns = t_ns
        if isinstance(item, Plot):
            closed = found.assembler.add_plot(item, t_ns)
        else:
            closed = found.assembler.add_marker(item, t_ns)
    if closed is not None:
        found.scans.append(closed)
