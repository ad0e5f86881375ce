"""Numerical kernels of the SAM TOC: plain arrays in, arrays out, no DDS.

Modules, one per step of the pipeline (import the module named after the concept,
``from mcc.compute import kalman``):

* `backend`    — NumPy | CuPy selection (`get_xp`, `to_numpy`); every kernel takes ``xp``.
* `kalman`     — batched CV Kalman filter bank, IMM (CV + coordinated turn), radar
  range/azimuth/elevation → ENU conversion. State order ``[x y z vx vy vz]``, SI units.
* `associate`  — chi-square gating, clustered global nearest neighbour, M-of-N, deletion.
* `threat`     — threat evaluation of tracks × defended assets (CPA, time to impact, score).
* `wta`        — weapon-target assignment (Hungarian exact, greedy maximum marginal return).
* `scoring`    — expected value of many candidate assignments at once.
* `montecarlo` — vectorised engagement simulation: raid annihilation, leakers, plan comparison.
* `gospa`      — GOSPA / OSPA between truth and estimates (used by `mcc.apps.metrics`).
* `rodinia`    — Rodinia reference kernels: Needleman–Wunsch and HotSpot.

Running kernels on a device chosen at run time (docs/compute.md):

* `open_compute` (`dispatch`) — the registered kernels as methods of one device: ``"cpu"``,
  ``"cuda:N"`` or ``"remote:NAME"`` (default: ``MCC_DEVICE``).
* `kernels` / `registry` — the catalogue: name → function + argument schema (with parameter
  ranges and a cost estimate per kernel).
* `limits` — the compute service's bounds (`ServiceLimits`) and the compute-time budget the
  iterative kernels check (`compute_budget`).
* `remote` — the compute service (``mcc compute serve``, app ``mcc.compute.remote:serve``) and
  its client (imported on demand: it needs the bus).
"""

from mcc.compute import (
    associate,
    backend,
    gospa,
    kalman,
    kernels,
    limits,
    montecarlo,
    registry,
    rodinia,
    scoring,
    threat,
    wta,
)
from mcc.compute.associate import Association, MofNInitiator, gnn_assign, gnn_associate
from mcc.compute.backend import available_devices, get_xp, to_numpy
from mcc.compute.dispatch import CallTiming, Kernels, open_compute
from mcc.compute.kalman import IMMState, KalmanUpdate
from mcc.compute.kernels import KERNELS, kernel_spec
from mcc.compute.montecarlo import EngagementPlan, MonteCarloResult, compare_plans, simulate_raid
from mcc.compute.registry import ArgSpec, KernelSpec, ParamSpec
from mcc.compute.threat import ThreatAssessment, evaluate_threats
from mcc.compute.wta import WTAResult, wta_greedy, wta_hungarian

__all__ = [
    "KERNELS",
    "ArgSpec",
    "Association",
    "CallTiming",
    "EngagementPlan",
    "IMMState",
    "KalmanUpdate",
    "KernelSpec",
    "Kernels",
    "MofNInitiator",
    "MonteCarloResult",
    "ParamSpec",
    "ThreatAssessment",
    "WTAResult",
    "associate",
    "available_devices",
    "backend",
    "compare_plans",
    "evaluate_threats",
    "get_xp",
    "gnn_assign",
    "gnn_associate",
    "gospa",
    "kalman",
    "kernel_spec",
    "kernels",
    "limits",
    "montecarlo",
    "open_compute",
    "registry",
    "rodinia",
    "scoring",
    "simulate_raid",
    "threat",
    "to_numpy",
    "wta",
    "wta_greedy",
    "wta_hungarian",
]
