"""Bad samples are refused at the writer with a message naming the field; nothing is sent."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mcc.bus import Bus, validate_sample
from mcc.errors import SampleError, TopicError
from mcc.types import (
    AirPicture,
    ComputeRequest,
    DetectionBatch,
    MissionStatus,
    NDArray,
    SystemEntry,
    Threat,
    Track,
    TrackStatus,
)
from mcc.types.arrays import pack, packed_field, to_ndarray_msg


def _batch(values: list[float], count: int | None = None) -> DetectionBatch:
    data = pack(values, "<f8")
    n = len(values) if count is None else count
    return DetectionBatch(
        sensor_id="r",
        count=n,
        **{
            f: data
            for f in (
                "range_m",
                "azimuth_rad",
                "elevation_rad",
                "radial_velocity_mps",
                "snr_db",
                "x_m",
                "y_m",
                "z_m",
            )
        },
    )


@pytest.mark.parametrize(
    ("sample", "message"),
    [
        (Track(track_id=1, x_m=math.nan), r"Track\.x_m = nan: state fields must be finite"),
        (Threat(track_id=1, score=math.inf), r"Threat\.score = inf"),
        (Track(track_id=1, status=7), r"Track\.status = 7: not a TrackStatus; use one of TRACK_"),
        (Track(track_id=-1), r"Track\.track_id = -1: expected an integer in \[0, 4294967295\]"),
        (
            Track(track_id=1, covariance=[0.0] * 35),
            r"Track\.covariance: 35 values, the IDL declares 36",
        ),
        (Track(track_id=1, covariance=[math.nan] * 36), r"Track\.covariance: contains NaN"),
        (_batch([1.0, 2.0], count=3), r"DetectionBatch\.range_m: 16 bytes but count=3 needs 24"),
        (_batch([1.0, math.nan]), r"DetectionBatch\.range_m\[1\]: NaN or inf"),
        (
            AirPicture(count=1, state=pack(np.zeros(5), "<f8")),
            r"AirPicture\.track_id: 0 bytes but count=1 needs 4",
        ),
        (
            ComputeRequest(
                request_id="r", args=[NDArray(dtype="<f8", shape=[2, 2], data=b"\0" * 24)]
            ),
            r"ComputeRequest\.args\[0\]: 24 bytes of data but shape \(2, 2\) of <f8 needs 32",
        ),
        (
            ComputeRequest(request_id="r", args=[NDArray(dtype="float128x", shape=[1], data=b"")]),
            r"ComputeRequest\.args\[0\]: dtype 'float128x' is not a numpy dtype",
        ),
        (
            MissionStatus(mission="m", systems=[SystemEntry(system_id="a", state=99)]),
            r"MissionStatus\.systems\[0\]\.state = 99: not a SystemState",
        ),
        (DetectionBatch(count=1, range_m=[1.0]), r"DetectionBatch\.range_m: expected packed bytes"),
    ],
)
def test_bad_sample_is_refused_naming_the_field(sample: object, message: str) -> None:
    with pytest.raises(SampleError, match=message):
        validate_sample(sample)


def test_good_samples_pass_and_int_enum_is_normalised() -> None:
    validate_sample(_batch([1.0, 2.0, 3.0]))
    validate_sample(ComputeRequest(request_id="r", args=[to_ndarray_msg(np.eye(3))]))
    track = Track(track_id=1, status=1)
    validate_sample(track)
    assert track.status is TrackStatus.TRACK_CONFIRMED


def test_refused_sample_never_reaches_a_reader(bus_env: dict[str, str], domain_id: int) -> None:
    with Bus(domain_id) as bus:
        writer, reader = bus.writer("Track"), bus.reader("Track")
        assert writer.wait_for_readers(1, timeout_s=10)
        with pytest.raises(SampleError):
            writer.write(Track(track_id=5, vx_mps=math.nan))
        writer.write(Track(track_id=6, vx_mps=1.0))
        got = reader.take_until(1, timeout_s=10)
        assert [s.track_id for s in got] == [6]
        assert reader.take_wait(timeout_s=0.3) == []
        assert bus.stats.invalid_samples_refused == 1


def test_packed_arrays_round_trip_through_the_bus(bus_env: dict[str, str], domain_id: int) -> None:
    values = np.linspace(-1e5, 1e5, 1000)
    with Bus(domain_id) as bus:
        reader = bus.reader("DetectionBatch")
        writer = bus.writer("DetectionBatch")
        assert writer.wait_for_readers(1, timeout_s=10)
        writer.write(_batch(list(values)))
        (got,) = reader.take_until(1, timeout_s=10)
    np.testing.assert_array_equal(packed_field(got, "z_m"), values)


def test_unknown_topic_lists_the_catalogue(bus_env: dict[str, str], domain_id: int) -> None:
    with Bus(domain_id) as bus, pytest.raises(TopicError, match="unknown topic 'Trakc'.*Track"):
        bus.writer("Trakc")


def test_topic_rebound_to_another_type_is_refused(bus_env: dict[str, str], domain_id: int) -> None:
    with Bus(domain_id) as bus:
        bus.writer("Track")
        with pytest.raises(TopicError, match="already bound to Track"):
            bus.writer("Track", type=Threat)


def test_unknown_profile_is_an_error_listing_known_ones(
    bus_env: dict[str, str], domain_id: int
) -> None:
    from mcc.errors import QosError

    with Bus(domain_id) as bus, pytest.raises(QosError, match="known profiles: .*sensor_stream"):
        bus.writer("Track", profile="sensor_strem")


def test_optional_packed_array_holds_count_items_or_none() -> None:
    """``DetectionBatch.iff`` was appended after radars existed: empty passes (a writer that
    predates it), ``count`` octets pass, any other length is refused naming the field."""
    batch = _batch([1.0, 2.0, 3.0])
    validate_sample(batch)  # iff left out
    batch.iff = pack([0, 1, 2], "u1")
    validate_sample(batch)
    batch.iff = pack([0, 1], "u1")
    with pytest.raises(SampleError, match=r"DetectionBatch\.iff: 2 bytes but count=3 .* or none"):
        validate_sample(batch)


def test_sample_to_dict_decodes_optional_arrays() -> None:
    from mcc.bus.inspect import sample_to_dict

    batch = _batch([1.0, 2.0])
    batch.iff = pack([2, 1], "u1")
    assert sample_to_dict(batch)["iff"] == "uint8[2] [2, 1]"
    assert sample_to_dict(_batch([1.0]))["iff"] == "uint8[0] []"
