"""LatencyRecorder against numpy on known data, and the LatencyStats record."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from mcc.bench.stats import CDF_PERCENTILES, HIGHEST_NS, LatencyRecorder, LatencyStats

HDR_REL = 1e-3  # 3 significant digits: every reported value is within 0.1 % of the truth


def nearest_rank(values: np.ndarray, q: float) -> float:
    """The q-th percentile by nearest rank (what HDR reports), immune to float noise in q*N."""
    ordered = np.sort(values)
    rank = max(1, math.ceil(round(q * len(ordered) / 100, 6)))
    return float(ordered[rank - 1])


@pytest.fixture(scope="module")
def lognormal_ns() -> np.ndarray:
    """200k latencies around 20 µs with a long tail, as integer nanoseconds."""
    rng = np.random.default_rng(20240601)
    return np.rint(rng.lognormal(mean=math.log(20_000), sigma=0.6, size=200_000)).astype(np.int64)


def test_percentiles_mean_stdev_match_numpy(lognormal_ns: np.ndarray) -> None:
    rec = LatencyRecorder()
    rec.record_many_ns(lognormal_ns)
    s = rec.stats()
    us = lognormal_ns / 1e3
    assert s.count == len(lognormal_ns)
    for field, q in [("p50_us", 50), ("p90_us", 90), ("p99_us", 99), ("p999_us", 99.9)]:
        expected = nearest_rank(us, q)
        assert expected == pytest.approx(np.percentile(us, q), rel=1e-2)
        assert getattr(s, field) == pytest.approx(expected, rel=HDR_REL), field
    assert s.mean_us == pytest.approx(us.mean(), rel=HDR_REL)
    assert s.stdev_us == pytest.approx(us.std(), rel=HDR_REL)
    assert s.min_us == pytest.approx(us.min(), rel=HDR_REL)
    assert s.max_us == pytest.approx(us.max(), rel=HDR_REL)
    assert s.stdev_us is not None
    assert s.stderr_us == pytest.approx(s.stdev_us / math.sqrt(s.count))


def test_small_values_are_exact() -> None:
    # Below 2048 ns the histogram has 1 ns resolution.
    rec = LatencyRecorder()
    rec.record_many_ns(range(1, 1001))
    s = rec.stats()
    assert (s.count, s.min_us, s.p50_us, s.p90_us, s.p99_us, s.max_us) == (
        1000,
        0.001,
        0.5,
        0.9,
        0.99,
        1.0,
    )
    assert s.mean_us == pytest.approx(0.5005)


def test_bulk_and_single_recording_agree() -> None:
    rng = np.random.default_rng(7)
    values = rng.integers(0, HIGHEST_NS, size=3000)
    bulk, single = LatencyRecorder(), LatencyRecorder()
    bulk.record_many_ns(values)
    for v in values.tolist():
        single.record_ns(v)
    assert bulk.stats() == single.stats()
    assert bulk.count == single.count == 3000


def test_accepts_iterables_and_float_arrays() -> None:
    rec = LatencyRecorder()
    rec.record_many_ns(v for v in (1000, 2000))
    rec.record_many_ns([3000])
    rec.record_many_ns(np.array([4000.4, 5000.0]))
    rec.record_many_ns(np.array([], dtype=np.int64))
    assert rec.count == 5
    assert rec.stats().p50_us == pytest.approx(3.0, rel=HDR_REL)


@pytest.mark.parametrize("bad", [-1, HIGHEST_NS + 1_000_000])
def test_out_of_range_sample_is_refused(bad: int) -> None:
    with pytest.raises(ValueError, match="outside"):
        LatencyRecorder().record_ns(bad)
    with pytest.raises(ValueError, match="outside"):
        LatencyRecorder().record_many_ns(np.array([1000, bad]))


def test_non_finite_samples_are_refused() -> None:
    with pytest.raises(ValueError, match="NaN"):
        LatencyRecorder().record_many_ns(np.array([1000.0, np.nan]))


def test_empty_recorder_has_no_stats() -> None:
    with pytest.raises(ValueError, match="no latency samples"):
        LatencyRecorder().stats()


def test_lost_passes_through_and_row_keys_are_the_fields() -> None:
    rec = LatencyRecorder()
    rec.record_ns(12_345)
    s = rec.stats(lost=3)
    assert s.lost == 3
    row = s.as_row()
    assert list(row) == [f.name for f in dataclasses.fields(LatencyStats)]
    assert row["count"] == 1 and row["p50_us"] == pytest.approx(12.345, rel=HDR_REL)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.count = 2  # type: ignore[misc]


# -- CDF, transport between processes, merging ---------------------------------------------------


def test_cdf_points_are_the_nearest_rank_percentiles(lognormal_ns: np.ndarray) -> None:
    rec = LatencyRecorder()
    rec.record_many_ns(lognormal_ns)
    us = lognormal_ns / 1e3
    points = rec.cdf()
    assert [q for q, _ in points] == list(CDF_PERCENTILES)
    assert points[0][1] == pytest.approx(us.min(), rel=HDR_REL)
    assert points[-1][1] == pytest.approx(us.max(), rel=HDR_REL)
    for q, value in points[1:-1]:
        assert value == pytest.approx(nearest_rank(us, q), rel=HDR_REL), q
    values = [v for _, v in points]
    assert values == sorted(values)


def test_cdf_refuses_bad_percentiles_and_empty_recorders() -> None:
    rec = LatencyRecorder()
    with pytest.raises(ValueError, match="no latency samples"):
        rec.cdf()
    rec.record_ns(1000)
    with pytest.raises(ValueError, match="outside 0 .. 100"):
        rec.cdf([50.0, 101.0])


def test_encode_decode_round_trip_is_exact(lognormal_ns: np.ndarray) -> None:
    rec = LatencyRecorder()
    rec.record_many_ns(lognormal_ns[:5000])
    text = rec.encode()
    assert isinstance(text, str) and text.isascii()
    back = LatencyRecorder.decode(text)
    assert back.stats() == rec.stats()
    assert back.cdf() == rec.cdf()


def test_decode_of_garbage_is_refused() -> None:
    with pytest.raises(ValueError, match="not an encoded latency histogram"):
        LatencyRecorder.decode("this is not a histogram")


def test_merge_equals_recording_everything_in_one(lognormal_ns: np.ndarray) -> None:
    a, b, both = LatencyRecorder(), LatencyRecorder(), LatencyRecorder()
    a.record_many_ns(lognormal_ns[:70_000])
    b.record_many_ns(lognormal_ns[70_000:])
    both.record_many_ns(lognormal_ns)
    a.merge(b)
    assert a.stats() == both.stats()
    us = lognormal_ns / 1e3
    assert a.stats().p99_us == pytest.approx(nearest_rank(us, 99), rel=HDR_REL)
