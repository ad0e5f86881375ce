"""The track output: air pictures in, CAT062 system tracks and CAT065 status out."""

from __future__ import annotations

import math
import socket
import time
from pathlib import Path

import numpy as np
import pytest

from mcc.asterix.blocks import split_blocks
from mcc.asterix.cat062 import decode_tracks
from mcc.asterix.cat065 import decode_status
from mcc.asterix.output import OutputSettings, TrackOutput, enu_to_wgs84
from mcc.bus import Bus
from mcc.types import AirPicture, Identity, IffAnswer, TargetClass, TrackStatus
from mcc.types.arrays import pack
from tests.apps.configs import configured
from tests.asterix.conftest import Oracle
from tests.conftest import app_instance, wait_for

NOW_NS = 1_790_000_000 * 10**9


def picture(
    ids: list[int], *, cycle: int = 1, time_ns: int = NOW_NS, tracker_id: str = "t/tracker/0"
) -> AirPicture:
    n = len(ids)
    state = np.array([[1000.0 * k, -500.0 * k, 300.0 + k, 200.0, -20.0, 1.0] for k in range(n)])
    cov = np.tile(np.diag([100.0, 400.0, 900.0, 4.0, 9.0, 1.0]), (n, 1, 1))
    return AirPicture(
        tracker_id=tracker_id,
        cycle=cycle,
        time_ns=time_ns,
        origin_ns=time_ns - 10**8,
        publish_ns=time_ns,
        count=n,
        track_id=pack(ids, "<u4"),
        status=pack([int(TrackStatus.TRACK_CONFIRMED.value)] * n, "u1"),
        classification=pack([int(TargetClass.CLASS_CRUISE_MISSILE.value)] * n, "u1"),
        quality=pack([0.9] * n, "<f8"),
        state=pack(state, "<f8"),
        covariance=pack(cov, "<f8"),
        identity=pack([int(Identity.IDENTITY_HOSTILE.value)] * n, "u1"),
        iff=pack([int(IffAnswer.IFF_NO_REPLY.value)] * n, "u1"),
    )


def output(**kw: object) -> tuple[TrackOutput, list[bytes]]:
    sent: list[bytes] = []
    settings = OutputSettings(to="127.0.0.1:9", sac=1, sic=100, **kw)  # type: ignore[arg-type]
    return TrackOutput(settings, sent.append), sent


def tracks_of(sent: list[bytes]) -> list[dict]:
    return [t for d in sent if d[0] == 62 for t in decode_tracks(d)]


def test_a_picture_goes_out_as_tracks_then_an_end_of_batch_and_status() -> None:
    out, sent = output(origin=(48.0, -4.0, 0.0))
    out.on_picture(picture([1, 2, 70_000]), NOW_NS)
    out.tick(NOW_NS)
    cats = [d[0] for d in sent]
    assert cats == [62, 65, 65]  # tracks, end of batch, SDPS status
    tracks = tracks_of(sent)
    assert [t["number"] for t in tracks] == [1, 2, 70_000 % 65536]
    assert [(t["x_m"], t["y_m"]) for t in tracks] == [
        (0.0, 0.0),
        (1000.0, -500.0),
        (2000.0, -1000.0),
    ]
    first = tracks[0]
    assert (first["tsb"], first["tse"], first["cnf"], first["md5"]) == (1, 0, 0, 3)
    assert (first["identity"], first["classification"]) == (6, 2)  # HOSTILE, CRUISE_MISSILE
    assert first["tod_s"] == pytest.approx((NOW_NS % (86_400 * 10**9)) / 1e9, abs=1 / 128)
    assert first["lat_deg"] == pytest.approx(48.0, abs=180 / 2**26)  # half the LSB
    [end, status] = [decode_status(d)[0] for d in sent[1:]]
    assert (end["kind"], end["batch"], status["kind"], status["nogo"]) == (2, 1, 1, 0)
    # The same picture is not sent twice; the next one ends track 2 and begins track 3.
    out.tick(NOW_NS + 10**9)
    assert [d[0] for d in sent[3:]] == [65]
    out.on_picture(picture([1, 3, 70_000], cycle=2, time_ns=NOW_NS + 10**9), NOW_NS + 10**9)
    sent.clear()
    out.tick(NOW_NS + 2 * 10**9)
    tracks = tracks_of(sent)
    assert [(t["number"], t["tsb"], t["tse"]) for t in tracks] == [
        (1, 0, 0), (3, 1, 0), (70_000 % 65536, 0, 0), (2, 0, 1),
    ]  # fmt: skip
    assert out.status()["tracks_now"] == 3


def test_track_numbers_stay_unique_in_16_bits() -> None:
    out, sent = output()
    out.on_picture(picture([5, 65_536 + 5, 2 * 65_536 + 5]), NOW_NS)
    out.tick(NOW_NS)
    assert [t["number"] for t in tracks_of(sent)] == [5, 6, 7]


def test_an_old_picture_is_not_sent_and_the_status_says_degraded() -> None:
    out, sent = output(max_picture_age_s=2.0)
    out.on_picture(picture([1]), NOW_NS)
    out.tick(NOW_NS + 3 * 10**9)
    assert [d[0] for d in sent] == [65]
    assert decode_status(sent[0])[0]["nogo"] == 1


def test_hostile_pictures_are_dropped_and_counted() -> None:
    out, sent = output(max_tracks=5)
    out.on_picture(picture([1], time_ns=NOW_NS + 60 * 10**9), NOW_NS)  # from the future
    out.on_picture(picture([1], time_ns=NOW_NS - 60 * 10**9), NOW_NS)  # long ago
    out.on_picture(picture(list(range(6))), NOW_NS)  # too many tracks
    bad = picture([1, 2])
    bad.count = 3  # arrays of 2 tracks, a count of 3
    out.on_picture(bad, NOW_NS)
    out.on_picture(picture([1], tracker_id="other"), NOW_NS)  # followed: the first heard
    out.on_picture(picture([9], tracker_id="t/tracker/0"), NOW_NS)
    out.on_picture(picture([8], tracker_id="other"), NOW_NS)
    assert out.dropped == {"stamped": 2, "large": 1, "arrays": 1}
    out.tick(NOW_NS)
    assert [t["number"] for t in tracks_of(sent)] == [8]  # tracker "other", heard first


def test_enu_to_wgs84_follows_the_ellipsoid() -> None:
    lat0 = 45.0
    east, north = np.array([0.0, 0.0, 10_000.0]), np.array([0.0, 10_000.0, 0.0])
    lat, lon = enu_to_wgs84(east, north, np.zeros(3), (lat0, 7.0, 0.0))
    e2 = 6.69437999014e-3
    s = math.sin(math.radians(lat0))
    meridian = 6_378_137.0 * (1 - e2) / (1 - e2 * s * s) ** 1.5
    normal = 6_378_137.0 / math.sqrt(1 - e2 * s * s)
    assert (lat[0], lon[0]) == pytest.approx((45.0, 7.0), abs=1e-9)
    assert lat[1] - lat0 == pytest.approx(math.degrees(10_000 / meridian), rel=1e-3)
    assert lon[2] - 7.0 == pytest.approx(
        math.degrees(10_000 / (normal * math.cos(math.radians(lat0)))), rel=1e-3
    )


@pytest.mark.slow
def test_the_track_output_app_sends_the_bus_picture_over_udp(
    bus_env: dict[str, str], domain_id: int, tmp_path: Path, oracle: Oracle
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        rx.bind(("127.0.0.1", 0))
        rx.settimeout(0.2)
        port = rx.getsockname()[1]
        env = configured(bus_env, to=f"127.0.0.1:{port}", sic=100, rate_hz=5.0)
        with (
            Bus(domain_id) as bus,
            app_instance("mcc.apps.asterix:track_output", env=env, system="out", logs=tmp_path),
        ):
            pictures = bus.writer("AirPicture")
            got: list[bytes] = []

            def heard_tracks() -> bool:
                now = time.time_ns()
                pictures.write(picture([11, 12], cycle=now, time_ns=now))
                try:
                    while True:
                        got.append(rx.recv(65_535))
                except TimeoutError:
                    pass
                return any(d[0] == 62 for d in got)

            wait_for(heard_tracks, 30, f"CAT062 from the app: {(tmp_path / 'out.log').read_text()}")
    records = [r for parsed in oracle.parse(got) for r in parsed]
    tracks = [r for r in records if r["category"] == 62]
    assert {r["I040"]["TrkN"]["val"] for r in tracks} >= {11, 12}
    assert {r["I010"]["SIC"]["val"] for r in records} == {100}
    assert any(r["category"] == 65 and r["I000"]["Typ"]["val"] == 1 for r in records)
    assert all(not split_blocks(d).fault for d in got)
    status = (tmp_path / "asterix-out-0.json").read_text()
    assert '"records"' in status
