"""Packed numeric arrays on the wire: numpy arrays <-> little-endian bytes (DESIGN.md)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from mcc.types._mcc import PACKED_ARRAYS, NDArray


def pack(values: npt.ArrayLike, dtype: str) -> bytes:
    """``values`` as packed bytes of ``dtype`` (e.g. ``"<f8"``), C order."""
    return np.ascontiguousarray(values, dtype=np.dtype(dtype)).tobytes()


def unpack(data: bytes, dtype: str, shape: tuple[int, ...] = (-1,)) -> npt.NDArray[Any]:
    """A read-only view of packed bytes as an array of ``dtype`` and ``shape``."""
    return np.frombuffer(data, dtype=np.dtype(dtype)).reshape(shape)


def packed_field(sample: Any, name: str) -> npt.NDArray[Any]:
    """Field ``name`` of a batch sample (``DetectionBatch``, ``AirPicture`` …) as an array."""
    dtype, dims = PACKED_ARRAYS[type(sample).__name__][name]
    return unpack(getattr(sample, name), dtype, (sample.count, *dims))


def to_ndarray_msg(array: npt.ArrayLike) -> NDArray:
    """An ``NDArray`` message holding ``array`` (converted to little-endian)."""
    a = np.asarray(array)
    dtype = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
    a = np.ascontiguousarray(a, dtype=dtype)
    return NDArray(dtype=a.dtype.str, shape=list(a.shape), data=a.tobytes())


def from_ndarray_msg(msg: NDArray) -> npt.NDArray[Any]:
    """The array carried by an ``NDArray`` message (a read-only view of its bytes)."""
    return np.frombuffer(msg.data, dtype=np.dtype(msg.dtype)).reshape(tuple(msg.shape))
