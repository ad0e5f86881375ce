"""Packed numeric arrays on the wire: numpy arrays <-> little-endian bytes (docs/architecture.md,
"Data model")."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from mcc.types._mcc import OPTIONAL_ARRAYS, PACKED_ARRAYS, NDArray


def pack(values: npt.ArrayLike, dtype: str) -> bytes:
    """``values`` as packed bytes of ``dtype`` (e.g. ``"<f8"``), C order."""
    return np.ascontiguousarray(values, dtype=np.dtype(dtype)).tobytes()


def unpack(data: bytes, dtype: str, shape: tuple[int, ...] = (-1,)) -> npt.NDArray[Any]:
    """A read-only view of packed bytes as an array of ``dtype`` and ``shape``."""
    return np.frombuffer(data, dtype=np.dtype(dtype)).reshape(shape)


def packed_field(sample: Any, name: str) -> npt.NDArray[Any]:
    """Field ``name`` of a batch sample (``DetectionBatch``, ``AirPicture`` …) as an array.

    An optional field (``OPTIONAL_ARRAYS``) that is empty comes back with 0 rows; one of any
    other length than ``count`` items raises ``ValueError`` (check it with `optional_field`)."""
    kind = type(sample).__name__
    spec = PACKED_ARRAYS.get(kind, {}).get(name) or OPTIONAL_ARRAYS[kind][name]
    dtype, dims = spec
    data = getattr(sample, name)
    rows = 0 if not data and name in OPTIONAL_ARRAYS.get(kind, {}) else sample.count
    return unpack(data, dtype, (rows, *dims))


def float_field(sample: Any, name: str) -> npt.NDArray[np.float64]:
    """`packed_field` as float64 (a copy only when the field is not already ``<f8``)."""
    return np.asarray(packed_field(sample, name), dtype=np.float64)


def optional_field(sample: Any, name: str) -> npt.NDArray[Any] | None:
    """Optional field ``name`` (``OPTIONAL_ARRAYS``) as ``count`` rows, or None when it is empty
    (the writer predates it or left it out). Raises ``ValueError`` naming the field when it
    holds another number of items: the reader counts and drops such a sample."""
    dtype, dims = OPTIONAL_ARRAYS[type(sample).__name__][name]
    data = getattr(sample, name)
    if not data:
        return None
    item = np.dtype(dtype).itemsize * int(np.prod(dims, dtype=np.int64))
    if len(data) != sample.count * item:
        raise ValueError(
            f"{type(sample).__name__}.{name}: {len(data)} bytes but count={sample.count} "
            f"needs {sample.count * item} or none"
        )
    return unpack(data, dtype, (sample.count, *dims))


def to_ndarray_msg(array: npt.ArrayLike) -> NDArray:
    """An ``NDArray`` message holding ``array`` (converted to little-endian)."""
    a = np.asarray(array)
    dtype = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
    a = np.ascontiguousarray(a, dtype=dtype)
    return NDArray(dtype=a.dtype.str, shape=list(a.shape), data=a.tobytes())


def from_ndarray_msg(msg: NDArray) -> npt.NDArray[Any]:
    """The array carried by an ``NDArray`` message (a read-only view of its bytes)."""
    return np.frombuffer(msg.data, dtype=np.dtype(msg.dtype)).reshape(tuple(msg.shape))
