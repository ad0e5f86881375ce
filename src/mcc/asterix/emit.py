"""A radar's scans sent as ASTERIX: what MCC's radar simulator emits for a gateway.

Each scan goes out as CAT048 target reports (one data block per datagram, at most
``max_datagram_octets``) followed by a CAT034 north marker with the scan's time and the antenna
rotation period: a snapshot radar's plots before the marker that closes them
(`mcc.asterix.scans`). Every plot of a scan carries the scan's time of day.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Sequence
from typing import Any

import numpy.typing as npt

from mcc.asterix.cat034 import NORTH, encode_marker
from mcc.asterix.cat048 import Column, encode_plots
from mcc.asterix.tod import tod_units
from mcc.asterix.udp import open_sender

__all__ = ["PlotEmitter"]


class PlotEmitter:
    """Sends scans of one radar (data source ``sac``/``sic``) to ``to`` (``host:port``)."""

    def __init__(
        self,
        to: str,
        *,
        sac: int,
        sic: int,
        rotation_s: float,
        interface: str | None = None,
        max_datagram_octets: int = 1400,
        log: logging.Logger | None = None,
    ) -> None:
        self.to = to
        self.sac, self.sic = sac, sic
        self.rotation_s = rotation_s
        self.max_datagram_octets = max_datagram_octets
        self.log = log or logging.getLogger("mcc.asterix.emit")
        self.sock: socket.socket = open_sender(to, interface=interface)
        self.datagrams = 0
        self.plots = 0
        self.unsent = 0  # plots the format cannot hold (beyond 256 NM)
        self.errors = 0

    def send_scan(
        self,
        time_ns: int,
        *,
        range_m: Column,
        azimuth_rad: Column,
        height_m: Column,
        iff: Sequence[int] | npt.NDArray[Any] | None,
        doppler_mps: Column,
        amplitude_db: Column,
    ) -> None:
        """Send one scan seen at ``time_ns`` (plots, then its north marker)."""
        units = tod_units(time_ns)
        blocks, unsent = encode_plots(
            sac=self.sac,
            sic=self.sic,
            tod_units=units,
            range_m=range_m,
            azimuth_rad=azimuth_rad,
            height_m=height_m,
            iff=iff,
            doppler_mps=doppler_mps,
            amplitude_db=amplitude_db,
            max_block_octets=self.max_datagram_octets,
        )
        self.unsent += unsent
        self.plots += len(range_m) - unsent
        marker = encode_marker(
            sac=self.sac, sic=self.sic, tod_units=units, kind=NORTH, rotation_s=self.rotation_s
        )
        for datagram in [*blocks, marker]:
            try:
                self.sock.send(datagram)
            except OSError as exc:  # nobody listening yet, a full buffer: count, go on
                self.errors += 1
                if self.errors == 1:
                    self.log.warning(
                        "ASTERIX to %s: %s; further errors are counted, not logged", self.to, exc
                    )
                continue
            self.datagrams += 1

    def close(self) -> None:
        self.sock.close()
