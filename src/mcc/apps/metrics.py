"""Tracking metrics: GOSPA, OSPA and track continuity (ID switches, fragmentations).

Sets of points are arrays ``(N, d)`` of positions in metres (truth first, estimates second);
distances are Euclidean. GOSPA follows García-Fernández, Rahmathullah and Svensson (2020): with
``alpha = 2`` it splits exactly into localisation, missed-target and false-track parts,
``distance**p = localisation + missed + false``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from mcc.errors import ComputeError

__all__ = [
    "GospaResult",
    "TrackContinuity",
    "gospa",
    "ospa",
    "track_continuity",
    "truth_track_ids",
]


@dataclasses.dataclass(frozen=True, eq=False)
class GospaResult:
    """GOSPA of one instant. ``distance`` is in metres; the parts are in metres**p."""

    distance: float
    localisation: float  # Σ d^p over assigned pairs (pairs with d < c)
    missed: float  # c^p / alpha per missed truth
    false: float  # c^p / alpha per false estimate
    n_missed: int
    n_false: int
    truth_idx: np.ndarray  # (K,) assigned truth indices
    estimate_idx: np.ndarray  # (K,) the estimate assigned to each


@dataclasses.dataclass(frozen=True, eq=False)
class TrackContinuity:
    """Identity continuity over time, from `track_continuity`."""

    id_switches: int  # times a truth's track id changed from one id to another
    switches_per_truth: np.ndarray  # (n_truth,)
    fragmentations: int  # times a truth was re-acquired after a gap with no track
    coverage: float  # fraction of (time, truth) cells that had a track


def _points(name: str, a: Any, dim: int | None = None) -> np.ndarray:
    arr = np.asarray(a, dtype=np.float64)
    if arr.ndim == 1 and arr.size == 0:
        arr = arr.reshape(0, dim or 0)
    if arr.ndim != 2:
        raise ComputeError(f"{name} must be an (N, d) array of positions, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ComputeError(f"{name} has NaN/inf values; pass finite positions in metres")
    return arr


def _pair(truth: Any, estimates: Any) -> tuple[np.ndarray, np.ndarray]:
    x = _points("truth", truth)
    y = _points("estimates", estimates, x.shape[1])
    if x.shape[0] == 0 and x.shape[1] == 0:
        x = x.reshape(0, y.shape[1])
    if x.shape[1] != y.shape[1]:
        raise ComputeError(f"truth is {x.shape[1]}-D but estimates are {y.shape[1]}-D")
    return x, y


def _check_cp(c: float, p: float) -> None:
    if not (np.isfinite(c) and c > 0):
        raise ComputeError(f"c={c!r} is out of range; allowed (0, inf) metres")
    if not (np.isfinite(p) and p >= 1):
        raise ComputeError(f"p={p!r} is out of range; allowed [1, inf)")


def gospa(
    truth: Any, estimates: Any, *, c: float, p: float = 2.0, alpha: float = 2.0
) -> GospaResult:
    """GOSPA between ``truth (m, d)`` and ``estimates (n, d)``, cut-off ``c`` metres, order ``p``.

    The assignment minimises ``Σ min(d, c)^p`` (`linear_sum_assignment`); a pair at ``d >= c``
    counts as one missed truth plus one false estimate, each costing ``c^p / alpha``.
    """
    _check_cp(c, p)
    if not 0 < alpha <= 2:
        raise ComputeError(f"alpha={alpha!r} is out of range; allowed (0, 2]")
    x, y = _pair(truth, estimates)
    d = np.linalg.norm(x[:, None, :] - y[None, :, :], axis=2)
    cost = np.minimum(d, c) ** p
    rows, cols = linear_sum_assignment(cost)
    if alpha == 2:
        good = d[rows, cols] < c
        rows, cols = rows[good], cols[good]
        localisation = float((d[rows, cols] ** p).sum())
    else:
        # alpha < 2: cut pairs stay assigned at c^p (no exact split into missed + false).
        localisation = float(cost[rows, cols].sum())
    n_missed = x.shape[0] - rows.size
    n_false = y.shape[0] - cols.size
    missed = c**p / alpha * n_missed
    false = c**p / alpha * n_false
    return GospaResult(
        distance=float((localisation + missed + false) ** (1.0 / p)),
        localisation=localisation,
        missed=missed,
        false=false,
        n_missed=int(n_missed),
        n_false=int(n_false),
        truth_idx=rows.astype(np.int64),
        estimate_idx=cols.astype(np.int64),
    )


def ospa(truth: Any, estimates: Any, *, c: float, p: float = 1.0) -> float:
    """OSPA distance (metres) between ``truth (m, d)`` and ``estimates (n, d)``; 0 if both empty.

    ``((min_π Σ min(d, c)^p + c^p |n - m|) / max(m, n))^(1/p)``.
    """
    _check_cp(c, p)
    x, y = _pair(truth, estimates)
    big = max(x.shape[0], y.shape[0])
    if big == 0:
        return 0.0
    cost = np.minimum(np.linalg.norm(x[:, None, :] - y[None, :, :], axis=2), c) ** p
    rows, cols = linear_sum_assignment(cost)
    total = cost[rows, cols].sum() + c**p * abs(x.shape[0] - y.shape[0])
    return float((total / big) ** (1.0 / p))


def truth_track_ids(
    truth: Any, estimates: Any, estimate_ids: Any, *, max_distance_m: float
) -> np.ndarray:
    """The id of the estimate assigned to each truth at one instant, -1 when none is within
    ``max_distance_m`` (optimal assignment on distance). One row of `track_continuity`'s input."""
    x, y = _pair(truth, estimates)
    ids = np.asarray(estimate_ids, dtype=np.int64)
    if ids.shape != (y.shape[0],):
        raise ComputeError(f"estimate_ids must have shape ({y.shape[0]},), got {ids.shape}")
    out = np.full(x.shape[0], -1, dtype=np.int64)
    d = np.linalg.norm(x[:, None, :] - y[None, :, :], axis=2)
    cost = np.where(d <= max_distance_m, d, max_distance_m * 1e3 + 1.0)
    rows, cols = linear_sum_assignment(cost)
    ok = d[rows, cols] <= max_distance_m
    out[rows[ok]] = ids[cols[ok]]
    return out


def track_continuity(assigned: Any) -> TrackContinuity:
    """ID switches and fragmentations from ``assigned (T, n_truth)``: the track id following each
    truth at each time step (-1 = no track), e.g. stacked rows of `truth_track_ids`.

    A switch is a track id different from the last id that followed the same truth (gaps do
    not reset it); a fragmentation is a re-acquisition after a gap.
    """
    a = np.asarray(assigned)
    if a.ndim != 2 or a.dtype.kind not in "iu":
        raise ComputeError(f"assigned must be a (T, n_truth) integer array, got {a.dtype}{a.shape}")
    n_time, n_truth = a.shape
    if a.size == 0:
        return TrackContinuity(0, np.zeros(n_truth, dtype=np.int64), 0, 0.0)
    valid = a >= 0
    step = np.where(valid, np.arange(n_time)[:, None], -1)
    last = np.maximum.accumulate(step, axis=0)  # last tracked step up to and including t
    prev = np.vstack([np.full((1, n_truth), -1), last[:-1]])  # ... strictly before t
    cols = np.broadcast_to(np.arange(n_truth), a.shape)
    prev_id = np.where(prev >= 0, a[np.maximum(prev, 0), cols], -1)
    switch = valid & (prev >= 0) & (a != prev_id)
    was_valid = np.vstack([np.zeros((1, n_truth), bool), valid[:-1]])
    frag = valid & ~was_valid & (prev >= 0)
    per_truth = switch.sum(axis=0).astype(np.int64)
    return TrackContinuity(
        id_switches=int(per_truth.sum()),
        switches_per_truth=per_truth,
        fragmentations=int(frag.sum()),
        coverage=float(valid.mean()),
    )
