"""Batched Kalman filtering: a bank of linear filters over N tracks, an IMM (CV + coordinated turn),
and conversion of radar range/azimuth/elevation to ENU positions with their covariance.

Conventions
-----------
* State order is **positions first, then velocities**: ``[x y z vx vy vz]`` in 3-D (the bus
  order of ``Track``/``AirPicture``), ``[x y vx vy]`` in 2-D, ``[x vx]`` in 1-D. Metres, m/s.
* Arrays carry the batch on the leading axes: ``x`` is ``(..., n)``, ``P`` is ``(..., n, n)``.
  Matrices (``F``, ``Q``, ``H``, ``R``) are ``(n, n)`` for all tracks or ``(..., n, n)`` per track;
  everything broadcasts like NumPy ``matmul``.
* ENU frame: x east, y north, z up. Azimuth is from north, clockwise; elevation from the
  horizontal plane, positive up. Angles in radians.
* A positive turn rate turns the velocity counter-clockwise seen from above (a left turn).

Every function takes an optional ``xp`` (numpy or cupy); left out, it follows the input arrays.
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any, Literal, NamedTuple

import numpy as np

from mcc.compute.backend import array_module, as_float_array, require_finite
from mcc.errors import ComputeError

__all__ = [
    "IMMState",
    "KalmanUpdate",
    "ct_transition",
    "cv_initiate",
    "cv_measurement_matrix",
    "cv_process_noise",
    "cv_transition",
    "ekf_update",
    "enu_to_rae",
    "gaussian_log_likelihood",
    "imm_combine",
    "imm_initiate",
    "imm_mix",
    "imm_models",
    "imm_predict",
    "imm_transition",
    "imm_update",
    "polar_measurement",
    "polar_to_cartesian",
    "predict",
    "rae_covariance",
    "rae_to_enu",
    "update",
    "wrap_angle",
]

_LOG_2PI = math.log(2.0 * math.pi)


class KalmanUpdate(NamedTuple):
    """Result of `update`: posterior state and covariance, innovation and its covariance."""

    x: Any  # (..., n)
    P: Any  # (..., n, n)
    innovation: Any  # (..., m), z - H x_prior
    S: Any  # (..., m, m), H P H^T + R


class IMMState(NamedTuple):
    """State of an IMM bank: per-model estimates and model probabilities of N tracks.

    ``x`` is ``(N, M, n)``, ``P`` is ``(N, M, n, n)``, ``mu`` is ``(N, M)`` (rows sum to 1).
    """

    x: Any
    P: Any
    mu: Any


def _xp(xp: ModuleType | None, *arrays: Any) -> ModuleType:
    return xp if xp is not None else array_module(*arrays)


def _check_ndim(ndim: int, *, low: int = 1) -> None:
    if not isinstance(ndim, int) or not low <= ndim <= 3:
        raise ComputeError(f"ndim={ndim!r} is out of range; allowed {low}, 2 or 3 (integer)")


def _mT(a: Any) -> Any:
    return a.swapaxes(-1, -2)


def _symmetrise(a: Any) -> Any:
    return 0.5 * (a + _mT(a))


def _dt_array(dt_s: Any, xp: ModuleType) -> Any:
    dt = as_float_array("dt_s", dt_s, xp=xp)
    if bool((dt < 0).any()):
        raise ComputeError(f"dt_s must be >= 0 seconds, got min {float(dt.min())}")
    return dt


# ---------------------------------------------------------------------------------------------
# Models


def cv_transition(dt_s: Any, *, ndim: int = 3, xp: ModuleType | None = None) -> Any:
    """Constant-velocity transition matrix for a step of ``dt_s`` seconds.

    ``dt_s`` scalar → ``(2*ndim, 2*ndim)``; ``dt_s`` of shape ``(N,)`` → ``(N, 2*ndim, 2*ndim)``.
    """
    _check_ndim(ndim)
    xp = _xp(xp, dt_s)
    dt = _dt_array(dt_s, xp)
    n = 2 * ndim
    F = xp.broadcast_to(xp.eye(n), (*dt.shape, n, n)).copy()
    idx = xp.arange(ndim)
    F[..., idx, idx + ndim] = dt[..., None]
    return F


def cv_process_noise(
    dt_s: Any,
    sigma_a: Any,
    *,
    ndim: int = 3,
    model: Literal["continuous", "discrete"] = "continuous",
    xp: ModuleType | None = None,
) -> Any:
    """Process noise of the constant-velocity model over ``dt_s`` seconds, per axis independent.

    ``model="continuous"``: continuous white-noise acceleration, ``sigma_a**2`` is its power
    spectral density q in m²/s³; Q = q [[dt³/3, dt²/2], [dt²/2, dt]].
    ``model="discrete"``: piecewise-constant white acceleration of standard deviation
    ``sigma_a`` m/s² over each step; Q = σ² [[dt⁴/4, dt³/2], [dt³/2, dt²]].
    ``dt_s`` and ``sigma_a`` are scalars or ``(N,)``; the result is ``(..., 2*ndim, 2*ndim)``.
    """
    _check_ndim(ndim)
    xp = _xp(xp, dt_s, sigma_a)
    dt = _dt_array(dt_s, xp)
    sa = as_float_array("sigma_a", sigma_a, xp=xp)
    if bool((sa < 0).any()):
        raise ComputeError(f"sigma_a must be >= 0, got min {float(sa.min())}")
    q = sa**2
    if model == "continuous":
        pp, pv, vv = dt**3 / 3.0, dt**2 / 2.0, dt
    elif model == "discrete":
        pp, pv, vv = dt**4 / 4.0, dt**3 / 2.0, dt**2
    else:
        raise ComputeError(f"model={model!r} is not supported: use 'continuous' or 'discrete'")
    pp, pv, vv = (xp.asarray(q * v) for v in (pp, pv, vv))
    shape = xp.broadcast_shapes(pp.shape, q.shape)
    n = 2 * ndim
    Q = xp.zeros((*shape, n, n))
    idx = xp.arange(ndim)
    Q[..., idx, idx] = pp[..., None]
    Q[..., idx, idx + ndim] = pv[..., None]
    Q[..., idx + ndim, idx] = pv[..., None]
    Q[..., idx + ndim, idx + ndim] = vv[..., None]
    return Q


def ct_transition(
    dt_s: Any, turn_rate_rps: Any, *, ndim: int = 3, xp: ModuleType | None = None
) -> Any:
    """Coordinated-turn transition (known turn rate in the x-y plane; z, if any, is CV).

    ``dt_s`` and ``turn_rate_rps`` (rad/s, positive = counter-clockwise) broadcast together; the
    result is ``(..., 2*ndim, 2*ndim)``. A turn rate of 0 gives exactly `cv_transition`.
    """
    _check_ndim(ndim, low=2)
    xp = _xp(xp, dt_s, turn_rate_rps)
    dt = _dt_array(dt_s, xp)
    w = as_float_array("turn_rate_rps", turn_rate_rps, xp=xp)
    dt, w = xp.broadcast_arrays(dt, w)
    wt = w * dt
    # sin(wT)/w and (1 - cos(wT))/w written with sinc so that w -> 0 needs no special case.
    s_w = dt * xp.sinc(wt / math.pi)
    c_w = 0.5 * w * dt**2 * xp.sinc(wt / (2.0 * math.pi)) ** 2
    cos, sin = xp.cos(wt), xp.sin(wt)
    F = cv_transition(dt, ndim=ndim, xp=xp)
    d = ndim
    F[..., 0, d] = s_w
    F[..., 0, d + 1] = -c_w
    F[..., 1, d] = c_w
    F[..., 1, d + 1] = s_w
    F[..., d, d] = cos
    F[..., d, d + 1] = -sin
    F[..., d + 1, d] = sin
    F[..., d + 1, d + 1] = cos
    return F


def cv_measurement_matrix(*, ndim: int = 3, xp: ModuleType | None = None) -> Any:
    """``H = [I 0]``, ``(ndim, 2*ndim)``: the measurement is the position."""
    _check_ndim(ndim)
    xp = xp if xp is not None else np
    return xp.concatenate([xp.eye(ndim), xp.zeros((ndim, ndim))], axis=1)


def cv_initiate(
    position: Any,
    position_cov: Any,
    *,
    velocity: Any = None,
    velocity_sigma_mps: float = 300.0,
    xp: ModuleType | None = None,
) -> tuple[Any, Any]:
    """Initial CV states from position measurements ``(N, d)`` with covariance ``(N, d, d)``.

    The velocity is ``velocity`` ``(N, d)`` when known, else zero with standard deviation
    ``velocity_sigma_mps`` per axis. Returns ``x (N, 2d)`` and block-diagonal ``P (N, 2d, 2d)``.
    """
    xp = _xp(xp, position, position_cov)
    pos = as_float_array("position", position, xp=xp, ndim=2)
    cov = as_float_array("position_cov", position_cov, xp=xp)
    n_tracks, d = pos.shape
    _check_ndim(d)
    if cov.shape not in ((n_tracks, d, d), (d, d)):
        raise ComputeError(
            f"position_cov must have shape ({n_tracks}, {d}, {d}) or ({d}, {d}), "
            f"got {tuple(cov.shape)}"
        )
    if not velocity_sigma_mps >= 0:
        raise ComputeError(f"velocity_sigma_mps={velocity_sigma_mps!r} must be >= 0 m/s")
    vel = (
        xp.zeros_like(pos)
        if velocity is None
        else as_float_array("velocity", velocity, xp=xp, ndim=2)
    )
    x = xp.concatenate([pos, vel], axis=1)
    P = xp.zeros((n_tracks, 2 * d, 2 * d))
    P[:, :d, :d] = cov
    idx = xp.arange(d, 2 * d)
    P[:, idx, idx] = velocity_sigma_mps**2
    return x, P


# ---------------------------------------------------------------------------------------------
# Linear Kalman filter bank


def predict(x: Any, P: Any, F: Any, Q: Any, *, xp: ModuleType | None = None) -> tuple[Any, Any]:
    """Kalman prediction of a batch: ``x' = F x``, ``P' = F P Fᵀ + Q`` (symmetrised).

    Shapes: ``x (..., n)``, ``P (..., n, n)``; ``F`` and ``Q`` ``(n, n)`` or batched.
    """
    xp = _xp(xp, x, P)
    x = xp.asarray(x, dtype=xp.float64)
    require_finite("x", x, xp=xp)
    x_pred = (F @ x[..., None])[..., 0]
    P_pred = _symmetrise(F @ P @ _mT(xp.asarray(F)) + Q)
    return x_pred, P_pred


def update(x: Any, P: Any, z: Any, H: Any, R: Any, *, xp: ModuleType | None = None) -> KalmanUpdate:
    """Kalman measurement update of a batch, Joseph form (stays symmetric positive definite).

    Shapes: ``x (..., n)``, ``P (..., n, n)``, ``z (..., m)``; ``H (m, n)``, ``R (m, m)`` or
    batched. Returns the posterior and the innovation ``z - H x`` with its covariance ``S``.
    """
    xp = _xp(xp, x, P, z)
    x = xp.asarray(x, dtype=xp.float64)
    z = xp.asarray(z, dtype=xp.float64)
    require_finite("z", z, xp=xp)
    H = xp.asarray(H, dtype=xp.float64)
    return ekf_update(x, P, z - (H @ x[..., None])[..., 0], H, R, xp=xp)


def gaussian_log_likelihood(innovation: Any, S: Any, *, xp: ModuleType | None = None) -> Any:
    """``log N(y; 0, S)`` over a batch: ``y (..., m)``, ``S (..., m, m)`` → ``(...)``."""
    xp = _xp(xp, innovation, S)
    m = innovation.shape[-1]
    sol = xp.linalg.solve(S, innovation[..., None])[..., 0]
    d2 = (innovation * sol).sum(axis=-1)
    _, logdet = xp.linalg.slogdet(S)
    return -0.5 * (d2 + logdet + m * _LOG_2PI)


# ---------------------------------------------------------------------------------------------
# Interacting multiple model (models share the state; CV and CT with fixed turn rates)


def imm_models(
    dt_s: Any,
    *,
    turn_rates_rps: Any = (0.0,),
    sigma_a: Any,
    ndim: int = 3,
    noise_model: Literal["continuous", "discrete"] = "continuous",
    xp: ModuleType | None = None,
) -> tuple[Any, Any]:
    """Transition and process noise of M models, one per turn rate (0 = CV).

    Returns ``F`` and ``Q``: ``(M, n, n)`` for scalar ``dt_s``, ``(N, M, n, n)`` for ``(N,)``.
    A typical IMM is ``turn_rates_rps=(0.0, +w, -w)`` with w of 3-10 deg/s. Every model gets
    the same white-acceleration noise (`cv_process_noise` with ``sigma_a``, ``noise_model``).
    """
    xp = _xp(xp, dt_s)
    dt = _dt_array(dt_s, xp)
    sa = as_float_array("sigma_a", sigma_a, xp=xp)
    dt = xp.broadcast_to(dt, xp.broadcast_shapes(dt.shape, sa.shape))
    rates = as_float_array("turn_rates_rps", turn_rates_rps, xp=xp, ndim=1)
    if rates.shape[0] == 0:
        raise ComputeError("turn_rates_rps is empty; give at least one model (0.0 is CV)")
    if ndim == 1:
        if bool((rates != 0).any()):
            raise ComputeError("turn_rates_rps must all be 0 with ndim=1 (no plane to turn in)")
        F = cv_transition(dt[..., None] * xp.ones_like(rates), ndim=ndim, xp=xp)
    else:
        F = ct_transition(dt[..., None], rates, ndim=ndim, xp=xp)
    q1 = cv_process_noise(dt, sa, ndim=ndim, model=noise_model, xp=xp)
    Q = xp.broadcast_to(q1[..., None, :, :], F.shape).copy()
    return F, Q


def imm_transition(
    dt_s: Any, n_models: int, *, sojourn_s: float, xp: ModuleType | None = None
) -> Any:
    """Markov transition matrices ``(..., M, M)`` of M models over steps of ``dt_s`` seconds.

    A model is kept with probability ``exp(-dt / sojourn_s)`` (a mean sojourn of ``sojourn_s``
    seconds, whatever the scan period) and left evenly for the others; one model: ``[[1]]``.
    """
    xp = _xp(xp, dt_s)
    dt = _dt_array(dt_s, xp)
    if not sojourn_s > 0:
        raise ComputeError(f"sojourn_s={sojourn_s!r} must be > 0 seconds")
    if n_models == 1:
        return xp.ones((*dt.shape, 1, 1))
    stay = xp.exp(-dt / sojourn_s)[..., None, None]
    eye = xp.eye(n_models)
    return stay * eye + (1.0 - stay) * (1.0 - eye) / (n_models - 1)


def imm_initiate(x: Any, P: Any, mu: Any, *, xp: ModuleType | None = None) -> IMMState:
    """IMM state with every model starting at ``x (N, n)``, ``P (N, n, n)``; ``mu (M,)`` or
    ``(N, M)`` are the initial model probabilities (each row sums to 1)."""
    xp = _xp(xp, x, P)
    x = as_float_array("x", x, xp=xp, ndim=2)
    P = as_float_array("P", P, xp=xp, ndim=3)
    mu = as_float_array("mu", mu, xp=xp)
    mu = xp.broadcast_to(mu, (x.shape[0], mu.shape[-1])).copy()
    _check_probabilities("mu", mu, xp)
    n_models = mu.shape[-1]
    xs = xp.broadcast_to(x[:, None, :], (x.shape[0], n_models, x.shape[1])).copy()
    Ps = xp.broadcast_to(P[:, None], (P.shape[0], n_models, *P.shape[1:])).copy()
    return IMMState(xs, Ps, mu)


def _check_probabilities(name: str, p: Any, xp: ModuleType) -> None:
    require_finite(name, p, xp=xp)
    if bool((p < 0).any()) or not bool(xp.allclose(p.sum(axis=-1), 1.0, atol=1e-6)):
        raise ComputeError(f"{name} must be probabilities >= 0 whose rows sum to 1")


def imm_mix(
    state: IMMState,
    trans_prob: Any,
    *,
    xp: ModuleType | None = None,
    validate: bool = True,
    floor: float = 0.0,
) -> IMMState:
    """IMM mixing step: model-conditioned initial conditions and predicted model probabilities.

    ``trans_prob[i, j]`` is P(model j now | model i before), ``(M, M)`` for every track or
    ``(N, M, M)`` per track (e.g. from each track's step, `imm_transition`), rows summing to 1.
    Returns mixed ``x0``, ``P0`` and ``mu`` = the predicted probabilities c̄.
    ``validate=False`` skips the checks of ``trans_prob`` (a caller that checked it once).
    ``floor`` > 0: a mixing weight μ_(i|j) below it is dropped and the other weights of model j
    renormalised (the tracker's guard against a near-zero turn model widening the straight
    model's covariance through the spread of the means); 0 mixes by the textbook.
    """
    xp = _xp(xp, state.x)
    pi = as_float_array("trans_prob", trans_prob, xp=xp) if validate else trans_prob
    n_models = state.mu.shape[-1]
    if validate:
        if pi.shape[-2:] != (n_models, n_models) or pi.ndim not in (2, 3):
            raise ComputeError(
                f"trans_prob must be ({n_models}, {n_models}) or (N, {n_models}, {n_models}) "
                f"for {n_models} models, got {tuple(pi.shape)}"
            )
        _check_probabilities("trans_prob", pi, xp)
    x, P, mu = state
    if pi.ndim == 2:
        c_bar = mu @ pi  # (N, M)
        w = mu[:, :, None] * pi[None, :, :]  # (N, i, j)
    else:
        c_bar = (mu[:, None, :] @ pi)[:, 0, :]
        w = mu[:, :, None] * pi
    w = w / xp.maximum(c_bar[:, None, :], 1e-300)
    if floor > 0.0:
        w = xp.where(w < floor, 0.0, w)
        w = w / xp.maximum(w.sum(axis=1, keepdims=True), 1e-300)
    n_tracks, n_models, n = x.shape
    # A contiguous (N, j, i): the batched products below stay on their fast path.
    wT = xp.ascontiguousarray(_mT(w))
    x0 = wT @ x
    # P0_j = Σ_i w_ij (P_i + (x_i - x0_j)(x_i - x0_j)ᵀ) = Σ_i w_ij (P_i + d_i d_iᵀ) - e_j e_jᵀ
    # with d_i = x_i - r and e_j = x0_j - r for any r: one (M × M) @ (M × n²) product per
    # track instead of M² outer products. r = the track's first model keeps d and e as small
    # as the spread of the models, so nothing cancels.
    ref = x[:, :1, :]
    d = x - ref
    e = x0 - ref
    # Outer products by einsum: 1.6× faster than broadcasting (n, 1) × (1, n) (measured).
    second = xp.einsum("...i,...j->...ij", d, d)
    second += P
    P0 = (wT @ second.reshape(n_tracks, n_models, n * n)).reshape(P.shape)
    P0 -= xp.einsum("...i,...j->...ij", e, e)
    return IMMState(x0, _symmetrise(P0), c_bar)


def imm_predict(
    state: IMMState, *, F: Any, Q: Any, trans_prob: Any, xp: ModuleType | None = None
) -> IMMState:
    """IMM mixing followed by model-conditioned prediction.

    ``F``, ``Q``: ``(M, n, n)`` or ``(N, M, n, n)`` (see `imm_models`). The returned ``mu`` is
    the predicted model probability; it is the right one to keep when a track is not updated.
    """
    mixed = imm_mix(state, trans_prob, xp=xp)
    x, P = predict(mixed.x, mixed.P, F, Q, xp=xp)
    return IMMState(x, P, mixed.mu)


def imm_update(
    state: IMMState, z: Any, H: Any, R: Any, *, xp: ModuleType | None = None
) -> tuple[IMMState, Any]:
    """Model-conditioned updates with ``z (N, m)`` and model probability update.

    ``H``: ``(m, n)`` or ``(M, m, n)``; ``R``: ``(m, m)`` or ``(N, m, m)``. Returns the new state
    and the log-likelihood of each measurement under the mixture, ``(N,)``.
    """
    xp = _xp(xp, state.x, z)
    z = xp.asarray(z, dtype=xp.float64)
    R = xp.asarray(R, dtype=xp.float64)
    if R.ndim == 3:
        R = R[:, None]
    upd = update(state.x, state.P, z[:, None, :], H, R, xp=xp)
    ll = gaussian_log_likelihood(upd.innovation, upd.S, xp=xp)  # (N, M)
    with np.errstate(divide="ignore"):
        log_w = ll + xp.log(state.mu)
    peak = log_w.max(axis=1, keepdims=True)
    total = xp.log(xp.exp(log_w - peak).sum(axis=1, keepdims=True)) + peak
    mu = xp.exp(log_w - total)
    return IMMState(upd.x, upd.P, mu), total[:, 0]


def imm_combine(state: IMMState, *, xp: ModuleType | None = None) -> tuple[Any, Any]:
    """Moment-matched combined estimate: ``x (N, n)`` and ``P (N, n, n)``."""
    xp = _xp(xp, state.x)
    x, P, mu = state
    n_tracks, n_models, n = x.shape
    xc = (mu[:, None, :] @ x)[:, 0, :]
    Y = (x - xc[:, None, :]) * xp.sqrt(mu)[..., None]  # (N, M, n)
    Pc = (mu[:, None, :] @ P.reshape(n_tracks, n_models, n * n)).reshape(n_tracks, n, n)
    # Yᵀ contiguous: the batched product of a transposed view is 3× slower (measured).
    Pc += xp.ascontiguousarray(_mT(Y)) @ Y
    return xc, _symmetrise(Pc)


# ---------------------------------------------------------------------------------------------
# Radar measurement conversion


def rae_to_enu(
    range_m: Any,
    azimuth_rad: Any,
    elevation_rad: Any,
    *,
    sensor_pos: Any = (0.0, 0.0, 0.0),
    xp: ModuleType | None = None,
) -> Any:
    """ENU positions ``(N, 3)`` of detections at range/azimuth/elevation from ``sensor_pos``.

    x = r cos(el) sin(az) (east), y = r cos(el) cos(az) (north), z = r sin(el) (up).
    """
    xp = _xp(xp, range_m, azimuth_rad, elevation_rad)
    r = as_float_array("range_m", range_m, xp=xp)
    az = as_float_array("azimuth_rad", azimuth_rad, xp=xp)
    el = as_float_array("elevation_rad", elevation_rad, xp=xp)
    origin = as_float_array("sensor_pos", sensor_pos, xp=xp)
    r, az, el = xp.broadcast_arrays(r, az, el)
    ce = xp.cos(el)
    return xp.stack([r * ce * xp.sin(az), r * ce * xp.cos(az), r * xp.sin(el)], axis=-1) + origin


def enu_to_rae(
    position: Any, *, sensor_pos: Any = (0.0, 0.0, 0.0), xp: ModuleType | None = None
) -> tuple[Any, Any, Any]:
    """Range (m), azimuth (rad, [0, 2π), from north clockwise) and elevation (rad) of ENU
    positions ``(..., 3)`` seen from ``sensor_pos``; the inverse of `rae_to_enu`."""
    xp = _xp(xp, position)
    d = as_float_array("position", position, xp=xp) - as_float_array(
        "sensor_pos", sensor_pos, xp=xp
    )
    east, north, up = d[..., 0], d[..., 1], d[..., 2]
    horizontal = xp.hypot(east, north)
    r = xp.hypot(horizontal, up)
    az = xp.mod(xp.arctan2(east, north), 2.0 * math.pi)
    el = xp.arctan2(up, horizontal)
    return r, az, el


def rae_covariance(
    range_m: Any,
    azimuth_rad: Any,
    elevation_rad: Any,
    *,
    sigma_range_m: Any,
    sigma_azimuth_rad: Any,
    sigma_elevation_rad: Any,
    xp: ModuleType | None = None,
) -> Any:
    """Covariance ``(N, 3, 3)`` in m² of the ENU positions from `rae_to_enu`, by linearisation.

    R = J diag(σr², σaz², σel²) Jᵀ with J = ∂(x, y, z)/∂(r, az, el) at each detection. Sigmas
    are scalars or per detection. (No debiasing: fine while r·σ_angle² ≪ r·σ_angle.)
    """
    xp = _xp(xp, range_m, azimuth_rad, elevation_rad)
    r = as_float_array("range_m", range_m, xp=xp)
    az = as_float_array("azimuth_rad", azimuth_rad, xp=xp)
    el = as_float_array("elevation_rad", elevation_rad, xp=xp)
    sr = as_float_array("sigma_range_m", sigma_range_m, xp=xp)
    sa = as_float_array("sigma_azimuth_rad", sigma_azimuth_rad, xp=xp)
    se = as_float_array("sigma_elevation_rad", sigma_elevation_rad, xp=xp)
    r, az, el, sr, sa, se = xp.broadcast_arrays(r, az, el, sr, sa, se)
    ca, sna, ce, sne = xp.cos(az), xp.sin(az), xp.cos(el), xp.sin(el)
    J = xp.empty((*r.shape, 3, 3))
    J[..., 0, 0] = ce * sna
    J[..., 0, 1] = r * ce * ca
    J[..., 0, 2] = -r * sne * sna
    J[..., 1, 0] = ce * ca
    J[..., 1, 1] = -r * ce * sna
    J[..., 1, 2] = -r * sne * ca
    J[..., 2, 0] = sne
    J[..., 2, 1] = 0.0
    J[..., 2, 2] = r * ce
    var = xp.stack([sr**2, sa**2, se**2], axis=-1)
    return _symmetrise((J * var[..., None, :]) @ _mT(J))


# ---------------------------------------------------------------------------------------------
# Polar measurements: debiased conversion and the extended Kalman filter


def wrap_angle(a: Any, *, xp: ModuleType | None = None) -> Any:
    """Angles wrapped to ``[-π, π)``."""
    xp = _xp(xp, a)
    return xp.mod(a + math.pi, 2.0 * math.pi) - math.pi


def polar_to_cartesian(
    range_m: Any,
    azimuth_rad: Any,
    elevation_rad: Any = None,
    *,
    sigma_range_m: Any,
    sigma_azimuth_rad: Any,
    sigma_elevation_rad: Any = 0.0,
    sensor_pos: Any = (0.0, 0.0, 0.0),
    debias: bool = True,
    xp: ModuleType | None = None,
) -> tuple[Any, Any]:
    """Positions and covariances of polar detections: ``(N, 3)``/``(N, 3, 3)`` with elevation,
    ``(N, 2)``/``(N, 2, 2)`` without (range is then the horizontal range).

    With ``debias`` the unbiased conversion (Mo, Song, Bar-Shalom et al.): E[cos ε] = λ = exp(-σ²/2)
    for a Gaussian angle error ε, so the converted position is divided by λ_az (and λ_el);
    without it, the plain conversion. Covariance: linearised at the detection (`rae_covariance`).
    """
    xp = _xp(xp, range_m, azimuth_rad)
    r = as_float_array("range_m", range_m, xp=xp).reshape(-1)
    az = as_float_array("azimuth_rad", azimuth_rad, xp=xp).reshape(-1)
    origin = as_float_array("sensor_pos", sensor_pos, xp=xp)
    sa = as_float_array("sigma_azimuth_rad", sigma_azimuth_rad, xp=xp)
    scale = xp.exp(0.5 * sa**2) if debias else xp.ones_like(sa)
    if elevation_rad is None:
        sr = as_float_array("sigma_range_m", sigma_range_m, xp=xp)
        r, az, sr, sa, scale = xp.broadcast_arrays(r, az, sr, sa, scale)
        pos = xp.stack([r * xp.sin(az), r * xp.cos(az)], axis=-1) * scale[..., None]
        pos = pos + origin[:2]
        J = xp.empty((*r.shape, 2, 2))
        J[..., 0, 0], J[..., 0, 1] = xp.sin(az), r * xp.cos(az)
        J[..., 1, 0], J[..., 1, 1] = xp.cos(az), -r * xp.sin(az)
        var = xp.stack([sr**2, sa**2], axis=-1)
        return pos, _symmetrise((J * var[..., None, :]) @ _mT(J))
    el = as_float_array("elevation_rad", elevation_rad, xp=xp).reshape(-1)
    se = as_float_array("sigma_elevation_rad", sigma_elevation_rad, xp=xp)
    scale_el = xp.exp(0.5 * se**2) if debias else xp.ones_like(se)
    pos = rae_to_enu(r, az, el, xp=xp)
    pos = pos * xp.stack([scale * scale_el, scale * scale_el, scale_el + 0 * scale], axis=-1)
    cov = rae_covariance(
        r,
        az,
        el,
        sigma_range_m=sigma_range_m,
        sigma_azimuth_rad=sigma_azimuth_rad,
        sigma_elevation_rad=sigma_elevation_rad,
        xp=xp,
    )
    return pos + origin, cov


def polar_measurement(
    x: Any,
    sensor_pos: Any,
    *,
    ndim: int,
    elevation: bool = True,
    range_rate: bool = False,
    xp: ModuleType | None = None,
) -> tuple[Any, Any]:
    """The radar's measurement of CV states ``x (..., 2*ndim)`` and its Jacobian.

    Components, in order: range (m), azimuth (rad, from north clockwise), elevation (rad, 3-D
    with ``elevation``), range rate (m/s, with ``range_rate``). In 2-D the range is horizontal.
    Returns ``h (..., m)`` and ``H (..., m, 2*ndim)`` (the EKF's linearisation at ``x``).
    """
    _check_ndim(ndim, low=2)
    xp = _xp(xp, x)
    d = x[..., :ndim] - as_float_array("sensor_pos", sensor_pos, xp=xp)[..., :ndim]
    v = x[..., ndim:]
    e, n = d[..., 0], d[..., 1]
    rho2 = xp.maximum(e * e + n * n, 1e-12)
    rho = xp.sqrt(rho2)
    r2 = rho2 + (d[..., 2] ** 2 if ndim == 3 else 0.0)
    r = xp.sqrt(r2)
    rows: list[Any] = [r, xp.arctan2(e, n)]
    m = 2 + int(elevation and ndim == 3) + int(range_rate)
    H = xp.zeros((*x.shape[:-1], m, 2 * ndim))
    H[..., 0, :ndim] = d / r[..., None]
    H[..., 1, 0] = n / rho2
    H[..., 1, 1] = -e / rho2
    k = 2
    if elevation and ndim == 3:
        u = d[..., 2]
        rows.append(xp.arctan2(u, rho))
        H[..., k, 0] = -e * u / (r2 * rho)
        H[..., k, 1] = -n * u / (r2 * rho)
        H[..., k, 2] = rho / r2
        k += 1
    if range_rate:
        rr = (d * v).sum(axis=-1) / r
        rows.append(rr)
        H[..., k, :ndim] = (v - rr[..., None] * d / r[..., None]) / r[..., None]
        H[..., k, ndim:] = d / r[..., None]
    return xp.stack(rows, axis=-1), H


def ekf_update(
    x: Any, P: Any, y: Any, H: Any, R: Any, *, xp: ModuleType | None = None
) -> KalmanUpdate:
    """Kalman update with a given innovation ``y (..., m)`` (e.g. ``z - h(x)`` with angles
    wrapped) and linearisation ``H (..., m, n)``: the extended Kalman filter's update, Joseph
    form. Shapes broadcast as in `update`."""
    xp = _xp(xp, x, P, y)
    HP = H @ P
    S = _symmetrise(HP @ _mT(H) + R)
    # K = P Hᵀ S⁻¹, i.e. Kᵀ = S⁻¹ H P since P and S are symmetric.
    try:
        K = _mT(xp.linalg.solve(S, HP))
    except np.linalg.LinAlgError as exc:
        raise ComputeError("innovation covariance S is singular; check R and P") from exc
    x_post = x + (K @ y[..., None])[..., 0]
    IKH = xp.eye(x.shape[-1]) - K @ H
    P_post = _symmetrise(IKH @ P @ _mT(IKH) + K @ R @ _mT(K))
    return KalmanUpdate(x_post, P_post, y, S)
