"""The kernel catalogue: every kernel that `open_compute` runs locally or on the compute service.

Each entry adapts a kernel of this package to the registry's calling convention,
``fn(xp, *arrays, **params) -> tuple of arrays``, and declares its schema
(`mcc.compute.registry.KernelSpec`). ``mcc compute kernels`` prints the signatures.

=============== ============================================ ===================================
kernel          what                                         module
=============== ============================================ ===================================
kalman_predict  CV Kalman prediction of N tracks             `mcc.compute.kalman.predict`
kalman_update   Kalman update (Joseph form) of N tracks      `mcc.compute.kalman.update`
gating_cost     χ² gate + Mahalanobis cost matrix (N × M)    `mcc.compute.associate`
gospa           GOSPA between truth and estimates            `mcc.compute.gospa.gospa`
wta_score       expected value of K candidate assignments    `mcc.compute.scoring`
montecarlo      raid annihilation by Monte Carlo             `mcc.compute.montecarlo`
nw              Rodinia Needleman–Wunsch (copy-bound)        `mcc.compute.rodinia`
hotspot         Rodinia HotSpot (compute-bound)              `mcc.compute.rodinia`
=============== ============================================ ===================================
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

import numpy as np

from mcc.compute import associate, kalman, montecarlo, rodinia
from mcc.compute.backend import to_numpy
from mcc.compute.gospa import gospa
from mcc.compute.registry import REQUIRED, ArgSpec, Example, KernelSpec, ParamSpec, Tolerance
from mcc.compute.scoring import score_assignments
from mcc.errors import ComputeError

__all__ = ["KERNELS", "kernel_names", "kernel_spec"]

F8 = ("<f8",)
INT = ("<i8", "<i4")


def _spd(rng: np.random.Generator, n: int, size: int, scale: float) -> np.ndarray:
    a = rng.normal(size=(size, n, n))
    return scale * (a @ a.swapaxes(1, 2) / n + np.eye(n))


# -- Kalman -------------------------------------------------------------------------------------


def _kalman_predict(xp: ModuleType, x: Any, P: Any, F: Any, Q: Any) -> tuple[Any, ...]:
    return kalman.predict(x, P, F, Q, xp=xp)


def _kalman_update(xp: ModuleType, x: Any, P: Any, z: Any, H: Any, R: Any) -> tuple[Any, ...]:
    r = kalman.update(x, P, z, H, R, xp=xp)
    return r.x, r.P, r.innovation, r.S


def _tracks(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    x = np.concatenate([rng.uniform(-2e4, 2e4, (n, 3)), rng.normal(0.0, 200.0, (n, 3))], axis=1)
    return x, _spd(rng, 6, n, 50.0)


def _kalman_predict_example(n: int, rng: np.random.Generator) -> Example:
    x, P = _tracks(n, rng)
    F = kalman.cv_transition(1.0)
    Q = kalman.cv_process_noise(1.0, 5.0)
    return Example((x, P, F, Q), {})


def _kalman_update_example(n: int, rng: np.random.Generator) -> Example:
    x, P = _tracks(n, rng)
    z = x[:, :3] + rng.normal(0.0, 10.0, (n, 3))
    return Example((x, P, z, kalman.cv_measurement_matrix(), 100.0 * np.eye(3)), {})


# -- association, GOSPA ---------------------------------------------------------------------


def _gating_cost(
    xp: ModuleType, z_pred: Any, S: Any, z: Any, *, gate_probability: float
) -> tuple[Any, ...]:
    gate = associate.chi2_gate_threshold(gate_probability, int(z_pred.shape[1]))
    d2 = associate.pairwise_mahalanobis_sq(z_pred, S, z, xp=xp)
    return (xp.where(d2 <= gate, d2, xp.inf),)


def _gating_cost_example(n: int, rng: np.random.Generator) -> Example:
    side_m = 2e4 * max(1.0, (n / 100.0) ** (1.0 / 3.0))
    z_pred = rng.uniform(0.0, side_m, (n, 3))
    S = _spd(rng, 3, n, 400.0)
    z = z_pred[rng.permutation(n)] + rng.normal(0.0, 20.0, (n, 3))
    return Example((z_pred, S, z), {"gate_probability": 0.99})


def _gospa(
    xp: ModuleType, truth: Any, estimates: Any, *, c: float, p: float, alpha: float
) -> tuple[Any, ...]:
    r = gospa(truth, estimates, c=c, p=p, alpha=alpha, xp=xp)
    return (
        np.float64(r.distance),
        np.float64(r.localisation),
        np.float64(r.missed),
        np.float64(r.false),
        np.int64(r.n_missed),
        np.int64(r.n_false),
        r.truth_idx,
        r.estimate_idx,
    )


def _gospa_example(n: int, rng: np.random.Generator) -> Example:
    side_m = 1000.0 * np.sqrt(max(n, 1) / 10.0)
    truth = rng.uniform(-side_m, side_m, (n, 2))
    seen = truth[rng.random(n) < 0.9]
    seen = seen + rng.normal(0.0, 10.0, seen.shape)
    clutter = rng.uniform(-side_m, side_m, (max(n // 10, 0), 2))
    return Example((truth, np.concatenate([seen, clutter])), {"c": 100.0, "p": 2.0, "alpha": 2.0})


# -- weapon-target assignment, Monte Carlo --------------------------------------------------


def _wta_score(xp: ModuleType, pk: Any, value: Any, assignment: Any) -> tuple[Any, ...]:
    return (score_assignments(pk, value, assignment, xp=xp),)


def _wta_score_example(k: int, rng: np.random.Generator) -> Example:
    n_weapons, n_targets = 16, 32
    pk = rng.uniform(0.3, 0.9, (n_weapons, n_targets)) * (rng.random((n_weapons, n_targets)) < 0.7)
    value = rng.uniform(0.1, 1.0, n_targets)
    assignment = rng.integers(-1, n_targets, (k, n_weapons)).astype(np.int32)
    return Example((pk, value, assignment), {})


def _montecarlo(
    xp: ModuleType, pk: Any, *, trials: int, seed: int, reserve_rounds: int, looks: int
) -> tuple[Any, ...]:
    plan = montecarlo.EngagementPlan(pk=to_numpy(pk), reserve_rounds=reserve_rounds, looks=looks)
    r = montecarlo.simulate_raid(plan, trials=trials, rng=seed, xp=xp)
    return np.float64(r.annihilation_prob), np.float64(r.expected_leakers), r.kill_prob


def _montecarlo_example(trials: int, rng: np.random.Generator) -> Example:
    pk = rng.uniform(0.5, 0.9, (8, 2))
    params = {"trials": trials, "seed": int(rng.integers(2**31)), "reserve_rounds": 4, "looks": 1}
    return Example((pk,), params)


# -- Rodinia ----------------------------------------------------------------------------------


def _nw(xp: ModuleType, reference: Any, *, penalty: int) -> tuple[Any, ...]:
    return (rodinia.needleman_wunsch(reference, penalty=penalty, xp=xp),)


def _nw_example(length: int, rng: np.random.Generator) -> Example:
    return Example((rodinia.nw_inputs(length, seed=int(rng.integers(2**31))),), {"penalty": 10})


def _hotspot(xp: ModuleType, temp: Any, power: Any, *, iterations: int) -> tuple[Any, ...]:
    return (rodinia.hotspot(temp, power, iterations=iterations, xp=xp),)


def _hotspot_example(side: int, rng: np.random.Generator) -> Example:
    temp, power = rodinia.hotspot_inputs(side, seed=int(rng.integers(2**31)))
    return Example((temp, power), {"iterations": 100})


# -- costs: estimated seconds of one call on one CPU core ---------------------------------------
# From calls of the examples on a 2-core VM (2024), with a margin of about 2: the compute service
# refuses a request whose estimate exceeds its budget (`mcc.compute.limits`), and stops the
# iterative kernels (montecarlo, nw, hotspot) once the budget is spent whatever the estimate.

#: The most ``trials`` of one ``montecarlo`` call and ``iterations`` of one ``hotspot`` call.
MAX_TRIALS = 10**9
MAX_ITERATIONS = 10**7


def _kalman_predict_cost(d: Mapping[str, int], p: Mapping[str, Any]) -> float:
    return d["N"] * d["n"] ** 3 * 6e-9


def _kalman_update_cost(d: Mapping[str, int], p: Mapping[str, Any]) -> float:
    return d["N"] * (d["n"] ** 3 + d["m"] ** 3) * 2e-8


def _gating_cost_cost(d: Mapping[str, int], p: Mapping[str, Any]) -> float:
    return d["N"] * d["M"] * d["m"] ** 2 * 1e-8


def _gospa_cost(d: Mapping[str, int], p: Mapping[str, Any]) -> float:
    n = max(d["m"], d["n"])
    return n * n * d["d"] * 3e-8 + n**3 * 2e-10  # distances, then the assignment (worst case)


def _wta_score_cost(d: Mapping[str, int], p: Mapping[str, Any]) -> float:
    return d["K"] * d["W"] * (d["T"] + 1) * 4e-9


def _montecarlo_cost(d: Mapping[str, int], p: Mapping[str, Any]) -> float:
    per_trial = d["threats"] * (d["shots"] + 1 + p["looks"] * (1 if p["reserve_rounds"] else 0))
    return p["trials"] * per_trial * 6e-9


def _nw_cost(d: Mapping[str, int], p: Mapping[str, Any]) -> float:
    return d["L1"] * d["L2"] * 6e-8 + (d["L1"] + d["L2"]) * 2e-5


def _hotspot_cost(d: Mapping[str, int], p: Mapping[str, Any]) -> float:
    return p["iterations"] * (d["rows"] * d["cols"] * 4e-9 + 2e-5)


_SPECS = (
    KernelSpec(
        name="kalman_predict",
        fn=_kalman_predict,
        cost_s=_kalman_predict_cost,
        args=(
            ArgSpec("x", F8, ("N", "n"), "states [x y z vx vy vz], m and m/s"),
            ArgSpec("P", F8, ("N", "n", "n"), "covariances"),
            ArgSpec("F", F8, ("n", "n"), "transition matrix"),
            ArgSpec("Q", F8, ("n", "n"), "process noise"),
        ),
        params=(),
        results=("x", "P"),
        doc="Kalman prediction of a bank of N tracks: x' = F x, P' = F P Fᵀ + Q.",
        example=_kalman_predict_example,
        size_unit="tracks",
        bench_sizes=(1_000, 10_000, 30_000),
        quick_sizes=(10_000,),
        bound="copy",
        tolerance=Tolerance(rtol=1e-9, atol=1e-9, why="matrix products summed in another order"),
        batch_args=("x", "P"),
    ),
    KernelSpec(
        name="kalman_update",
        fn=_kalman_update,
        cost_s=_kalman_update_cost,
        args=(
            ArgSpec("x", F8, ("N", "n"), "predicted states"),
            ArgSpec("P", F8, ("N", "n", "n"), "predicted covariances"),
            ArgSpec("z", F8, ("N", "m"), "one measurement per track"),
            ArgSpec("H", F8, ("m", "n"), "measurement matrix"),
            ArgSpec("R", F8, ("m", "m"), "measurement noise"),
        ),
        params=(),
        results=("x", "P", "innovation", "S"),
        doc="Kalman update of N tracks (Joseph form), with innovations and their covariance.",
        example=_kalman_update_example,
        size_unit="tracks",
        bench_sizes=(1_000, 10_000, 30_000),
        quick_sizes=(10_000,),
        bound="copy",
        tolerance=Tolerance(rtol=1e-8, atol=1e-8, why="batched solve factorises differently"),
        batch_args=("x", "P", "z"),
    ),
    KernelSpec(
        name="gating_cost",
        fn=_gating_cost,
        cost_s=_gating_cost_cost,
        args=(
            ArgSpec("z_pred", F8, ("N", "m"), "predicted measurements of N tracks"),
            ArgSpec("S", F8, ("N", "m", "m"), "innovation covariances (R included)"),
            ArgSpec("z", F8, ("M", "m"), "M measurements"),
        ),
        params=(
            ParamSpec(
                "gate_probability", float, 0.99, "χ² gate probability", low=1e-9, high=1 - 1e-12
            ),
        ),
        results=("cost",),
        doc="Squared Mahalanobis distance of every track-measurement pair, inf outside the gate.",
        example=_gating_cost_example,
        size_unit="tracks = measurements",
        bench_sizes=(100, 300, 1000),
        quick_sizes=(300,),
        bound="copy",
        tolerance=Tolerance(rtol=1e-7, atol=1e-6, why="Cholesky inverse and GEMM on the device"),
    ),
    KernelSpec(
        name="gospa",
        fn=_gospa,
        cost_s=_gospa_cost,
        args=(
            ArgSpec("truth", F8, ("m", "d"), "true positions, m"),
            ArgSpec("estimates", F8, ("n", "d"), "estimated positions, m"),
        ),
        params=(
            ParamSpec("c", float, REQUIRED, "cut-off distance, m", low=1e-9),
            ParamSpec("p", float, 2.0, "order", low=1.0, high=1e3),
            ParamSpec("alpha", float, 2.0, "0 < alpha <= 2", low=1e-9, high=2.0),
        ),
        results=(
            "distance",
            "localisation",
            "missed",
            "false",
            "n_missed",
            "n_false",
            "truth_idx",
            "estimate_idx",
        ),
        doc="GOSPA metric (distances on the device, optimal assignment on the host).",
        example=_gospa_example,
        size_unit="targets",
        bench_sizes=(100, 300, 1000),
        quick_sizes=(300,),
        bound="compute",
        tolerance=Tolerance(rtol=1e-9, atol=1e-9, why="distances summed in another order"),
    ),
    KernelSpec(
        name="wta_score",
        fn=_wta_score,
        cost_s=_wta_score_cost,
        args=(
            ArgSpec("pk", F8, ("W", "T"), "single-shot kill probabilities"),
            ArgSpec("value", F8, ("T",), "target values"),
            ArgSpec("assignment", INT, ("K", "W"), "target per weapon per candidate, -1 = none"),
        ),
        params=(),
        results=("expected_value",),
        doc="Expected value destroyed by each of K candidate weapon-target assignments.",
        example=_wta_score_example,
        size_unit="candidates",
        bench_sizes=(1_000, 10_000, 100_000),
        quick_sizes=(10_000,),
        bound="copy",
        tolerance=Tolerance(rtol=1e-12, atol=1e-12, why="products taken in the same order"),
        batch_args=("assignment",),
    ),
    KernelSpec(
        name="montecarlo",
        fn=_montecarlo,
        cost_s=_montecarlo_cost,
        args=(ArgSpec("pk", F8, ("threats", "shots"), "pk of each first-salvo shot, 0 = none"),),
        params=(
            ParamSpec("trials", int, 100_000, "raids simulated", low=1, high=MAX_TRIALS),
            ParamSpec(
                "seed", int, 0, "random seed (same result on one backend)", low=0, high=2**63 - 1
            ),
            ParamSpec("reserve_rounds", int, 0, "rounds held back for SLS", low=0, high=10_000),
            ParamSpec("looks", int, 1, "look-shoot cycles", low=1, high=64),
        ),
        results=("annihilation_prob", "expected_leakers", "kill_prob"),
        doc="Monte Carlo raid: P(every threat killed), expected leakers, kill probability each.",
        example=_montecarlo_example,
        size_unit="trials",
        bench_sizes=(10_000, 100_000, 1_000_000),
        quick_sizes=(100_000,),
        bound="compute",
        tolerance=Tolerance(
            rtol=0.0,
            atol=0.02,
            why="CuPy draws its own random stream: statistical agreement (> 6 σ at 2·10⁵ trials)",
        ),
    ),
    KernelSpec(
        name="nw",
        fn=_nw,
        cost_s=_nw_cost,
        args=(ArgSpec("reference", ("<i4",), ("L1", "L2"), "BLOSUM62 score of each pair"),),
        params=(ParamSpec("penalty", int, rodinia.NW_PENALTY, "gap cost", low=0, high=2**20),),
        results=("score",),
        doc="Rodinia Needleman–Wunsch: global alignment score matrix (anti-diagonal wavefront).",
        example=_nw_example,
        size_unit="residues per sequence",
        bench_sizes=(256, 1024, 2048),
        quick_sizes=(1024,),
        bound="copy",
        tolerance=Tolerance(rtol=0.0, atol=0.0, why="integer arithmetic: identical"),
    ),
    KernelSpec(
        name="hotspot",
        fn=_hotspot,
        cost_s=_hotspot_cost,
        args=(
            ArgSpec("temp", ("<f4", "<f8"), ("rows", "cols"), "initial temperatures"),
            ArgSpec("power", ("<f4", "<f8"), ("rows", "cols"), "power per cell"),
        ),
        params=(ParamSpec("iterations", int, 60, "time steps", low=0, high=MAX_ITERATIONS),),
        results=("temp",),
        doc="Rodinia HotSpot: transient chip temperature after `iterations` stencil steps.",
        example=_hotspot_example,
        size_unit="grid side (cells), 100 steps",
        bench_sizes=(256, 512, 1024),
        quick_sizes=(512,),
        bound="compute",
        tolerance=Tolerance(rtol=1e-5, atol=1e-3, why="float32; the GPU fuses multiply-adds"),
    ),
)

#: Every registered kernel by name.
KERNELS: dict[str, KernelSpec] = {spec.name: spec for spec in _SPECS}


def kernel_names() -> tuple[str, ...]:
    """The registered kernel names, in catalogue order."""
    return tuple(KERNELS)


def kernel_spec(name: str) -> KernelSpec:
    """The spec of kernel ``name``; `ComputeError` listing the known kernels otherwise."""
    try:
        return KERNELS[name]
    except KeyError:
        raise ComputeError(
            f"unknown kernel {name!r}; registered kernels: {', '.join(KERNELS)}"
        ) from None
