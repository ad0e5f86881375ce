"""The ComputeRequest/ComputeReply codec: byte-identical to cyclonedds' serialiser both ways."""

from __future__ import annotations

import numpy as np
import pytest

from mcc.compute import wire
from mcc.compute.registry import canonical_dtype
from mcc.errors import ComputeError
from mcc.types import ComputeReply, ComputeRequest, NDArray

RNG = np.random.default_rng(9)
ARRAYS = [
    np.arange(3, dtype="<i1"),  # 3 bytes: the next element needs padding
    RNG.random((2, 3)),
    np.ones((0, 4)),  # empty
    RNG.random((3, 5)).astype("<f4"),
    np.array(2.5),  # 0-d
    np.arange(7, dtype=">i8"),  # big-endian goes out little-endian
    np.zeros((4, 6))[:, ::2],  # not contiguous
    np.array([True, False, True]),
]


def _msg(a: np.ndarray) -> NDArray:
    wire_dtype = canonical_dtype(a.dtype)
    data = np.ascontiguousarray(a, dtype=wire_dtype).tobytes()
    return NDArray(dtype=wire_dtype, shape=list(a.shape), data=data)


def _reference(sample: ComputeRequest | ComputeReply) -> bytes:
    data = sample.serialize(use_version_2=True)
    return data.ljust((len(data) + 3) & ~3, b"\0")  # as DataWriter.write pads it


@pytest.mark.parametrize("count", [0, 1, 2, 5, len(ARRAYS)])
@pytest.mark.parametrize("request_id", ["r", "rq", "req", "client/1/é"])
def test_request_bytes_are_the_reference_serialiser_s(count: int, request_id: str) -> None:
    args = ARRAYS[:count]
    fields = dict(
        request_id=request_id,
        client_id="host/42/1",
        kernel="gating_cost",
        params_json='{"gate_probability": 0.99}',
        deadline_ns=-3,
        issue_ns=2**62,
    )
    ours = wire.encode_request(args=args, **fields)  # type: ignore[arg-type]
    ref = _reference(ComputeRequest(args=[_msg(a) for a in args], **fields))  # type: ignore[arg-type]
    assert ours == ref
    for data in (ours, ComputeRequest(args=[_msg(a) for a in args], **fields).serialize()):  # type: ignore[arg-type]
        got = wire.decode_request(data)
        assert (got.request_id, got.kernel, got.deadline_ns) == (request_id, "gating_cost", -3)
        assert len(got.args) == count
        for a, b in zip(got.args, args, strict=True):
            assert a.shape == b.shape and not a.flags.writeable
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("ok", [True, False])
def test_reply_bytes_are_the_reference_serialiser_s(ok: bool) -> None:
    for count in (0, 3, len(ARRAYS)):
        fields = dict(
            request_id="c/1/7",
            client_id="c/1",
            server_id="s/9/compute",
            ok=ok,
            error="" if ok else "refused: no",
            device="cuda:0",
            compute_ms=12.75,
            reply_ns=123,
        )
        ours = wire.encode_reply(results=ARRAYS[:count], **fields)  # type: ignore[arg-type]
        ref = _reference(ComputeReply(results=[_msg(a) for a in ARRAYS[:count]], **fields))  # type: ignore[arg-type]
        assert ours == ref
        got = wire.decode_reply(ours)
        assert (got.ok, got.error, got.compute_ms, got.device) == (
            ok,
            fields["error"],
            12.75,
            "cuda:0",
        )
        assert got.nbytes == sum(a.nbytes for a in ARRAYS[:count])


def _base(a: np.ndarray) -> object:
    base: object = a
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return base


def test_decoded_arrays_are_views_unless_misaligned() -> None:
    big = RNG.random(1000)
    views = []
    for request_id in ("abc", "abcdefg"):  # ids 4 bytes apart shift the data by 4 bytes
        data = wire.encode_request(
            request_id=request_id,
            client_id="b",
            kernel="k",
            args=[big],
            params_json="",
            deadline_ns=0,
            issue_ns=0,
        )
        (arr,) = wire.decode_request(data).args
        assert arr.flags.aligned and not arr.flags.writeable
        np.testing.assert_array_equal(arr, big)
        views.append(_base(arr) is data)
    assert sorted(views) == [False, True]  # one view of the sample, one aligned copy


def test_malformed_samples_are_refused_with_the_reason() -> None:
    msg = NDArray(dtype="<f8", shape=[3], data=b"\0" * 16)  # 16 bytes for 3 doubles
    data = _reference(
        ComputeRequest(request_id="x", client_id="c", kernel="k", args=[msg], params_json="")
    )
    with pytest.raises(ComputeError, match=r"array 0: 16 bytes of data but shape \(3,\)"):
        wire.decode_request(data)
    msg = NDArray(dtype="float128x", shape=[1], data=b"\0" * 8)
    data = _reference(
        ComputeRequest(request_id="x", client_id="c", kernel="k", args=[msg], params_json="")
    )
    with pytest.raises(ComputeError, match="dtype 'float128x' is not a numpy dtype"):
        wire.decode_request(data)
    with pytest.raises(ComputeError, match="compute_ms=nan must be finite"):
        wire.encode_reply(
            request_id="x",
            client_id="c",
            server_id="s",
            ok=True,
            error="",
            results=[],
            device="cpu",
            compute_ms=float("nan"),
            reply_ns=0,
        )
