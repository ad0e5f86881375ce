"""The radar gateway: one radar's ASTERIX stream (CAT048 plots, CAT034 markers) into
``DetectionBatch``es at the radar's site from the mission.

`RadarGateway` is the logic, fed datagrams and the clock (tests drive it directly);
`run_gateway` is its UDP loop inside an app (`mcc.apps.asterix.gateway`). What the datagram says
of the radar is never trusted for where it is: the site is the scenario's. What it says of
time is checked against this host's clock (``max_time_offset_s``); its data source against the
one configured (or the first one heard); its sender against ``allow_from``; its rate against
``max_datagrams_per_s`` and ``max_bytes_per_s``. Everything dropped is counted per category and
cause (`mcc.asterix.blocks.CAUSES`), logged once per sender, and written with the gateway's
figures to its status file every ``status_period_s``.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from mcc.asterix.blocks import InputStats
from mcc.asterix.cat034 import Marker
from mcc.asterix.cat048 import Plot
from mcc.asterix.scans import ScanAssembler, ScanBatch, detection_batch
from mcc.asterix.stream import RadarStream
from mcc.asterix.tod import unix_ns
from mcc.asterix.udp import MAX_DATAGRAM, RateLimit, open_receiver
from mcc.files import write_atomic
from mcc.types import DetectionBatch

__all__ = ["GatewaySettings", "RadarGateway", "run_gateway"]


@dataclass(frozen=True)
class GatewaySettings:
    """What one gateway needs (the app builds it from its ``config:`` and the scenario)."""

    sensor_id: str
    site_m: tuple[float, float, float]
    listen: str = "0.0.0.0:30048"
    group: str | None = None
    interface: str = "0.0.0.0"
    sac: int | None = None
    sic: int | None = None
    allow_from: tuple[str, ...] = ()
    per: Literal["scan", "sector"] = "scan"
    max_scan_s: float = 15.0
    max_range_m: float = 256 * 1852.0
    max_time_offset_s: float = 30.0
    max_datagrams_per_s: float = 5000.0
    max_bytes_per_s: float = 20e6
    max_plots_per_scan: int = 20_000
    status_period_s: float = 1.0
    buffer_octets: int = 4 << 20
    scenario_period_s: float | None = None


class RadarGateway:
    """One radar's datagrams in, its scans out through ``publish``."""

    def __init__(
        self,
        settings: GatewaySettings,
        publish: Callable[[DetectionBatch], None],
        *,
        log: logging.Logger | None = None,
    ) -> None:
        self.settings = settings
        self.publish = publish
        self.log = log or logging.getLogger("mcc.asterix.gateway")
        self.stats = InputStats(log=self.log)
        self.stream = RadarStream(self.stats)
        self.scans = ScanAssembler(per=settings.per, max_scan_s=settings.max_scan_s)
        self.datagram_limit = RateLimit(settings.max_datagrams_per_s)
        self.byte_limit = RateLimit(settings.max_bytes_per_s)
        self.allow = frozenset(settings.allow_from)
        self.source: tuple[int, int] | None = None
        if settings.sac is not None and settings.sic is not None:
            self.source = (settings.sac, settings.sic)
        self.scan_id = 0
        self.published = 0
        self.plots_published = 0
        self.evidence: Counter[str] = Counter()  # plots with Mode 3/A, Mode S, IFF, height
        self.last_origin_ns: int | None = None
        self.last_plot_wall_ns: int | None = None
        self.period_warned = False

    # -- input ---------------------------------------------------------------------------

    def datagram(self, data: bytes, sender: tuple[str, int], now_ns: int) -> None:
        """Take one datagram from ``sender`` (ip, port) received at ``now_ns``."""
        source = f"{sender[0]}:{sender[1]}"
        if self.allow and sender[0] not in self.allow:
            self.stats.datagrams += 1
            self.stats.drop(None, "sender", f"{sender[0]} is not in allow_from", source)
            return
        now_s = now_ns / 1e9
        if not self.datagram_limit.take(1.0, now_s) or not self.byte_limit.take(len(data), now_s):
            self.stats.datagrams += 1
            self.stats.drop(None, "flood", f"{len(data)} octets over the rate limits", source)
            return
        for cat, item in self.stream.decode(data, source):
            if not self._from_our_radar(cat, item, source):
                continue
            if cat == 48:
                assert isinstance(item, Plot)
                self._plot(item, source, now_ns)
            else:
                assert isinstance(item, Marker)
                self._marker(item, source, now_ns)

    def _from_our_radar(self, cat: int, item: Plot | Marker, source: str) -> bool:
        pair = (item.sac, item.sic)
        if self.source is None:
            self.source = pair
            self.log.info("%s: listening to data source SAC/SIC %d/%d", self.name, *pair)
        if pair != self.source:
            # Another radar on a shared group: not a fault, counted apart (logged once).
            key = (f"{cat:03d}", f"source {pair[0]}/{pair[1]}")
            if key not in self.stats.skipped and len(self.stats.skipped) < 256:
                self.log.info("%s: records of data source %d/%d left aside", self.name, *pair)
            if key in self.stats.skipped or len(self.stats.skipped) < 256:
                self.stats.skipped[key] += 1
            else:
                self.stats.skipped[(f"{cat:03d}", "source (others)")] += 1
            return False
        return True

    def _time_ns(self, cat: int, tod_s: float, source: str, now_ns: int) -> int | None:
        t_ns = unix_ns(tod_s, now_ns)
        offset_s = (t_ns - now_ns) / 1e9
        if abs(offset_s) > self.settings.max_time_offset_s:
            self.stats.drop(cat, "time", f"{offset_s:+.3f} s from this clock", source)
            return None
        return t_ns

    def _plot(self, plot: Plot, source: str, now_ns: int) -> None:
        if plot.range_m > self.settings.max_range_m:
            self.stats.drop(48, "range", f"range {plot.range_m:.0f} m (max_range_m)", source)
            return
        t_ns = self._time_ns(48, plot.tod_s, source, now_ns)
        if t_ns is None:
            return
        self.last_plot_wall_ns = now_ns
        closed = self.scans.add_plot(plot, t_ns)
        if closed is not None:
            self._close(closed, now_ns)

    def _marker(self, marker: Marker, source: str, now_ns: int) -> None:
        t_ns = None
        if not math.isnan(marker.tod_s):
            t_ns = self._time_ns(34, marker.tod_s, source, now_ns)
            if t_ns is None:
                return
        closed = self.scans.add_marker(marker, t_ns)
        if closed is not None:
            self._close(closed, now_ns)
        self._check_period()

    def tick(self, now_ns: int) -> None:
        """Close a scan whose radar went quiet (no plot for ``max_scan_s``)."""
        last = self.last_plot_wall_ns
        if last is not None and now_ns - last > self.settings.max_scan_s * 1e9:
            closed = self.scans.flush()
            self.last_plot_wall_ns = None
            if closed is not None:
                self._close(closed, now_ns)

    # -- output --------------------------------------------------------------------------

    def _close(self, batch: ScanBatch, now_ns: int) -> None:
        if batch.count > self.settings.max_plots_per_scan:
            detail = f"{batch.count} plots (max_plots_per_scan)"
            self.stats.drop(48, "scan_size", detail, "the radar", n=batch.count)
            return
        msg = detection_batch(
            batch,
            sensor_id=self.settings.sensor_id,
            scan_id=self.scan_id,
            site_m=self.settings.site_m,
            publish_ns=time.time_ns(),
        )
        self.scan_id += 1
        self.published += 1
        self.plots_published += batch.count
        self.last_origin_ns = msg.origin_ns
        for plot in batch.plots:
            self.evidence["mode3a"] += plot.mode3a >= 0
            self.evidence["mode_s"] += plot.mode_s >= 0
            self.evidence["iff"] += plot.iff != 0
            self.evidence["height"] += plot.height_kind != 0
        self.publish(msg)

    def _check_period(self) -> None:
        measured, expected = self.scans.scan_period_s, self.settings.scenario_period_s
        if self.period_warned or measured is None or not expected or len(self.scans.periods_s) < 3:
            return
        if abs(measured - expected) > 0.1 * expected:
            self.period_warned = True
            self.log.warning(
                "%s: the radar's north markers come every %.3f s, the scenario says %.3f s",
                self.name,
                measured,
                expected,
            )

    @property
    def name(self) -> str:
        return f"gateway of {self.settings.sensor_id!r}"

    def status(self) -> dict[str, Any]:
        """The gateway's figures (its status file)."""
        s = self.settings
        return {
            "sensor_id": s.sensor_id,
            "site_m": list(s.site_m),
            "listen": s.listen,
            "group": s.group,
            "data_source": None if self.source is None else f"{self.source[0]}/{self.source[1]}",
            "per": s.per,
            "scan_period_s": self.scans.scan_period_s,
            "antenna_rotation_s": self.scans.rotation_s,
            "scenario_scan_period_s": s.scenario_period_s,
            "markers": self.scans.markers,
            "batches_published": self.published,
            "plots_published": self.plots_published,
            "plots_with": dict(self.evidence),
            "last_origin_ns": self.last_origin_ns,
            "input": self.stats.as_dict(),
        }

    def status_text(self) -> str:
        period = self.scans.scan_period_s
        text = f"{self.published} scans, {self.plots_published} plots"
        if period is not None:
            text += f", scan {period:.2f} s"
        dropped = self.stats.summary_text()
        return f"{text}; {dropped}" if dropped else text


def run_gateway(
    gateway: RadarGateway,
    *,
    stopping: Callable[[], bool],
    on_status: Callable[[dict[str, Any], str], None],
    status_path: Path | None = None,
    count_in: Callable[[], None] | None = None,
    on_ready: Callable[[], None] | None = None,
) -> None:
    """Receive datagrams for ``gateway`` until ``stopping()`` (``count_in`` called for each,
    ``on_ready`` once the socket listens); every ``status_period_s`` write its status to
    ``status_path`` and hand it to ``on_status``. ``OSError`` when the socket cannot be opened
    (the address is taken, the group cannot be joined)."""
    s = gateway.settings
    sock = open_receiver(
        s.listen, group=s.group, interface=s.interface, buffer_octets=s.buffer_octets
    )
    sock.settimeout(0.05)
    if on_ready is not None:
        on_ready()
    next_status = time.monotonic()
    with sock:
        while not stopping():
            try:
                data, sender = sock.recvfrom(MAX_DATAGRAM)
            except TimeoutError:
                data = b""
            except OSError as exc:  # e.g. an ICMP error reported on the socket: go on
                gateway.log.debug("receive: %s", exc)
                data = b""
            now_ns = time.time_ns()
            if data:
                if count_in is not None:
                    count_in()
                gateway.datagram(data, sender, now_ns)
            gateway.tick(now_ns)
            if time.monotonic() >= next_status:
                next_status += s.status_period_s
                _status(gateway, status_path, on_status)
    _status(gateway, status_path, on_status)


def _status(
    gateway: RadarGateway,
    path: Path | None,
    on_status: Callable[[dict[str, Any], str], None],
) -> None:
    doc = gateway.status()
    if path is not None:
        try:
            write_atomic(path, json.dumps(doc, indent=1) + "\n")
        except OSError as exc:
            gateway.log.debug("cannot write %s: %s", path, exc)
    on_status(doc, gateway.status_text())
