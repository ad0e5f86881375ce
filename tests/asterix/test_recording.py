"""ASTERIX recordings (raw blocks, pcap, pcapng) and ``mcc track replay`` on them."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest

from mcc.apps.scenario import load_scenario
from mcc.asterix.cat034 import NORTH, encode_marker
from mcc.asterix.cat048 import encode_plots
from mcc.asterix.recording import RecordingStats, datagrams, radar_scans
from tests.conftest import REPO, run_cli

PAYLOADS = [b"\x30\x00\x03", b"\x22\x00\x05\x00\x00", bytes(range(40))]


# -- an independent writer of captures (the formats' own layouts) ----------------------------


def ipv4_udp(payload: bytes, *, src: str = "10.1.2.3", sport: int = 4000, frag: int = 0,
             proto: int = 17) -> bytes:  # fmt: skip
    udp = struct.pack(">HHHH", sport, 30048, 8 + len(payload), 0) + payload
    total = 20 + len(udp)
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, total, 1, frag, 64, proto, 0,
                     bytes(int(x) for x in src.split(".")), bytes([232, 1, 1, 1]))  # fmt: skip
    return ip + udp


def ethernet(packet: bytes, *, vlan: bool = False) -> bytes:
    head = b"\x01\x00\x5e\x01\x01\x01" + b"\x02\x00\x00\x00\x00\x01"
    if vlan:
        head += b"\x81\x00\x00\x07"
    return head + b"\x08\x00" + packet


def sll(packet: bytes) -> bytes:
    return struct.pack(">HHH8sH", 0, 1, 6, b"\x02\x00\x00\x00\x00\x01\x00\x00", 0x0800) + packet


def pcap(frames: list[bytes], *, link: int, endian: str = "<", nano: bool = False) -> bytes:
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    out = struct.pack(endian + "IHHiIII", magic, 2, 4, 0, 0, 65535, link)
    for k, frame in enumerate(frames):
        out += struct.pack(endian + "IIII", 1_700_000_000 + k, 5, len(frame), len(frame)) + frame
    return out


def pcapng(frames: list[bytes], *, link: int) -> bytes:
    def block(kind: int, body: bytes) -> bytes:
        body += b"\x00" * (-len(body) % 4)
        n = 12 + len(body)
        return struct.pack("<II", kind, n) + body + struct.pack("<I", n)

    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    out += block(1, struct.pack("<HHI", link, 0, 65535))
    for k, frame in enumerate(frames):
        if k % 2:
            out += block(3, struct.pack("<I", len(frame)) + frame)  # simple packet
        else:
            out += block(6, struct.pack("<IIIII", 0, 0, k, len(frame), len(frame)) + frame)
    return out


@pytest.mark.parametrize(
    "capture",
    [
        pcap([ethernet(ipv4_udp(p)) for p in PAYLOADS], link=1),
        pcap([ethernet(ipv4_udp(p), vlan=True) for p in PAYLOADS], link=1, endian=">", nano=True),
        pcap([sll(ipv4_udp(p)) for p in PAYLOADS], link=113),
        pcap([ipv4_udp(p) for p in PAYLOADS], link=101),
        pcapng([ethernet(ipv4_udp(p)) for p in PAYLOADS], link=1),
    ],
    ids=["pcap-ethernet", "pcap-be-ns-vlan", "pcap-sll", "pcap-raw", "pcapng"],
)
def test_captures_give_their_udp_payloads(capture: bytes) -> None:
    stats = RecordingStats()
    assert list(datagrams(capture, stats)) == [("10.1.2.3:4000", p) for p in PAYLOADS]
    assert (stats.packets, stats.udp, dict(stats.skipped)) == (3, 3, {})


def test_what_is_not_a_whole_udp_datagram_is_counted_and_skipped() -> None:
    frames = [
        ethernet(ipv4_udp(PAYLOADS[0])),
        ethernet(ipv4_udp(PAYLOADS[0], proto=6)),  # TCP
        ethernet(ipv4_udp(PAYLOADS[0], frag=0x2000)),  # a first fragment
        ethernet(ipv4_udp(PAYLOADS[0]))[:30],  # cut inside the IP header
        b"\x00" * 6,
    ]
    capture = pcap(frames, link=1)
    stats = RecordingStats()
    assert [p for _, p in datagrams(capture + b"\x01\x02\x03", stats)] == [PAYLOADS[0]]
    assert stats.skipped == {
        "not UDP": 1, "IPv4 fragment": 1, "bad IPv4 header": 1, "short frame": 1,
        "truncated capture": 1,
    }  # fmt: skip
    assert list(datagrams(pcapng([ethernet(ipv4_udp(b"x"))], link=1)[:-6])) == []


def test_raw_recordings_are_split_into_blocks_until_framing_is_lost() -> None:
    blocks = [b"\x30\x00\x03", b"\x22\x00\x04\x00"]
    assert [p for _, p in datagrams(b"".join(blocks))] == blocks
    assert [p for _, p in datagrams(b"".join(blocks) + b"\x30\x00\x09\x01")] == blocks + [
        b"\x30\x00\x09\x01"
    ]


# -- replay ------------------------------------------------------------------------------------

TOD0_S = 36_000.0  # the recording starts at 10:00:00 UTC


def _recording(tmp: Path, kind: str) -> tuple[Path, Path, Path, Path]:
    """40 s of the small scenario's radar: the same scans as an ASTERIX recording (``kind``)
    and as CSV, the radar's sensors file and the truth (time of day, s)."""
    scenario = load_scenario(REPO / "scenarios" / "small.yaml")
    model = scenario.radars[0]
    rng = np.random.default_rng(1)
    payloads: list[bytes] = []
    rows = ["time_s,sensor_id,range_m,azimuth_rad,elevation_rad"]
    truth = ["time_s,target_id,x_m,y_m,z_m"]
    for k in range(80):
        t = k * model.scan_period_s
        dets = model.scan(scenario.truth_at(t), t, rng)
        units = round((TOD0_S + t) * 128)
        blocks, _ = encode_plots(sac=0, sic=1, tod_units=units, range_m=dets.range_m,
                                 azimuth_rad=dets.azimuth_rad, height_m=dets.z_m)  # fmt: skip
        payloads += [*blocks, encode_marker(sac=0, sic=1, tod_units=units, kind=NORTH)]
        for r, az, el in zip(dets.range_m, dets.azimuth_rad, dets.elevation_rad, strict=True):
            rows.append(f"{TOD0_S + t},radar-1,{r},{az},{el}")
        if not dets.count:
            rows.append(f"{TOD0_S + t},radar-1,,,")
        state = scenario.truth_at(t).live()
        for tid, (x, y, z) in zip(state.ids, state.positions_m, strict=True):
            truth.append(f"{TOD0_S + t},{tid},{x},{y},{z}")
    if kind == "raw":
        data = b"".join(payloads)
    else:
        data = pcap([ethernet(ipv4_udp(p)) for p in payloads], link=1)
    rec, csv_file = tmp / f"radar.{kind}", tmp / "radar.csv"
    rec.write_bytes(data)
    csv_file.write_text("\n".join(rows) + "\n")
    x, y, z = model.position_m
    sensors = tmp / "sensors.yaml"
    sensors.write_text(
        f"radar-1:\n  position_m: [{x}, {y}, {z}]\n  sigma_range_m: {model.sigma_range_m}\n"
        f"  sigma_azimuth_rad: {model.sigma_azimuth_rad}\n"
        f"  sigma_elevation_rad: {model.sigma_elevation_rad}\n  sac: 0\n  sic: 1\n"
    )
    (tmp / "truth.csv").write_text("\n".join(truth) + "\n")
    return rec, csv_file, sensors, tmp / "truth.csv"


@pytest.mark.parametrize("kind", ["raw", "pcap"])
def test_replay_of_an_asterix_recording_scores_as_the_same_detections_in_csv(
    kind: str, tmp_path: Path
) -> None:
    rec, csv_file, sensors, truth = _recording(tmp_path, kind)
    results = {}
    for name, det in (("asterix", rec), ("csv", csv_file)):
        out = tmp_path / f"{name}.json"
        proc = run_cli(
            ["track", "replay", str(det), "--sensors", str(sensors), "--truth", str(truth),
             "--json", str(out)],
            env=dict(os.environ),
        )  # fmt: skip
        results[name] = json.loads(out.read_text())
        assert "GOSPA" in proc.stdout
    a, c = results["asterix"], results["csv"]
    assert (a["scans"], a["detections"], a["ndim"]) == (c["scans"], c["detections"], 3)
    assert a["track_ids"] == c["track_ids"]
    assert a["gospa_mean_m"] == pytest.approx(c["gospa_mean_m"], rel=0.1, abs=5.0)
    report = a["asterix"]
    assert report["sources"] == {"0/1": "radar-1"} and report["input"]["dropped_total"] == 0
    assert report["input"]["records"]["034"] == 80


def test_replay_names_a_data_source_no_sensor_claims(tmp_path: Path) -> None:
    rec, _, sensors, _ = _recording(tmp_path, "raw")
    sensors.write_text(sensors.read_text().replace("sic: 1", "sic: 2"))
    proc = run_cli(
        [
            "track",
            "replay",
            str(rec),
            "--sensors",
            str(sensors),
            "--json",
            str(tmp_path / "o.json"),
        ],
        env=dict(os.environ),
        check=False,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "ASTERIX data source (SAC/SIC) 0/1 has no sensor in the sensors file" in proc.stderr
    # A recording with no plot in it says so and what it held.
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 4)
    proc = run_cli(
        [
            "track",
            "replay",
            str(junk),
            "--sensors",
            str(sensors),
            "--json",
            str(tmp_path / "o.json"),
        ],
        env=dict(os.environ),
        check=False,
    )
    assert proc.returncode == 2 and "no CAT048 target report in the recording" in proc.stderr


def test_the_oracles_real_capture_replays(tmp_path: Path, oracle: object) -> None:
    """The oracle's sample capture (a Mode S radar, SAC/SIC 25/13): scans from its markers."""
    from tests.asterix.conftest import Oracle

    assert isinstance(oracle, Oracle)
    capture = tmp_path / "cat_034_048.pcap"
    capture.write_bytes(oracle.sample("cat_034_048.pcap"))
    sources, stats, recording = radar_scans(capture)
    assert (25, 13) in sources and recording.udp == recording.packets
    assert stats.dropped_total == 0
    plots = sum(scan.count for found in sources.values() for scan in found.scans)
    assert plots == stats.records["048"]
