"""Associators: global nearest neighbour over the gated pairs, solved by independent clusters."""

from __future__ import annotations

from types import ModuleType
from typing import Literal

import numpy as np
import numpy.typing as npt
import scipy.sparse
from scipy.optimize import linear_sum_assignment
from scipy.sparse.csgraph import min_weight_full_bipartite_matching

from mcc.tracking.base import Gated

__all__ = ["GNNAssociator", "bipartite_components", "run_starts", "small_unique"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
_EMPTY_I64 = np.zeros(0, np.int64)


def _load_kernel() -> ModuleType | None:
    """`mcc.tracking._jpda` (its ``unique_inverse`` and ``components``), or None where the
    package's extensions are not built: then NumPy's code below, the reference."""
    try:
        from mcc.tracking import _jpda
    except ImportError:
        return None
    return _jpda


# Written in C because the tracker calls these 6-8 times a scan on a few dozen indices, where
# NumPy's ~4 µs of fixed cost per call (6 array calls; 10-15 µs for the components' sweeps)
# was a tenth of a `formation` scan (measured 2026-11-28: docs/tracking.md, "Speed").
KERNEL = _load_kernel()


class GNNAssociator:
    """Global nearest neighbour: the assignment of least total cost, tracks marked ``first``
    (confirmed ones) choosing before the others, which share what is left (with a cost of d²
    alone a tentative track's wide gate would otherwise outbid a confirmed track for its own
    detection; Stone Soup's initiator, too, only sees the detections left over).

    ``cost="likelihood"``: a pair costs d² + ln|S| − min ln|S| (−2 log of its Gaussian
    likelihood up to a constant), so between two tracks at the same distance the more certain
    one wins; ``cost="distance"``: d² alone. Leaving a track or a detection out costs half the
    largest gated cost, so every gated pair can be taken (`gnn_sparse`).
    """

    def __init__(self, gate: float, *, cost: Literal["likelihood", "distance"] = "likelihood"):
        self.gate = gate
        self.cost = cost

    def associate(
        self,
        gated: Gated,
        first: npt.NDArray[np.bool_],
        n_meas: int,
        nll: F64 | None = None,
        miss_cost: float | None = None,
    ) -> tuple[I64, I64]:
        """``nll``: −2 ln of each pair's likelihood up to a constant, when the predictor knows
        better than the Gaussian of ``d2`` and ``logdet`` (an IMM's model mixture); used in
        place of d² + ln|S| with the ``likelihood`` cost. ``miss_cost``: with the
        ``likelihood`` cost, a track is left without a detection rather than given one whose
        cost (d² + ln|S|, or ``nll``) is not below this (the tracker's: the pair's likelihood
        ratio to clutter is below that of a miss, 1 − p_d p_g), and leaving a track and a
        detection out costs exactly that."""
        ti, mj, d2 = gated.ti, gated.mj, gated.d2
        if ti.size == 0:
            return _EMPTY_I64, _EMPTY_I64
        if self.cost == "likelihood" and miss_cost is not None:
            raw = gated.d2 + gated.logdet if nll is None else nll
            keep = raw < miss_cost
            if not keep.any():
                return _EMPTY_I64, _EMPTY_I64
            ti, mj, raw, first = ti[keep], mj[keep], raw[keep], first[keep]
            # One shift of every pair and of the miss: the same optimum, weights >= 0.
            lo = float(raw.min())
            cost, max_cost = raw - lo, miss_cost - lo
        elif self.cost == "likelihood":
            own = gated.logdet if nll is None else nll - d2
            extra = own - own.min()
            cost = d2 + extra
            max_cost = max(self.gate, float(d2.max())) + float(extra.max())
        else:
            cost, max_cost = d2, max(self.gate, float(d2.max()))
        t1, m1 = gnn_sparse(ti[first], mj[first], cost[first], max_cost=max_cost)
        used = np.zeros(n_meas, bool)
        used[m1] = True
        second = ~first & ~used[mj]
        t2, m2 = gnn_sparse(ti[second], mj[second], cost[second], max_cost=max_cost)
        return np.concatenate([t1, t2]), np.concatenate([m1, m2])


def gnn_sparse(ti: I64, mj: I64, cost: F64, *, max_cost: float) -> tuple[I64, I64]:
    """Global nearest neighbour on gated pairs (``cost <= max_cost``): the assignment of
    minimum total cost where leaving a track or a measurement out costs ``max_cost / 2``.

    The same optimum as `mcc.compute.associate.gnn_assign` on the dense matrix. Clusters with one
    track or one measurement take their cheapest pair (vectorised); the others are solved
    together as one assignment problem on an augmented graph (each track may pair with its
    own "missed" node, each measurement with its own "unused" node, and the two dummy nodes of
    a gated pair with each other at no cost): dense `linear_sum_assignment` while small, else
    the sparse Jonker-Volgenant solver.
    """
    if ti.size == 0:
        return _EMPTY_I64, _EMPTY_I64
    tracks, t_local = small_unique(ti)
    meas, m_local = small_unique(mj)
    label = bipartite_components(t_local, m_local, tracks.size, meas.size)
    comp = label[t_local]  # component of each pair, labelled by its smallest track
    t_per = np.bincount(label, minlength=tracks.size)
    m_first = np.full(meas.size, tracks.size, np.int64)
    np.minimum.at(m_first, m_local, comp)
    m_per = np.bincount(m_first, minlength=tracks.size)
    simple = ((t_per == 1) | (m_per == 1))[comp]

    out_t, out_m = [], []
    if simple.any():
        sc, cs = comp[simple], cost[simple]
        order = np.lexsort((cs, sc))
        first = order[run_starts(sc[order])]
        out_t.append(t_local[simple][first])
        out_m.append(m_local[simple][first])
    hard = ~simple
    if hard.any():
        rt, ht = small_unique(t_local[hard])
        rm, hm = small_unique(m_local[hard])
        r, c = _augmented_assignment(ht, hm, cost[hard], rt.size, rm.size, 0.5 * max_cost)
        out_t.append(rt[r])
        out_m.append(rm[c])
    t_idx = tracks[np.concatenate(out_t)]
    m_idx = meas[np.concatenate(out_m)]
    order = np.argsort(t_idx)
    return t_idx[order].astype(np.int64), m_idx[order].astype(np.int64)


def bipartite_components(t: I64, m: I64, n_t: int, n_m: int) -> I64:
    """Connected components of the bipartite graph of edges ``(t[k], m[k])``: for each track,
    the smallest track index of its component (label propagation; gate clusters are small, so
    it converges in a few sweeps, without scipy.sparse's per-call overhead; union-find in
    `KERNEL`, the same labels)."""
    if KERNEL is not None:
        label = np.empty(n_t, np.int64)
        KERNEL.components(
            np.ascontiguousarray(t, np.int64), np.ascontiguousarray(m, np.int64), n_t, n_m, label
        )
        return label
    label = np.arange(n_t, dtype=np.int64)
    while True:
        m_label = np.full(n_m, n_t, np.int64)
        np.minimum.at(m_label, m, label[t])
        new = label.copy()
        np.minimum.at(new, t, m_label[m])
        new = new[new]  # pointer jumping: follow labels to their roots
        if (new == label).all():
            return label
        label = new


def small_unique(x: I64) -> tuple[I64, I64]:
    """``np.unique(x, return_inverse=True)`` of indices (small integers >= 0), by a table of
    the values seen rather than a sort: a few times faster on the tracker's arrays."""
    if x.size == 0:
        return _EMPTY_I64, _EMPTY_I64
    if KERNEL is not None:
        uniq, inverse = np.empty(x.size, np.int64), np.empty(x.size, np.int64)
        count = KERNEL.unique_inverse(np.ascontiguousarray(x, np.int64), uniq, inverse)
        return uniq[:count], inverse
    seen = np.zeros(int(x.max()) + 1, bool)
    seen[x] = True
    return np.flatnonzero(seen), (np.cumsum(seen) - 1)[x]


def run_starts(a: npt.NDArray[np.generic]) -> npt.NDArray[np.bool_]:
    """Where each run of equal values of ``a`` starts (``a`` sorted: its distinct values)."""
    out = np.empty(a.size, bool)
    out[:1] = True
    np.not_equal(a[1:], a[:-1], out=out[1:])
    return out


def _augmented_assignment(
    ti: I64, mj: I64, cost: F64, a: int, b: int, half: float
) -> tuple[I64, I64]:
    """Optimal pairs of ``a`` tracks and ``b`` measurements given gated ``(ti, mj, cost)``,
    where leaving either out costs ``half``; returns the assigned (track, measurement) pairs."""
    k = ti.size
    if (a + b) ** 2 <= 250_000:
        big = np.full((a + b, b + a), np.inf)
        big[ti, mj] = cost
        big[np.arange(a), b + np.arange(a)] = half
        big[a + np.arange(b), np.arange(b)] = half
        big[a + mj, b + ti] = 0.0
        rows, cols = linear_sum_assignment(big)
    else:
        # Rows: tracks then measurement dummies; columns: measurements then track dummies.
        # +1 on every weight: the solver needs non-zero weights, and every full matching has
        # a + b edges, so the optimum does not move.
        r = np.concatenate([ti, np.arange(a), a + np.arange(b), a + mj])
        c = np.concatenate([mj, b + np.arange(a), np.arange(b), b + ti])
        w = np.concatenate([cost, np.full(a + b, half), np.zeros(k)]) + 1.0
        graph = scipy.sparse.csr_array((w, (r, c)), shape=(a + b, a + b))
        rows, cols = min_weight_full_bipartite_matching(graph)
    real = (rows < a) & (cols < b)
    return rows[real].astype(np.int64), cols[real].astype(np.int64)
