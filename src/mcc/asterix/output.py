"""The air picture out as CAT062 system tracks, with CAT065 SDPS status, over UDP.

`TrackOutput` is the logic, fed ``AirPicture`` samples and the clock (tests drive it
directly); `mcc.apps.asterix.track_output` runs it on the bus. Every ``1 / rate_hz`` seconds the
newest picture of the tracker followed (``tracker_id``, else the first heard) goes out as one
CAT062 record per track, the records packed into datagrams of at most ``max_datagram_octets``,
then a CAT065 end of batch; a track that left the picture gets one last record with TSE set,
a new one TSB on its first. Track numbers are 16 bits: a track id keeps the number it got
(its id modulo 65536 when free, else the next free one) until its end. An SDPS status goes out
every ``status_period_s``: operational while pictures come, degraded when the newest is older
than ``max_picture_age_s`` (no tracks are sent then: old positions are worse than none).

Hostile pictures are normal input: a picture stamped too far from this clock, of more than
``max_tracks`` tracks, or whose arrays do not hold ``count`` tracks is dropped and counted.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mcc.asterix.cat062 import SystemTrack, encode_tracks
from mcc.asterix.cat065 import (
    END_OF_BATCH,
    NOGO_DEGRADED,
    NOGO_OPERATIONAL,
    SDPS_STATUS,
    encode_status,
)
from mcc.asterix.tod import tod_units
from mcc.types import AirPicture
from mcc.types.arrays import optional_field, packed_field

__all__ = ["OutputSettings", "TrackOutput", "enu_to_wgs84"]

# WGS-84
_A = 6_378_137.0
_F = 1 / 298.257223563
_E2 = _F * (2 - _F)


def enu_to_wgs84(
    east_m: np.ndarray, north_m: np.ndarray, up_m: np.ndarray, origin: tuple[float, float, float]
) -> tuple[np.ndarray, np.ndarray]:
    """Latitude and longitude (degrees) of ENU points about ``origin`` (lat °, lon °, height
    m), through ECEF on the WGS-84 ellipsoid (Bowring's latitude)."""
    lat0, lon0, h0 = math.radians(origin[0]), math.radians(origin[1]), origin[2]
    s_lat, c_lat, s_lon, c_lon = math.sin(lat0), math.cos(lat0), math.sin(lon0), math.cos(lon0)
    n0 = _A / math.sqrt(1 - _E2 * s_lat**2)
    x0, y0, z0 = (n0 + h0) * c_lat * c_lon, (n0 + h0) * c_lat * s_lon, (n0 * (1 - _E2) + h0) * s_lat
    x = x0 - s_lon * east_m - s_lat * c_lon * north_m + c_lat * c_lon * up_m
    y = y0 + c_lon * east_m - s_lat * s_lon * north_m + c_lat * s_lon * up_m
    z = z0 + c_lat * north_m + s_lat * up_m
    b = _A * (1 - _F)
    ep2 = (_A**2 - b**2) / b**2
    p = np.hypot(x, y)
    theta = np.arctan2(z * _A, p * b)
    lat = np.arctan2(z + ep2 * b * np.sin(theta) ** 3, p - _E2 * _A * np.cos(theta) ** 3)
    lon = np.arctan2(y, x)
    return np.degrees(lat), np.degrees(lon)


@dataclass(frozen=True)
class OutputSettings:
    """What a track output needs (the app builds it from its ``config:``)."""

    to: str
    sac: int = 0
    sic: int = 1
    service_id: int = 1
    rate_hz: float = 1.0
    tracker_id: str | None = None
    origin: tuple[float, float, float] | None = None  # lat °, lon °, height m of ENU (0, 0, 0)
    status_period_s: float = 1.0
    max_picture_age_s: float = 5.0
    max_future_s: float = 2.0
    max_datagram_octets: int = 1400
    max_tracks: int = 20_000
    interface: str | None = None
    ttl: int = 1


@dataclass
class TrackOutput:
    """Air pictures in, CAT062/CAT065 datagrams out through ``send``."""

    settings: OutputSettings
    send: Callable[[bytes], Any]
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("mcc.asterix.output"))
    picture: AirPicture | None = None
    picture_receive_ns: int = 0
    sent_cycle: int | None = None
    numbers: dict[int, int] = field(default_factory=dict)  # track id → track number
    last: dict[int, SystemTrack] = field(default_factory=dict)  # track id → its last report
    batch: int = 0
    next_update_ns: int = 0
    next_status_ns: int = 0
    updates: int = 0
    records: int = 0
    datagrams: int = 0
    octets: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    left_out: Counter[str] = field(default_factory=Counter)
    send_errors: int = 0
    other_trackers: set[str] = field(default_factory=set)

    def on_picture(self, msg: AirPicture, receive_ns: int) -> None:
        """Keep ``msg`` when it is the newest sound picture of the tracker followed."""
        s = self.settings
        if s.tracker_id is None and self.picture is not None:
            followed = self.picture.tracker_id
        else:
            followed = s.tracker_id or msg.tracker_id
        if msg.tracker_id != followed:
            if msg.tracker_id not in self.other_trackers and len(self.other_trackers) < 64:
                self.other_trackers.add(msg.tracker_id)
                self.log.info(
                    "AirPicture of tracker %r ignored: following %r",
                    msg.tracker_id[:80],
                    followed[:80],
                )
            return
        ahead_s = (msg.time_ns - receive_ns) / 1e9
        if ahead_s > s.max_future_s or -ahead_s > s.max_picture_age_s:
            self._drop("stamped", f"picture time {ahead_s:+.3f} s from this clock")
            return
        if msg.count > s.max_tracks:
            self._drop("large", f"{msg.count} tracks (max_tracks {s.max_tracks})")
            return
        try:
            packed_field(msg, "state").reshape(msg.count, 6)
            packed_field(msg, "covariance").reshape(msg.count, 6, 6)
            packed_field(msg, "track_id")
            packed_field(msg, "status")
            optional_field(msg, "iff")
            optional_field(msg, "identity")
        except ValueError as exc:
            self._drop("arrays", str(exc))
            return
        if self.picture is not None and msg.time_ns < self.picture.time_ns:
            self._drop("old", "older than the picture held")
            return
        self.picture, self.picture_receive_ns = msg, receive_ns

    def _drop(self, why: str, detail: str) -> None:
        self.dropped[why] += 1
        if self.dropped[why] == 1:
            self.log.warning("AirPicture dropped: %s; further ones are counted, not logged", detail)

    def tick(self, now_ns: int) -> None:
        """Send what is due at ``now_ns``: the tracks at the update rate, the SDPS status at
        its period."""
        s = self.settings
        fresh = (
            self.picture is not None and now_ns - self.picture.time_ns <= s.max_picture_age_s * 1e9
        )
        if now_ns >= self.next_update_ns:
            self.next_update_ns = now_ns + int(1e9 / s.rate_hz)
            if fresh and self.picture is not None and self.picture.cycle != self.sent_cycle:
                self._update(self.picture, now_ns)
        if now_ns >= self.next_status_ns:
            self.next_status_ns = now_ns + int(s.status_period_s * 1e9)
            nogo = NOGO_OPERATIONAL if fresh else NOGO_DEGRADED
            self._send(
                encode_status(
                    sac=s.sac,
                    sic=s.sic,
                    service_id=s.service_id,
                    tod_units=tod_units(now_ns),
                    kind=SDPS_STATUS,
                    nogo=nogo,
                )
            )

    def _number(self, track_id: int) -> int:
        number = self.numbers.get(track_id)
        if number is not None:
            return number
        taken = set(self.numbers.values())
        number = track_id % 65536
        for _ in range(65536):
            if number not in taken:
                break
            number = (number + 1) % 65536
        self.numbers[track_id] = number
        return number

    def _update(self, msg: AirPicture, now_ns: int) -> None:
        s = self.settings
        n = msg.count
        ids = packed_field(msg, "track_id").astype(np.int64)
        status = packed_field(msg, "status")
        classes = packed_field(msg, "classification")
        state = packed_field(msg, "state").reshape(n, 6)
        cov = packed_field(msg, "covariance").reshape(n, 6, 6)
        iff = optional_field(msg, "iff")
        identity = optional_field(msg, "identity")
        variances = np.clip(np.diagonal(cov, axis1=1, axis2=2), 0.0, None)
        sigma = np.sqrt(variances)
        lat = lon = None
        if s.origin is not None:
            lat, lon = enu_to_wgs84(state[:, 0], state[:, 1], state[:, 2], s.origin)
        reports: list[SystemTrack] = []
        now: dict[int, SystemTrack] = {}
        for row in range(n):
            track_id = int(ids[row])
            begin = track_id not in self.last
            x = state[row]
            report = SystemTrack(
                number=self._number(track_id),
                x_m=float(x[0]),
                y_m=float(x[1]),
                z_m=float(x[2]),
                vx_mps=float(x[3]),
                vy_mps=float(x[4]),
                vz_mps=float(x[5]),
                sigma_xy_m=(float(sigma[row, 0]), float(sigma[row, 1])),
                sigma_v_mps=(float(sigma[row, 3]), float(sigma[row, 4])),
                sigma_z_m=float(sigma[row, 2]),
                status=int(status[row]),
                iff=0 if iff is None else int(iff[row]),
                identity=0 if identity is None else int(identity[row]),
                classification=int(classes[row]),
                begin=begin,
                lat_deg=None if lat is None else float(lat[row]),
                lon_deg=None if lon is None else float(lon[row]),
            )
            reports.append(report)
            now[track_id] = report
        for track_id, report in self.last.items():
            if track_id not in now:  # left the picture: its last report, track service end
                reports.append(report._replace(end=True, begin=False))
                self.numbers.pop(track_id, None)
        self.last = now
        blocks = encode_tracks(
            reports,
            sac=s.sac,
            sic=s.sic,
            service_id=s.service_id,
            tod_units=tod_units(msg.time_ns),
            max_block_octets=s.max_datagram_octets,
            left_out=self.left_out,
        )
        for block in blocks:
            self._send(block)
        self.records += len(reports)
        self.batch += 1
        self.updates += 1
        self.sent_cycle = msg.cycle
        self._send(
            encode_status(
                sac=s.sac,
                sic=s.sic,
                service_id=s.service_id,
                tod_units=tod_units(now_ns),
                kind=END_OF_BATCH,
                batch=self.batch,
            )
        )

    def _send(self, datagram: bytes) -> None:
        try:
            self.send(datagram)
        except OSError as exc:  # no route, a full buffer, a refused port: count, go on
            self.send_errors += 1
            if self.send_errors == 1:
                self.log.warning(
                    "cannot send to %s: %s; further errors are counted", self.settings.to, exc
                )
            return
        self.datagrams += 1
        self.octets += len(datagram)

    def status(self) -> dict[str, Any]:
        s = self.settings
        return {
            "to": s.to,
            "data_source": f"{s.sac}/{s.sic}",
            "tracker_id": self.picture.tracker_id if self.picture is not None else s.tracker_id,
            "updates": self.updates,
            "records": self.records,
            "datagrams": self.datagrams,
            "octets": self.octets,
            "tracks_now": len(self.last),
            "pictures_dropped": dict(self.dropped),
            "items_left_out": dict(self.left_out),
            "send_errors": self.send_errors,
        }
