"""The lean codec is byte-identical to cyclonedds' serialiser and decodes its output."""

from __future__ import annotations

import numpy as np
import pytest

from mcc import types
from mcc.bus import _native
from mcc.bus.codec import flat_codec
from mcc.types.arrays import pack
from tests.integration.bus_peer import sample_for


def _padded(data: bytes) -> bytes:
    return data.ljust((len(data) + 3) & ~3, b"\0")


def _samples() -> list[object]:
    rng = np.random.default_rng(1)
    out: list[object] = []
    for n in (0, 1, 3, 17):
        f8 = pack(rng.normal(size=n), "<f8")
        for sensor in ("", "r", "radar-12", "ünïcode"):
            out.append(
                types.DetectionBatch(
                    sensor_id=sensor,
                    scan_id=2**63 + n,
                    origin_ns=-5,
                    publish_ns=7,
                    sensor_x_m=1.5,
                    count=n,
                    **{f: f8 for f in types.PACKED_ARRAYS["DetectionBatch"]},
                )
            )
            out.append(types.PerfSample(writer_id=sensor, seq=n, send_ns=-n, payload=bytes(n * 7)))
        out.append(
            types.AirPicture(
                tracker_id="t",
                cycle=n,
                count=n,
                track_id=pack(np.arange(n), "<u4"),
                state=pack(rng.normal(size=(n, 6)), "<f8"),
            )
        )
        out.append(types.Truth(scenario_id="s", time_ns=n, count=n, target_class=bytes(n)))
    # Keyed types: the key changes nothing in the data representation.
    keyed = ("Heartbeat", "EngagementOrder", "Threat", "WorkItem", "Checkpoint", "PersistAck")
    out += [sample_for(name) for name in keyed]
    return out


@pytest.mark.parametrize("sample", _samples(), ids=lambda s: type(s).__name__)
def test_encode_is_byte_identical_and_decodes_back(sample: object) -> None:
    codec = flat_codec(type(sample))
    assert codec is not None
    reference = _padded(sample.serialize())  # type: ignore[attr-defined]
    assert codec.encode(sample) == reference
    assert codec.decode(reference) == sample


@pytest.mark.parametrize("sample", _samples(), ids=lambda s: type(s).__name__)
@pytest.mark.parametrize("version_2", [False, True], ids=["xcdr1", "xcdr2"])
def test_the_native_encoder_writes_the_python_encoders_bytes(
    sample: object, version_2: bool
) -> None:
    codec = flat_codec(type(sample))
    assert codec is not None and codec.layout is not None
    assert _native.encode_flat(codec.layout, sample, version_2) == codec.encoder(version_2)(sample)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("seq", -1),  # uint64 below range
        ("seq", 2**64),  # above
        ("send_ns", 2**63),  # int64 above
        ("send_ns", 1.5),  # not an integer
        ("writer_id", b"bytes"),  # not a str
        ("writer_id", "\ud800"),  # a lone surrogate: not UTF-8
        ("payload", "text"),  # not bytes
        ("payload", None),
    ],
)
def test_the_native_encoder_declines_what_the_python_encoder_refuses(
    field: str, value: object
) -> None:
    """Declined (None), so the Python encoder raises its own error; nothing half-written."""
    sample = types.PerfSample(writer_id="w", seq=1, send_ns=2, payload=b"x")
    setattr(sample, field, value)
    codec = flat_codec(types.PerfSample)
    assert codec is not None
    for version_2 in (False, True):
        assert _native.encode_flat(codec.layout, sample, version_2) is None
        with pytest.raises(Exception):  # noqa: B017 - struct.error, TypeError, UnicodeError …
            codec.encoder(version_2)(sample)


def test_decode_of_reference_serialisation_with_enum() -> None:
    codec = flat_codec(types.SystemEntry)
    assert codec is not None
    entry = types.SystemEntry(
        system_id="m/a/0",
        state=types.SystemState.SYSTEM_FAILED,
        pid=3,
        restarts=2,
        host="h",
        device="cpu",
    )
    assert codec.encode(entry) == _padded(entry.serialize())
    assert codec.decode(entry.serialize()) == entry


@pytest.mark.parametrize("cls", [types.Track, types.MissionStatus, types.ComputeRequest])
def test_nested_or_sequence_types_use_the_generic_serialiser(cls: type) -> None:
    assert flat_codec(cls) is None


# -- both data representations, every flat type (docs/interop.md) ----------------------------


def _flat_types() -> list[type]:
    from mcc.types import foreign

    module = foreign.load_module()
    return [
        getattr(types, name)
        for name in module.order
        if name in module.structs and flat_codec(getattr(types, name)) is not None
    ]


@pytest.mark.parametrize("cls", _flat_types(), ids=lambda c: c.__name__)
@pytest.mark.parametrize("version_2", [False, True], ids=["xcdr1", "xcdr2"])
def test_both_representations_match_the_reference_and_decode_by_header(
    cls: type, version_2: bool
) -> None:
    from mcc.types import foreign

    module = foreign.load_module()
    sample = foreign.from_plain(cls, foreign.pattern_sample(module, cls.__name__, 4))
    codec = flat_codec(cls)
    assert codec is not None
    reference = _padded(sample.serialize(use_version_2=version_2))  # type: ignore[attr-defined]
    assert codec.encoder(version_2)(sample) == reference
    assert _native.encode_flat(codec.layout, sample, version_2) == reference
    assert reference[1] in ((0x07, 0x09) if version_2 else (0x01,))
    # one decoder for both: the encapsulation header of each sample says which
    assert codec.decode(reference) == sample


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"\x00\x01", ValueError),  # shorter than a header
        (b"\x00\x01\x00\x00\xff\xff\xff\x7f", ValueError),  # a length past the end (XCDR1)
        (b"\x00\x09\x00\x00\x08\x00\x00\x00\xff\xff\xff\x7f", ValueError),  # the same, XCDR2
    ],
)
def test_a_malformed_sample_raises_an_exception_never_more(data: bytes, error: type) -> None:
    codec = flat_codec(types.DetectionBatch)
    assert codec is not None
    with pytest.raises(error):
        codec.decode(data)
