"""Monte Carlo engagement simulation: raid annihilation probability and expected leakers.

A plan fires a first salvo at every threat (``pk (n_threats, n_shots)``, 0 = no shot). Shots are
independent Bernoulli kills, except that every shot of a weapon fails when that weapon is
unavailable for the raid (``weapon_availability``, a common cause that couples threats). With
shoot-look-shoot (``reserve_rounds > 0``), after each look the surviving threats, in
``priority`` order, get one reserve round each while the shared reserve lasts.

Trials are vectorised: a chunk of trials × threats is drawn at once (float32 uniforms) from a
seeded ``numpy.random.Generator``; the same seed gives the same result. Without a common cause
the shots at one threat are independent, so its salvo is drawn once with the combined pk
``1 - Π(1 - pk)``; with one, every shot is drawn.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from types import ModuleType
from typing import Any, Literal

import numpy as np
from scipy.special import ndtri  # norm.ppf without importing scipy.stats (~2 s)

from mcc.compute.backend import require_in_range, to_numpy
from mcc.compute.limits import check_budget
from mcc.errors import ComputeError

__all__ = [
    "EngagementPlan",
    "MonteCarloResult",
    "PlanComparison",
    "compare_plans",
    "raid_annihilation_exact",
    "simulate_raid",
]

# Uniforms drawn per chunk of trials: 1 MB of float32 stays in cache (measured: 4x faster
# than 16 MB chunks on a 2-core VM).
_CHUNK_DRAWS = 1 << 18


def _prob_array(name: str, a: Any, ndim: int) -> np.ndarray:
    arr = np.asarray(to_numpy(a), dtype=np.float64)
    if arr.ndim != ndim:
        raise ComputeError(f"{name} must have {ndim} dimension(s), got shape {arr.shape}")
    if not np.isfinite(arr).all() or (arr < 0).any() or (arr > 1).any():
        raise ComputeError(f"{name} must hold probabilities in 0..1 (no NaN)")
    return arr


@dataclasses.dataclass(frozen=True, eq=False)
class EngagementPlan:
    """Which shots are fired at which threats; see the module docstring.

    pk: ``(n_threats, n_shots)`` single-shot kill probability of each first-salvo shot.
    weapon: ``(n_threats, n_shots)`` weapon index of each shot, -1 when not tied to a weapon.
    weapon_availability: ``(W,)`` probability that each weapon works for the whole raid.
    reserve_rounds: rounds held back for shoot-look-shoot (0 = shoot-shoot only).
    reserve_pk: ``(n_threats,)`` pk of a reserve round at each threat (default: the best pk of
    that threat's salvo). looks: look-shoot cycles. priority: ``(n_threats,)``, lower first
    (e.g. threat rank; default index order).
    """

    pk: np.ndarray
    weapon: np.ndarray | None = None
    weapon_availability: np.ndarray | None = None
    reserve_rounds: int = 0
    reserve_pk: np.ndarray | None = None
    looks: int = 1
    priority: np.ndarray | None = None

    def __post_init__(self) -> None:
        pk = _prob_array("pk", self.pk, 2)
        object.__setattr__(self, "pk", pk)
        n_threats = pk.shape[0]
        if self.weapon is not None or self.weapon_availability is not None:
            if self.weapon is None or self.weapon_availability is None:
                raise ComputeError("weapon and weapon_availability must be given together")
            avail = _prob_array("weapon_availability", self.weapon_availability, 1)
            weapon = np.asarray(to_numpy(self.weapon), dtype=np.int64)
            if weapon.shape != pk.shape:
                raise ComputeError(f"weapon must have shape {pk.shape}, got {weapon.shape}")
            if weapon.size and (weapon.min() < -1 or weapon.max() >= avail.size):
                raise ComputeError(
                    f"weapon indices must be -1..{avail.size - 1} (weapon_availability has "
                    f"{avail.size}), got {weapon.min()}..{weapon.max()}"
                )
            object.__setattr__(self, "weapon", weapon)
            object.__setattr__(self, "weapon_availability", avail)
        if not isinstance(self.reserve_rounds, int | np.integer) or self.reserve_rounds < 0:
            raise ComputeError(f"reserve_rounds={self.reserve_rounds!r} must be an integer >= 0")
        if not isinstance(self.looks, int | np.integer) or self.looks < 1:
            raise ComputeError(f"looks={self.looks!r} must be an integer >= 1")
        if self.reserve_pk is None:
            best = pk.max(axis=1) if pk.shape[1] else np.zeros(n_threats)
            object.__setattr__(self, "reserve_pk", best)
        else:
            rpk = _prob_array("reserve_pk", self.reserve_pk, 1)
            if rpk.shape != (n_threats,):
                raise ComputeError(f"reserve_pk must have shape ({n_threats},), got {rpk.shape}")
            object.__setattr__(self, "reserve_pk", rpk)
        if self.priority is not None:
            prio = np.asarray(to_numpy(self.priority), dtype=np.float64)
            if prio.shape != (n_threats,) or not np.isfinite(prio).all():
                raise ComputeError(f"priority must be ({n_threats},) finite numbers")
            object.__setattr__(self, "priority", prio)

    @property
    def n_threats(self) -> int:
        return int(self.pk.shape[0])

    @property
    def shoot_look_shoot(self) -> bool:
        return self.reserve_rounds > 0

    @classmethod
    def from_shots(
        cls,
        shots: Any,
        pk: Any,
        *,
        weapon_availability: Any = None,
        reserve_rounds: int = 0,
        reserve_pk: Any = None,
        looks: int = 1,
        priority: Any = None,
    ) -> EngagementPlan:
        """A plan from a WTA shot matrix ``shots (W, T)`` with single-shot ``pk (W, T)``
        (e.g. ``WTAResult.shots``); threats are the T targets."""
        n = np.asarray(to_numpy(shots), dtype=np.int64)
        p = _prob_array("pk", pk, 2)
        if n.shape != p.shape or (n < 0).any():
            raise ComputeError(f"shots must be whole numbers >= 0 of shape {p.shape}")
        n_targets = p.shape[1]
        w_idx, t_idx = np.nonzero(n)
        counts = n[w_idx, t_idx]
        shot_w = np.repeat(w_idx, counts)
        shot_t = np.repeat(t_idx, counts)
        order = np.argsort(shot_t, kind="stable")
        shot_w, shot_t = shot_w[order], shot_t[order]
        per_target = np.bincount(shot_t, minlength=n_targets)
        width = int(per_target.max()) if per_target.size else 0
        start = np.concatenate([[0], np.cumsum(per_target)[:-1]])
        slot = np.arange(shot_t.size) - start[shot_t]
        plan_pk = np.zeros((n_targets, width))
        plan_w = np.full((n_targets, width), -1, dtype=np.int64)
        plan_pk[shot_t, slot] = p[shot_w, shot_t]
        plan_w[shot_t, slot] = shot_w
        return cls(
            pk=plan_pk,
            weapon=plan_w if weapon_availability is not None else None,
            weapon_availability=weapon_availability,
            reserve_rounds=reserve_rounds,
            reserve_pk=reserve_pk,
            looks=looks,
            priority=priority,
        )


@dataclasses.dataclass(frozen=True, eq=False)
class MonteCarloResult:
    """Estimates from `simulate_raid`; intervals at ``confidence`` (two-sided)."""

    trials: int
    n_threats: int
    annihilation_prob: float  # P(every threat killed)
    annihilation_ci: tuple[float, float]  # Wilson score interval
    expected_leakers: float  # mean number of threats that survive
    leakers_ci: tuple[float, float]  # normal approximation
    kill_prob: np.ndarray  # (n_threats,) P(threat killed)
    expected_rounds: float  # salvo rounds + mean reserve rounds used
    confidence: float


def raid_annihilation_exact(pk: Any) -> float:
    """Closed form for independent shots, no shoot-look-shoot: ``Π_t (1 - Π_s (1 - pk_ts))``."""
    p = _prob_array("pk", pk, 2)
    return float(np.prod(1.0 - np.prod(1.0 - p, axis=1)))


def _rng(rng: np.random.Generator | int | None) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    return np.random.default_rng(rng)


def _wilson(successes: int, n: int, z: float) -> tuple[float, float]:
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def simulate_raid(
    plan: EngagementPlan,
    *,
    trials: int = 100_000,
    rng: np.random.Generator | int | None = None,
    confidence: float = 0.95,
    xp: ModuleType | None = None,
) -> MonteCarloResult:
    """Simulate ``trials`` independent raids of ``plan``; one engagement = one threat × trial.

    ``rng`` is a Generator or a seed. ``xp=cupy`` draws on the GPU (seeded from ``rng``).
    """
    if not isinstance(trials, int | np.integer) or trials < 1:
        raise ComputeError(f"trials={trials!r} must be an integer >= 1")
    require_in_range("confidence", confidence, low=0.0, high=1.0, closed="neither")
    xp = xp if xp is not None else np
    gen = _rng(rng)
    if xp is not np:
        gen = xp.random.default_rng(int(gen.integers(2**63)))

    n_threats, n_shots = plan.pk.shape
    if plan.priority is not None:
        perm = np.argsort(plan.priority, kind="stable")
    else:
        perm = np.arange(n_threats)
    assert plan.reserve_pk is not None
    rpk = xp.asarray(plan.reserve_pk[perm], dtype=xp.float32)
    coupled = plan.weapon is not None and plan.weapon_availability is not None
    if coupled:
        assert plan.weapon is not None and plan.weapon_availability is not None
        n_weapons = plan.weapon_availability.size
        # -1 (no weapon) maps onto an extra, always-available column.
        weapon = xp.asarray(np.where(plan.weapon < 0, n_weapons, plan.weapon)[perm])
        avail = xp.asarray(plan.weapon_availability, dtype=xp.float32)
        pk = xp.asarray(plan.pk[perm], dtype=xp.float32)
    else:
        # Independent shots at one threat: its salvo is one Bernoulli draw of the combined pk.
        salvo_pk = xp.asarray(1.0 - np.prod(1.0 - plan.pk[perm], axis=1), dtype=xp.float32)
    salvo_rounds = int((plan.pk > 0).sum())

    per_trial = max(1, n_threats * (max(n_shots, 1) if coupled else 1))
    chunk = max(1, min(trials, _CHUNK_DRAWS // per_trial))
    annihilated = 0
    leak_sum = 0.0
    leak_sq = 0.0
    reserve_used = 0.0
    kills = xp.zeros(n_threats, dtype=xp.int64)
    done = 0
    while done < trials:
        check_budget()  # the compute service's budget per call (no-op for local calls)
        b = min(chunk, trials - done)
        if coupled:
            up = gen.random((b, n_weapons), dtype=xp.float32) < avail
            up = xp.concatenate([up, xp.ones((b, 1), dtype=bool)], axis=1)
            hit = gen.random((b, n_threats, n_shots), dtype=xp.float32) < pk
            killed = (hit & up[:, weapon]).any(axis=2)
        else:
            killed = gen.random((b, n_threats), dtype=xp.float32) < salvo_pk
        if plan.reserve_rounds > 0:
            pool = xp.full(b, plan.reserve_rounds, dtype=xp.int64)
            for _ in range(plan.looks):
                alive = ~killed
                fire = alive & (xp.cumsum(alive, axis=1) <= pool[:, None])
                pool = pool - fire.sum(axis=1)
                killed |= fire & (gen.random((b, n_threats), dtype=xp.float32) < rpk)
            reserve_used += float((plan.reserve_rounds - pool).sum())
        leakers = n_threats - xp.count_nonzero(killed, axis=1)
        annihilated += int(xp.count_nonzero(leakers == 0))
        leak_sum += float(leakers.sum())
        leak_sq += float((leakers * leakers).sum())
        kills += xp.count_nonzero(killed, axis=0)
        done += b

    z = float(ndtri(0.5 + confidence / 2.0))
    mean_leak = leak_sum / trials
    var_leak = max(leak_sq / trials - mean_leak**2, 0.0) * trials / max(trials - 1, 1)
    half = z * math.sqrt(var_leak / trials)
    kill_prob = np.empty(n_threats)
    kill_prob[perm] = to_numpy(kills) / trials
    return MonteCarloResult(
        trials=int(trials),
        n_threats=n_threats,
        annihilation_prob=annihilated / trials,
        annihilation_ci=_wilson(annihilated, trials, z),
        expected_leakers=mean_leak,
        leakers_ci=(max(0.0, mean_leak - half), mean_leak + half),
        kill_prob=kill_prob,
        expected_rounds=salvo_rounds + reserve_used / trials,
        confidence=confidence,
    )


@dataclasses.dataclass(frozen=True, eq=False)
class PlanComparison:
    """Results of `compare_plans`, in the order given, and the best plan's index."""

    results: tuple[MonteCarloResult, ...]
    best_index: int
    separated: bool  # the best plan's interval does not overlap the runner-up's


def compare_plans(
    plans: Sequence[EngagementPlan],
    *,
    trials: int = 100_000,
    rng: np.random.Generator | int | None = None,
    objective: Literal["annihilation", "leakers"] = "annihilation",
    confidence: float = 0.95,
    xp: ModuleType | None = None,
) -> PlanComparison:
    """Simulate each plan with common random numbers (the same seed) and pick the best one:
    highest raid annihilation probability, or fewest expected leakers."""
    if not plans:
        raise ComputeError("plans is empty; give at least one EngagementPlan")
    if objective not in ("annihilation", "leakers"):
        raise ComputeError(f"objective={objective!r} is not supported: 'annihilation'|'leakers'")
    seed = int(_rng(rng).integers(2**63))
    results = tuple(
        simulate_raid(p, trials=trials, rng=seed, confidence=confidence, xp=xp) for p in plans
    )
    if objective == "annihilation":
        scores = [r.annihilation_prob for r in results]
        lo = [r.annihilation_ci[0] for r in results]
        hi = [r.annihilation_ci[1] for r in results]
    else:
        scores = [-r.expected_leakers for r in results]
        lo = [-r.leakers_ci[1] for r in results]
        hi = [-r.leakers_ci[0] for r in results]
    order = sorted(range(len(results)), key=lambda i: (-scores[i], i))
    best = order[0]
    separated = len(order) == 1 or lo[best] > hi[order[1]]
    return PlanComparison(results=results, best_index=best, separated=separated)
