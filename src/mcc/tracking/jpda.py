"""Joint probabilistic data association (JPDA): every gated detection updates a track, weighted
by the marginal probability that it is the track's (Bar-Shalom, Daum & Huang 2009).

A joint event gives each track of a cluster (tracks linked by shared gated detections) at most
one detection and each detection at most one track. Its probability is proportional to
``Π_(t,j) g_tj · Π_(t missed) (1 − p_d p_g)``, ``g_tj = p_d N(y_tj; 0, S_tj) / λ`` the
likelihood ratio of detection ``j`` for track ``t`` against clutter of density ``λ`` (the
tracker's measured one, in the update's measurement space). The marginal ``β_tj`` sums the
events that pair them, ``β_t0`` those that leave ``t`` undetected.

`JPDAAssociator.marginals` enumerates every joint event of a cluster of up to
``max_cluster`` tracks (and ``max_events`` events) at once, as arrays; larger clusters take
Fitzgerald's cheap JPDA, ``β_tj = g_tj / (w0 + S_t + S_j − g_tj)`` normalised per track
(``S_t``, ``S_j`` the row and column sums of ``g``; exact for a single track), and are counted
in ``fallbacks``. `pda_mix` then reduces each track's mixture (no detection, or detection
``j``) to one Gaussian per filter model: the PDA update with its spread-of-innovations term.

The marginals of a scan are computed by the C kernel `mcc.tracking._jpda`, every cluster in one
call, where it is built (setup.py builds it with the package); the NumPy code here is its
reference (``native=False``), and what runs in a checkout whose extensions are not built.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from mcc.tracking.associators import bipartite_components, run_starts, small_unique

__all__ = ["JPDAAssociator", "pda_mix"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]
_Weights = tuple[F64, F64]  # each pair's ln g, and the ln g JPDA* ranks events by
# mcc.tracking._jpda.marginals (its stub has the parameters' names)
Kernel = Callable[
    [I64, I64, F64, int, int, float, bool, int, float, U64, F64, F64, F64 | None],
    tuple[int, int],
]


def _load_kernel() -> Kernel | None:
    """The C kernel, or None where the package's extensions are not built."""
    try:
        from mcc.tracking._jpda import marginals
    except ImportError:
        return None
    return marginals


KERNEL = _load_kernel()


class JPDAAssociator:
    """Marginal association probabilities of gated (track, detection) pairs (module docstring).

    ``pd``: probability of detection; ``gate_probability``: p_g, the probability that a true
    detection is in the gate; ``max_cluster``: the most tracks a cluster may have for exact
    enumeration; ``max_events``: the most joint events (before removing those that give one
    detection to two tracks) enumerated at once; ``native``: by the C kernel where it is built
    (`KERNEL`), else by the NumPy enumeration, its reference.
    """

    def __init__(
        self,
        pd: float,
        gate_probability: float,
        *,
        max_cluster: int = 8,
        max_events: int = 1 << 16,
        star: bool = False,
        native: bool = True,
    ) -> None:
        self.gate_probability = gate_probability
        self.set_pd(pd)
        self.star = star
        self.max_cluster = max_cluster
        self.max_events = max_events
        self.kernel = KERNEL if native else None
        self.clusters = 0  # clusters of two tracks or more, solved
        self.fallbacks = 0  # of which solved by the cheap approximation

    def set_pd(self, pd: float) -> None:
        """The p_d of the radar whose scan is associated next."""
        self.pd = pd
        self.log_w0 = math.log(1.0 - pd * self.gate_probability)

    def log_ratio(self, log_likelihood: F64, density: float) -> F64:
        """``ln g`` of pairs from their log-likelihood and the clutter density λ."""
        return math.log(self.pd) + log_likelihood - math.log(density)

    def marginals(
        self, ti: I64, mj: I64, log_g: F64, rank_g: F64 | None = None
    ) -> tuple[F64, I64, F64]:
        """``β`` of each pair ``(K,)``, the tracks involved ``(T,)`` (sorted) and their
        ``β_t0`` ``(T,)``. ``rank_g``: the ``ln g`` of each pair by which JPDA* ranks the
        joint events that differ only by which track took which detection (None: ``log_g``);
        the event it keeps is weighed by ``log_g``."""
        tracks, t_loc = small_unique(ti)
        beta = np.zeros(ti.size)
        beta0 = np.ones(tracks.size)
        if ti.size == 0:
            return beta, tracks, beta0
        meas, m_loc = small_unique(mj)
        if self.kernel is not None:
            exact_tracks = min(self.max_cluster, tracks.size)  # JPDA*'s codes: see _exact_group
            clusters, fallbacks = self.kernel(
                t_loc, m_loc, np.ascontiguousarray(log_g, np.float64), tracks.size, meas.size,
                self.log_w0, self.star, self.max_cluster, float(self.max_events),
                _codes(meas.size + exact_tracks), beta, beta0,
                None if rank_g is None else np.ascontiguousarray(rank_g, np.float64),
            )  # fmt: skip
            self.clusters += clusters
            self.fallbacks += fallbacks
            return beta, tracks, beta0
        label = bipartite_components(t_loc, m_loc, tracks.size, meas.size)
        comp = label[t_loc]
        t_per = np.bincount(label, minlength=tracks.size)
        single = t_per[comp] == 1
        if single.any():  # one track: β_tj = g_tj / (w0 + Σ_j g_tj), in logs
            self._single(t_loc[single], log_g[single], beta, beta0, single)
        rest = np.flatnonzero(~single)
        if rest.size:
            rank = log_g if rank_g is None else np.asarray(rank_g, np.float64)
            self._clusters(rest, comp, t_loc, m_loc, (log_g, rank), beta, beta0)
        return beta, tracks, beta0

    def _single(
        self, t: I64, log_g: F64, beta: F64, beta0: F64, sel: npt.NDArray[np.bool_]
    ) -> None:
        top = np.full(beta0.size, self.log_w0)
        np.maximum.at(top, t, log_g)
        w = np.exp(log_g - top[t])
        total = np.exp(self.log_w0 - top)
        np.add.at(total, t, w)
        beta[sel] = w / total[t]
        has = small_unique(t)[0]
        beta0[has] = np.exp(self.log_w0 - top[has]) / total[has]

    def _clusters(
        self, rest: I64, comp: I64, t_loc: I64, m_loc: I64, g: _Weights, beta: F64, beta0: F64
    ) -> None:
        """The clusters of two tracks or more among pairs ``rest``: those of T tracks
        enumerated together (`_exact_group`, each track's detections padded to the group's
        most with impossible ones), those past ``max_cluster`` tracks or ``max_events`` joint
        events by the cheap JPDA. One group per T, not per shape: fewer NumPy calls, and
        padding costs no event in the enumeration. ``g``: each pair's ln g and JPDA*'s ranking."""
        log_g, rank_g = g
        order = rest[np.lexsort((t_loc[rest], comp[rest]))]  # by cluster, then track
        c_of, t_of = comp[order], t_loc[order]
        runs = np.flatnonzero(run_starts(c_of * (t_of.max() + 1) + t_of))  # each track's first
        run_len = np.diff(runs, append=order.size)
        run_cluster = c_of[runs]
        cl_start = np.flatnonzero(run_starts(run_cluster))
        n_cl = cl_start.size
        tracks_per = np.diff(cl_start, append=runs.size)
        k_per = np.maximum.reduceat(run_len, cl_start)
        run_cl = np.repeat(np.arange(n_cl), tracks_per)  # cluster (0..n_cl-1) of each run
        run_t = np.arange(runs.size) - cl_start[run_cl]  # track of each run in its cluster
        pair_run = np.repeat(np.arange(runs.size), run_len)
        pair_k = np.arange(order.size) - runs[pair_run]
        self.clusters += int(n_cl)
        # Π (n_t + 1) itself, not its log, so that a cluster of max_events events is exact
        # here as in the C kernel (floats: exact below 2^53, and past it over any max_events)
        events = np.multiply.reduceat(run_len + 1.0, cl_start)
        exact = (tracks_per <= self.max_cluster) & (events <= self.max_events)
        if not exact.all():
            self.fallbacks += int(np.count_nonzero(~exact))
            self._cheap(order[~exact[run_cl[pair_run]]], t_loc, m_loc, log_g, beta, beta0)
        # Every track's detections padded to the group's k: padding adds no event (a padded
        # choice is never taken), so one group per cluster size T.
        sentinel = log_g.size  # an impossible pair
        lg = np.append(log_g, -np.inf)
        rg = np.append(rank_g, -np.inf)
        ml = np.append(m_loc, int(m_loc.max(initial=-1)) + 1)
        for T in np.unique(tracks_per[exact]).tolist():
            sel = np.flatnonzero(exact & (tracks_per == T))
            k = int(k_per[sel].max())
            rank = np.full(n_cl, -1)
            rank[sel] = np.arange(sel.size)
            pairs = np.full((sel.size, T, k), sentinel)
            mine = rank[run_cl[pair_run]] >= 0
            pr = pair_run[mine]
            pairs[rank[run_cl[pr]], run_t[pr], pair_k[mine]] = order[mine]
            chunk = max(1, int((1 << 20) // (float(events[sel].max()) * T)))
            for i in range(0, sel.size, chunk):
                self._exact_group(pairs[i : i + chunk], t_loc, ml, (lg, rg), beta, beta0)

    def _exact_group(
        self, pairs: I64, t_loc: I64, m_loc: I64, g: _Weights, beta: F64, beta0: F64
    ) -> None:
        """Enumerate the joint events of C clusters of T tracks at once: ``pairs (C, T, k)``
        the gated pairs of each track (padded with the impossible pair ``log_g.size - 1``,
        ``g = (log_g, rank_g)`` and ``m_loc`` extended by it).

        The events are grown track by track, each partial event extended by a miss or by one
        of the track's detections that no earlier track of it took, so that only feasible
        events are made (5 tracks sharing 6 detections: 4 051 of the 7⁵ = 16 807 choices).
        JPDA* keeps, of the events that differ only by which track took which detection (the
        same detections used, the same tracks missed), the likeliest by ``rank_g``; two partial
        events of the same tracks in that relation have the same extensions, so only the
        likelier one is grown (462 events instead of 4 051 above)."""
        log_g, rank_g = g
        C, T, k = pairs.shape
        sentinel = log_g.size - 1
        cl = np.arange(C)  # the cluster of each partial event
        sel = np.full((C, T), -1)  # its pairs, -1: the track missed (or not yet chosen)
        det = np.full((C, T), np.iinfo(np.int64).min)  # its detections, -1 - t: t missed
        part = np.zeros(C)  # its ln weight so far
        rank = np.zeros(C)  # its JPDA* ranking so far (the same sum over rank_g)
        # The key of a partial event: the sum of a random 64-bit code per detection number
        # (misses numbered per track: the same set in any order, collisions ~2^-64), plus
        # its cluster's code.
        codes = _codes(max(int(m_loc.max(initial=0)) + T + 1, C))
        with np.errstate(over="ignore"):
            key = codes[cl] * np.uint64(0x9E3779B97F4A7C15)
        lg = log_g.copy()
        lg[sentinel] = self.log_w0  # a miss (pair -1) weighs w0
        rg = rank_g.copy()
        rg[sentinel] = self.log_w0
        for t in range(T):
            cand = pairs[cl, t]  # (R, k)
            cdet = m_loc[cand]
            grow = np.ones((cl.size, k + 1), bool)
            grow[:, 1:] = cand != sentinel
            if t:
                grow[:, 1:] &= ~(det[:, :t, None] == cdet[:, None, :]).any(axis=1)
            r, c = np.nonzero(grow)  # row-major: the choices' order
            hit = c > 0
            pick = np.where(hit, cand[r, c - 1], -1)
            got = np.where(hit, cdet[r, c - 1], -1 - t)
            cl, part, sel, det = cl[r], part[r] + lg[pick], sel[r], det[r]
            rank = rank[r] + rg[pick]
            sel[:, t] = pick
            det[:, t] = got
            if self.star:
                with np.errstate(over="ignore"):
                    key = key[r] + codes[got + T]
                if t:
                    by = np.lexsort((-rank, key))
                    best = np.sort(by[run_starts(key[by])])
                    cl, part, sel, det, key = cl[best], part[best], sel[best], det[best], key[best]
                    rank = rank[best]
        missed = sel < 0
        logw = lg[sel].sum(axis=1)
        start = np.flatnonzero(run_starts(cl))  # every cluster has an event
        p = np.exp(logw - np.maximum.reduceat(logw, start)[cl])
        p /= np.add.reduceat(p, start)[cl]
        w = np.broadcast_to(p[:, None], sel.shape)
        beta += np.bincount(sel[~missed], weights=w[~missed], minlength=beta.size)
        slot = cl[:, None] * T + np.arange(T)
        miss_p = np.bincount(slot[missed], weights=w[missed], minlength=C * T)
        beta0[t_loc[pairs[:, :, 0]]] = miss_p.reshape(C, T)

    def _cheap(self, pairs: I64, t_loc: I64, m_loc: I64, log_g: F64, beta: F64, beta0: F64) -> None:
        """Fitzgerald's cheap JPDA on ``pairs`` (g scaled so that w0 = 1; it is exact for a
        lone track and keeps each detection's total probability at most one)."""
        t, m = t_loc[pairs], m_loc[pairs]
        g = np.exp(np.minimum(log_g[pairs] - self.log_w0, 700.0))
        s_t = np.bincount(t, weights=g, minlength=beta0.size)
        s_m = np.bincount(m, weights=g, minlength=int(m.max()) + 1)
        b = g / (1.0 + s_t[t] + s_m[m] - g)
        has = np.unique(t)
        b0 = 1.0 / (1.0 + s_t[has])
        total = np.bincount(t, weights=b, minlength=beta0.size)[has] + b0
        scale = np.zeros(beta0.size)
        scale[has] = 1.0 / total
        beta[pairs] = b * scale[t]
        beta0[has] = b0 / total


_CODES = np.random.default_rng(0x5EED).integers(0, 2**63, 1 << 12, dtype=np.uint64)


def _codes(size: int) -> npt.NDArray[np.uint64]:
    """Fixed random 64-bit codes, at least ``size`` of them (JPDA*'s event keys)."""
    global _CODES
    if size > _CODES.size:
        more = np.random.default_rng(size).integers(0, 2**63, size, dtype=np.uint64)
        _CODES = np.concatenate([_CODES, more])
    return _CODES


def pda_mix(
    x: F64,
    P: F64,
    mu: F64,
    x_pair: F64,
    P_pair: F64,
    ll_pair: F64,
    pair_track: I64,
    beta: F64,
    beta0: F64,
) -> tuple[F64, F64, F64]:
    """The PDA update of T tracks of M filter models each.

    ``x (T, M, n)``, ``P (T, M, n, n)``, ``mu (T, M)``: the predictions and model
    probabilities; ``x_pair (K, M, n)``, ``P_pair``, ``ll_pair (K, M)``: each gated pair's
    updated states and per-model log-likelihoods; ``pair_track (K,)``: the track (0..T-1) of
    each pair; ``beta (K,)``, ``beta0 (T,)``: the association marginals. Per model the weight
    of "pair p" is ``β_p μ_m N_m(y_p) / Σ_m μ_m N_m(y_p)`` and of "no detection" ``β_0 μ_m``;
    their sum is the model's new probability, and the state is the moment-matched mixture
    (its covariance includes the spread of the updated states: the spread-of-innovations
    term). Returns ``x``, ``P``, ``mu`` updated.
    """
    with np.errstate(divide="ignore"):
        log_mu = np.log(mu)
    a = ll_pair + log_mu[pair_track]  # (K, M)
    top = a.max(axis=1, keepdims=True)
    w = np.exp(a - top)
    w *= (beta / w.sum(axis=1))[:, None]  # (K, M): β_p P(m | pair p)
    w0 = beta0[:, None] * mu  # (T, M)
    mu_new = w0.copy()
    np.add.at(mu_new, pair_track, w)
    safe = np.where(mu_new > 0, mu_new, 1.0)
    c0, c = w0 / safe, w / safe[pair_track]
    x_new = c0[..., None] * x
    np.add.at(x_new, pair_track, c[..., None] * x_pair)
    d0 = x - x_new
    dp = x_pair - x_new[pair_track]
    P_new = c0[..., None, None] * (P + d0[..., :, None] * d0[..., None, :])
    spread = P_pair + dp[..., :, None] * dp[..., None, :]
    np.add.at(P_new, pair_track, c[..., None, None] * spread)
    mu_new /= mu_new.sum(axis=1, keepdims=True)
    return x_new, 0.5 * (P_new + P_new.swapaxes(-1, -2)), mu_new
