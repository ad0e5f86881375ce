"""Weapon-target assignment (static WTA): maximise the expected value destroyed.

``pk (W, T)`` is the single-shot kill probability of weapon w against target t, ``value (T,)``
the value of destroying each target (e.g. its threat score). Shots are independent, so with
``shots[w, t]`` rounds the expected value destroyed is ``Σ_t value_t (1 - Π_w (1 - pk)^shots)``.

Weapons that are not ready, have no rounds, or cannot reach a target (``in_range`` false, see
`engagement_mask`) get ``pk = 0`` for it and are never assigned there. Everything runs on the
host (SciPy's assignment solver); inputs may be NumPy or CuPy arrays.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from mcc.compute.backend import to_numpy
from mcc.errors import ComputeError

__all__ = [
    "WTAResult",
    "effective_pk",
    "engagement_mask",
    "expected_value",
    "wta_greedy",
    "wta_hungarian",
]


@dataclasses.dataclass(frozen=True, eq=False)
class WTAResult:
    """An assignment: one row per (weapon, target) pair used, sorted by weapon then target."""

    weapon_idx: np.ndarray  # (K,) int64
    target_idx: np.ndarray  # (K,) int64
    rounds: np.ndarray  # (K,) rounds weapon_idx[k] fires at target_idx[k]
    shots: np.ndarray  # (W, T) int64, the same assignment as a matrix
    kill_prob: np.ndarray  # (T,) probability each target is destroyed
    expected_value: float  # Σ value_t kill_prob_t


def _float(name: str, a: Any, ndim: int) -> np.ndarray:
    arr = to_numpy(a).astype(np.float64, copy=False)
    if arr.ndim != ndim:
        raise ComputeError(f"{name} must have {ndim} dimension(s), got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ComputeError(f"{name} has NaN/inf values; pass finite numbers")
    return arr


def engagement_mask(
    weapon_position: Any,
    target_position: Any,
    *,
    min_range_m: Any = 0.0,
    max_range_m: Any,
) -> np.ndarray:
    """``(W, T)`` True where target t lies within weapon w's range band (metres, 3-D distance).

    ``weapon_position (W, 3)``, ``target_position (T, 3)``; ranges are scalars or ``(W,)``.
    """
    wp = _float("weapon_position", weapon_position, 2)
    tp = _float("target_position", target_position, 2)
    lo = np.broadcast_to(to_numpy(min_range_m).astype(np.float64), (wp.shape[0],))
    hi = np.broadcast_to(to_numpy(max_range_m).astype(np.float64), (wp.shape[0],))
    dist = np.linalg.norm(wp[:, None, :] - tp[None, :, :], axis=2)
    return (dist >= lo[:, None]) & (dist <= hi[:, None])


def effective_pk(pk: Any, *, ready: Any = None, in_range: Any = None) -> np.ndarray:
    """``pk (W, T)`` with zeros for weapons not ``ready (W,)`` and pairs not ``in_range (W, T)``."""
    p = _float("pk", pk, 2)
    if (p < 0).any() or (p > 1).any():
        raise ComputeError(f"pk must be in 0..1, got {p.min()}..{p.max()}")
    out = p.copy()
    if ready is not None:
        r = np.asarray(to_numpy(ready), dtype=bool)
        if r.shape != (p.shape[0],):
            raise ComputeError(f"ready must have shape ({p.shape[0]},), got {r.shape}")
        out[~r] = 0.0
    if in_range is not None:
        m = np.asarray(to_numpy(in_range), dtype=bool)
        if m.shape != p.shape:
            raise ComputeError(f"in_range must have shape {p.shape}, got {m.shape}")
        out[~m] = 0.0
    return out


def expected_value(pk: Any, value: Any, shots: Any) -> float:
    """Expected value destroyed by ``shots (W, T)`` rounds with single-shot ``pk (W, T)``."""
    p = _float("pk", pk, 2)
    v = _value(value, p.shape[1])
    n = np.asarray(to_numpy(shots), dtype=np.int64)
    survive = np.prod((1.0 - p) ** n, axis=0)
    return float((v * (1.0 - survive)).sum())


def _value(value: Any, n_targets: int) -> np.ndarray:
    v = _float("value", value, 1)
    if v.shape != (n_targets,):
        raise ComputeError(f"value must have shape ({n_targets},), got {v.shape}")
    if (v < 0).any():
        raise ComputeError("value must be >= 0")
    return v


def _rounds(rounds: Any, n_weapons: int) -> np.ndarray:
    if rounds is None:
        return np.ones(n_weapons, dtype=np.int64)
    r = np.broadcast_to(np.asarray(to_numpy(rounds)), (n_weapons,))
    if (r < 0).any() or not np.all(r == np.round(r)):
        raise ComputeError("rounds must be whole numbers >= 0 per weapon")
    return r.astype(np.int64)


def _result(p: np.ndarray, v: np.ndarray, shots: np.ndarray) -> WTAResult:
    w_idx, t_idx = np.nonzero(shots)
    kill = 1.0 - np.prod((1.0 - p) ** shots, axis=0)
    return WTAResult(
        weapon_idx=w_idx.astype(np.int64),
        target_idx=t_idx.astype(np.int64),
        rounds=shots[w_idx, t_idx],
        shots=shots,
        kill_prob=kill,
        expected_value=float((v * kill).sum()),
    )


def wta_hungarian(
    pk: Any, value: Any, *, ready: Any = None, rounds: Any = None, in_range: Any = None
) -> WTAResult:
    """Exact WTA when each target takes at most one round (Hungarian on ``-value · pk``).

    Weapon w fires at most ``rounds[w]`` rounds (default 1), each at a different target.
    Pairs of zero expected value are left out.
    """
    p = effective_pk(pk, ready=ready, in_range=in_range)
    n_weapons, n_targets = p.shape
    v = _value(value, n_targets)
    reps = np.minimum(_rounds(rounds, n_weapons), n_targets)
    row_weapon = np.repeat(np.arange(n_weapons), reps)
    shots = np.zeros((n_weapons, n_targets), dtype=np.int64)
    if row_weapon.size and n_targets:
        gain = p[row_weapon] * v[None, :]
        rows, cols = linear_sum_assignment(gain, maximize=True)
        keep = gain[rows, cols] > 0
        np.add.at(shots, (row_weapon[rows[keep]], cols[keep]), 1)
    return _result(p, v, shots)


def wta_greedy(
    pk: Any,
    value: Any,
    *,
    ready: Any = None,
    rounds: Any = None,
    in_range: Any = None,
    max_rounds_per_target: int | None = None,
    min_gain: float = 0.0,
) -> WTAResult:
    """Greedy maximum marginal return: repeatedly fire the round that adds the most expected
    value, ``value_t · Π(1 - pk) · pk_wt``, until rounds run out or no gain exceeds ``min_gain``.

    Weapons may fire several rounds at one target (up to ``max_rounds_per_target`` rounds per
    target in all). Optimal when pk does not depend on the weapon; close to it otherwise.
    The loop runs once per round fired; each pass is vectorised over weapons × targets.
    """
    p = effective_pk(pk, ready=ready, in_range=in_range)
    n_weapons, n_targets = p.shape
    v = _value(value, n_targets)
    left = _rounds(rounds, n_weapons).copy()
    if max_rounds_per_target is not None and max_rounds_per_target < 0:
        raise ComputeError(f"max_rounds_per_target={max_rounds_per_target!r} must be >= 0")
    unlimited = np.iinfo(np.int64).max
    cap = np.full(
        n_targets,
        unlimited if max_rounds_per_target is None else max_rounds_per_target,
        dtype=np.int64,
    )
    shots = np.zeros((n_weapons, n_targets), dtype=np.int64)
    if p.size == 0:
        return _result(p, v, shots)
    survive = np.ones(n_targets)
    gain = p * v[None, :]
    gain[left == 0] = -np.inf
    gain[:, cap == 0] = -np.inf
    while True:
        k = int(np.argmax(gain))
        w, t = divmod(k, n_targets)
        if not gain[w, t] > min_gain:
            break
        shots[w, t] += 1
        left[w] -= 1
        cap[t] -= 1
        survive[t] *= 1.0 - p[w, t]
        if cap[t] == 0:
            gain[:, t] = -np.inf
        else:
            gain[:, t] = np.where(left > 0, v[t] * survive[t] * p[:, t], -np.inf)
        if left[w] == 0:
            gain[w, :] = -np.inf
    return _result(p, v, shots)
