"""`open_compute`: the registered kernels of one device as methods, run here or remotely.

>>> with open_compute("cpu") as kernels:             # or "cuda:0", or "remote:compute"
...     x, P = kernels.kalman_predict(x, P, F, Q)
...     score = kernels.nw(reference, penalty=10).score

The device comes from the argument, else ``MCC_DEVICE`` (set by the orchestrator: ``cpu`` for
``gpu: none``, ``cuda:0`` for ``gpu: exclusive``, ``remote:compute`` for ``gpu: shared``), else
``cpu``, so an app moves between a local CPU, its own GPU and a shared one by configuration.
Every call takes host arrays (anything `numpy.asarray` takes, or CuPy arrays), checks them
against the kernel's schema (`mcc.compute.kernels`) and returns a named tuple of read-only
NumPy arrays on every device: a CuPy result is copied back to the host, a remote one is a view
of the reply. ``kernels.last_timing`` tells where the time of the last call went.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from concurrent.futures import Future
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from mcc.compute.backend import device_kind, get_xp, to_numpy
from mcc.compute.kernels import KERNELS, kernel_spec
from mcc.compute.registry import CallTiming, KernelSpec

if TYPE_CHECKING:  # the bus is imported only for a remote device
    from mcc.bus.transport import Transport
from mcc.errors import ComputeError
from mcc.lifecycle import Closeable
from mcc.settings import current, env_name

__all__ = ["ENV_DEVICE", "CallTiming", "Executor", "Kernels", "open_compute", "run_kernel"]

#: Environment variable naming the device of `open_compute()` (set by the orchestrator).
ENV_DEVICE = env_name("device")


class Executor(Protocol):
    """Runs checked calls on one device (`LocalExecutor`, `mcc.compute.remote.ComputeClient`)."""

    device: str

    def submit(
        self, spec: KernelSpec, arrays: tuple[np.ndarray, ...], params: dict[str, Any]
    ) -> Future[tuple[tuple[np.ndarray, ...], CallTiming]]: ...

    def call(
        self, spec: KernelSpec, arrays: tuple[np.ndarray, ...], params: dict[str, Any]
    ) -> tuple[tuple[np.ndarray, ...], CallTiming]: ...

    def close(self) -> None: ...


def run_kernel(
    spec: KernelSpec, xp: ModuleType, arrays: tuple[np.ndarray, ...], params: dict[str, Any]
) -> tuple[np.ndarray, ...]:
    """Run ``spec`` on array module ``xp``: host arrays in (copied to the device when ``xp`` is
    CuPy), read-only host arrays out. Used by local calls and by the compute service."""
    on_device = arrays if xp is np else tuple(xp.asarray(a) for a in arrays)
    results = spec.fn(xp, *on_device, **params)
    if len(results) != len(spec.results):
        raise ComputeError(
            f"kernel {spec.name!r} returned {len(results)} arrays, its spec declares "
            f"{len(spec.results)} ({', '.join(spec.results)}); fix mcc.compute.kernels"
        )
    out = []
    for r in results:
        host = np.asarray(to_numpy(r))
        if any(np.may_share_memory(host, a) for a in arrays):
            host = host.copy()  # a result never aliases the caller's input
        host.flags.writeable = False
        out.append(host)
    return tuple(out)


class LocalExecutor:
    """Runs kernels in this process on ``"cpu"`` (NumPy) or ``"cuda:N"`` (CuPy)."""

    def __init__(self, device: str) -> None:
        device_kind(device)
        self.device = device
        self._xp = get_xp(device)  # fails now, with the fix, when CuPy or the GPU is missing

    def submit(
        self, spec: KernelSpec, arrays: tuple[np.ndarray, ...], params: dict[str, Any]
    ) -> Future[tuple[tuple[np.ndarray, ...], CallTiming]]:
        future: Future[tuple[tuple[np.ndarray, ...], CallTiming]] = Future()
        try:
            future.set_result(self.call(spec, arrays, params))
        except BaseException as exc:
            future.set_exception(exc)
        return future

    def call(
        self, spec: KernelSpec, arrays: tuple[np.ndarray, ...], params: dict[str, Any]
    ) -> tuple[tuple[np.ndarray, ...], CallTiming]:
        t0 = time.perf_counter()
        xp = self._xp if self.device == "cpu" else get_xp(self.device)  # current device
        results = run_kernel(spec, xp, arrays, params)
        ms = (time.perf_counter() - t0) * 1e3
        return results, CallTiming(spec.name, self.device, ms, ms)

    def close(self) -> None:
        """Nothing to release: the array module stays loaded."""


class Kernels(Closeable):
    """The registered kernels as methods, run by one executor; see the module docstring."""

    def __init__(self, executor: Executor) -> None:
        self._executor = executor
        self.last_timing: CallTiming | None = None

    @property
    def device(self) -> str:
        """Where the kernels run: ``cpu``, ``cuda:N`` or ``remote:NAME``."""
        return self._executor.device

    @property
    def executor(self) -> Executor:
        """What runs the calls (a `mcc.compute.remote.ComputeClient` for remote devices)."""
        return self._executor

    @staticmethod
    def names() -> tuple[str, ...]:
        """The kernels that can be called."""
        return tuple(KERNELS)

    def _prepare(
        self, kernel: str, arrays: tuple[Any, ...], params: dict[str, Any]
    ) -> tuple[KernelSpec, tuple[np.ndarray, ...], dict[str, Any]]:
        spec = kernel_spec(kernel)
        return spec, spec.prepare(arrays), spec.check_params(params)

    def call(self, kernel: str, *arrays: Any, **params: Any) -> Any:
        """Run ``kernel`` on ``arrays`` with ``params``; its named tuple of results."""
        t0 = time.perf_counter()
        spec, host, checked = self._prepare(kernel, arrays, params)
        results, timing = self._executor.call(spec, host, checked)
        total_ms = (time.perf_counter() - t0) * 1e3
        self.last_timing = dataclasses.replace(timing, total_ms=total_ms)
        return spec.result_type(*results)

    def submit(self, kernel: str, *arrays: Any, **params: Any) -> Future[Any]:
        """Start ``kernel`` and return a future of its results (remote calls overlap; local
        ones run before this returns)."""
        spec, host, checked = self._prepare(kernel, arrays, params)
        inner = self._executor.submit(spec, host, checked)
        outer: Future[Any] = Future()

        def done(f: Future[tuple[tuple[np.ndarray, ...], CallTiming]]) -> None:
            exc = f.exception()
            if exc is not None:
                outer.set_exception(exc)
            else:
                outer.set_result(spec.result_type(*f.result()[0]))

        inner.add_done_callback(done)
        return outer

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_") or name not in KERNELS:
            raise AttributeError(
                f"{type(self).__name__} has no kernel {name!r}; kernels: {', '.join(KERNELS)}"
            )
        spec = KERNELS[name]

        def call(*arrays: Any, **params: Any) -> Any:
            return self.call(name, *arrays, **params)

        call.__name__ = name
        call.__doc__ = f"{spec.signature()}\n\n{spec.doc}"
        return call

    def __dir__(self) -> list[str]:
        return [*super().__dir__(), *KERNELS]

    def close(self) -> None:
        """Release the executor (a remote client's bus participant)."""
        self._executor.close()

    def __repr__(self) -> str:
        return f"<Kernels on {self.device}>"


def open_compute(
    device: str | None = None,
    *,
    timeout_s: float = 60.0,
    connect_timeout_s: float = 15.0,
    retries: int = 2,
    domain_id: int | None = None,
    transport: Transport | None = None,
) -> Kernels:
    """The kernels of ``device`` (default: ``MCC_DEVICE``, else ``"cpu"``); close it after use.

    ``"cpu"`` and ``"cuda:N"`` run in this process. ``"remote:NAME"`` sends every call to the
    compute service NAME (``mcc compute serve --name NAME``) on DDS domain ``domain_id``
    (default ``MCC_DOMAIN``) over ``transport`` (default: the environment's): a call fails
    with `RequestTimeoutError` after ``timeout_s``, or after ``connect_timeout_s`` when no
    service answers, and is sent again up to ``retries`` times when the service restarts
    while it runs (every kernel is idempotent). These options are accepted, and unused, for
    local devices, so the call site never changes.
    """
    device = device or current().device or "cpu"
    if device.startswith("remote:"):
        from mcc.compute.client import ComputeClient

        return Kernels(
            ComputeClient(
                device.removeprefix("remote:"),
                domain_id=domain_id,
                transport=transport,
                timeout_s=timeout_s,
                connect_timeout_s=connect_timeout_s,
                retries=retries,
            )
        )
    try:
        device_kind(device)
    except ComputeError:
        raise ComputeError(
            f"device={device!r} (argument or {ENV_DEVICE}) is not supported: use 'cpu', "
            "'cuda:N' or 'remote:<service name>'"
        ) from None
    return Kernels(LocalExecutor(device))
