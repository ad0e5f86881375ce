"""The classic 2-D multi-target benchmark (after Vo & Ma's GM-PHD paper) used to compare
trackers with Stone Soup: `classic_2d` draws it, `Classic2D` holds it."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Classic2D:
    """A 2-D multi-target scenario with per-scan truths and measurements.

    State order ``[x, vx, y, vy]`` (Stone Soup's); ``F``, ``Q``, ``H``, ``R`` are the exact
    models the data were drawn with, so a filter under test can use them as they are.
    """

    times_s: F64  # (K,)
    truth_ids: list[npt.NDArray[np.int64]]  # per scan (n_k,)
    truth_positions: list[F64]  # per scan (n_k, 2), metres
    truth_velocities: list[F64]  # per scan (n_k, 2), m/s
    measurements: list[F64]  # per scan (m_k, 2), metres
    measurement_ids: list[npt.NDArray[np.int64]]  # per scan (m_k,), target id or -1 (clutter)
    F: F64  # (4, 4) transition
    Q: F64  # (4, 4) process noise
    H: F64  # (2, 4) measurement
    R: F64  # (2, 2) measurement noise
    region: tuple[tuple[float, float], tuple[float, float]]  # ((xmin, xmax), (ymin, ymax))
    p_d: float
    p_s: float
    clutter_rate: float  # false alarms per scan (Poisson mean)
    dt_s: float
    seed: int

    @property
    def scans(self) -> int:
        return int(self.times_s.shape[0])

    @property
    def clutter_density(self) -> float:
        """False alarms per square metre and scan."""
        (x0, x1), (y0, y1) = self.region
        return self.clutter_rate / ((x1 - x0) * (y1 - y0))


def classic_2d(
    n_targets: int,
    *,
    scans: int = 100,
    dt_s: float = 1.0,
    sigma_v: float = 5.0,
    p_s: float = 0.99,
    R: npt.ArrayLike | None = None,  # noqa: N803 (the textbook's name)
    p_d: float = 0.98,
    clutter_rate: float | None = None,
    region: tuple[tuple[float, float], tuple[float, float]] | None = None,
    seed: int = 0,
    birth_speed_mps: float = 10.0,
) -> Classic2D:
    """The classic 2-D RFS benchmark (after Vo & Ma's GM-PHD paper), scaled to ``n_targets``.

    Nearly-constant-velocity targets with discrete white-noise acceleration of std ``sigma_v``
    (m/s²): ``Q = sigma_v² G Gᵀ`` per axis, ``G = [dt²/2, dt]``. Each scan a target survives
    with ``p_s`` and dies when it leaves ``region``; births are ``Poisson(n·(1−p_s) +
    deficit/2)`` where ``deficit = max(n − alive, 0)``, uniform in the inner 80 % of the region
    with velocity ``N(0, birth_speed_mps²)`` per axis, so about ``n_targets`` fly at any time.
    A live target is detected with ``p_d`` as ``H x + N(0, R)`` (default ``R = diag(10², 10²)``).
    Clutter is ``Poisson(clutter_rate)`` uniform in ``region``; defaults scale with the target
    count so that densities stay those of 10 targets in [-1000, 1000]²: ``clutter_rate = 3·n``
    and ``region = [-L, L]²`` with ``L = 1000·sqrt(n/10)`` m.
    """
    if n_targets < 1 or scans < 1 or dt_s <= 0 or not 0 < p_s <= 1 or not 0 <= p_d <= 1:
        raise ValueError(
            f"classic_2d(n_targets={n_targets}, scans={scans}, dt_s={dt_s}, p_s={p_s}, "
            f"p_d={p_d}): need n_targets >= 1, scans >= 1, dt_s > 0, 0 < p_s <= 1, 0 <= p_d <= 1"
        )
    half = 1000.0 * math.sqrt(n_targets / 10.0)
    region = region or ((-half, half), (-half, half))
    (x0, x1), (y0, y1) = region
    lam = 30.0 * n_targets / 10.0 if clutter_rate is None else float(clutter_rate)
    r_cov = np.diag([100.0, 100.0]) if R is None else np.asarray(R, dtype=np.float64)
    r_chol = np.linalg.cholesky(r_cov)
    f1 = np.array([[1.0, dt_s], [0.0, 1.0]])
    g = np.array([dt_s**2 / 2.0, dt_s])
    F = np.kron(np.eye(2), f1)
    Q = np.kron(np.eye(2), np.outer(g, g)).astype(np.float64) * sigma_v**2
    H = np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]])
    rng = np.random.default_rng(seed)

    def births(k: int) -> np.ndarray:
        x = np.empty((k, 4))
        x[:, 0] = rng.uniform(x0 + 0.1 * (x1 - x0), x1 - 0.1 * (x1 - x0), k)
        x[:, 2] = rng.uniform(y0 + 0.1 * (y1 - y0), y1 - 0.1 * (y1 - y0), k)
        x[:, 1] = rng.normal(0.0, birth_speed_mps, k)
        x[:, 3] = rng.normal(0.0, birth_speed_mps, k)
        return x

    states = births(n_targets)
    ids = np.arange(1, n_targets + 1, dtype=np.int64)
    next_id = n_targets + 1
    out_ids, out_pos, out_vel, out_z, out_zid = [], [], [], [], []
    for k in range(scans):
        if k > 0:
            survive = rng.random(len(ids)) < p_s
            accel = rng.normal(0.0, sigma_v, (len(ids), 2))
            states = states @ F.T
            states[:, [0, 2]] += accel * g[0]
            states[:, [1, 3]] += accel * g[1]
            inside = (
                (states[:, 0] >= x0)
                & (states[:, 0] <= x1)
                & (states[:, 2] >= y0)
                & (states[:, 2] <= y1)
            )
            keep = survive & inside
            states, ids = states[keep], ids[keep]
            mean = n_targets * (1.0 - p_s) + 0.5 * max(n_targets - len(ids), 0)
            born = int(rng.poisson(mean))
            states = np.vstack([states, births(born)])
            ids = np.concatenate([ids, np.arange(next_id, next_id + born, dtype=np.int64)])
            next_id += born
        detected = rng.random(len(ids)) < p_d
        z = states[detected] @ H.T + rng.standard_normal((int(detected.sum()), 2)) @ r_chol.T
        c = int(rng.poisson(lam))
        clutter = np.column_stack([rng.uniform(x0, x1, c), rng.uniform(y0, y1, c)])
        zs = np.vstack([z, clutter])
        zid = np.concatenate([ids[detected], np.full(c, -1, np.int64)])
        order = rng.permutation(len(zs))
        out_ids.append(ids.copy())
        out_pos.append(states[:, [0, 2]].copy())
        out_vel.append(states[:, [1, 3]].copy())
        out_z.append(zs[order])
        out_zid.append(zid[order])
    return Classic2D(
        times_s=np.arange(scans, dtype=np.float64) * float(dt_s),
        truth_ids=out_ids,
        truth_positions=out_pos,
        truth_velocities=out_vel,
        measurements=out_z,
        measurement_ids=out_zid,
        F=F,
        Q=Q,
        H=H,
        R=r_cov,
        region=region,
        p_d=p_d,
        p_s=p_s,
        clutter_rate=lam,
        dt_s=dt_s,
        seed=seed,
    )
