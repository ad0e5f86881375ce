"""Threat evaluation of N tracks against A defended assets, batched (tracks × assets).

Straight-line (constant-velocity) kinematics in the ENU frame: positions in metres, velocities
in m/s, times in seconds. The score of a (track, asset) pair is in 0..1:

    score = class_weight · asset_value · proximity · urgency · approach
    proximity = exp(-½ (cpa / cpa_scale_m)²)         1 when the track passes over the asset
    urgency   = time_scale_s / (time_scale_s + t_go)  t_go = time to impact, else time to CPA
    approach  = (1 + cos heading) / 2                 1 flying straight at the asset, 0 away

A track's threat is its highest pair score; rank 1 is the most threatening track.
"""

from __future__ import annotations

import dataclasses
from types import ModuleType
from typing import Any

import numpy as np

from mcc.compute.backend import array_module, as_float_array, to_numpy
from mcc.errors import ComputeError

__all__ = ["DEFAULT_CLASS_WEIGHTS", "ThreatAssessment", "evaluate_threats", "rank_threats"]

# Indexed by the IDL enum TargetClass: UNKNOWN, AIRCRAFT, CRUISE_MISSILE, HELICOPTER,
# BALLISTIC, UAV, DECOY. Unknown is scored as a likely threat: under-reacting costs more.
DEFAULT_CLASS_WEIGHTS = np.array([0.7, 0.6, 1.0, 0.4, 1.0, 0.5, 0.1])


@dataclasses.dataclass(frozen=True, eq=False)
class ThreatAssessment:
    """Threat evaluation; ``(N, A)`` arrays per pair, ``(N,)`` per track (NumPy arrays)."""

    cpa_m: np.ndarray  # (N, A) closest point of approach distance
    time_to_cpa_s: np.ndarray  # (N, A) >= 0; 0 when the track is moving away (or still)
    time_to_impact_s: np.ndarray  # (N, A) time to enter the asset radius; -1 when never
    heading_cos: np.ndarray  # (N, A) cos of the angle between velocity and line to the asset
    speed_mps: np.ndarray  # (N,)
    pair_score: np.ndarray  # (N, A) in 0..1
    score: np.ndarray  # (N,) highest pair score of each track
    asset_idx: np.ndarray  # (N,) the asset most threatened by each track (-1 when A = 0)
    rank: np.ndarray  # (N,) 1 = most threatening
    order: np.ndarray  # (N,) track indices from most to least threatening


def evaluate_threats(
    position: Any,
    velocity: Any,
    asset_position: Any,
    *,
    asset_radius_m: Any = 1000.0,
    asset_value: Any = 1.0,
    classification: Any = None,
    class_weights: Any = DEFAULT_CLASS_WEIGHTS,
    cpa_scale_m: float = 5000.0,
    time_scale_s: float = 60.0,
    xp: ModuleType | None = None,
) -> ThreatAssessment:
    """Evaluate tracks ``position``/``velocity`` ``(N, 3)`` against ``asset_position (A, 3)``.

    ``asset_radius_m`` (scalar or ``(A,)``) defines "impact"; ``asset_value`` (0..1, scalar or
    ``(A,)``) weighs assets; ``classification (N,)`` holds TargetClass values that index
    ``class_weights`` (0..1); left out, every track weighs 1.
    """
    xp = xp if xp is not None else array_module(position, velocity, asset_position)
    p = as_float_array("position", position, xp=xp, ndim=2)
    v = as_float_array("velocity", velocity, xp=xp, ndim=2)
    a = as_float_array("asset_position", asset_position, xp=xp, ndim=2)
    if p.shape != v.shape or p.shape[1] != a.shape[1]:
        raise ComputeError(
            f"shapes disagree: position {tuple(p.shape)}, velocity {tuple(v.shape)}, "
            f"asset_position {tuple(a.shape)}; expected (N, d), (N, d), (A, d)"
        )
    n_assets = a.shape[0]
    radius = xp.broadcast_to(as_float_array("asset_radius_m", asset_radius_m, xp=xp), (n_assets,))
    value = xp.broadcast_to(as_float_array("asset_value", asset_value, xp=xp), (n_assets,))
    if bool((radius < 0).any()):
        raise ComputeError("asset_radius_m must be >= 0 metres")
    if bool((value < 0).any()) or bool((value > 1).any()):
        raise ComputeError("asset_value must be in 0..1")
    if not (cpa_scale_m > 0 and time_scale_s > 0):
        raise ComputeError(
            f"cpa_scale_m={cpa_scale_m!r} and time_scale_s={time_scale_s!r} must be > 0"
        )
    weight = _class_weight(classification, class_weights, p.shape[0], xp)

    rel = p[:, None, :] - a[None, :, :]  # (N, A, d) asset → track
    speed2 = (v**2).sum(axis=1)  # (N,)
    speed = xp.sqrt(speed2)
    rv = (rel * v[:, None, :]).sum(axis=2)  # (N, A) closing when < 0
    dist2 = (rel**2).sum(axis=2)
    moving = speed2[:, None] > 0
    safe_s2 = xp.where(moving, speed2[:, None], 1.0)
    t_cpa = xp.where(moving, xp.maximum(-rv / safe_s2, 0.0), 0.0)
    cpa = xp.sqrt(((rel + v[:, None, :] * t_cpa[..., None]) ** 2).sum(axis=2))

    # First t >= 0 with |rel + v t| = radius: a t² + 2 b t + c = 0.
    c = dist2 - radius[None, :] ** 2
    disc = rv**2 - speed2[:, None] * c
    hits = moving & (rv < 0) & (disc >= 0)
    root = (-rv - xp.sqrt(xp.maximum(disc, 0.0))) / safe_s2
    tti = xp.where(c <= 0, 0.0, xp.where(hits, root, -1.0))

    dist = xp.sqrt(dist2)
    denom = dist * speed[:, None]
    heading_cos = xp.where(denom > 0, -rv / xp.where(denom > 0, denom, 1.0), 0.0)
    heading_cos = xp.clip(heading_cos, -1.0, 1.0)

    t_go = xp.where(tti >= 0, tti, t_cpa)
    proximity = xp.exp(-0.5 * (cpa / cpa_scale_m) ** 2)
    urgency = time_scale_s / (time_scale_s + t_go)
    approach = 0.5 * (1.0 + heading_cos)
    pair_score = weight[:, None] * value[None, :] * proximity * urgency * approach

    pair_score_np = to_numpy(pair_score)
    t_go_np = to_numpy(t_go)
    if n_assets:
        asset_idx = pair_score_np.argmax(axis=1)
        score = np.take_along_axis(pair_score_np, asset_idx[:, None], axis=1)[:, 0]
        t_rank = np.take_along_axis(t_go_np, asset_idx[:, None], axis=1)[:, 0]
    else:
        asset_idx = np.full(p.shape[0], -1, dtype=np.int64)
        score = np.zeros(p.shape[0])
        t_rank = np.zeros(p.shape[0])
    rank, order = rank_threats(score, tie_break=t_rank)
    return ThreatAssessment(
        cpa_m=to_numpy(cpa),
        time_to_cpa_s=to_numpy(t_cpa),
        time_to_impact_s=to_numpy(tti),
        heading_cos=to_numpy(heading_cos),
        speed_mps=to_numpy(speed),
        pair_score=pair_score_np,
        score=score,
        asset_idx=asset_idx.astype(np.int64),
        rank=rank,
        order=order,
    )


def _class_weight(classification: Any, table: Any, n_tracks: int, xp: ModuleType) -> Any:
    if classification is None:
        return xp.ones(n_tracks)
    cls = xp.asarray(classification)
    w = as_float_array("class_weights", table, xp=xp, ndim=1)
    if cls.shape != (n_tracks,):
        raise ComputeError(f"classification must have shape ({n_tracks},), got {cls.shape}")
    if cls.size and (int(cls.min()) < 0 or int(cls.max()) >= w.shape[0]):
        raise ComputeError(
            f"classification values must be TargetClass values 0..{w.shape[0] - 1}, "
            f"got {int(cls.min())}..{int(cls.max())}"
        )
    if bool((w < 0).any()) or bool((w > 1).any()):
        raise ComputeError("class_weights must be in 0..1")
    return w[cls.astype(xp.int64)]


def rank_threats(score: Any, *, tie_break: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Ranks (1 = highest ``score``) and the order of indices, ties broken by smaller
    ``tie_break`` (e.g. time to go, seconds) then by index. Returns ``(rank, order)``."""
    s = to_numpy(score)
    keys: tuple[np.ndarray, ...] = (np.arange(s.size),)
    if tie_break is not None:
        keys = (*keys, to_numpy(tie_break))
    order = np.lexsort((*keys, -s))
    rank = np.empty(s.size, dtype=np.int64)
    rank[order] = np.arange(1, s.size + 1)
    return rank, order.astype(np.int64)
