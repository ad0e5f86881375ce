"""Hostile input is normal input: the gateway fed bad datagrams drops and counts each (per
category and cause), logs it once per sender, never raises and never publishes a plot of a
block that was not whole and well formed."""

from __future__ import annotations

import logging
import math
import random

import numpy as np
import pytest

from mcc.asterix.cat034 import NORTH, SECTOR, encode_marker
from mcc.asterix.cat048 import NM_M, encode_plots
from mcc.asterix.editions import spec
from mcc.asterix.gateway import GatewaySettings, RadarGateway
from mcc.asterix.tod import tod_units
from mcc.bus import validate_sample
from mcc.types import DetectionBatch
from mcc.types.arrays import float_field, optional_field

NOW_NS = 1_790_000_000 * 10**9  # a fixed clock: every test is deterministic
SITE = (1000.0, -1500.0, 20.0)
RADAR = ("192.0.2.7", 30048)


def make_gateway(**kw: object) -> tuple[RadarGateway, list[DetectionBatch]]:
    published: list[DetectionBatch] = []
    values: dict[str, object] = dict(
        sensor_id="search", site_m=SITE, sac=0, sic=1, max_range_m=60_000.0,
        scenario_period_s=1.0,
    )  # fmt: skip
    values.update(kw)
    gateway = RadarGateway(GatewaySettings(**values), published.append)  # type: ignore[arg-type]
    return gateway, published


def plots(t_ns: int, ranges: list[float], *, sic: int = 1, **kw: object) -> bytes:
    n = len(ranges)
    blocks, _ = encode_plots(
        sac=0,
        sic=sic,
        tod_units=tod_units(t_ns),
        range_m=ranges,
        azimuth_rad=[0.5] * n,
        height_m=[SITE[2] + 1000.0] * n,
        iff=kw.get("iff"),  # type: ignore[arg-type]
        max_block_octets=60_000,
    )
    [block] = blocks
    return block


def north(t_ns: int, sic: int = 1) -> bytes:
    return encode_marker(sac=0, sic=sic, tod_units=tod_units(t_ns), kind=NORTH, rotation_s=1.0)


def test_a_scan_becomes_one_batch_at_the_scenarios_site() -> None:
    gateway, out = make_gateway()
    gateway.datagram(plots(NOW_NS, [10_000.0, 20_000.0], iff=[2, 1]), RADAR, NOW_NS)
    assert out == []  # held until its north marker
    gateway.datagram(north(NOW_NS), RADAR, NOW_NS + 1000)
    [batch] = out
    assert (batch.sensor_id, batch.count, batch.origin_ns) == ("search", 2, NOW_NS)
    assert (batch.sensor_x_m, batch.sensor_y_m, batch.sensor_z_m) == SITE
    r = float_field(batch, "range_m")
    assert r == pytest.approx([10_000.0, 20_000.0], abs=NM_M / 512)
    el = float_field(batch, "elevation_rad")
    assert el == pytest.approx(np.arcsin(1000.0 / r), abs=4e-4)  # height LSB 25 ft
    z = float_field(batch, "z_m")
    assert z == pytest.approx([SITE[2] + 1000.0] * 2, abs=4.0)
    assert list(optional_field(batch, "iff")) == [2, 1]  # type: ignore[arg-type]
    validate_sample(batch)
    # An empty scan is published too: the tracker counts its misses.
    gateway.datagram(north(NOW_NS + 10**9), RADAR, NOW_NS + 10**9)
    assert out[-1].count == 0 and out[-1].origin_ns == NOW_NS + 10**9 and out[-1].iff == b""
    assert gateway.scans.scan_period_s == 1.0


def _block(cat: int, body: bytes) -> bytes:
    return bytes([cat]) + (len(body) + 3).to_bytes(2, "big") + body


def _good_body(n: int = 3) -> bytes:
    return plots(NOW_NS, [5000.0 + 100 * k for k in range(n)])[3:]


BAD = {
    # cause: (category key, datagram)
    "truncated": ("048", _block(48, _good_body()[:-1])),
    "past_datagram": ("048", plots(NOW_NS, [5000.0])[:-2]),
    "length": ("048", bytes([48, 0, 2]) + _good_body()),
    "short": ("?", bytes([48, 0])),
    "category": ("001", _block(1, b"\x80\x01\x02")),
    "fspec": ("048", _block(48, b"\xff\xff\xff\xff\x00")),
    "item": ("048", _block(48, bytes([0x01, 0x01, 0x04, 0x20, 0x00]))),  # I048/120 subitem 3
    "malformed": ("048", _block(48, bytes([0x01, 0x01, 0x01, 0x04, 0x00]))),  # SP of length 0
}


@pytest.mark.parametrize("cause", sorted(BAD))
def test_a_bad_block_is_counted_by_category_and_cause_and_none_of_it_is_published(
    cause: str,
) -> None:
    key, datagram = BAD[cause]
    gateway, out = make_gateway()
    gateway.datagram(datagram, RADAR, NOW_NS)
    gateway.datagram(north(NOW_NS), RADAR, NOW_NS)
    assert gateway.stats.dropped == {(key, cause): 1}
    assert gateway.status()["input"]["dropped"] == {key: {cause: 1}}
    assert [b.count for b in out] == [0]  # the scan closed with none of the bad block's plots


def test_a_block_with_one_bad_record_gives_no_plot_at_all() -> None:
    """Two whole records then a cut one: the block is dropped whole (its records cannot be
    told from garbage once framing inside it is lost)."""
    body = _good_body(3)
    gateway, out = make_gateway()
    gateway.datagram(_block(48, body[:-3]) + north(NOW_NS), RADAR, NOW_NS)
    assert gateway.stats.dropped[("048", "truncated")] == 1
    assert [b.count for b in out] == [0]


def _record(items: dict) -> bytes:
    cat = spec(48)
    return bytes(cat.create([cat.cv_record.create(items)]).unparse().to_bytes())


def test_values_out_of_range_drop_their_record_only() -> None:
    base = {
        "010": (("SAC", 0), ("SIC", 1)),
        "020": ((("TYP", 1), 0, 0, 0, 0, 0),),
        "040": (("RHO", 1280), ("THETA", 0)),
    }
    good = _record({**base, "140": tod_units(NOW_NS)})
    late = _record({**base, "140": 86_400 * 128 + 5})  # past 24 h: 24 bits hold it
    high = _record({**base, "140": tod_units(NOW_NS), "090": (0, 0, ("FL", 1500 * 4))})
    far = _record({**base, "140": tod_units(NOW_NS), "040": (("RHO", 65_000), ("THETA", 0))})
    skew = _record({**base, "140": tod_units(NOW_NS + 120 * 10**9)})
    other = _record({**base, "140": tod_units(NOW_NS), "010": (("SAC", 9), ("SIC", 9))})
    nothing = _record({"010": (("SAC", 0), ("SIC", 1)), "140": tod_units(NOW_NS)})
    gateway, out = make_gateway()
    for datagram in (good, late, high, far, skew, other, nothing, north(NOW_NS)):
        gateway.datagram(datagram, RADAR, NOW_NS)
    assert gateway.stats.dropped == {
        ("048", "range"): 3,
        ("048", "time"): 1,
        ("048", "missing"): 1,
    }
    # Another radar's record (a shared group) is no fault: counted apart, not dropped.
    assert gateway.stats.skipped == {("048", "source 9/9"): 1}
    assert [b.count for b in out] == [1]


def test_senders_floods_and_huge_scans_are_dropped() -> None:
    gateway, out = make_gateway(allow_from=("192.0.2.7",), max_datagrams_per_s=10.0,
                                max_plots_per_scan=5)  # fmt: skip
    gateway.datagram(plots(NOW_NS, [5000.0]), ("198.51.100.1", 9), NOW_NS)
    assert gateway.stats.dropped == {("?", "sender"): 1}
    for _ in range(30):  # 30 datagrams in the same instant: the bucket holds 10
        gateway.datagram(plots(NOW_NS, [5000.0]), RADAR, NOW_NS)
    assert gateway.stats.dropped[("?", "flood")] == 20
    gateway.datagram(north(NOW_NS), RADAR, NOW_NS + 10**9)  # a second later: tokens again
    assert out == []  # 10 plots held > max_plots_per_scan: the scan goes, not a part of it
    assert gateway.stats.dropped[("048", "scan_size")] == 10


def test_each_cause_is_logged_once_per_sender(caplog: pytest.LogCaptureFixture) -> None:
    gateway, _ = make_gateway()
    with caplog.at_level(logging.WARNING):
        for sender in (RADAR, RADAR, RADAR, ("192.0.2.8", 1)):
            gateway.datagram(BAD["truncated"][1], sender, NOW_NS)
            gateway.datagram(BAD["fspec"][1], sender, NOW_NS)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4, lines  # 2 causes x 2 senders
    assert sum("192.0.2.7:30048" in line and "truncated" in line for line in lines) == 1
    assert gateway.stats.dropped == {("048", "truncated"): 4, ("048", "fspec"): 4}


def test_the_first_data_source_heard_is_the_one_kept_when_none_is_configured() -> None:
    gateway, out = make_gateway(sac=None, sic=None)
    gateway.datagram(plots(NOW_NS, [5000.0], sic=5), RADAR, NOW_NS)
    gateway.datagram(plots(NOW_NS, [6000.0], sic=6), RADAR, NOW_NS)
    gateway.datagram(north(NOW_NS, sic=5), RADAR, NOW_NS)
    assert [b.count for b in out] == [1] and gateway.status()["data_source"] == "0/5"
    assert gateway.stats.skipped == {("048", "source 0/6"): 1} and not gateway.stats.dropped


def test_sectors_scans_lost_markers_and_a_quiet_radar() -> None:
    gateway, out = make_gateway(per="sector", max_scan_s=1.5)
    sector = encode_marker(sac=0, sic=1, tod_units=tod_units(NOW_NS), kind=SECTOR,
                           sector_rad=math.pi / 2)  # fmt: skip
    gateway.datagram(plots(NOW_NS, [5000.0]) + sector, RADAR, NOW_NS)
    assert [b.count for b in out] == [1]
    # No marker for 2 s: a plot past max_scan_s closes the batch before it.
    gateway.datagram(plots(NOW_NS, [5000.0]), RADAR, NOW_NS)
    gateway.datagram(plots(NOW_NS + 2 * 10**9, [7000.0]), RADAR, NOW_NS + 2 * 10**9)
    assert [b.count for b in out] == [1, 1]
    # Then the radar goes quiet: the open batch leaves after max_scan_s.
    gateway.tick(NOW_NS + 3 * 10**9)
    assert [b.count for b in out] == [1, 1]
    gateway.tick(NOW_NS + 4 * 10**9)
    assert [b.count for b in out] == [1, 1, 1]


def test_a_scan_period_other_than_the_scenarios_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    gateway, _ = make_gateway(scenario_period_s=1.0)
    with caplog.at_level(logging.WARNING):
        for k in range(5):
            t = NOW_NS + k * 4 * 10**9
            gateway.datagram(north(t), RADAR, t)
    assert gateway.status()["scan_period_s"] == 4.0
    assert any("every 4.000 s, the scenario says 1.000 s" in r.getMessage() for r in caplog.records)


def test_garbage_and_mutated_streams_never_raise_and_publish_only_sound_batches() -> None:
    rng = random.Random(34)
    gateway, out = make_gateway(max_time_offset_s=86_400.0, max_datagrams_per_s=1e9)
    good = plots(NOW_NS, [5000.0, 6000.0, 7000.0], iff=[1, 2, 3]) + north(NOW_NS)
    for k in range(3000):
        kind = k % 3
        if kind == 0:
            datagram = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 80)))
        elif kind == 1:
            mutated = bytearray(good)
            for _ in range(rng.randint(1, 4)):
                mutated[rng.randrange(len(mutated))] = rng.getrandbits(8)
            datagram = bytes(mutated)
        else:
            datagram = good[: rng.randrange(len(good))]
        gateway.datagram(datagram, (f"203.0.113.{k % 7}", 1), NOW_NS)
    gateway.datagram(north(NOW_NS), RADAR, NOW_NS)
    assert out and gateway.stats.dropped_total > 1000
    for batch in out:
        validate_sample(batch)  # what a writer on the bus would refuse, none is
        assert batch.count <= 3 * 3000
    assert len(gateway.stats.logged) <= 7 * len(gateway.stats.dropped)


def test_a_clock_stepped_back_neither_floods_nor_starves_the_gateway() -> None:
    from mcc.asterix.udp import RateLimit

    bucket = RateLimit(2.0)
    assert bucket.take(1, 100.0) and bucket.take(1, 100.0) and not bucket.take(1, 100.0)
    assert not bucket.take(1, 50.0)  # 50 s back: no tokens from nowhere
    assert bucket.take(1, 100.5)  # half a second after the newest instant: one token
    gateway, out = make_gateway()
    gateway.datagram(plots(NOW_NS, [5000.0]), RADAR, NOW_NS)
    gateway.datagram(north(NOW_NS), RADAR, NOW_NS - 3600 * 10**9)  # stepped back an hour
    assert gateway.stats.dropped == {("034", "time"): 1}  # its marker is an hour off, not flood
