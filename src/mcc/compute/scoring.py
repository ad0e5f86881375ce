"""Weapon-target assignment scoring: the expected value of many candidate assignments at once.

`mcc.compute.wta` finds one good assignment; a planner that searches (local search, genetic
algorithms, Monte Carlo tree search) instead scores thousands of candidates per decision. A
candidate is an ``assignment (W,)`` row: the target each weapon fires one round at, -1 when it
holds fire. With single-shot kill probabilities ``pk (W, T)`` and target values ``value (T,)``
its expected value destroyed is ``Σ_t value_t (1 - Π_{w → t} (1 - pk[w, t]))``, the objective
of `mcc.compute.wta.expected_value`. Vectorised over candidates for NumPy or CuPy.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from mcc.compute.backend import array_module, as_float_array
from mcc.errors import ComputeError

__all__ = ["score_assignments"]


def score_assignments(pk: Any, value: Any, assignment: Any, *, xp: ModuleType | None = None) -> Any:
    """Expected value destroyed ``(K,)`` by each row of ``assignment (K, W)`` (target index per
    weapon, -1 = no shot), with ``pk (W, T)`` in 0..1 and ``value (T,)`` >= 0."""
    xp = xp if xp is not None else array_module(pk, value, assignment)
    p = as_float_array("pk", pk, xp=xp, ndim=2)
    v = as_float_array("value", value, xp=xp, ndim=1)
    plan = xp.asarray(assignment)
    n_weapons, n_targets = p.shape
    if v.shape != (n_targets,):
        raise ComputeError(f"value must have shape ({n_targets},), got {tuple(v.shape)}")
    if plan.ndim != 2 or plan.shape[1] != n_weapons or plan.dtype.kind not in "iu":
        raise ComputeError(
            f"assignment must be a (K, {n_weapons}) integer array (target per weapon, -1 = none),"
            f" got {plan.dtype}{tuple(plan.shape)}"
        )
    if bool((p < 0).any()) or bool((p > 1).any()):
        raise ComputeError("pk must be in 0..1")
    if bool((v < 0).any()):
        raise ComputeError("value must be >= 0")
    if plan.size and (int(plan.min()) < -1 or int(plan.max()) >= n_targets):
        raise ComputeError(
            f"assignment holds targets {int(plan.min())}..{int(plan.max())}; "
            f"allowed -1 (no shot) .. {n_targets - 1}"
        )
    n_plans = plan.shape[0]
    # Column n_targets is a dummy target for "no shot" that every round misses.
    miss = xp.concatenate([1.0 - p, xp.ones((n_weapons, 1))], axis=1)
    target = xp.where(plan < 0, n_targets, plan).astype(xp.int64)
    survive = xp.ones((n_plans, n_targets + 1))
    rows = xp.arange(n_plans)
    for w in range(n_weapons):  # W passes (tens), each vectorised over the K candidates
        t = target[:, w]
        survive[rows, t] *= miss[w, t]  # one target per (candidate, weapon): no repeats
    return ((1.0 - survive[:, :n_targets]) * v).sum(axis=1)
