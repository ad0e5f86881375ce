"""Numerical kernels of the SAM TOC: plain arrays in, arrays out, no DDS.

Modules, one per step of the pipeline (import the module named after the concept,
``from mcc.compute import kalman``):

* `backend`    — NumPy | CuPy selection (`get_xp`, `to_numpy`); every kernel takes ``xp``.
* `kalman`     — batched CV Kalman filter bank, IMM (CV + coordinated turn), radar
  range/azimuth/elevation → ENU conversion. State order ``[x y z vx vy vz]``, SI units.
* `associate`  — chi-square gating, clustered global nearest neighbour, M-of-N, deletion.
* `threat`     — threat evaluation of tracks × defended assets (CPA, time to impact, score).
* `wta`        — weapon-target assignment (Hungarian exact, greedy maximum marginal return).
* `montecarlo` — vectorised engagement simulation: raid annihilation, leakers, plan comparison.
"""

from mcc.compute import associate, backend, kalman, montecarlo, threat, wta
from mcc.compute.associate import Association, MofNInitiator, gnn_assign, gnn_associate
from mcc.compute.backend import get_xp, to_numpy
from mcc.compute.kalman import IMMState, KalmanUpdate
from mcc.compute.montecarlo import EngagementPlan, MonteCarloResult, compare_plans, simulate_raid
from mcc.compute.threat import ThreatAssessment, evaluate_threats
from mcc.compute.wta import WTAResult, wta_greedy, wta_hungarian

__all__ = [
    "Association",
    "EngagementPlan",
    "IMMState",
    "KalmanUpdate",
    "MofNInitiator",
    "MonteCarloResult",
    "ThreatAssessment",
    "WTAResult",
    "associate",
    "backend",
    "compare_plans",
    "evaluate_threats",
    "get_xp",
    "gnn_assign",
    "gnn_associate",
    "kalman",
    "montecarlo",
    "simulate_raid",
    "threat",
    "to_numpy",
    "wta",
    "wta_greedy",
    "wta_hungarian",
]
