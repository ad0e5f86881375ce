"""Writer-side sample checks: bad samples are refused with a clear error, never sent.

Checked, per topic type, with a plan built once per type:
  * float fields and fixed float arrays are finite (no NaN, no inf);
  * integer fields fit their IDL type;
  * enum fields hold a literal of their enum;
  * packed array fields (``mcc.types.PACKED_ARRAYS``) hold exactly ``count`` items and, for
    floating-point arrays, only finite values; optional ones (``mcc.types.OPTIONAL_ARRAYS``,
    appended to a type after writers existed) hold ``count`` items or none;
  * nested ``NDArray`` messages have a valid dtype and as many bytes as their shape needs.
"""

from __future__ import annotations

import enum
import math
import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
from cyclonedds.idl import IdlStruct
from cyclonedds.idl import types as idl_types

from mcc.errors import SampleError
from mcc.types import OPTIONAL_ARRAYS, PACKED_ARRAYS, NDArray

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint8": (0, 2**8 - 1),
    "byte": (0, 2**8 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
}


@dataclass(frozen=True)
class _Plan:
    floats: tuple[str, ...]
    ints: tuple[tuple[str, int, int], ...]
    enums: tuple[tuple[str, type[enum.Enum]], ...]
    float_arrays: tuple[tuple[str, int], ...]
    packed: tuple[tuple[str, np.dtype[Any], int, bool], ...]  # field, dtype, per count, optional
    nested: tuple[str, ...]  # struct-typed fields
    nested_seqs: tuple[str, ...]  # sequences of structs


@cache
def _plan(cls: type) -> _Plan:
    module = sys.modules[cls.__module__]
    hints = typing.get_type_hints(cls, globalns=vars(module), include_extras=True)
    floats, ints, enums, float_arrays, nested, nested_seqs = [], [], [], [], [], []
    for name, hint in hints.items():
        if name in ("sample_info",):
            continue
        base = typing.get_origin(hint) is typing.Annotated and typing.get_args(hint)
        meta = base[1] if base else None
        if hint is float or meta in ("float64", "float32"):
            floats.append(name)
        elif meta in _INT_RANGES:
            lo, hi = _INT_RANGES[meta]
            ints.append((name, lo, hi))
        elif isinstance(hint, type) and issubclass(hint, enum.Enum):
            enums.append((name, hint))
        elif isinstance(hint, type) and issubclass(hint, IdlStruct):
            nested.append(name)
        elif isinstance(meta, idl_types.array) and meta.subtype in (
            idl_types.float64,
            idl_types.float32,
        ):
            float_arrays.append((name, meta.length))
        elif isinstance(meta, idl_types.sequence):
            sub = vars(module).get(meta.subtype) if isinstance(meta.subtype, str) else meta.subtype
            if isinstance(sub, type) and issubclass(sub, IdlStruct):
                nested_seqs.append(name)
    packed = tuple(
        (name, np.dtype(dtype), math.prod(dims), optional)
        for optional, table in ((False, PACKED_ARRAYS), (True, OPTIONAL_ARRAYS))
        for name, (dtype, dims) in table.get(cls.__name__, {}).items()
    )
    return _Plan(
        tuple(floats),
        tuple(ints),
        tuple(enums),
        tuple(float_arrays),
        packed,
        tuple(nested),
        tuple(nested_seqs),
    )


@cache
def received_check(cls: type) -> Callable[[Any], None] | None:
    """The check a reader runs on decoded samples of ``cls``: `validate_sample`, or None when
    decoding already guarantees everything it would check (integers of a fixed width, enum
    members: no float, float array, packed array or nested struct to look at)."""
    plan = _plan(cls)
    if plan.floats or plan.float_arrays or plan.packed or plan.nested or plan.nested_seqs:
        return validate_sample
    return None


def validate_sample(sample: Any, *, path: str | None = None) -> None:
    """Raise ``SampleError`` naming the field, the value and the fix if ``sample`` is bad."""
    cls = type(sample)
    where = path or cls.__name__
    plan = _plan(cls)  # type: ignore[arg-type]
    for name in plan.floats:
        value = getattr(sample, name)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise SampleError(f"{where}.{name} = {value!r}: expected a number")
        if not math.isfinite(value):
            raise SampleError(
                f"{where}.{name} = {value}: state fields must be finite; "
                "fix the producer (or use the field's documented sentinel)"
            )
    for name, lo, hi in plan.ints:
        value = getattr(sample, name)
        if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
            raise SampleError(f"{where}.{name} = {value!r}: expected an integer in [{lo}, {hi}]")
    for name, enum_cls in plan.enums:
        value = getattr(sample, name)
        if not isinstance(value, enum_cls):
            try:
                setattr(sample, name, enum_cls(value))
            except ValueError:
                allowed = ", ".join(m.name for m in enum_cls)
                raise SampleError(
                    f"{where}.{name} = {value!r}: not a {enum_cls.__name__}; use one of {allowed}"
                ) from None
    for name, length in plan.float_arrays:
        values = getattr(sample, name)
        if len(values) != length:
            raise SampleError(f"{where}.{name}: {len(values)} values, the IDL declares {length}")
        if not np.isfinite(np.asarray(values, dtype=np.float64)).all():
            raise SampleError(f"{where}.{name}: contains NaN or inf; state fields must be finite")
    if plan.packed:
        _check_packed(sample, where, plan.packed)
    for name in plan.nested:
        validate_sample(getattr(sample, name), path=f"{where}.{name}")
    for name in plan.nested_seqs:
        for i, item in enumerate(getattr(sample, name)):
            item_path = f"{where}.{name}[{i}]"
            if isinstance(item, NDArray):
                _check_ndarray(item, item_path)
            validate_sample(item, path=item_path)


def _check_packed(
    sample: Any, where: str, packed: tuple[tuple[str, np.dtype[Any], int, bool], ...]
) -> None:
    count = sample.count
    for name, dtype, per_item, optional in packed:
        data = getattr(sample, name)
        if not isinstance(data, (bytes, bytearray)):
            raise SampleError(
                f"{where}.{name}: expected packed bytes, got {type(data).__name__}; "
                f"use mcc.types.arrays.pack(values, {dtype.str!r})"
            )
        if optional and not data:
            continue  # left out: the writer predates the field
        expected = count * per_item * dtype.itemsize
        if len(data) != expected:
            raise SampleError(
                f"{where}.{name}: {len(data)} bytes but count={count} needs {expected} "
                f"({count} x {per_item} x {dtype.str}); pack exactly `count` items"
                + (" or none" if optional else "")
            )
        if dtype.kind == "f" and count and not np.isfinite(np.frombuffer(data, dtype)).all():
            bad = int(np.flatnonzero(~np.isfinite(np.frombuffer(data, dtype)))[0])
            raise SampleError(
                f"{where}.{name}[{bad // per_item}]: NaN or inf; values must be finite"
            )


def _check_ndarray(msg: NDArray, where: str) -> None:
    ndarray_layout(msg.dtype, msg.shape, len(msg.data), where=where)


#: numpy dtype kinds that an array on the wire may have: numbers (no objects or records).
NUMBER_KINDS = "biufc"


def ndarray_layout(
    dtype_text: str,
    shape: typing.Sequence[int],
    nbytes: int,
    *,
    where: str,
    error: type[Exception] = SampleError,
    plain: bool = False,
) -> tuple[np.dtype[Any], tuple[int, ...]]:
    """The dtype and shape of an ``NDArray`` (``dtype_text``, ``shape``, ``nbytes`` of data),
    checked: a numpy dtype (``plain``: a plain number type) whose size times the shape is
    ``nbytes``; else ``error`` naming ``where``. The one check of arrays on the wire: the
    writer's `validate_sample` and the compute service's decoder both use it."""
    try:
        dtype = np.dtype(dtype_text)
    except (TypeError, ValueError, SyntaxError):
        raise error(f"{where}: dtype {dtype_text!r} is not a numpy dtype (e.g. '<f8')") from None
    if plain and (dtype.kind not in NUMBER_KINDS or dtype.fields or dtype.subdtype is not None):
        raise error(f"{where}: dtype {dtype_text!r} is not a plain number type (e.g. '<f8')")
    dims = tuple(int(n) for n in shape)
    expected = math.prod(dims) * dtype.itemsize
    if nbytes != expected:
        raise error(
            f"{where}: {nbytes} bytes of data but shape {dims} of {dtype.str} needs {expected}; "
            "build it with mcc.types.arrays.to_ndarray_msg"
        )
    return dtype, dims


def ndarray_view(
    data: Any, dtype: np.dtype[Any], shape: tuple[int, ...], offset: int = 0
) -> np.ndarray[Any, Any]:
    """A read-only array of ``shape`` over ``data`` from ``offset`` (checked by
    `ndarray_layout`); copied only when the bytes are not aligned for ``dtype``."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes == 0:
        arr = np.empty(shape, dtype=dtype)
    else:
        arr = np.frombuffer(data, dtype=dtype, count=nbytes // dtype.itemsize, offset=offset)
        if not arr.flags.aligned:
            arr = arr.copy()
        arr = arr.reshape(shape)
    arr.flags.writeable = False
    return arr
