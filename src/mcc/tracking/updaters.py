"""Updaters: the Kalman update on Cartesian positions, and the extended Kalman filter on
polar detections (range, azimuth[, elevation][, range rate])."""

from __future__ import annotations

import math
from types import ModuleType
from typing import Literal, overload

import numpy as np
import numpy.typing as npt

from mcc.compute import kalman
from mcc.errors import ComputeError
from mcc.tracking.associators import small_unique
from mcc.tracking.base import Measurements
from mcc.tracking.scan import PolarDetections

__all__ = ["PolarEKFUpdater", "PositionUpdater", "mahalanobis", "position_update"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
_LOG_2PI = math.log(2.0 * math.pi)


def _load_kernel() -> ModuleType | None:
    """The C kernel `mcc.tracking._ekf`, or None where the package's extensions are not built."""
    try:
        from mcc.tracking import _ekf
    except ImportError:
        return None
    return _ekf


# The 2-D range/azimuth EKF of a scan's pairs in one call (gate distances, IMM model mixture,
# update); the NumPy code below is its reference and what runs without it.
KERNEL = _load_kernel()


class PositionUpdater:
    """Linear Kalman update with ``H = [I 0]``: the detection is a position (Cartesian scans,
    or polar ones converted by `kalman.polar_to_cartesian`)."""

    def __init__(self, ndim: int) -> None:
        self.d = ndim

    def dim(self, meas: Measurements) -> int:
        return self.d

    def innovation(self, x: F64, P: F64, meas: Measurements, cols: I64) -> tuple[F64, F64]:
        z, R = meas.z[cols], meas.R_rows(cols)
        if x.ndim == 3:
            z, R = z[:, None], R[:, None]
        d = self.d
        return z - x[..., :d], P[..., :d, :d] + R

    def pair_innovation(
        self, x: F64, P: F64, meas: Measurements, rows: I64, cols: I64
    ) -> tuple[F64, F64]:
        """`innovation` of rows ``rows`` of ``x``, ``P`` with detections ``cols``."""
        return self.innovation(x[rows], P[rows], meas, cols)

    def pair_update(
        self, x: F64, P: F64, meas: Measurements, rows: I64, cols: I64
    ) -> tuple[F64, F64, F64]:
        """`update` of rows ``rows`` of ``x``, ``P`` with detections ``cols``."""
        return self.update(x[rows], P[rows], meas, cols)

    def update(self, x: F64, P: F64, meas: Measurements, cols: I64) -> tuple[F64, F64, F64]:
        z, R = meas.z[cols], meas.R_rows(cols)
        if x.ndim == 3:
            z, R = z[:, None], R[:, None]
        return position_update(x, P, z, R, self.d)


class PolarEKFUpdater:
    """Extended Kalman filter update in the radar's own coordinates: ``h(x)`` and its Jacobian
    from `kalman.polar_measurement` at the prediction, the azimuth innovation wrapped to
    ±π. Used for scans with ``polar`` set; others go to the `PositionUpdater`."""

    def __init__(self, ndim: int, *, native: bool = True) -> None:
        self.d = ndim
        self.linear = PositionUpdater(ndim)
        self.kernel = KERNEL if native else None  # read at construction (tests patch KERNEL)

    def native(self, meas: Measurements) -> bool:
        """Whether the C kernel computes this scan's gate and update: 2-D range/azimuth
        detections (no range rate) and the kernel built."""
        polar = meas.polar
        return (
            self.kernel is not None
            and polar is not None
            and polar.range_rate_mps is None
            and self.d == 2
        )

    def pair_distance(
        self, x: F64, P: F64, meas: Measurements, rows: I64, cols: I64, mu: F64 | None = None
    ) -> tuple[F64, F64, F64 | None]:
        """By the C kernel (`native` scans only): `mahalanobis` of `pair_innovation` of rows
        ``rows`` of ``x (N, [M,] 4)``, ``P`` with detections ``cols``: ``d2`` and ``ln|S|``
        ``(K, [M])``. With ``mu (N, M)``, the IMM's `model_gate` instead: per pair the least
        ``d2`` over the models, that model's ``ln|S|`` and ln Σ_m μ_m N(y_m; 0, S_m) ``(K,)``."""
        polar = meas.polar
        assert self.kernel is not None and polar is not None
        models = x.shape[1] if x.ndim == 3 else 1
        shape = (rows.size,) if mu is not None or x.ndim == 2 else (rows.size, models)
        d2, logdet = np.empty(shape), np.empty(shape)
        ll = None if mu is None else np.empty(rows.size)
        if mu is not None:
            mu = np.ascontiguousarray(mu, dtype=np.float64)
        x, P = _inner_contiguous(x, P)
        bad = self.kernel.gate(
            x, P, models, _indices(rows), _indices(cols), _range_azimuth(polar), _polar_R(polar, 2),
            float(polar.sensor_position_m[0]), float(polar.sensor_position_m[1]),
            mu, d2, logdet, ll,
        )  # fmt: skip
        if bad:
            raise ComputeError("an innovation covariance is not positive definite; check R and P")
        return d2, logdet, ll

    def pair_update_mix(
        self, x: F64, P: F64, mu: F64, meas: Measurements, rows: I64, cols: I64
    ) -> tuple[F64, F64, F64, F64, F64]:
        """By the C kernel (`native` scans only), for an IMM's models ``x (N, M, 4)``:
        `pair_update`, each pair's ln Σ_m μ_m N_m(y) ``(K,)`` (`IMMPredictor.pda_update`'s) and
        the models' posterior probabilities ``(K, M)`` (`IMMPredictor.update`'s)."""
        x_post, P_post, ll, mix, mu_post = self._native_update(x, P, meas, rows, cols, mu)
        assert mix is not None and mu_post is not None
        return x_post, P_post, ll, mix, mu_post

    def _native_update(
        self, x: F64, P: F64, meas: Measurements, rows: I64, cols: I64, mu: F64 | None = None
    ) -> tuple[F64, F64, F64, F64 | None, F64 | None]:
        """`pair_update` by the C kernel (`native` scans only); with ``mu``, also the mixture
        of each pair and the models' posterior probabilities (`pair_update_mix`)."""
        polar = meas.polar
        assert self.kernel is not None and polar is not None
        lead = (rows.size, x.shape[1]) if x.ndim == 3 else (rows.size,)
        x_post, P_post, ll = np.empty((*lead, 4)), np.empty((*lead, 4, 4)), np.empty(lead)
        x, P = _inner_contiguous(x, P)
        extra: tuple[F64, ...] = ()
        if mu is not None:
            extra = (np.ascontiguousarray(mu, dtype=np.float64), np.empty(rows.size),
                     np.empty(lead))  # fmt: skip
        bad = self.kernel.update(
            x, P, x.shape[1] if x.ndim == 3 else 1, _indices(rows), _indices(cols),
            _range_azimuth(polar),
            _polar_R(polar, 2), float(polar.sensor_position_m[0]),
            float(polar.sensor_position_m[1]), x_post, P_post, ll, *extra,
        )  # fmt: skip
        if bad:
            raise ComputeError("an innovation covariance is not positive definite; check R and P")
        if mu is None:
            return x_post, P_post, ll, None, None
        return x_post, P_post, ll, extra[1], extra[2]

    def dim(self, meas: Measurements) -> int:
        if meas.polar is None:
            return self.d
        return _polar_dim(meas.polar, self.d)

    def innovation(self, x: F64, P: F64, meas: Measurements, cols: I64) -> tuple[F64, F64]:
        polar = meas.polar
        if polar is None:
            return self.linear.innovation(x, P, meas, cols)
        d = self.d
        if polar.range_rate_mps is None and d == 2:  # H has no velocity columns
            y, Hp, R = self._linearise_2d(x, polar, cols)
            return y, _sym(Hp @ P[..., :d, :d] @ Hp.swapaxes(-1, -2) + R)
        y, H, R = self._linearise(x, polar, cols)
        if polar.range_rate_mps is None:
            Hp = H[..., :d]
            return y, _sym(Hp @ P[..., :d, :d] @ Hp.swapaxes(-1, -2) + R)
        return y, _sym(H @ P @ H.swapaxes(-1, -2) + R)

    def update(self, x: F64, P: F64, meas: Measurements, cols: I64) -> tuple[F64, F64, F64]:
        polar = meas.polar
        if polar is None:
            return self.linear.update(x, P, meas, cols)
        if self.native(meas):
            return self._native_update(x, P, meas, np.arange(x.shape[0]), cols)[:3]
        if polar.range_rate_mps is None and self.d == 2:
            y, Hp, R = self._linearise_2d(x, polar, cols)
        else:
            y, H, R = self._linearise(x, polar, cols)
            if polar.range_rate_mps is not None:
                post = kalman.ekf_update(x, P, y, H, R, xp=np)
                d2, logdet = mahalanobis(post.innovation, post.S)
                return post.x, post.P, -0.5 * (d2 + logdet + y.shape[-1] * _LOG_2PI)
            Hp = H[..., : self.d]
        x_post, P_post, d2, det = _ekf_position_update(x, P, y, Hp, R)
        return x_post, P_post, -0.5 * (d2 + np.log(det) + y.shape[-1] * _LOG_2PI)

    def pair_innovation(
        self, x: F64, P: F64, meas: Measurements, rows: I64, cols: I64
    ) -> tuple[F64, F64]:
        """`innovation` of rows ``rows`` of ``x``, ``P`` with detections ``cols``, the
        linearisation and ``H P Hᵀ`` made once per row, not per pair (the same numbers: at
        1000 tracks in wide bearing noise a track has 30 candidate detections)."""
        polar = meas.polar
        if polar is None or polar.range_rate_mps is not None or self.d != 2:
            return self.innovation(x[rows], P[rows], meas, cols)
        u, at = small_unique(rows)
        r, az, Hp = _polar_2d(x[u], polar)
        HPH = Hp @ P[u][..., :2, :2] @ Hp.swapaxes(-1, -2)
        return _polar_residual(polar, cols, r[at], az[at]), _sym(HPH[at] + _polar_R(polar, 2))

    def pair_update(
        self, x: F64, P: F64, meas: Measurements, rows: I64, cols: I64
    ) -> tuple[F64, F64, F64]:
        """`update` of rows ``rows`` of ``x``, ``P`` with detections ``cols``; a row's gain and
        posterior covariance computed once for all its detections (JPDA: the same numbers)."""
        polar = meas.polar
        if self.native(meas):
            return self._native_update(x, P, meas, rows, cols)[:3]
        if polar is None or polar.range_rate_mps is not None or self.d != 2:
            return self.update(x[rows], P[rows], meas, cols)
        u, at = small_unique(rows)
        xu = x[u]
        r, az, Hp = _polar_2d(xu, polar)
        y = _polar_residual(polar, cols, r[at], az[at])
        R = _polar_R(polar, 2)
        x_post, P_post, d2, det = _ekf_position_update(xu, P[u], y, Hp, R, at)
        return x_post, P_post, -0.5 * (d2 + np.log(det) + y.shape[-1] * _LOG_2PI)

    def _linearise_2d(self, x: F64, polar: PolarDetections, cols: I64) -> tuple[F64, F64, F64]:
        """`_linearise` of range and azimuth in 2-D, the Jacobian's position columns only:
        the arithmetic of `kalman.polar_measurement` (the same numbers) without its checks
        and its zero velocity columns (it runs three times a scan)."""
        r, az, Hp = _polar_2d(x, polar)
        return _polar_residual(polar, cols, r, az), Hp, _polar_R(polar, 2)

    def _linearise(self, x: F64, polar: PolarDetections, cols: I64) -> tuple[F64, F64, F64]:
        h, H = kalman.polar_measurement(
            x,
            polar.sensor_position_m,
            ndim=self.d,
            elevation=polar.elevation_rad is not None,
            range_rate=polar.range_rate_mps is not None,
            xp=np,
        )
        z = polar.z()[cols]
        if self.d == 2 and polar.elevation_rad is not None:
            z = np.delete(z, 2, axis=1)  # a 2-D tracker ignores elevation
        if x.ndim == 3:
            z = z[:, None]
        y = z - h
        y[..., 1] = kalman.wrap_angle(y[..., 1], xp=np)
        R = _polar_R(polar, self.d)
        return y, H, R


def _inner_contiguous(x: F64, P: F64) -> tuple[F64, F64]:
    """``x`` and ``P`` as the kernel reads them: float64, any strides over tracks and models,
    each state and covariance contiguous (a copy only where they are not)."""
    if x.dtype != np.float64 or x.strides[-1] != 8:
        x = np.ascontiguousarray(x, dtype=np.float64)
    if P.dtype != np.float64 or P.strides[-2:] != (32, 8):
        P = np.ascontiguousarray(P, dtype=np.float64)
    return x, P


def _range_azimuth(polar: PolarDetections) -> F64:
    """The detections' range and azimuth ``(M, 2)``, contiguous (the kernel's ``z``; a 2-D
    tracker ignores elevation). Kept with the scan's detections, as `PolarDetections.z`."""
    cached: F64 | None = polar.__dict__.get("_z2")
    if cached is None:
        cached = np.ascontiguousarray(polar.z()[:, :2])
        polar.__dict__["_z2"] = cached  # a frozen dataclass: the cache bypasses __setattr__
    return cached


def _indices(a: I64) -> I64:
    """``a`` as a contiguous int64 array (the kernel's indices)."""
    return np.ascontiguousarray(a, dtype=np.int64)


def _polar_2d(x: F64, polar: PolarDetections) -> tuple[F64, F64, F64]:
    """Range, azimuth and the position columns of their Jacobian at states ``x (..., 4)``,
    by the arithmetic of `kalman.polar_measurement`."""
    e = x[..., 0] - polar.sensor_position_m[0]
    n = x[..., 1] - polar.sensor_position_m[1]
    rho2 = np.maximum(e * e + n * n, 1e-12)
    r = np.sqrt(rho2)
    Hp = np.empty((*x.shape[:-1], 2, 2))
    Hp[..., 0, 0] = e / r
    Hp[..., 0, 1] = n / r
    Hp[..., 1, 0] = n / rho2
    Hp[..., 1, 1] = -e / rho2
    return r, np.arctan2(e, n), Hp


def _polar_residual(polar: PolarDetections, cols: I64, r: F64, az: F64) -> F64:
    """Detections ``cols`` less the predicted range ``r`` and azimuth ``az`` (``(K,)`` or
    ``(K, M)``), the azimuth wrapped."""
    z = polar.z()[cols]
    if r.ndim == 2:
        z = z[:, None]
    y = np.empty((*r.shape, 2))
    y[..., 0] = z[..., 0] - r
    y[..., 1] = kalman.wrap_angle(z[..., 1] - az, xp=np)
    return y


def _ekf_position_update(
    x: F64, P: F64, y: F64, Hp: F64, R: F64, at: I64 | None = None
) -> tuple[F64, F64, F64, F64]:
    """EKF update when the measurement depends on the position only, ``H = [Hp 0]``:
    posterior ``x``, ``P``, the squared Mahalanobis distance and ``|S|`` of each row (with
    ``at``: of each innovation ``y[k]`` of row ``at[k]``, R shared).

    P Hᵀ is P's position columns times Hpᵀ, S is m × m (m <= 3, closed-form inverse) and
    P⁺ = P − K (P Hᵀ)ᵀ: the same estimate as `kalman.ekf_update` (the tests compare both with
    filterpy). Written over the batch as the last axis ("structure of arrays": every product
    a few multiply-adds over contiguous rows) because NumPy's batched matmul of 4 × 2
    matrices pays per matrix: measured 0.73 ms against 2.2 ms for 1000 tracks × 7 IMM
    models.
    """
    shape, n = x.shape[:-1], x.shape[-1]
    m, d = Hp.shape[-2], Hp.shape[-1]
    Pt = np.ascontiguousarray(P.reshape(-1, n, n).transpose(1, 2, 0))  # (n, n, B)
    Ht = np.ascontiguousarray(Hp.reshape(-1, m, d).transpose(1, 2, 0))  # (m, d, B)
    PHt = (Pt[:, None, :d] * Ht[None]).sum(axis=2)  # (n, m, B)
    S = (Ht[:, :, None] * PHt[None, :d]).sum(axis=1) + R[..., None]  # (m, m, B)
    S_inv, det = _inv_small(S.transpose(2, 0, 1), with_det=True)
    Si = np.ascontiguousarray(S_inv.transpose(1, 2, 0))  # (m, m, B)
    K = (PHt[:, :, None] * Si[None]).sum(axis=1)  # (n, m, B)
    Pp = Pt - (K[:, None] * PHt[None]).sum(axis=2)  # (n, n, B)
    Pp += Pp.transpose(1, 0, 2)
    Pp *= 0.5
    P_post = np.ascontiguousarray(Pp.transpose(2, 0, 1)).reshape(*shape, n, n)
    if at is not None:
        # Rows ``at`` of the batch, one per innovation: the gain and the posterior
        # covariance do not depend on the detection.
        inner = int(np.prod(shape[1:], dtype=np.int64))
        flat = (at[:, None] * inner + np.arange(inner)).reshape(-1)
        shape = (at.size, *shape[1:])
        x, P_post, K, Si, det = x[at], P_post[at], K[..., flat], Si[..., flat], det[flat]
    yt = np.ascontiguousarray(y.reshape(-1, m).T)  # (m, B)
    x_post = x + (K * yt[None]).sum(axis=1).T.reshape(*shape, n)
    d2 = (yt[:, None] * Si * yt[None]).sum(axis=(0, 1))
    return x_post, P_post, d2.reshape(shape), det.reshape(shape)


def _sym(a: F64) -> F64:
    return 0.5 * (a + a.swapaxes(-1, -2))


def _polar_dim(polar: PolarDetections, d: int) -> int:
    return (
        2 + int(polar.elevation_rad is not None and d == 3) + int(polar.range_rate_mps is not None)
    )


def _polar_R(polar: PolarDetections, d: int) -> F64:
    """The update's measurement covariance for a ``d``-D tracker (kept with the scan's
    detections: every gating and update of the scan asks)."""
    cached: F64 | None = polar.__dict__.get(f"_R{d}")
    if cached is not None:
        return cached
    sig = [polar.sigma_range_m, polar.sigma_azimuth_rad]
    if polar.elevation_rad is not None and d == 3:
        sig.append(polar.sigma_elevation_rad)
    if polar.range_rate_mps is not None:
        sig.append(polar.sigma_range_rate_mps)
    R = np.diag(np.square(sig))
    R.flags.writeable = False
    polar.__dict__[f"_R{d}"] = R  # a frozen dataclass: the cache bypasses __setattr__
    return R


def mahalanobis(y: F64, S: F64) -> tuple[F64, F64]:
    """``yᵀ S⁻¹ y`` and ``ln|S|`` over a batch: ``y (..., m)``, ``S (..., m, m)``."""
    if S.shape[-1] <= 3:
        S_inv, det = _inv_small(S, with_det=True)
        return np.einsum("...i,...ij,...j->...", y, S_inv, y), np.log(det)
    sol = np.linalg.solve(S, y[..., None])[..., 0]
    sign, logdet = np.linalg.slogdet(S)
    if not bool((sign > 0).all()):
        raise ComputeError("an innovation covariance is not positive definite; check R and P")
    return (y * sol).sum(axis=-1), logdet


def position_update(x: F64, P: F64, z: F64, R: F64, d: int) -> tuple[F64, F64, F64]:
    """Kalman update with ``H = [I 0]`` (the measurement is the position), batched over the
    leading axes, and the log-likelihood of each measurement.

    The same estimate as `kalman.update` (checked by the tests) written for this H: ``P Hᵀ`` and
    ``H P`` are slices, ``S⁻¹`` is closed form, ``P⁺ = P − K H P`` (symmetrised).
    """
    if x.shape[0] == 0:
        return x, P, np.zeros(x.shape[:-1])
    PHt = P[..., :, :d]  # (K, n, d)
    S = P[..., :d, :d] + R
    S_inv, det = _inv_small(S, with_det=True)
    K = PHt @ S_inv  # (K, n, d)
    y = z - x[..., :d]
    x_post = x + np.einsum("...ij,...j->...i", K, y)
    P_post = P - K @ np.ascontiguousarray(P[..., :d, :])
    P_post = 0.5 * (P_post + P_post.swapaxes(-1, -2))
    d2 = np.einsum("...i,...ij,...j->...", y, S_inv, y)
    return x_post, P_post, -0.5 * (d2 + np.log(det) + d * _LOG_2PI)


@overload
def _inv_small(S: F64) -> F64: ...
@overload
def _inv_small(S: F64, *, with_det: Literal[True]) -> tuple[F64, F64]: ...
def _inv_small(S: F64, *, with_det: bool = False) -> F64 | tuple[F64, F64]:
    """Inverses of a stack of symmetric positive-definite 1×1, 2×2 or 3×3 matrices, closed form
    (LAPACK's batched inverse costs ~0.6 µs per 2×2 matrix, this ~0.03 µs)."""
    d = S.shape[-1]
    if d == 1:
        det = S[..., 0, 0]
        out = 1.0 / S
    elif d == 2:
        a, b, c = S[..., 0, 0], S[..., 0, 1], S[..., 1, 1]
        det = a * c - b * b
        out = np.empty_like(S)
        out[..., 0, 0] = c
        out[..., 1, 1] = a
        out[..., 0, 1] = out[..., 1, 0] = -b
        out /= det[..., None, None]
    elif d == 3:
        # The adjugate's columns are cross products of the columns.
        c0, c1, c2 = S[..., :, 0], S[..., :, 1], S[..., :, 2]
        adj = np.stack([np.cross(c1, c2), np.cross(c2, c0), np.cross(c0, c1)], axis=-2)
        det = np.einsum("...i,...i->...", c0, adj[..., 0, :])
        out = adj / det[..., None, None]
    else:
        inv = np.asarray(np.linalg.inv(S), dtype=np.float64)
        return (inv, np.linalg.det(S)) if with_det else inv
    if not bool((det > 0).all()):
        raise ComputeError("an innovation covariance is not positive definite; check R and P")
    return (out, det) if with_det else out
