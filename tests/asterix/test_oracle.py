"""MCC's ASTERIX against an independent decoder (asterix-decoder, C++): what MCC writes the
oracle reads back field by field, and what real radars sent (the oracle's sample recordings)
MCC reads as the oracle does."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from mcc.asterix.cat034 import NORTH, SECTOR, encode_marker
from mcc.asterix.cat048 import FT_M, NM_M, encode_plots
from mcc.asterix.cat062 import SystemTrack, decode_tracks, encode_tracks
from mcc.asterix.cat065 import END_OF_BATCH, NOGO_DEGRADED, decode_status, encode_status
from mcc.asterix.recording import datagrams
from mcc.asterix.stream import RadarStream
from mcc.types import IffAnswer
from tests.asterix.conftest import Oracle

FOEFRI_OF_IFF = {0: 0, 2: 1, 3: 2, 1: 3}  # IffAnswer value → I048/020 FOE/FRI


def _val(record: dict, item: str, name: str) -> object:
    return record[item][name]["val"]


def test_plots_mcc_writes_are_what_the_oracle_reads(oracle: Oracle) -> None:
    rng = np.random.default_rng(48)
    n = 120
    r = rng.uniform(200, 250_000, n)
    az = rng.uniform(0, 2 * np.pi, n)
    h = rng.uniform(-100, 20_000, n)
    iff = rng.integers(0, 4, n).astype(np.uint8)
    dop = rng.uniform(-600, 600, n)
    amp = rng.uniform(-140, 140, n)
    blocks, unsent = encode_plots(
        sac=7, sic=42, tod_units=86_399 * 128 + 5, range_m=r, azimuth_rad=az, height_m=h,
        iff=iff, doppler_mps=dop, amplitude_db=amp, max_block_octets=400,
    )  # fmt: skip
    assert unsent == 0 and len(blocks) > 3 and all(len(b) <= 400 for b in blocks)
    records = [rec for parsed in oracle.parse(blocks) for rec in parsed]
    assert len(records) == n
    for k, rec in enumerate(records):
        assert rec["category"] == 48
        assert (_val(rec, "I010", "SAC"), _val(rec, "I010", "SIC")) == (7, 42)
        assert _val(rec, "I140", "ToD") == pytest.approx(86_399 + 5 / 128)
        assert _val(rec, "I020", "TYP") == 1
        assert _val(rec, "I020", "FOEFRI") == FOEFRI_OF_IFF[int(iff[k])]
        assert _val(rec, "I040", "RHO") * NM_M == pytest.approx(r[k], abs=NM_M / 512)
        theta = math.radians(float(_val(rec, "I040", "THETA")))  # type: ignore[arg-type]
        assert math.remainder(theta - az[k], 2 * math.pi) == pytest.approx(0, abs=5e-5)
        assert _val(rec, "I110", "3D_Height") * FT_M == pytest.approx(h[k], abs=12.5 * FT_M)
        assert rec["I130"]["PAMP"]["PAM"]["val"] == pytest.approx(
            np.clip(amp[k], -128, 127), abs=0.5
        )
        if abs(round(dop[k])) <= 511:
            assert rec["I120"]["CAL"]["CAL"]["val"] == round(dop[k])
        else:
            assert "I120" not in rec  # beyond the item's ±511 m/s: left out
    # MCC reads its own plots as the oracle does.
    stream = RadarStream()
    plots = [p for b in blocks for _, p in stream.decode(b, "test")]
    assert len(plots) == n
    for plot, rec in zip(plots, records, strict=True):
        assert plot.range_m == pytest.approx(_val(rec, "I040", "RHO") * NM_M)
        assert plot.height_m == pytest.approx(_val(rec, "I110", "3D_Height") * FT_M)
        assert FOEFRI_OF_IFF[plot.iff] == _val(rec, "I020", "FOEFRI")


def test_markers_mcc_writes_are_what_the_oracle_reads(oracle: Oracle) -> None:
    north = encode_marker(sac=1, sic=2, tod_units=128 * 3600, kind=NORTH, rotation_s=4.5)
    sector = encode_marker(sac=1, sic=2, tod_units=128 * 3601, kind=SECTOR, sector_rad=math.pi)
    [[n], [s]] = oracle.parse([north, sector])
    assert (n["category"], _val(n, "I000", "MsgTyp"), _val(n, "I030", "ToD")) == (34, 1, 3600.0)
    assert _val(n, "I041", "RotS") == 4.5
    assert (_val(s, "I000", "MsgTyp"), _val(s, "I020", "Azi")) == (2, 180.0)
    markers = [m for d in (north, sector) for _, m in RadarStream().decode(d, "test")]
    assert [(m.kind, m.tod_s) for m in markers] == [(1, 3600.0), (2, 3601.0)]
    assert markers[0].rotation_s == 4.5 and markers[1].sector_rad == pytest.approx(math.pi)


def _plots_and_oracle(oracle: Oracle, payloads: list[bytes]) -> tuple[list, list]:
    """MCC's plots and markers, and the oracle's records less the reports of no detection
    (I048/020 TYP 0 without a position: a track's end), which MCC counts apart."""
    stream = RadarStream()
    ours = [item for p in payloads for _, item in stream.decode(p, "sample")]
    theirs = [rec for parsed in oracle.parse(payloads) for rec in parsed]
    assert stream.stats.dropped_total == 0, stream.stats.as_dict()
    ends = [r for r in theirs if r["category"] == 48 and "I040" not in r]
    assert all(_val(r, "I020", "TYP") == 0 for r in ends)
    assert stream.stats.skipped == {("048", "no_detection"): len(ends)}
    return ours, [r for r in theirs if not (r["category"] == 48 and "I040" not in r)]


def test_real_radar_data_reads_as_the_oracle_reads_it(oracle: Oracle) -> None:
    """The oracle's sample recordings: a Mode S radar's CAT048 (raw and in a pcap, with its
    CAT034 service messages)."""
    payloads = [oracle.sample("cat048.raw"), oracle.sample("cat034.raw")]
    payloads += [p for _, p in datagrams(oracle.sample("cat_034_048.pcap"))]
    assert len(payloads) > 20
    ours, theirs = _plots_and_oracle(oracle, payloads)
    assert len(ours) == len(theirs)
    kinds = Counter(rec["category"] for rec in theirs)
    assert kinds[48] > 50 and kinds[34] > 5, kinds
    for item, rec in zip(ours, theirs, strict=True):
        assert (item.sac, item.sic) == (_val(rec, "I010", "SAC"), _val(rec, "I010", "SIC"))
        if rec["category"] == 34:
            assert item.kind == _val(rec, "I000", "MsgTyp")
            if "I030" in rec:
                assert item.tod_s == _val(rec, "I030", "ToD")
            continue
        assert item.tod_s == _val(rec, "I140", "ToD")
        assert item.range_m == pytest.approx(_val(rec, "I040", "RHO") * NM_M)
        assert math.degrees(item.azimuth_rad) == pytest.approx(_val(rec, "I040", "THETA"))
        assert item.typ == _val(rec, "I020", "TYP")
        if "I070" in rec and _val(rec, "I070", "V") == 0 and _val(rec, "I070", "G") == 0:
            assert f"{item.mode3a:04o}" == _val(rec, "I070", "Mode3A")
        if "I220" in rec:
            assert f"{item.mode_s:06X}" == _val(rec, "I220", "ACAddr")
        else:
            assert item.mode_s == -1
        if "I110" not in rec and "I090" in rec and _val(rec, "I090", "V") == 0:
            fl = _val(rec, "I090", "FL")
            if _val(rec, "I090", "G") == 0:
                assert item.height_m == pytest.approx(fl * 100 * FT_M)  # type: ignore[operator]


def _track(number: int, **kw: object) -> SystemTrack:
    values: dict[str, object] = dict(
        number=number, x_m=12_345.5, y_m=-54_321.0, z_m=3048.0, vx_mps=250.25, vy_mps=-10.5,
        vz_mps=-5.08, sigma_xy_m=(30.0, 45.5), sigma_v_mps=(3.25, 4.0), sigma_z_m=60.0,
        status=1, iff=int(IffAnswer.IFF_FRIEND.value), identity=3, classification=1,
    )  # fmt: skip
    values.update(kw)
    return SystemTrack(**values)  # type: ignore[arg-type]


def test_tracks_mcc_sends_are_what_the_oracle_reads_field_by_field(oracle: Oracle) -> None:
    tracks = [
        _track(7, begin=True, lat_deg=48.5, lon_deg=-3.25),
        _track(8, status=0, iff=int(IffAnswer.IFF_NO_REPLY.value), identity=6, classification=2),
        _track(65_535, status=2, end=True, iff=int(IffAnswer.IFF_INVALID.value)),
        _track(9, vx_mps=9000.0, z_m=1e6),  # beyond I062/185 and I062/130: items left out
        _track(10, x_m=5e6),  # beyond I062/100: the track is left out
    ]
    left = Counter[str]()
    blocks = encode_tracks(
        tracks, sac=3, sic=100, service_id=9, tod_units=128 * 43_200, left_out=left
    )
    assert left == {"velocity": 1, "altitude": 1, "position": 1}
    [records] = oracle.parse(blocks)
    assert [r["I040"]["TrkN"]["val"] for r in records] == [7, 8, 65_535, 9]
    first, tentative, ended, fast = records
    for rec in records:
        assert (_val(rec, "I010", "SAC"), _val(rec, "I010", "SIC")) == (3, 100)
        assert (_val(rec, "I015", "SID"), _val(rec, "I070", "ToT")) == (9, 43_200.0)
        assert (_val(rec, "I100", "X"), _val(rec, "I100", "Y")) == (12_345.5, -54_321.0)
    assert (_val(first, "I185", "Vx"), _val(first, "I185", "Vy")) == (250.25, -10.5)
    assert _val(first, "I130", "Alt") == 10_000.0  # 3048 m
    assert _val(first, "I220", "RoC") == pytest.approx(-1000.0)  # -5.08 m/s
    assert (_val(first, "I105", "Lat"), _val(first, "I105", "Lon")) == pytest.approx(
        (48.5, -3.25), abs=1e-5
    )
    status = first["I080"]
    assert (status["CNF"]["val"], status["TSB"]["val"], status["TSE"]["val"]) == (0, 1, 0)
    assert (status["MD5"]["val"], status["CST"]["val"], status["SRC"]["val"]) == (1, 0, 2)
    assert [t["TRI"]["val"] for t in first["ISP"]] == [
        "01",
        "03",
        "01",
    ]  # format 1, FRIEND, AIRCRAFT
    accuracy = first["I500"]
    assert (accuracy["APC"]["APC_X"]["val"], accuracy["APC"]["APC_Y"]["val"]) == (30.0, 45.5)
    assert (accuracy["ATV"]["ATV_X"]["val"], accuracy["ATV"]["ATV_Y"]["val"]) == (3.25, 4.0)
    assert tentative["I080"]["CNF"]["val"] == 1 and tentative["I080"]["MD5"]["val"] == 3
    assert [t["TRI"]["val"] for t in tentative["ISP"]] == ["01", "06", "02"]
    assert ended["I080"]["TSE"]["val"] == 1 and ended["I080"]["CST"]["val"] == 1
    assert ended["I080"]["MD5"]["val"] == 2
    assert "I185" not in fast and "I130" not in fast and "I100" in fast
    # libasterix reads the same back (what a neighbour using it sees).
    mine = decode_tracks(blocks[0])
    assert [t["number"] for t in mine] == [7, 8, 65_535, 9]
    assert (mine[0]["identity"], mine[0]["classification"], mine[0]["md5"]) == (3, 1, 1)


def test_status_mcc_sends_is_what_the_oracle_reads(oracle: Oracle) -> None:
    status = encode_status(sac=3, sic=100, service_id=9, tod_units=128 * 10, nogo=NOGO_DEGRADED)
    batch = encode_status(
        sac=3, sic=100, service_id=9, tod_units=128 * 11, kind=END_OF_BATCH, batch=257
    )
    [[s], [b]] = oracle.parse([status, batch])
    assert (s["category"], _val(s, "I000", "Typ"), _val(s, "I030", "ToD")) == (65, 1, 10.0)
    assert (_val(s, "I040", "NOGO"), _val(s, "I040", "PSS")) == (1, 1)
    assert (_val(b, "I000", "Typ"), _val(b, "I020", "BTN")) == (2, 1)
    assert decode_status(batch)[0]["batch"] == 1 and decode_status(status)[0]["nogo"] == 1
