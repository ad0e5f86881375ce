"""The kernel registry's schema: what a kernel takes (arrays, parameters) and gives back.

A `KernelSpec` names a kernel, its function ``fn(xp, *arrays, **params) -> tuple of arrays``,
the arrays it takes (`ArgSpec`: name, allowed dtypes, shape with named dimensions shared across
arguments), its scalar parameters (`ParamSpec`), the names of its results, and the tolerance
within which a GPU result must match the NumPy one. The same spec validates a local call
(`mcc.compute.open_compute`) and a remote one (the compute service checks every
``ComputeRequest`` against it before queueing it), so a bad kernel name, dtype, shape or
parameter is refused with the same message in both places. The kernels themselves are listed
in `mcc.compute.kernels`; `CallTiming` says where the time of one call went.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from mcc.errors import ComputeError

__all__ = [
    "REQUIRED",
    "ArgSpec",
    "CallTiming",
    "Example",
    "KernelSpec",
    "ParamSpec",
    "Tolerance",
    "canonical_dtype",
]

Dim = str | int
#: ``ParamSpec.default`` of a parameter the caller must give.
REQUIRED: Any = object()


class Example(NamedTuple):
    """Inputs of one call: the arrays (NumPy, in argument order) and the parameters."""

    arrays: tuple[np.ndarray, ...]
    params: dict[str, Any]


def canonical_dtype(dtype: Any) -> str:
    """The dtype string MCC uses on the wire: little-endian, e.g. ``'<f8'``, ``'|i1'``."""
    dt = np.dtype(dtype)
    return (dt.newbyteorder("<") if dt.byteorder == ">" else dt).str


@dataclasses.dataclass(frozen=True)
class ArgSpec:
    """One array argument: ``shape`` names each dimension (a name shared across arguments must
    have one size in a call) or fixes it (an int); ``dtypes`` are the accepted dtypes, the first
    being the one a local call casts to when the caller's array casts to it safely."""

    name: str
    dtypes: tuple[str, ...]
    shape: tuple[Dim, ...]
    doc: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtypes", tuple(canonical_dtype(d) for d in self.dtypes))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def describe(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        return f"{self.name} ({dims}) {'|'.join(self.dtypes)}"


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    """One scalar parameter: ``kind`` is float, int, bool or str; ``default`` may be REQUIRED.

    ``low``/``high`` bound a number (inclusive; None: unbounded on that side): every request
    is bounded, so a count such as ``trials`` or ``iterations`` always has a ``high``.
    """

    name: str
    kind: type
    default: Any
    doc: str = ""
    low: float | None = None
    high: float | None = None

    def describe(self) -> str:
        default = "required" if self.default is REQUIRED else f"default {self.default!r}"
        return f"{self.name} ({self.kind.__name__}, {default})"

    def _range(self) -> str:
        if self.low is None and self.high is None:
            return ""
        low = "" if self.low is None else f"{self.low:g}"
        high = "" if self.high is None else f"{self.high:g}"
        return f", {low}..{high}"

    def check(self, kernel: str, value: Any) -> Any:
        """``value`` as this parameter's kind; `ComputeError` naming kernel and parameter."""
        ok: bool
        if self.kind is bool:
            ok = isinstance(value, bool | np.bool_)
        elif self.kind is int:
            ok = isinstance(value, int | np.integer) and not isinstance(value, bool)
        elif self.kind is float:
            ok = isinstance(value, int | float | np.integer | np.floating) and not isinstance(
                value, bool
            )
            ok = ok and math.isfinite(float(value))
        else:
            ok = isinstance(value, self.kind)
        if not ok:
            raise ComputeError(
                f"kernel {kernel!r}: parameter {self.name}={value!r} must be a "
                f"{'finite ' if self.kind is float else ''}{self.kind.__name__}"
            )
        out = self.kind(value)
        if (self.low is not None and out < self.low) or (self.high is not None and out > self.high):
            raise ComputeError(
                f"kernel {kernel!r}: parameter {self.name}={value!r} is out of range; "
                f"allowed {self._range()[2:]} (a larger job: split it into several calls)"
            )
        return out


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """How close a GPU result must be to the NumPy one: ``|gpu - cpu| <= atol + rtol·|cpu|``
    for float results, equality for integer ones. ``why`` says where the difference comes from."""

    rtol: float = 1e-9
    atol: float = 0.0
    why: str = "same algorithm; floating-point reduction order differs"


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """A registered kernel; see the module docstring.

    ``batch_args`` name the arguments that several queued requests may have concatenated along
    their first axis (one call instead of many; the remaining arguments and the parameters must
    then be identical, and every result is split back along its first axis). ``example(size,
    rng)`` builds realistic inputs of ``size`` (``size_unit``) for tests and benchmarks;
    ``bench_sizes`` are the sizes ``mcc bench compute`` measures (``quick_sizes`` with
    ``--quick``); ``bound`` says what dominates its remote time (``"compute"``/``"copy"``).
    """

    name: str
    fn: Callable[..., tuple[Any, ...]]
    args: tuple[ArgSpec, ...]
    params: tuple[ParamSpec, ...]
    results: tuple[str, ...]
    doc: str
    example: Callable[[int, np.random.Generator], Example]
    size_unit: str
    bench_sizes: tuple[int, ...]
    quick_sizes: tuple[int, ...]
    bound: str
    tolerance: Tolerance = Tolerance()
    batch_args: tuple[str, ...] = ()
    idempotent: bool = True
    #: ``cost_s(dims, params)``: the estimated seconds of one call on one CPU core, from the
    #: sizes of the named dimensions and the parameters (None: negligible). The compute
    #: service refuses a request whose estimate exceeds its budget.
    cost_s: Callable[[Mapping[str, int], Mapping[str, Any]], float] | None = None
    #: the named tuple a call returns (fields = ``results``)
    result_type: Any = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "result_type", collections.namedtuple(f"{self.name}_result", self.results)
        )
        unknown = sorted(set(self.batch_args) - {a.name for a in self.args})
        if unknown:
            raise ComputeError(f"kernel {self.name!r}: batch_args {unknown} are not arguments")

    # -- validation -----------------------------------------------------------------------
    def signature(self) -> str:
        """``name(arg (dims) dtype, ..., *, param (kind, default), ...)``."""
        parts = [a.describe() for a in self.args]
        if self.params:
            parts += ["*", *(p.describe() for p in self.params)]
        return f"{self.name}({', '.join(parts)}) -> {', '.join(self.results)}"

    def estimate_s(self, dims: Mapping[str, int], params: Mapping[str, Any]) -> float:
        """The estimated seconds of one call (``cost_s``; 0.0 when the spec has none)."""
        return 0.0 if self.cost_s is None else float(self.cost_s(dims, params))

    def check_arrays(self, metas: Sequence[tuple[str, tuple[int, ...]]]) -> dict[str, int]:
        """Check ``(dtype, shape)`` of each array against the schema; `ComputeError` names the
        argument, what it got and what the kernel takes. Returns the size of each named
        dimension."""
        if len(metas) != len(self.args):
            names = ", ".join(a.name for a in self.args)
            raise ComputeError(
                f"kernel {self.name!r} takes {len(self.args)} array(s) ({names}), "
                f"got {len(metas)}; signature: {self.signature()}"
            )
        sizes: dict[str, tuple[int, str]] = {}
        for spec, (dtype, shape) in zip(self.args, metas, strict=True):
            if dtype not in spec.dtypes:
                raise ComputeError(
                    f"kernel {self.name!r}: argument {spec.name!r} has dtype {dtype!r}; "
                    f"allowed: {', '.join(map(repr, spec.dtypes))} "
                    f"(e.g. a.astype({np.dtype(spec.dtypes[0]).name!r}))"
                )
            if len(shape) != spec.ndim:
                raise ComputeError(
                    f"kernel {self.name!r}: argument {spec.name!r} has shape {tuple(shape)}; "
                    f"it must have {spec.ndim} dimension(s) "
                    f"({', '.join(str(d) for d in spec.shape)})"
                )
            for axis, (dim, size) in enumerate(zip(spec.shape, shape, strict=True)):
                if isinstance(dim, int):
                    if size != dim:
                        raise ComputeError(
                            f"kernel {self.name!r}: argument {spec.name!r} has shape "
                            f"{tuple(shape)}; axis {axis} must be {dim}"
                        )
                elif dim in sizes and sizes[dim][0] != size:
                    seen, where = sizes[dim]
                    raise ComputeError(
                        f"kernel {self.name!r}: argument {spec.name!r} has shape {tuple(shape)}"
                        f" but {where} says {dim}={seen}; expected "
                        f"({', '.join(str(d) for d in spec.shape)})"
                    )
                else:
                    sizes.setdefault(dim, (size, f"argument {spec.name!r}"))
        return {dim: size for dim, (size, _) in sizes.items()}

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` with defaults filled in and values of the declared kinds."""
        known = {p.name: p for p in self.params}
        unknown = sorted(set(params) - set(known))
        if unknown:
            allowed = ", ".join(p.describe() for p in self.params) or "none"
            raise ComputeError(
                f"kernel {self.name!r}: unknown parameter(s) {', '.join(unknown)}; "
                f"parameters: {allowed}"
            )
        out: dict[str, Any] = {}
        for p in self.params:
            if p.name in params:
                out[p.name] = p.check(self.name, params[p.name])
            elif p.default is REQUIRED:
                raise ComputeError(
                    f"kernel {self.name!r}: parameter {p.name!r} is required "
                    f"({p.kind.__name__}); signature: {self.signature()}"
                )
            else:
                out[p.name] = p.default
        return out

    def params_from_json(self, text: str) -> dict[str, Any]:
        """Parameters from a request's ``params_json`` (``""`` = none), checked."""
        if not text.strip():
            return self.check_params({})
        try:
            params = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ComputeError(
                f"kernel {self.name!r}: params_json is not JSON ({exc.msg} at {exc.pos})"
            ) from None
        except RecursionError:  # hostile nesting: refused like any bad JSON
            raise ComputeError(f"kernel {self.name!r}: params_json is nested too deep") from None
        if not isinstance(params, dict):
            raise ComputeError(f"kernel {self.name!r}: params_json must be a JSON object")
        return self.check_params(params)

    def prepare(self, arrays: Sequence[Any]) -> tuple[np.ndarray, ...]:
        """Host arrays for a call: NumPy, C-contiguous, little-endian, of an allowed dtype
        (a safe cast to the first allowed dtype is applied), shapes checked."""
        if len(arrays) != len(self.args):
            self.check_arrays([("", ())] * len(arrays))  # raises with the signature
        out = []
        for spec, a in zip(self.args, arrays, strict=True):
            arr = np.asarray(_host(a))
            dtype = canonical_dtype(arr.dtype)
            if dtype not in spec.dtypes and np.can_cast(arr.dtype, spec.dtypes[0], "safe"):
                dtype = spec.dtypes[0]
            out.append(np.ascontiguousarray(arr, dtype=np.dtype(dtype)))
        self.check_arrays([(canonical_dtype(a.dtype), a.shape) for a in out])
        return tuple(out)


def _host(a: Any) -> Any:
    if type(a).__module__.startswith("cupy"):
        return a.get()
    return a


@dataclasses.dataclass(frozen=True)
class CallTiming:
    """Where the time of one kernel call went, in milliseconds.

    ``compute_ms`` is the kernel on its device, host↔device copies included (measured by the
    service for a remote call); ``total_ms - compute_ms`` is the cost of getting there and
    back: checks, (de)serialisation, the wire, the service's queue.
    """

    kernel: str
    device: str
    total_ms: float
    compute_ms: float
    request_bytes: int = 0
    reply_bytes: int = 0
    attempts: int = 1

    @property
    def overhead_ms(self) -> float:
        return max(self.total_ms - self.compute_ms, 0.0)
