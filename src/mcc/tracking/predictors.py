"""Predictors: banks of Kalman filters over N tracks, constant velocity or an IMM of turn rates."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeGuard

import numpy as np
import numpy.typing as npt

from mcc.compute import kalman
from mcc.tracking import updaters
from mcc.tracking.base import Measurements, Updater, grown
from mcc.tracking.config import TrackerConfig
from mcc.tracking.jpda import pda_mix
from mcc.tracking.updaters import PolarEKFUpdater

__all__ = ["CVPredictor", "IMMPredictor", "cv_predict", "imm_transition", "make_predictor"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
_LOG_2PI = float(np.log(2.0 * np.pi))
# JPDA: the association marginals of gated pairs from their log-likelihoods and, where the
# predictor ranks JPDA*'s events by another likelihood, that one (None: the first),
# ``(K,), (K,) | None -> (β (K,), tracks (T,) sorted, β_t0 (T,))``
# (`mcc.tracking.jpda.JPDAAssociator.marginals`).
Weigh = Callable[[F64, F64 | None], tuple[F64, I64, F64]]


def make_predictor(config: TrackerConfig) -> CVPredictor | IMMPredictor:
    """The predictor ``config.model`` names."""
    return IMMPredictor(config) if config.model == "imm" else CVPredictor(config)


class CVPredictor:
    """N constant-velocity Kalman filters: ``x (N, n)``, ``P (N, n, n)``."""

    def __init__(self, config: TrackerConfig) -> None:
        self.d = config.ndim
        self.n = 2 * config.ndim
        self.sigma_a = config.sigma_a_mps2
        self.noise_model = config.noise_model
        self.x: F64 = np.zeros((0, self.n))
        self.P: F64 = np.zeros((0, self.n, self.n))
        # JPDA's mixture by the C kernel (`mcc.tracking._ekf.pda_mix`) in 2-D; None: NumPy's.
        self.kernel = updaters.KERNEL if self.n == 4 else None

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def predict(self, dt_s: F64) -> None:
        self.x, self.P = cv_predict(self.x, self.P, dt_s, self.sigma_a, self.d, self.noise_model)

    def estimate(self) -> tuple[F64, F64]:
        return self.x, self.P

    def update(self, rows: I64, updater: Updater, meas: Measurements, cols: I64) -> None:
        self.x[rows], self.P[rows], _ = updater.update(self.x[rows], self.P[rows], meas, cols)

    def pda_update(
        self, ti: I64, updater: Updater, meas: Measurements, mj: I64, weigh: Weigh
    ) -> tuple[F64, I64, F64]:
        """JPDA: every gated pair ``(ti, mj)`` updates its track, weighted (`jpda.pda_mix`)."""
        x, P, ll = updater.pair_update(self.x, self.P, meas, ti, mj)
        beta, tracks, beta0 = weigh(ll, None)
        at = np.searchsorted(tracks, ti)
        if self.kernel is not None:
            xn, Pn, _ = _native_pda_mix(
                self.kernel, self.x, self.P, np.ones(len(self)), tracks, at, x, P, ll,
                beta, beta0,
            )  # fmt: skip
            self.x[tracks], self.P[tracks] = xn[:, 0], Pn[:, 0]
            return beta, tracks, beta0
        ones = np.ones((tracks.size, 1))
        xn, Pn, _ = pda_mix(
            self.x[tracks][:, None], self.P[tracks][:, None], ones,
            x[:, None], P[:, None], ll[:, None], at, beta, beta0,
        )  # fmt: skip
        self.x[tracks], self.P[tracks] = xn[:, 0], Pn[:, 0]
        return beta, tracks, beta0

    def append(self, x: F64, P: F64) -> None:
        self.x = np.concatenate([self.x, x])
        self.P = np.concatenate([self.P, P])

    def keep(self, mask: npt.NDArray[np.bool_]) -> None:
        self.x, self.P = self.x[mask], self.P[mask]


class IMMPredictor:
    """N IMMs (`kalman.imm_predict`) of coordinated-turn models at ``imm_turn_rates_dps``
    (0 = CV), with transition probabilities from each track's step (`kalman.imm_transition`)."""

    def __init__(self, config: TrackerConfig) -> None:
        self.d = config.ndim
        self.n = 2 * config.ndim
        self.noise_model = config.noise_model
        self.sojourn_s = (config.imm_sojourn_s, config.imm_turn_sojourn_s)
        self.mix_floor = config.imm_mix_floor
        self.turn_rates = np.radians(np.asarray(config.imm_turn_rates_dps, dtype=np.float64))
        m = self.turn_rates.size
        # Each model's white acceleration: the straight (0 deg/s) model's is small, the way a
        # well-tuned constant-velocity filter's is; the turns carry sigma_a_mps2.
        self.sigma_a = tuple(
            config.sigma_a_straight_mps2 if r == 0.0 else config.sigma_a_mps2
            for r in config.imm_turn_rates_dps
        )
        # A new track is most likely flying straight; the turns share the rest.
        cv = self.turn_rates == 0.0
        # JPDA* (association auto) ranks its events by the straightest model's likelihood
        # (config.jpda_rank); plain JPDA keeps every event and needs no ranking
        ranked = config.jpda_rank == "straight" and config.association == "auto"
        self.rank_model = int(np.argmin(np.abs(self.turn_rates))) if ranked else None
        self.mu0 = np.where(cv, 0.6 / max(int(cv.sum()), 1), 0.4 / max(int((~cv).sum()), 1))
        self.mu0 /= self.mu0.sum()
        self.state = kalman.IMMState(
            np.zeros((0, m, self.n)), np.zeros((0, m, self.n, self.n)), np.zeros((0, m))
        )
        self._combined: tuple[F64, F64] | None = None
        self._uniform: tuple[F64, F64] | None = None
        # JPDA's mixture by the C kernel (`mcc.tracking._ekf.pda_mix`) in 2-D; None: NumPy's.
        self.kernel = updaters.KERNEL if self.n == 4 else None

    def __len__(self) -> int:
        return int(self.state.x.shape[0])

    def predict(self, dt_s: F64) -> None:
        if len(self) == 0 or not dt_s.max() > 0:
            return
        lo, hi = float(dt_s.min()), float(dt_s.max())
        if lo != hi:
            F, Q = _imm_models(dt_s, self.turn_rates, self.sigma_a, self.d, self.noise_model)
            pi = imm_transition(dt_s, tuple(self.turn_rates.tolist()), *self.sojourn_s)
            mixed = imm_mix(self.state, pi, self.mix_floor)
            x, P = kalman.predict(mixed.x, mixed.P, F, Q, xp=np)
            self.state = kalman.IMMState(x, P, mixed.mu)
        else:
            # Every track one step of the same dt (the usual case): one transition matrix,
            # and each model's F P Fᵀ as one product over all tracks, vec(P) (F ⊗ F)ᵀ.
            rates = tuple(self.turn_rates.tolist())
            FT, FFT, Q, pi = _imm_step(
                lo, rates, self.sigma_a, self.d, self.noise_model, self.sojourn_s
            )
            # pi comes from `kalman.imm_transition` (checked there), cached per step length.
            if self.kernel is not None and pi.ndim == 2:
                self.state = _native_imm_predict(self.kernel, self.state, pi, self.mix_floor,
                                                 FT, FFT, Q)  # fmt: skip
                self._combined = None
                self._uniform = None
                return
            mixed = imm_mix(self.state, pi, self.mix_floor)
            n_tracks, n_models, n = mixed.x.shape
            Pv = mixed.P.reshape(n_tracks, n_models, n * n)
            if n_tracks <= _TALL_ROWS:
                # Few tracks: one product per array over the model axis (fixed per-call costs
                # dominate here; below the row count where BLAS would spread it over threads).
                x = np.matmul(mixed.x.transpose(1, 0, 2), FT).transpose(1, 0, 2)
                P = np.matmul(Pv.transpose(1, 0, 2), FFT).transpose(1, 0, 2)
                P = P.reshape(n_tracks, n_models, n, n) + Q
            else:
                x = np.empty_like(mixed.x)
                P = np.empty_like(mixed.P)
                for m in range(n_models):
                    x[:, m] = _tall_matmul(np.ascontiguousarray(mixed.x[:, m]), FT[m])
                    P[:, m] = _tall_matmul(np.ascontiguousarray(Pv[:, m]), FFT[m]).reshape(
                        n_tracks, n, n
                    )
                P += Q
            self.state = kalman.IMMState(x, P, mixed.mu)
        self._combined = None
        self._uniform = None

    def estimate(self) -> tuple[F64, F64]:
        if self._combined is None:
            self._combined = self._combine(self.state)
        return self._combined

    def _combine(self, state: kalman.IMMState, *, equal: bool = False) -> tuple[F64, F64]:
        """`kalman.imm_combine` of ``state`` (``equal``: with equal model weights), by the C
        kernel in 2-D: its matrix-vector products may differ in the last bits from NumPy's
        (no recursion reads the combined estimate: the output, the wide gate and deletion)."""
        x, P, mu = state
        if self.kernel is None:
            if equal:
                mu = np.full(mu.shape, 1.0 / mu.shape[1])
            return kalman.imm_combine(kalman.IMMState(x, P, mu), xp=np)
        if x.strides[-1] != 8 or P.strides[-2:] != (32, 8):
            x, P = np.ascontiguousarray(x), np.ascontiguousarray(P)
        xc, Pc = np.empty((x.shape[0], 4)), np.empty((x.shape[0], 4, 4))
        weights = None if equal else np.ascontiguousarray(mu, dtype=np.float64)
        self.kernel.imm_combine(x, P, weights, mu.shape[1], xc, Pc)
        return xc, Pc

    def update(self, rows: I64, updater: Updater, meas: Measurements, cols: I64) -> None:
        self._uniform = None
        if _native(updater, meas):
            st = self.state
            x, P, _, _, mu = updater.pair_update_mix(st.x, st.P, st.mu, meas, rows, cols)
            st.x[rows], st.P[rows], st.mu[rows] = x, P, mu
            self._recombine(rows, kalman.IMMState(x, P, mu))
            return
        x, P, ll = updater.update(self.state.x[rows], self.state.P[rows], meas, cols)
        with np.errstate(divide="ignore"):
            log_w = ll + np.log(self.state.mu[rows])
        log_w -= log_w.max(axis=1, keepdims=True)
        w = np.exp(log_w)
        mu = w / w.sum(axis=1, keepdims=True)
        self.state.x[rows], self.state.P[rows], self.state.mu[rows] = x, P, mu
        self._recombine(rows, kalman.IMMState(x, P, mu))

    def gate_estimate(self) -> tuple[F64, F64]:
        """Every model's estimate combined with equal weights: a Gaussian that covers each
        model's prediction, to find the pairs one model may take (`model_gate`)."""
        if self._uniform is None:
            self._uniform = self._combine(self.state, equal=True)
        return self._uniform

    def model_gate(
        self, ti: I64, updater: Updater, meas: Measurements, mj: I64
    ) -> tuple[F64, F64, F64]:
        """Per pair ``(ti, mj)``: the smallest squared distance over the models, the ln|S| of
        that model, and ln Σ_m μ_m N(y_m; 0, S_m), the detection's likelihood under the model
        mixture (each model's own innovation). A track flying straight is judged by its tight
        straight model, and a track starting a turn still finds its detection in the turn
        models' gates."""
        from mcc.tracking.updaters import mahalanobis

        st = self.state
        if _native(updater, meas):
            d2_best, logdet_best, ll_mix = updater.pair_distance(st.x, st.P, meas, ti, mj, st.mu)
            assert ll_mix is not None
            return d2_best, logdet_best, ll_mix
        y, S = updater.pair_innovation(st.x, st.P, meas, ti, mj)
        d2, logdet = mahalanobis(y, S)
        with np.errstate(divide="ignore"):
            a = -0.5 * (d2 + logdet + y.shape[-1] * _LOG_2PI) + np.log(st.mu[ti])
        top = a.max(axis=1)
        ll = top + np.log(np.exp(a - top[:, None]).sum(axis=1))
        pair = np.arange(d2.shape[0])
        best = d2.argmin(axis=1)
        return d2[pair, best], logdet[pair, best], np.asarray(ll)

    def _recombine(self, rows: I64, new: kalman.IMMState) -> None:
        """Refresh the cached combined estimate of ``rows`` only, from their new state (new
        arrays: an estimate handed out before stays as it was)."""
        if self._combined is None:
            return
        xc, Pc = self._combined[0].copy(), self._combined[1].copy()
        xc[rows], Pc[rows] = self._combine(new)
        self._combined = (xc, Pc)

    def pda_update(
        self, ti: I64, updater: Updater, meas: Measurements, mj: I64, weigh: Weigh
    ) -> tuple[F64, I64, F64]:
        """JPDA: every gated pair updates each model of its track (`jpda.pda_mix`); the
        marginals come from the pairs' model-mixture likelihoods."""
        self._uniform = None
        st = self.state
        if _native(updater, meas):
            x, P, ll, mix, _ = updater.pair_update_mix(st.x, st.P, st.mu, meas, ti, mj)
        else:
            x, P, ll = updater.pair_update(st.x, st.P, meas, ti, mj)
            with np.errstate(divide="ignore"):
                a = ll + np.log(st.mu[ti])
            top = a.max(axis=1)
            mix = top + np.log(np.exp(a - top[:, None]).sum(axis=1))
        rank = None if self.rank_model is None else ll[:, self.rank_model]
        beta, tracks, beta0 = weigh(mix, rank)
        at = np.searchsorted(tracks, ti)
        if self.kernel is not None:
            xs, Ps, mus = _native_pda_mix(
                self.kernel, st.x, st.P, st.mu, tracks, at, x, P, ll, beta, beta0
            )
        else:
            xs, Ps, mus = pda_mix(
                st.x[tracks], st.P[tracks], st.mu[tracks], x, P, ll, at, beta, beta0
            )
        st.x[tracks], st.P[tracks], st.mu[tracks] = xs, Ps, mus
        self._recombine(tracks, kalman.IMMState(xs, Ps, mus))
        return beta, tracks, beta0

    def append(self, x: F64, P: F64) -> None:
        # `kalman.imm_initiate` without its checks (mu0 is ours; births come from the
        # initiators): every model starts at (x, P). Runs every scan, for every left-over
        # detection.
        self._uniform = None
        st, k = self.state, x.shape[0]
        self.state = kalman.IMMState(
            grown(st.x, k, x[:, None]), grown(st.P, k, P[:, None]), grown(st.mu, k, self.mu0)
        )
        if self._combined is not None:  # every model of a new track holds (x, P)
            xc, Pc = self._combined
            self._combined = (np.concatenate([xc, x]), np.concatenate([Pc, P]))

    def keep(self, mask: npt.NDArray[np.bool_]) -> None:
        self._uniform = None
        self.state = kalman.IMMState(*(a[mask] for a in self.state))
        if self._combined is not None:
            self._combined = (self._combined[0][mask], self._combined[1][mask])


def _native(updater: Updater, meas: Measurements) -> TypeGuard[PolarEKFUpdater]:
    """Whether ``updater`` is the EKF and its C kernel takes this scan
    (`PolarEKFUpdater.native`)."""
    return isinstance(updater, PolarEKFUpdater) and updater.native(meas)


def _native_pda_mix(
    kernel: Any,
    x: F64,
    P: F64,
    mu: F64,
    tracks: I64,
    at: I64,
    x_pair: F64,
    P_pair: F64,
    ll_pair: F64,
    beta: F64,
    beta0: F64,
) -> tuple[F64, F64, F64]:
    """`jpda.pda_mix` of rows ``tracks`` of ``x (N, [M,] 4)``, ``P``, ``mu (N[, M])`` by the C
    kernel (the same operations in the same order): ``(T, M, 4)``, ``(T, M, 4, 4)``,
    ``(T, M)``. The tracks' states are read in place, not gathered first."""
    n_models = x.shape[1] if x.ndim == 3 else 1
    shape = (tracks.size, n_models)
    xs, Ps, mus = np.empty((*shape, 4)), np.empty((*shape, 4, 4)), np.empty(shape)

    def flat(a: npt.NDArray[Any], dtype: type = np.float64) -> npt.NDArray[Any]:
        return np.ascontiguousarray(a, dtype=dtype)

    if x.strides[-1] != 8 or P.strides[-2:] != (32, 8):
        x, P = flat(x), flat(P)
    kernel.pda_mix(
        x, P, flat(mu), n_models, flat(tracks, np.int64), flat(at, np.int64), flat(x_pair),
        flat(P_pair), flat(ll_pair), flat(beta), flat(beta0), xs, Ps, mus,
    )  # fmt: skip
    return xs, Ps, mus


def _native_imm_predict(
    kernel: Any, state: kalman.IMMState, pi: F64, floor: float, FT: F64, FFT: F64, Q: F64
) -> kalman.IMMState:
    """`imm_mix` and each model's one-step prediction (``x Fᵀ``, ``vec(P) (F ⊗ F)ᵀ + Q``) of
    every track by the C kernel, track by track: the same operations as the NumPy branch of
    `IMMPredictor.predict`, each matrix product summed as OpenBLAS sums it (docs/tracking.md)."""
    x, P, mu = state
    n_tracks, n_models = mu.shape
    if x.strides[-1] != 8 or P.strides[-2:] != (32, 8):
        x, P = np.ascontiguousarray(x), np.ascontiguousarray(P)
    xn, Pn, mun = np.empty(x.shape), np.empty(P.shape), np.empty(mu.shape)
    kernel.imm_predict(
        x, P, np.ascontiguousarray(mu), n_models, np.ascontiguousarray(pi), float(floor),
        np.ascontiguousarray(FT), np.ascontiguousarray(FFT), np.ascontiguousarray(Q),
        n_tracks if n_tracks <= _TALL_ROWS else _TALL_ROWS, xn, Pn, mun,
    )  # fmt: skip
    return kalman.IMMState(xn, Pn, mun)


def _imm_models(
    dt_s: F64, rates: F64, sigma_a: tuple[float, ...], d: int, noise_model: str
) -> tuple[F64, F64]:
    """`kalman.imm_models` for the step of each track, model m's Q scaled to its own
    ``sigma_a[m]`` (Q is proportional to σ² in both noise models); one (M, n, n) pair when
    all share the step."""
    model: Any = noise_model
    lo, hi = float(dt_s.min()), float(dt_s.max())
    if lo == hi:
        return _imm_models_one(lo, tuple(rates.tolist()), sigma_a, d, noise_model)
    F, Q = kalman.imm_models(
        dt_s, turn_rates_rps=rates, sigma_a=1.0, ndim=d, noise_model=model, xp=np
    )
    return F, Q * np.square(np.asarray(sigma_a))[:, None, None]


@functools.lru_cache(maxsize=64)
def _imm_step(
    dt_s: float,
    rates: tuple[float, ...],
    sigma_a: tuple[float, ...],
    d: int,
    noise_model: str,
    sojourn_s: tuple[float, float],
) -> tuple[F64, F64, F64, F64]:
    """Per model ``Fᵀ`` and ``(F ⊗ F)ᵀ``, the process noise ``Q`` (M, n, n) and the
    transition matrix of one step (radars repeat their few periods)."""
    F, Q = _imm_models_one(dt_s, rates, sigma_a, d, noise_model)
    FT = np.ascontiguousarray(F.swapaxes(-1, -2))
    # (F ⊗ F)ᵀ of every model in one product, [k n + l, i n + j] = F[i, k] F[j, l]: the same
    # products as `np.kron` (a scan's step differs from the last one's by rounding as often
    # as not, so this runs on a third of the scans: 7 `kron` calls cost more than the rest).
    m, n = F.shape[0], F.shape[-1]
    FFT = np.einsum("mik,mjl->mklij", F, F).reshape(m, n * n, n * n)
    pi = imm_transition(np.float64(dt_s), rates, *sojourn_s)
    return FT, FFT, Q, pi


def imm_mix(state: kalman.IMMState, pi: F64, floor: float) -> kalman.IMMState:
    """`kalman.imm_mix` (``pi`` from `imm_transition`, checked there) where a mixing weight
    μ_(i|j) below ``floor`` is dropped and the others of model j renormalised: a turn model of
    probability 0.001 would otherwise widen the straight model's covariance at every step
    through the spread of the means (Σ_i μ_(i|j) (x_i − x0_j)(x_i − x0_j)ᵀ, the turned velocity
    differing by ~100 m/s over a few seconds), while each turn model still mixes with the
    straight model and itself. ``floor`` 0: `kalman.imm_mix` itself."""
    return kalman.imm_mix(state, pi, xp=np, validate=False, floor=floor)


def imm_transition(
    dt_s: F64 | np.float64, rates: tuple[float, ...], straight_s: float, turn_s: float
) -> F64:
    """Markov transitions ``(..., M, M)`` over steps of ``dt_s``: the straight (0 rate) model
    is kept with probability ``exp(-dt / straight_s)`` and left evenly for the turns; a turn is
    kept with ``exp(-dt / turn_s)`` and left half for the straight model, half evenly for the
    other turns (all evenly when there is no straight model or no other turn). Rows sum to 1;
    the same as `kalman.imm_transition` when ``straight_s == turn_s`` and M <= 2."""
    dt = np.asarray(dt_s, dtype=np.float64)
    m = len(rates)
    if m == 1:
        return np.ones((*dt.shape, 1, 1))
    tau, to, eye = _transition_parts(rates, straight_s, turn_s)
    stay = np.exp(-dt[..., None] / tau)  # (..., M)
    return stay[..., :, None] * eye + (1.0 - stay)[..., :, None] * to


@functools.lru_cache(maxsize=16)
def _transition_parts(
    rates: tuple[float, ...], straight_s: float, turn_s: float
) -> tuple[F64, F64, F64]:
    """`imm_transition`'s parts that do not depend on the step: each model's sojourn, where
    it goes when it leaves ``(M, M)``, and the identity (read-only: cached)."""
    m = len(rates)
    straight = np.array([r == 0.0 for r in rates])
    tau = np.where(straight, straight_s, turn_s)
    to = np.zeros((m, m))  # where a model goes when it leaves
    for i in range(m):
        others = np.arange(m) != i
        if straight[i] or not straight.any() or int(others.sum()) == 1:
            to[i, others] = 1.0 / int(others.sum())
            continue
        turns = others & ~straight
        to[i, straight] = 0.5 / int(straight.sum()) if turns.any() else 1.0 / int(straight.sum())
        if turns.any():
            to[i, turns] = 0.5 / int(turns.sum())
    eye = np.eye(m)
    for a in (tau, to, eye):
        a.flags.writeable = False
    return tau, to, eye


@functools.lru_cache(maxsize=64)
def _imm_models_one(
    dt_s: float, rates: tuple[float, ...], sigma_a: tuple[float, ...], d: int, noise_model: str
) -> tuple[F64, F64]:
    model: Any = noise_model
    F, Q = kalman.imm_models(
        dt_s, turn_rates_rps=np.array(rates), sigma_a=1.0, ndim=d, noise_model=model, xp=np
    )
    return F, Q * np.square(np.asarray(sigma_a))[:, None, None]


def cv_predict(
    x: F64, P: F64, dt: F64, sigma_a: float, d: int, noise_model: str
) -> tuple[F64, F64]:
    """`kalman.predict` with `cv_transition` and `cv_process_noise`, arranged for speed.

    When every track has the same ``dt`` (the usual case: all tracks are at the last scan's
    time), ``F P Fᵀ`` is one matrix product over all tracks, ``vec(P) (F ⊗ F)ᵀ``. Otherwise
    `kalman.predict` runs with F in Fortran order, so its product with the transposed view of
    F stays on NumPy's fast path. Same results as `kalman.predict` (the tests check it).
    """
    n_tracks = x.shape[0]
    if n_tracks == 0:
        return x, P
    lo, hi = float(dt.min()), float(dt.max())
    if hi <= 0.0:
        return x, P
    if lo == hi:
        FT, FFT, Q = _cv_model(lo, sigma_a, d, noise_model)
        P_new = _tall_matmul(P.reshape(n_tracks, -1), FFT).reshape(P.shape)
        P_new += Q
        return _tall_matmul(x, FT), P_new
    model: Any = noise_model
    F = kalman.cv_transition(dt, ndim=d, xp=np)
    Q = kalman.cv_process_noise(dt, sigma_a, ndim=d, model=model, xp=np)
    F_fortran = F.swapaxes(-1, -2).copy().swapaxes(-1, -2)
    return kalman.predict(x, P, F_fortran, Q, xp=np)


@functools.lru_cache(maxsize=64)
def _cv_model(dt_s: float, sigma_a: float, d: int, noise_model: str) -> tuple[F64, F64, F64]:
    """``Fᵀ``, ``(F ⊗ F)ᵀ`` and ``Q`` of one step (radars repeat their few periods)."""
    model: Any = noise_model
    F = kalman.cv_transition(dt_s, ndim=d, xp=np)
    Q = kalman.cv_process_noise(dt_s, sigma_a, ndim=d, model=model, xp=np)
    return np.ascontiguousarray(F.T), np.ascontiguousarray(np.kron(F, F).T), Q


_TALL_ROWS = 512


def _tall_matmul(a: F64, b: F64, *, rows: int = _TALL_ROWS) -> F64:
    """``a @ b`` for a tall ``a`` (N × k, small k), in blocks of ``rows`` rows.

    OpenBLAS spreads one tall, narrow product over all its threads; on a busy machine waiting
    for them costs 10-50× the product itself (measured: 2.5-8 ms instead of 0.16 ms for
    4000 × 16 @ 16 × 16). Blocks of 512 rows stay on the calling thread.
    """
    out = np.empty((a.shape[0], b.shape[1]))
    for i in range(0, a.shape[0], rows):
        np.matmul(a[i : i + rows], b, out=out[i : i + rows])
    return out
