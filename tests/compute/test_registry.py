"""The kernel registry and `open_compute`: schemas, refusals naming the culprit, device choice."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import mcc.compute
from mcc.compute import KERNELS, kernel_spec, open_compute
from mcc.compute.dispatch import ENV_DEVICE
from mcc.compute.registry import REQUIRED, ArgSpec, KernelSpec, canonical_dtype
from mcc.errors import ComputeError
from mcc.settings import SettingsError

RNG = np.random.default_rng(5)


def _example(name: str, size: int = 8) -> tuple[tuple[np.ndarray, ...], dict[str, object]]:
    ex = KERNELS[name].example(size, np.random.default_rng(1))
    return ex.arrays, ex.params


def test_public_surface_exports_the_compute_api() -> None:
    for name in mcc.compute.__all__:
        assert hasattr(mcc.compute, name), name
    assert {"open_compute", "Kernels", "KERNELS", "kernel_spec", "rodinia", "gospa"} <= set(
        mcc.compute.__all__
    )


def test_catalogue_lists_the_issue_s_kernels_with_consistent_specs() -> None:
    assert set(KERNELS) == {
        "kalman_predict",
        "kalman_update",
        "gating_cost",
        "gospa",
        "wta_score",
        "montecarlo",
        "nw",
        "hotspot",
    }
    for name, spec in KERNELS.items():
        assert spec.name == name and spec.bound in ("copy", "compute")
        assert spec.bench_sizes and set(spec.quick_sizes) <= set(spec.bench_sizes)
        ex = spec.example(4, np.random.default_rng(0))
        spec.check_arrays([(canonical_dtype(a.dtype), a.shape) for a in ex.arrays])
        assert spec.check_params(ex.params).keys() == {p.name for p in spec.params}
        assert spec.signature().startswith(f"{name}(") and "->" in spec.signature()


def test_unknown_kernel_is_named_with_the_known_ones() -> None:
    with pytest.raises(ComputeError, match=r"unknown kernel 'fft'; registered kernels: kalman"):
        kernel_spec("fft")
    with open_compute("cpu") as kernels, pytest.raises(AttributeError, match="no kernel 'fft'"):
        kernels.fft  # noqa: B018


def test_wrong_dtype_names_argument_and_allowed_dtypes() -> None:
    ref = np.zeros((4, 4))  # float64, NW takes int32
    with (
        open_compute("cpu") as kernels,
        pytest.raises(
            ComputeError, match=r"kernel 'nw': argument 'reference' has dtype '<f8'; allowed: '<i4'"
        ),
    ):
        kernels.nw(ref)


def test_safe_casts_are_applied_unsafe_ones_refused() -> None:
    spec = kernel_spec("kalman_predict")
    arrays, _ = _example("kalman_predict")
    as_f4 = tuple(a.astype(np.float32) for a in arrays)  # float32 -> float64 is safe
    prepared = spec.prepare(as_f4)
    assert all(a.dtype == np.float64 and a.flags.c_contiguous for a in prepared)
    big_endian = spec.prepare(tuple(a.astype(">f8") for a in arrays))
    assert all(a.dtype.str == "<f8" for a in big_endian)
    with pytest.raises(ComputeError, match=r"argument 'reference' has dtype '<i8'"):
        kernel_spec("nw").prepare((np.zeros((3, 3), dtype=np.int64),))  # int64 -> int32: unsafe


def test_shapes_are_checked_across_arguments() -> None:
    spec = kernel_spec("kalman_predict")
    x, P, F, Q = _example("kalman_predict")[0]
    with pytest.raises(ComputeError, match=r"argument 'P' has shape \(7, 6, 6\) but argument "):
        spec.prepare((x, P[:7], F, Q))
    with pytest.raises(ComputeError, match=r"argument 'F' has shape \(6, 6, 1\); it must have 2"):
        spec.prepare((x, P, F[..., None], Q))
    with pytest.raises(ComputeError, match=r"takes 4 array\(s\) \(x, P, F, Q\), got 3"):
        spec.prepare((x, P, F))


def test_fixed_dimensions_are_checked() -> None:
    spec = KernelSpec(
        name="demo",
        fn=lambda xp, a: (a,),
        args=(ArgSpec("a", ("<f8",), ("N", 3)),),
        params=(),
        results=("a",),
        doc="",
        example=lambda n, rng: None,  # type: ignore[arg-type,return-value]
        size_unit="",
        bench_sizes=(1,),
        quick_sizes=(1,),
        bound="copy",
    )
    spec.check_arrays([("<f8", (5, 3))])
    with pytest.raises(ComputeError, match=r"argument 'a' has shape \(5, 2\); axis 1 must be 3"):
        spec.check_arrays([("<f8", (5, 2))])
    with pytest.raises(ComputeError, match=r"batch_args \['b'\] are not arguments"):
        dataclasses.replace(spec, batch_args=("b",))


def test_parameters_are_checked_by_name_kind_and_presence() -> None:
    spec = kernel_spec("gospa")
    assert any(p.default is REQUIRED for p in spec.params)
    with pytest.raises(ComputeError, match=r"parameter 'c' is required"):
        spec.check_params({})
    with pytest.raises(ComputeError, match=r"unknown parameter\(s\) cutoff; parameters: c"):
        spec.check_params({"c": 1.0, "cutoff": 2.0})
    with pytest.raises(ComputeError, match=r"parameter c='far' must be a finite float"):
        spec.check_params({"c": "far"})
    with pytest.raises(ComputeError, match=r"parameter c=nan must be a finite float"):
        spec.check_params({"c": float("nan")})
    with pytest.raises(ComputeError, match=r"parameter iterations=2.5 must be a int"):
        kernel_spec("hotspot").check_params({"iterations": 2.5})
    assert spec.check_params({"c": 5}) == {"c": 5.0, "p": 2.0, "alpha": 2.0}
    assert spec.params_from_json('{"c": 3}')["c"] == 3.0
    with pytest.raises(ComputeError, match="params_json is not JSON"):
        spec.params_from_json("{c: 3")
    with pytest.raises(ComputeError, match="must be a JSON object"):
        spec.params_from_json("[3]")


def test_results_are_named_read_only_numpy_arrays() -> None:
    arrays, params = _example("kalman_update")
    with open_compute("cpu") as kernels:
        res = kernels.kalman_update(*arrays, **params)
        timing = kernels.last_timing
    assert res._fields == ("x", "P", "innovation", "S")
    assert all(isinstance(r, np.ndarray) and not r.flags.writeable for r in res)
    assert timing is not None and timing.kernel == "kalman_update" and timing.device == "cpu"
    assert timing.total_ms >= timing.compute_ms > 0 and timing.overhead_ms >= 0


def test_a_result_never_aliases_an_input() -> None:
    temp = np.full((4, 4), 300.0, dtype=np.float32)
    power = np.zeros((4, 4), dtype=np.float32)
    with open_compute("cpu") as kernels:
        out = kernels.hotspot(temp, power, iterations=0).temp
    assert not np.may_share_memory(out, temp)
    temp[0, 0] = 0.0
    assert out[0, 0] == pytest.approx(300.0)


def test_submit_returns_a_future_of_the_named_results() -> None:
    arrays, params = _example("wta_score")
    with open_compute("cpu") as kernels:
        future = kernels.submit("wta_score", *arrays, **params)
        direct = kernels.wta_score(*arrays, **params)
    np.testing.assert_array_equal(future.result(timeout=5).expected_value, direct.expected_value)


def test_device_comes_from_argument_then_mcc_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_DEVICE, raising=False)
    with open_compute() as kernels:
        assert kernels.device == "cpu" and "nw" in dir(kernels) and repr(kernels)
    monkeypatch.setenv(ENV_DEVICE, "tpu:0")  # refused where every MCC_* variable is checked
    with pytest.raises(SettingsError, match=r"^MCC_DEVICE: String should match pattern"):
        open_compute()
    with pytest.raises(ComputeError, match=r"device='tpu:0' \(argument or MCC_DEVICE\)"):
        open_compute("tpu:0")
    with open_compute("cpu") as kernels:
        assert kernels.device == "cpu"
    with pytest.raises(ComputeError, match="compute service name 'a b'"):
        open_compute("remote:a b")
