"""Gaters: the (track, detection) pairs inside a chi-square gate, found without an N × M array."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import numpy.typing as npt

from mcc.compute.associate import chi2_gate_threshold
from mcc.tracking import updaters
from mcc.tracking.base import Gated, Measurements, Updater
from mcc.tracking.updaters import PolarEKFUpdater, mahalanobis

__all__ = ["Chi2Gater", "candidate_pairs", "lambda_max_bound"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
_EMPTY_I64 = np.zeros(0, np.int64)
_DENSE_PAIRS = 4096  # up to this many track × detection pairs, no grid
# Up to this many pairs the kernel tests every pair (one C loop: 8 µs at 99 × 61 against the
# grid's 49 µs of NumPy calls; the grid is cheaper from ~60 000 pairs, measured 2026-11-28),
# and the pairs come in (track, detection) order on both paths.
_DENSE_PAIRS_NATIVE = 1 << 15
_ZERO = np.zeros(1, np.int64)


class Chi2Gater:
    """Pairs whose squared Mahalanobis distance of the innovation (the updater's: positions,
    or range/azimuth/... for the EKF) is within ``chi2.ppf(gate_probability, m)``.

    Only the pairs that a spatial grid finds within the gate's bounding radius on positions
    (``sqrt(gate · (λmax(P) + λmax(R)))``, widened by ``polar_margin`` for polar scans whose
    converted covariance is an approximation) are computed, so the cost grows with the number
    of close pairs, not with tracks × detections.
    """

    def __init__(self, gate_probability: float, ndim: int, *, polar_margin: float = 1.5) -> None:
        self.probability = gate_probability
        self.d = ndim
        self.polar_margin = polar_margin
        # The grid's expansion in C (`candidate_pairs`); None: NumPy's.
        self.kernel = updaters.KERNEL

    def threshold(self, dim: int) -> float:
        return chi2_gate_threshold(self.probability, dim)

    def gate(self, x: F64, P: F64, meas: Measurements, updater: Updater) -> Gated:
        d = self.d
        pos, P_pos = x[:, :d], P[:, :d, :d]
        gate = self.threshold(updater.dim(meas))
        R = meas.R
        per_meas = R.ndim == 3
        bound = lambda_max_bound(P_pos if per_meas else P_pos + R)
        if per_meas:
            bound = bound + float(lambda_max_bound(R).max())
        if meas.polar is not None:
            bound = bound * self.polar_margin**2
        ti, mj = candidate_pairs(pos, np.sqrt(gate * bound), meas.z, kernel=self.kernel)
        if ti.size == 0:
            return Gated(ti, mj, np.zeros(0), np.zeros(0))
        if isinstance(updater, PolarEKFUpdater) and updater.native(meas):
            d2, logdet, _ = updater.pair_distance(x, P, meas, ti, mj)
        else:
            y, S = updater.pair_innovation(x, P, meas, ti, mj)
            d2, logdet = mahalanobis(y, S)
        ok = d2 <= gate
        return Gated(ti[ok], mj[ok], d2[ok], logdet[ok])


def candidate_pairs(
    track_pos: F64, radius: F64, meas_pos: F64, *, kernel: ModuleType | None = None
) -> tuple[I64, I64]:
    """All (track, measurement) pairs closer than the track's ``radius``, via a hashed grid.

    Tracks are grouped by radius (within a factor 4); each group hashes the measurements into
    square cells (x-y only) as wide as its largest radius and looks in the 3×3 cells around
    each track. Cell ``(i, j)`` goes to slot ``(i·W + j) mod 2^k``, ``W`` the grid's height in
    cells and ``2^k > 2W + 2``, so the 9 cells around a track fall in 9 different slots; other
    collisions only add candidates, which the distance test removes. Cost: O(N + M +
    candidates) per group, no N × M array.

    ``kernel`` (`mcc.tracking._ekf`, `Chi2Gater`'s; None: NumPy): the expansion of each
    track's 9 cells into pairs and the distance test in one C loop, the same pairs in the same
    order; the cells, the sort of the detections and the candidates' count stay NumPy's. At
    1000 targets in 1° of bearing noise a scan has ~10⁵ candidates, and NumPy's ten passes
    over them cost more than the rest of the gate (docs/tracking.md, "Speed").

    Up to ``_DENSE_PAIRS_NATIVE`` track × measurement pairs there is no grid: the kernel tests
    every pair (NumPy: every distance at once up to ``_DENSE_PAIRS`` pairs, else the grid's
    pairs sorted), and the pairs come in (track, measurement) order on both paths.
    """
    n, m = track_pos.shape[0], meas_pos.shape[0]
    if n == 0 or m == 0:
        return _EMPTY_I64, _EMPTY_I64
    if n * m <= _DENSE_PAIRS_NATIVE and kernel is not None:
        return _native_dense(kernel, track_pos, radius, meas_pos)
    if n * m <= _DENSE_PAIRS:
        # Few pairs: every distance at once costs less than building the grid (measured
        # 0.05 against 0.12 ms at 50 tracks × 50 detections, even at 64 × 64); the same pairs.
        diff = track_pos[:, None, :] - meas_pos[None, :, :]
        d2 = np.einsum("ijk,ijk->ij", diff, diff)
        ti, mj = np.nonzero(d2 <= (radius**2)[:, None])
        return ti.astype(np.int64), mj.astype(np.int64)
    tx, ty = np.ascontiguousarray(track_pos[:, 0]), np.ascontiguousarray(track_pos[:, 1])
    mx, my = np.ascontiguousarray(meas_pos[:, 0]), np.ascontiguousarray(meas_pos[:, 1])
    y_lo = min(float(ty.min()), float(my.min()))
    y_span = max(float(ty.max()), float(my.max())) - y_lo
    group = np.ceil(np.log2(np.maximum(radius, 1e-6)) * 0.5).astype(np.int64)
    g_lo, g_hi = int(group.min()), int(group.max())
    out_i, out_j = [], []
    for g in range(g_lo, g_hi + 1):
        sel = None if g_lo == g_hi else np.flatnonzero(group == g)
        if sel is not None and sel.size == 0:
            continue
        scale = 1.0 / float(radius.max() if sel is None else radius[sel].max())
        width = min(int(y_span * scale) + 3, 1 << 20)
        slots = 1 << max(int(4 * m).bit_length(), int(2 * width + 2).bit_length())
        mask = slots - 1
        # Truncation, not floor: cell 0 is twice as wide, and points closer than a cell
        # still fall in the same or adjacent cells.
        mkey = (mx * scale).astype(np.int64) * width + ((my - y_lo) * scale).astype(np.int64)
        mkey &= mask
        sx, sy = (tx, ty) if sel is None else (tx[sel], ty[sel])
        tkey = (sx * scale).astype(np.int64) * width + ((sy - y_lo) * scale).astype(np.int64)
        order = np.argsort(mkey)
        count = np.bincount(mkey, minlength=slots)
        start = np.cumsum(count) - count
        offsets = np.array([a * width + b for a in (-1, 0, 1) for b in (-1, 0, 1)])
        nkey = (tkey[:, None] + offsets).ravel() & mask
        counts = count[nkey]
        total = int(counts.sum())
        if total == 0:
            continue
        rows = np.arange(tkey.size) if sel is None else sel
        if kernel is not None:
            ti, mj = np.empty(total, np.int64), np.empty(total, np.int64)
            got = kernel.grid_pairs(
                np.ascontiguousarray(track_pos, dtype=np.float64),
                np.ascontiguousarray(meas_pos, dtype=np.float64),
                np.ascontiguousarray(radius, dtype=np.float64),
                np.ascontiguousarray(rows, dtype=np.int64), tkey, offsets, mask, count, start,
                np.ascontiguousarray(order, dtype=np.int64), ti, mj,
            )  # fmt: skip
            out_i.append(ti[:got])
            out_j.append(mj[:got])
            continue
        ti = np.repeat(np.repeat(rows, offsets.size), counts)
        first = np.cumsum(counts) - counts
        mj = order[np.repeat(start[nkey] - first, counts) + np.arange(total)]
        d2 = (tx[ti] - mx[mj]) ** 2 + (ty[ti] - my[mj]) ** 2
        if track_pos.shape[1] > 2:
            d2 += ((track_pos[:, 2:][ti] - meas_pos[:, 2:][mj]) ** 2).sum(axis=1)
        near = d2 <= radius[ti] ** 2
        out_i.append(ti[near])
        out_j.append(mj[near])
    if not out_i:
        return _EMPTY_I64, _EMPTY_I64
    ti, mj = np.concatenate(out_i), np.concatenate(out_j)
    if n * m <= _DENSE_PAIRS_NATIVE:  # the kernel's (track, detection) order
        order = np.lexsort((mj, ti))
        ti, mj = ti[order], mj[order]
    return ti, mj


def _native_dense(
    kernel: ModuleType, track_pos: F64, radius: F64, meas_pos: F64
) -> tuple[I64, I64]:
    """Every (track, measurement) pair tested by the kernel's grid expansion with a single
    cell holding every measurement: the pairs in (track, measurement) order."""
    n, m = track_pos.shape[0], meas_pos.shape[0]
    if not (np.isfinite(track_pos).all() and np.isfinite(meas_pos).all()):
        raise ValueError("candidate_pairs: a NaN or infinite position")
    ti, mj = np.empty(n * m, np.int64), np.empty(n * m, np.int64)
    rows, order = np.arange(n, dtype=np.int64), np.arange(m, dtype=np.int64)
    got = kernel.grid_pairs(
        np.ascontiguousarray(track_pos, dtype=np.float64),
        np.ascontiguousarray(meas_pos, dtype=np.float64),
        np.ascontiguousarray(radius, dtype=np.float64),
        rows, np.zeros(n, np.int64), _ZERO, 0, np.full(1, m, np.int64), _ZERO, order, ti, mj,
    )  # fmt: skip
    return ti[:got], mj[:got]


def lambda_max_bound(S: F64) -> F64:
    """An upper bound of the largest eigenvalue of symmetric PSD matrices ``(..., d, d)``:
    exact for 2×2, else the smaller of the trace and the Gershgorin bound."""
    d = S.shape[-1]
    if d == 2:
        a, b, c = S[..., 0, 0], S[..., 0, 1], S[..., 1, 1]
        return 0.5 * (a + c) + np.sqrt(0.25 * (a - c) ** 2 + b * b)
    trace = np.trace(S, axis1=-2, axis2=-1)
    gershgorin = np.abs(S).sum(axis=-1).max(axis=-1)
    return np.minimum(trace, gershgorin)
