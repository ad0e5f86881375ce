"""Conformance of every registered kernel on every backend.

1. The NumPy path of each kernel against an independent reference (a loop, a closed form or a
   brute force), so the NumPy path can serve as the reference for the others.
2. Every available backend against the NumPy path within the kernel's stated tolerance:
   ``cpu``, each ``cuda:N`` that CuPy sees (automatically, where CuPy and a GPU exist), and
   ``remote`` (a compute service in this process, on the CPU: bit-identical results).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
import pytest

from mcc.compute import KERNELS, Kernels, kalman, open_compute, wta
from mcc.compute.backend import available_devices
from mcc.compute.montecarlo import raid_annihilation_exact
from mcc.compute.remote import ComputeService
from mcc.compute.rodinia import hotspot_reference, needleman_wunsch_reference

#: Example size per kernel: large enough to exercise the vector paths, small enough to be quick.
SIZES = {
    "kalman_predict": 50,
    "kalman_update": 50,
    "gating_cost": 40,
    "gospa": 6,
    "wta_score": 300,
    "montecarlo": 200_000,
    "nw": 90,
    "hotspot": 24,
}


def _example(name: str) -> tuple[tuple[np.ndarray, ...], dict[str, object]]:
    ex = KERNELS[name].example(SIZES[name], np.random.default_rng(11))
    return ex.arrays, ex.params


@pytest.fixture(scope="module")
def numpy_kernels() -> Iterator[Kernels]:
    with open_compute("cpu") as kernels:
        yield kernels


# -- 1. the NumPy path against independent references -----------------------------------------


def _gospa_brute(x: np.ndarray, y: np.ndarray, c: float, p: float) -> float:
    best = np.inf
    for k in range(min(len(x), len(y)) + 1):
        for rows in itertools.combinations(range(len(x)), k):
            for cols in itertools.permutations(range(len(y)), k):
                d = np.linalg.norm(x[list(rows)] - y[list(cols)], axis=1)
                if (d >= c).any():
                    continue
                best = min(best, (d**p).sum() + c**p / 2 * (len(x) + len(y) - 2 * k))
    return float(best ** (1 / p))


def test_kalman_predict_matches_the_textbook_formula(numpy_kernels: Kernels) -> None:
    x, P, F, Q = _example("kalman_predict")[0]
    res = numpy_kernels.kalman_predict(x, P, F, Q)
    for i in range(0, len(x), 7):
        np.testing.assert_allclose(res.x[i], F @ x[i], rtol=1e-12)
        np.testing.assert_allclose(res.P[i], F @ P[i] @ F.T + Q, rtol=1e-12)


def test_kalman_update_matches_the_gain_form(numpy_kernels: Kernels) -> None:
    x, P, z, H, R = _example("kalman_update")[0]
    res = numpy_kernels.kalman_update(x, P, z, H, R)
    for i in range(0, len(x), 7):
        S = H @ P[i] @ H.T + R
        K = P[i] @ H.T @ np.linalg.inv(S)
        np.testing.assert_allclose(res.x[i], x[i] + K @ (z[i] - H @ x[i]), rtol=1e-9)
        np.testing.assert_allclose(res.P[i], (np.eye(6) - K @ H) @ P[i], rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(res.S[i], S, rtol=1e-12)


def test_gating_cost_matches_pairwise_mahalanobis(numpy_kernels: Kernels) -> None:
    (z_pred, S, z), params = _example("gating_cost")
    cost = numpy_kernels.gating_cost(z_pred, S, z, **params).cost
    gate = 11.344866730144373  # chi2.ppf(0.99, 3)
    inside = 0
    for i, j in itertools.product(range(len(z_pred)), range(len(z))):
        d = z[j] - z_pred[i]
        d2 = float(d @ np.linalg.solve(S[i], d))
        if d2 <= gate * (1 - 1e-9):
            assert cost[i, j] == pytest.approx(d2, rel=1e-7)
            inside += 1
        elif d2 > gate * (1 + 1e-9):
            assert cost[i, j] == np.inf
    assert inside >= len(z_pred) // 2  # the example puts most measurements near a track


def test_gospa_matches_brute_force(numpy_kernels: Kernels) -> None:
    (truth, est), params = _example("gospa")
    res = numpy_kernels.gospa(truth, est, **params)
    assert float(res.distance) == pytest.approx(_gospa_brute(truth, est, 100.0, 2.0), rel=1e-9)
    assert res.n_missed.dtype == np.int64 and res.truth_idx.shape == res.estimate_idx.shape


def test_wta_score_matches_expected_value_per_plan(numpy_kernels: Kernels) -> None:
    pk, value, assignment = _example("wta_score")[0]
    scores = numpy_kernels.wta_score(pk, value, assignment).expected_value
    for k in range(0, len(assignment), 29):
        shots = np.zeros(pk.shape, dtype=np.int64)
        for w, t in enumerate(assignment[k]):
            if t >= 0:
                shots[w, t] += 1
        assert scores[k] == pytest.approx(wta.expected_value(pk, value, shots), rel=1e-12)


def test_montecarlo_agrees_with_the_closed_form(numpy_kernels: Kernels) -> None:
    (pk,), params = _example("montecarlo")
    res = numpy_kernels.montecarlo(pk, **{**params, "reserve_rounds": 0})
    trials = int(params["trials"])
    p_exact = raid_annihilation_exact(pk)
    sigma = np.sqrt(p_exact * (1 - p_exact) / trials)
    assert float(res.annihilation_prob) == pytest.approx(p_exact, abs=5 * sigma)
    kill_exact = 1 - np.prod(1 - pk, axis=1)
    np.testing.assert_allclose(res.kill_prob, kill_exact, atol=5 * np.sqrt(0.25 / trials))
    assert float(res.expected_leakers) == pytest.approx((1 - kill_exact).sum(), abs=0.01)


def test_nw_matches_the_cell_by_cell_loop(numpy_kernels: Kernels) -> None:
    (ref,), params = _example("nw")
    np.testing.assert_array_equal(
        numpy_kernels.nw(ref, **params).score, needleman_wunsch_reference(ref, penalty=10)
    )


def test_hotspot_matches_the_cell_by_cell_loop(numpy_kernels: Kernels) -> None:
    (temp, power), params = _example("hotspot")
    got = numpy_kernels.hotspot(temp, power, **params).temp
    assert got.dtype == np.float32
    expected = hotspot_reference(temp, power, iterations=int(params["iterations"]))
    np.testing.assert_allclose(got, expected, rtol=KERNELS["hotspot"].tolerance.rtol)


def test_the_references_are_not_vacuous() -> None:
    """The examples produce results that depend on their inputs (no all-zero outputs)."""
    x, P, F, Q = _example("kalman_predict")[0]
    assert not np.allclose(kalman.predict(x, P, F, Q)[0], x)
    (temp, power), params = _example("hotspot")
    assert np.abs(hotspot_reference(temp, power, iterations=5) - temp).max() > 1e-3


# -- 2. every backend against the NumPy path ---------------------------------------------------


@pytest.fixture(params=[*available_devices(), "remote"])
def backend(request: pytest.FixtureRequest) -> Iterator[Kernels]:
    if request.param != "remote":
        with open_compute(request.param) as kernels:
            yield kernels
        return
    request.getfixturevalue("bus_env")  # a fresh domain and discovery tag
    with ComputeService(name="conformance"), open_compute("remote:conformance") as kernels:
        yield kernels


@pytest.mark.parametrize("name", list(KERNELS))
def test_backend_matches_numpy_within_tolerance(
    backend: Kernels, numpy_kernels: Kernels, name: str
) -> None:
    arrays, params = _example(name)
    expected = numpy_kernels.call(name, *arrays, **params)
    got = backend.call(name, *arrays, **params)
    tol = KERNELS[name].tolerance
    runs_numpy = backend.device in ("cpu", "remote:conformance")  # the service runs on the CPU
    assert got._fields == expected._fields
    for field, g, e in zip(got._fields, got, expected, strict=True):
        assert isinstance(g, np.ndarray) and not g.flags.writeable, field
        assert g.shape == e.shape and g.dtype == e.dtype, field
        if runs_numpy:  # the same code on the same device: the very same bits
            np.testing.assert_array_equal(g, e, err_msg=field)
        elif e.dtype.kind == "f":
            np.testing.assert_allclose(g, e, rtol=tol.rtol, atol=tol.atol, err_msg=tol.why)
        else:
            np.testing.assert_array_equal(g, e, err_msg=field)
