"""A lean codec for ``ComputeRequest`` / ``ComputeReply``: arrays in and out of the CDR bytes
with one copy on the way out and none on the way in.

cyclonedds-python's generic serialiser copies every ``NDArray.data`` block several times
(measured on this 2-core VM: 25–80 ms to serialise and 11–50 ms to deserialise a 16 MB request);
for the copy-bound kernels that is as much as the wire itself. This codec writes the same XCDR2
bytes (``@appendable`` structs: delimiter headers, 4-byte maximum alignment, little-endian;
`tests/compute/test_wire.py` checks byte-identity with the reference serialiser both ways) from
the arrays' own buffers, and decodes arrays as read-only views of the received sample
(`numpy.frombuffer`, copied only when a view would be misaligned for its dtype). Samples in any
other encoding fall back to the reference deserialiser.

An array sent as a bulk transfer (`mcc.bus.bulk`, see `mcc.compute.channel.BulkInbox`) is
referenced from its message instead of carried in it: the ``NDArray``'s ``dtype`` is
``BULK_PREFIX`` + its dtype (``"bulk:<f8"``), ``shape`` its shape, and ``data`` the transfer id
(8 bytes, little-endian). The decoder gives such an array as a placeholder of the right dtype
and shape that holds no data (zero strides, read-only) and names it in ``bulk``; the receiver
swaps in the transfer's buffer (`with_buffers`). A peer that predates the convention refuses
the dtype with a message naming it.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mcc.bus.validate import ndarray_layout, ndarray_view
from mcc.compute.registry import canonical_dtype
from mcc.errors import ComputeError
from mcc.types import ComputeReply, ComputeRequest

__all__ = [
    "BULK_PREFIX",
    "WireReply",
    "WireRequest",
    "decode_reply",
    "decode_request",
    "encode_reply",
    "encode_request",
    "wire_buffer",
    "with_buffers",
]

_HEADER_XCDR2_LE = b"\x00\x09\x00\x00"
#: The most arrays in a request or reply, and dimensions of one array, the decoder accepts
#: (a hostile count must not make it loop; the registry's kernels take at most 5 arrays of
#: at most 3 dimensions).
MAX_ARRAYS = 64
MAX_NDIM = 32
#: The dtype prefix of an array sent as a bulk transfer (its data is the transfer id).
BULK_PREFIX = "bulk:"
# Plain numbers only: no object, structured, sub-array, string or datetime dtypes.
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
_U64 = struct.Struct("<Q")


@dataclasses.dataclass(eq=False)
class WireRequest:
    """A decoded ``ComputeRequest``; ``args`` are read-only NumPy arrays. A reader sets
    ``sample_info`` (the DDS SampleInfo) as it takes the sample."""

    request_id: str
    client_id: str
    kernel: str
    args: tuple[np.ndarray, ...]
    params_json: str
    deadline_ns: int
    issue_ns: int
    sample_info: Any = dataclasses.field(default=None, repr=False)
    #: ``(index, transfer)`` of the arguments sent as bulk transfers (placeholders in ``args``)
    bulk: tuple[tuple[int, int], ...] = ()

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.args)


@dataclasses.dataclass(eq=False)
class WireReply:
    """A decoded ``ComputeReply``; ``results`` are read-only NumPy arrays."""

    request_id: str
    client_id: str
    server_id: str
    ok: bool
    error: str
    results: tuple[np.ndarray, ...]
    device: str
    compute_ms: float
    reply_ns: int
    sample_info: Any = dataclasses.field(default=None, repr=False)
    #: ``(index, transfer)`` of the results sent as bulk transfers (placeholders in ``results``)
    bulk: tuple[tuple[int, int], ...] = ()

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.results)


# -- encoding -----------------------------------------------------------------------------------


class _Encoder:
    """XCDR2 body writer; ``pos`` is the offset after the 4-byte encapsulation header."""

    def __init__(self) -> None:
        self.parts: list[Any] = []
        self.pos = 0

    def _align4(self) -> None:
        pad = -self.pos & 3
        if pad:
            self.parts.append(b"\0" * pad)
            self.pos += pad

    def raw(self, data: Any, size: int) -> None:
        self.parts.append(data)
        self.pos += size

    def u32(self, value: int) -> None:
        self._align4()
        self.raw(_U32.pack(value), 4)

    def i64(self, value: int) -> None:
        self._align4()
        self.raw(_I64.pack(value), 8)

    def f64(self, value: float) -> None:
        self._align4()
        self.raw(_F64.pack(value), 8)

    def boolean(self, value: bool) -> None:
        self.raw(b"\1" if value else b"\0", 1)

    def string(self, text: str) -> None:
        data = text.encode() + b"\0"
        self.u32(len(data))
        self.raw(data, len(data))

    def open_delimited(self) -> tuple[int, int]:
        self._align4()
        index = len(self.parts)
        self.raw(b"", 4)  # DHEADER, filled in by close_delimited
        return index, self.pos

    def close_delimited(self, mark: tuple[int, int]) -> None:
        index, start = mark
        self.parts[index] = _U32.pack(self.pos - start)

    def arrays(self, arrays: Sequence[np.ndarray], bulk: Mapping[int, int]) -> None:
        """``sequence<NDArray>``: DHEADER, count, then each NDArray (DHEADER + members); the
        arrays at the indices of ``bulk`` as references to their transfers."""
        outer = self.open_delimited()
        self.u32(len(arrays))
        for i, a in enumerate(arrays):
            mark = self.open_delimited()
            transfer = bulk.get(i)
            dtype = canonical_dtype(a.dtype)
            self.string(dtype if transfer is None else BULK_PREFIX + dtype)
            self.u32(a.ndim)
            for dim in a.shape:
                self.u32(int(dim))
            if transfer is None:
                self.u32(a.nbytes)
                self.raw(wire_buffer(a), a.nbytes)
            else:
                self.u32(8)
                self.raw(_U64.pack(transfer), 8)
            self.close_delimited(mark)
        self.close_delimited(outer)


def wire_buffer(a: np.ndarray) -> Any:
    """The bytes of ``a`` (little-endian, C order) without a copy when it already is so."""
    wire = np.dtype(canonical_dtype(a.dtype))
    if a.dtype != wire or not a.flags.c_contiguous:
        a = np.ascontiguousarray(a, dtype=wire)
    return a.reshape(-1).view(np.uint8).data if a.size else b""


def encode_request(
    *,
    request_id: str,
    client_id: str,
    kernel: str,
    args: Sequence[np.ndarray],
    params_json: str,
    deadline_ns: int,
    issue_ns: int,
    bulk: Mapping[int, int] | None = None,
) -> bytes:
    """The serialised ``ComputeRequest`` (what ``ComputeRequest.serialize()`` gives, padded);
    the arguments at the indices of ``bulk`` as references to its transfer ids."""
    enc = _Encoder()
    mark = enc.open_delimited()
    enc.string(request_id)
    enc.string(client_id)
    enc.string(kernel)
    enc.arrays(args, bulk or {})
    enc.string(params_json)
    enc.i64(deadline_ns)
    enc.i64(issue_ns)
    enc.close_delimited(mark)
    return _finish(enc)


def encode_reply(
    *,
    request_id: str,
    client_id: str,
    server_id: str,
    ok: bool,
    error: str,
    results: Sequence[np.ndarray],
    device: str,
    compute_ms: float,
    reply_ns: int,
    bulk: Mapping[int, int] | None = None,
) -> bytes:
    """The serialised ``ComputeReply``; the results at the indices of ``bulk`` as references
    to its transfer ids."""
    if not math.isfinite(compute_ms):
        raise ComputeError(f"compute_ms={compute_ms!r} must be finite")
    enc = _Encoder()
    mark = enc.open_delimited()
    enc.string(request_id)
    enc.string(client_id)
    enc.string(server_id)
    enc.boolean(ok)
    enc.string(error)
    enc.arrays(results, bulk or {})
    enc.string(device)
    enc.f64(compute_ms)
    enc.i64(reply_ns)
    enc.close_delimited(mark)
    return _finish(enc)


def _finish(enc: _Encoder) -> bytes:
    # The struct's DHEADER is the first part: the sample is the encapsulation header, the parts
    # and padding to a multiple of 4, joined in one copy.
    tail = -(4 + enc.pos) & 3
    return b"".join([_HEADER_XCDR2_LE, *enc.parts, b"\0" * tail])


# -- decoding -----------------------------------------------------------------------------------


class _Decoder:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 4  # absolute offset; alignment is relative to offset 4

    def _align4(self) -> None:
        self.pos += -(self.pos - 4) & 3

    def u32(self) -> int:
        self._align4()
        (value,) = _U32.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(value)

    def i64(self) -> int:
        self._align4()
        (value,) = _I64.unpack_from(self.data, self.pos)
        self.pos += 8
        return int(value)

    def f64(self) -> float:
        self._align4()
        (value,) = _F64.unpack_from(self.data, self.pos)
        self.pos += 8
        return float(value)

    def boolean(self) -> bool:
        value = self.data[self.pos]
        self.pos += 1
        return bool(value)

    def string(self) -> str:
        n = self.u32()
        if n == 0 or self.pos + n > len(self.data):
            raise ComputeError(
                f"malformed string at byte {self.pos} of a {len(self.data)} B sample"
            )
        try:
            text = self.data[self.pos : self.pos + n - 1].decode()
        except UnicodeDecodeError:
            raise ComputeError(f"string at byte {self.pos} is not UTF-8") from None
        self.pos += n
        return text

    def count(self, what: str, most: int) -> int:
        n = self.u32()
        if n > most:
            raise ComputeError(f"{n} {what}: at most {most} accepted")
        return n

    def arrays(self) -> tuple[tuple[np.ndarray, ...], tuple[tuple[int, int], ...]]:
        """The arrays, and ``(index, transfer)`` of those sent as bulk transfers."""
        end = self.u32() + self.pos  # the sequence's DHEADER
        out = []
        bulk = []
        for i in range(self.count("arrays", MAX_ARRAYS)):
            elem_end = self.u32() + self.pos  # the NDArray's DHEADER
            dtype_text = self.string()
            ndim = self.count(f"dimensions of array {i}", MAX_NDIM)
            shape = tuple(self.u32() for _ in range(ndim))
            nbytes = self.u32()
            if self.pos + nbytes > len(self.data):
                raise ComputeError(
                    f"array {i}: {nbytes} bytes of data but only {len(self.data) - self.pos} "
                    "left in the sample"
                )
            if dtype_text.startswith(BULK_PREFIX):
                out.append(
                    _placeholder(dtype_text, shape, self.data[self.pos : self.pos + nbytes], i)
                )
                bulk.append((i, _U64.unpack_from(self.data, self.pos)[0]))
            else:
                dtype, shape = ndarray_layout(
                    dtype_text, shape, nbytes, where=f"array {i}", error=ComputeError, plain=True
                )
                out.append(ndarray_view(self.data, dtype, shape, self.pos))
            self.pos = elem_end  # skips members a newer NDArray may append
        self.pos = end
        return tuple(out), tuple(bulk)


def _placeholder(dtype_text: str, shape: Sequence[int], ref: bytes, i: int) -> np.ndarray:
    """The stand-in of bulk array ``i`` (``dtype_text`` with `BULK_PREFIX`, ``ref`` its
    data): its dtype and shape, no data (zero strides: nothing allocated, whatever its size)."""
    if len(ref) != 8:
        raise ComputeError(
            f"array {i}: dtype {dtype_text!r} (a bulk transfer) with {len(ref)} bytes of data: "
            "its data is the 8-byte transfer id"
        )
    text = dtype_text.removeprefix(BULK_PREFIX)
    try:
        itemsize = np.dtype(text).itemsize
    except (TypeError, ValueError, SyntaxError):
        raise ComputeError(
            f"array {i}: dtype {dtype_text!r}: {text!r} is not a numpy dtype"
        ) from None
    dims = tuple(int(n) for n in shape)
    dtype, dims = ndarray_layout(
        text, dims, math.prod(dims) * itemsize, where=f"array {i}", error=ComputeError, plain=True
    )
    try:
        return np.broadcast_to(np.zeros((), dtype), dims)
    except ValueError:
        raise ComputeError(f"array {i}: shape {dims} is too large") from None


def with_buffers(
    arrays: tuple[np.ndarray, ...], buffers: Mapping[int, np.ndarray]
) -> tuple[np.ndarray, ...]:
    """``arrays`` with the placeholders at the indices of ``buffers`` replaced by read-only
    arrays of their dtype and shape over those buffers (``uint8``, the array's size)."""
    out = list(arrays)
    for i, buffer in buffers.items():
        stand_in = arrays[i]
        if buffer.nbytes != stand_in.nbytes:
            raise ComputeError(
                f"array {i}: its bulk transfer holds {buffer.nbytes} bytes, the message said "
                f"{stand_in.nbytes} ({stand_in.dtype.str}{stand_in.shape})"
            )
        arr = ndarray_view(buffer, stand_in.dtype, stand_in.shape)
        out[i] = arr
    return tuple(out)


def decode_request(data: bytes) -> WireRequest:
    """A ``ComputeRequest`` from its serialised bytes (arrays are views of ``data``)."""
    if data[:4] != _HEADER_XCDR2_LE:
        msg = ComputeRequest.deserialize(data)
        args, bulk = _from_msgs(msg.args)
        return WireRequest(
            msg.request_id,
            msg.client_id,
            msg.kernel,
            args,
            msg.params_json,
            msg.deadline_ns,
            msg.issue_ns,
            bulk=bulk,
        )
    dec = _Decoder(data)
    end = dec.u32() + dec.pos
    request_id, client_id, kernel = dec.string(), dec.string(), dec.string()
    args, bulk = dec.arrays()
    req = WireRequest(
        request_id=request_id,
        client_id=client_id,
        kernel=kernel,
        args=args,
        params_json=dec.string(),
        deadline_ns=dec.i64(),
        issue_ns=dec.i64(),
        bulk=bulk,
    )
    if dec.pos > end:
        raise ComputeError("malformed ComputeRequest: members run past its delimiter")
    return req


def decode_reply(data: bytes) -> WireReply:
    """A ``ComputeReply`` from its serialised bytes (results are views of ``data``)."""
    if data[:4] != _HEADER_XCDR2_LE:
        msg = ComputeReply.deserialize(data)
        results, bulk = _from_msgs(msg.results)
        return WireReply(
            msg.request_id,
            msg.client_id,
            msg.server_id,
            msg.ok,
            msg.error,
            results,
            msg.device,
            msg.compute_ms,
            msg.reply_ns,
            bulk=bulk,
        )
    dec = _Decoder(data)
    end = dec.u32() + dec.pos
    request_id, client_id, server_id = dec.string(), dec.string(), dec.string()
    ok, error = dec.boolean(), dec.string()
    results, bulk = dec.arrays()
    rep = WireReply(
        request_id=request_id,
        client_id=client_id,
        server_id=server_id,
        ok=ok,
        error=error,
        results=results,
        device=dec.string(),
        compute_ms=dec.f64(),
        reply_ns=dec.i64(),
        bulk=bulk,
    )
    if dec.pos > end:
        raise ComputeError("malformed ComputeReply: members run past its delimiter")
    return rep


def _from_msgs(
    msgs: Sequence[Any],
) -> tuple[tuple[np.ndarray, ...], tuple[tuple[int, int], ...]]:
    """Arrays of ``NDArray`` messages (the reference deserialiser's), with the decoder's
    bounds, and ``(index, transfer)`` of those sent as bulk transfers."""
    if len(msgs) > MAX_ARRAYS:
        raise ComputeError(f"{len(msgs)} arrays: at most {MAX_ARRAYS} accepted")
    out = []
    bulk = []
    for i, msg in enumerate(msgs):
        if len(msg.shape) > MAX_NDIM:
            raise ComputeError(f"{len(msg.shape)} dimensions of array {i}: at most {MAX_NDIM}")
        if msg.dtype.startswith(BULK_PREFIX):
            out.append(_placeholder(msg.dtype, msg.shape, bytes(msg.data), i))
            bulk.append((i, _U64.unpack(bytes(msg.data))[0]))
            continue
        dtype, shape = ndarray_layout(
            msg.dtype, msg.shape, len(msg.data), where=f"array {i}", error=ComputeError, plain=True
        )
        out.append(ndarray_view(msg.data, dtype, shape))
    return tuple(out), tuple(bulk)
