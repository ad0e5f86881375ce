"""Tracking metrics: GOSPA, OSPA and track continuity (ID switches, fragmentations).

Sets of points are arrays ``(N, d)`` of positions in metres (truth first, estimates second);
distances are Euclidean. GOSPA and OSPA are numeric kernels of `mcc.compute.gospa` (NumPy or
CuPy, also served remotely as kernel ``gospa``), re-exported here; see that module for the
definitions (García-Fernández, Rahmathullah and Svensson 2020).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from mcc.compute.gospa import GospaResult, as_point_sets, gospa, ospa
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
class TrackContinuity:
    """Identity continuity over time, from `track_continuity`."""

    id_switches: int  # times a truth's track id changed from one id to another
    switches_per_truth: np.ndarray  # (n_truth,)
    fragmentations: int  # times a truth was re-acquired after a gap with no track
    coverage: float  # fraction of (time, truth) cells that had a track


def truth_track_ids(
    truth: Any, estimates: Any, estimate_ids: Any, *, max_distance_m: float
) -> np.ndarray:
    """The id of the estimate assigned to each truth at one instant, -1 when none is within
    ``max_distance_m`` (optimal assignment on distance). One row of `track_continuity`'s input."""
    x, y = as_point_sets(truth, estimates, xp=np)
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
