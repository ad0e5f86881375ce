"""Classification from kinematics: class probabilities of each track from its speed, altitude
(3-D) and climb rate, as TargetClass values for the air picture that TEWA ranks.

Each class is a Gaussian in speed (and, in 3-D, altitude and vertical speed), flat prior; a
track gets the most probable class when its probability reaches ``min_probability``, else
``CLASS_UNKNOWN`` (which TEWA scores as a likely threat). Given the tracks' identities
(`mcc.tracking.identity`), a friend or assumed friend is not a missile: the cruise-missile and
ballistic classes are ruled out for it. The numbers are typical envelopes, not a threat library.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from mcc.types import Identity, TargetClass

__all__ = ["CLASS_MODELS", "ClassModel", "classify"]

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class ClassModel:
    """Mean and standard deviation of speed (m/s), altitude (m) and vertical speed (m/s)."""

    target_class: TargetClass
    speed_mps: tuple[float, float]
    altitude_m: tuple[float, float]
    climb_mps: tuple[float, float]


CLASS_MODELS = (
    ClassModel(TargetClass.CLASS_AIRCRAFT, (230.0, 90.0), (7000.0, 4000.0), (0.0, 40.0)),
    ClassModel(TargetClass.CLASS_CRUISE_MISSILE, (250.0, 50.0), (60.0, 80.0), (0.0, 10.0)),
    ClassModel(TargetClass.CLASS_HELICOPTER, (55.0, 25.0), (400.0, 400.0), (0.0, 5.0)),
    ClassModel(TargetClass.CLASS_BALLISTIC, (2000.0, 800.0), (40000.0, 30000.0), (-800.0, 600.0)),
    ClassModel(TargetClass.CLASS_UAV, (40.0, 15.0), (1500.0, 1000.0), (0.0, 5.0)),
)


_FRIENDLY = (int(Identity.IDENTITY_FRIEND.value), int(Identity.IDENTITY_ASSUMED_FRIEND.value))
_MISSILES = np.array(
    [
        m.target_class in (TargetClass.CLASS_CRUISE_MISSILE, TargetClass.CLASS_BALLISTIC)
        for m in CLASS_MODELS
    ]
)


def classify(
    x: F64,
    *,
    ndim: int,
    min_probability: float = 0.6,
    identity: npt.NDArray[np.uint8] | None = None,
) -> tuple[npt.NDArray[np.uint8], F64]:
    """TargetClass values ``(N,)`` and class probabilities ``(N, len(CLASS_MODELS))`` of CV
    states ``x (N, 2*ndim)`` (positions then velocities; altitude is z in 3-D); ``identity``
    ``(N,)`` (Identity values, optional) rules the missile classes out for friends."""
    v = x[:, ndim:]
    speed = np.linalg.norm(v, axis=1)
    log_p = np.zeros((x.shape[0], len(CLASS_MODELS)))
    for k, model in enumerate(CLASS_MODELS):
        log_p[:, k] = _log_normal(speed, *model.speed_mps)
        if ndim == 3:
            log_p[:, k] += _log_normal(x[:, 2], *model.altitude_m)
            log_p[:, k] += _log_normal(v[:, 2], *model.climb_mps)
    if identity is not None:
        friendly = np.isin(np.asarray(identity).reshape(-1), _FRIENDLY)
        log_p[np.ix_(friendly, _MISSILES)] = -np.inf
    log_p -= log_p.max(axis=1, keepdims=True)
    p = np.exp(log_p)
    p /= p.sum(axis=1, keepdims=True)
    values = np.array([int(m.target_class.value) for m in CLASS_MODELS], dtype=np.uint8)
    best = p.argmax(axis=1) if p.shape[0] else np.zeros(0, np.int64)
    out = np.where(
        p[np.arange(p.shape[0]), best] >= min_probability,
        values[best],
        np.uint8(TargetClass.CLASS_UNKNOWN.value),
    )
    return out.astype(np.uint8), p


def _log_normal(a: F64, mean: float, sigma: float) -> F64:
    return -0.5 * ((a - mean) / sigma) ** 2 - np.log(sigma)
