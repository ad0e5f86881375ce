"""Array backend: NumPy on the CPU, CuPy on a CUDA device, and the input checks every kernel shares.

Kernels take an optional ``xp`` (the array module). Left out, it is inferred from the arrays
passed in (`array_module`), so NumPy arrays stay on the CPU and CuPy arrays stay on the GPU.
SciPy steps (assignment, connected components, chi-square quantiles) always run on the host.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Literal

import numpy as np

from mcc.errors import ComputeError

__all__ = [
    "array_module",
    "as_float_array",
    "available_devices",
    "cuda_device_count",
    "device_kind",
    "get_xp",
    "require_finite",
    "require_in_range",
    "to_numpy",
]


def get_xp(device: str = "cpu") -> ModuleType:
    """The array module for ``device``: ``"cpu"`` → numpy, ``"cuda"`` or ``"cuda:N"`` → cupy.

    Selecting ``"cuda:N"`` makes device N current for this thread.
    """
    if device == "cpu":
        return np
    if device == "cuda" or device.startswith("cuda:"):
        index = 0
        if device != "cuda":
            suffix = device.removeprefix("cuda:")
            if not suffix.isdigit():
                raise ComputeError(
                    f"device={device!r}: the device index must be a non-negative integer, "
                    "e.g. 'cuda:0'"
                )
            index = int(suffix)
        try:
            cupy = importlib.import_module("cupy")
        except ImportError as exc:
            raise ComputeError(
                f"device={device!r} needs CuPy, which is not installed: "
                "`pip install mcc[gpu]` (or use device='cpu')"
            ) from exc
        cupy.cuda.Device(index).use()
        return cupy
    raise ComputeError(f"device={device!r} is not supported: use 'cpu', 'cuda' or 'cuda:N'")


def cuda_device_count() -> int:
    """CUDA devices CuPy can use here; 0 without CuPy, a driver or a device (never raises)."""
    try:
        cupy = importlib.import_module("cupy")
    except ImportError:
        return 0
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except (RuntimeError, OSError):  # CuPy installed, but no driver or no device
        return 0


def available_devices() -> tuple[str, ...]:
    """``"cpu"`` and ``"cuda:N"`` for every usable CUDA device (CuPy imported only to count)."""
    return ("cpu", *(f"cuda:{i}" for i in range(cuda_device_count())))


def device_kind(device: str) -> Literal["cpu", "gpu"]:
    """``"gpu"`` for ``"cuda"``/``"cuda:N"``, ``"cpu"`` for ``"cpu"``; `ComputeError` otherwise."""
    if device == "cpu":
        return "cpu"
    if device == "cuda" or device.startswith("cuda:"):
        return "gpu"
    raise ComputeError(f"device={device!r} is not supported: use 'cpu', 'cuda' or 'cuda:N'")


def array_module(*arrays: Any) -> ModuleType:
    """numpy, unless one of ``arrays`` is a CuPy array, in which case cupy."""
    for a in arrays:
        module = type(a).__module__
        if module.startswith("cupy"):
            return importlib.import_module("cupy")
    return np


def to_numpy(a: Any) -> np.ndarray:
    """``a`` as a NumPy array on the host (copies from the GPU for a CuPy array)."""
    if type(a).__module__.startswith("cupy"):
        return np.asarray(a.get())
    return np.asarray(a)


def as_float_array(name: str, a: Any, *, xp: ModuleType = np, ndim: int | None = None) -> Any:
    """``a`` as a float64 array of module ``xp``; raises if it has NaN/inf or the wrong ndim."""
    arr = xp.asarray(a, dtype=xp.float64)
    if ndim is not None and arr.ndim != ndim:
        raise ComputeError(f"{name} must have {ndim} dimension(s), got shape {tuple(arr.shape)}")
    require_finite(name, arr, xp=xp)
    return arr


def require_finite(name: str, a: Any, *, xp: ModuleType = np) -> None:
    """Raise `ComputeError` naming ``name`` when ``a`` holds a NaN or an infinity."""
    finite = xp.isfinite(a)
    if not bool(finite.all()):
        bad = int(finite.size - int(finite.sum()))
        raise ComputeError(
            f"{name} has {bad} NaN/inf value(s) (shape {tuple(xp.shape(a))}); pass finite numbers"
        )


def require_in_range(
    name: str,
    value: float,
    *,
    low: float,
    high: float,
    closed: Literal["both", "left", "right", "neither"] = "both",
) -> None:
    """Raise `ComputeError` unless ``value`` lies between ``low`` and ``high`` (NaN never does);
    ``closed`` says which ends are allowed."""
    ok_low = value >= low if closed in ("both", "left") else value > low
    ok_high = value <= high if closed in ("both", "right") else value < high
    if not (ok_low and ok_high):
        lo = "[" if closed in ("both", "left") else "("
        hi = "]" if closed in ("both", "right") else ")"
        raise ComputeError(f"{name}={value!r} is out of range; allowed {lo}{low}, {high}{hi}")
