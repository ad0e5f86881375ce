"""Deleters: which tracks end after a scan."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from mcc.compute.associate import MofNInitiator, deletion_mask
from mcc.tracking.base import TrackLife
from mcc.tracking.config import TrackerConfig

__all__ = ["ScanPeriodDeleter"]

F64 = npt.NDArray[np.float64]


class ScanPeriodDeleter:
    """Ends a track when:

    * it is tentative and, with ``track_logic="mofn"``, M-of-N confirmation is out of reach,
      or, with ``track_logic="llr"``, its score fell below ``drop_score`` or it was not
      confirmed in ``max_tentative_scans``;
    * it is confirmed and missed more than ``max_misses`` consecutive scans that covered it;
    * its position covariance grows past ``max_position_std_m``;
    * it was not updated for longer than ``max(max_coast_s, (max_misses + ½) × period)``,
      ``period`` being the scan period of the radar that last updated it: a track that left
      every radar's coverage (no misses counted) ends, and on a slow radar (5-12 s) this rule
      never fires before the misses rule does.
    """

    def __init__(self, config: TrackerConfig) -> None:
        self.config = config
        self.mofn = MofNInitiator(m=config.confirm_m, n=config.confirm_n)

    def delete(self, life: TrackLife, P: F64, time_s: float) -> npt.NDArray[np.bool_]:
        cfg = self.config
        tentative = life.tentative
        if cfg.track_logic == "llr":
            out = (life.score < cfg.drop_score) | (life.age >= cfg.max_tentative_scans)
        else:
            out = self.mofn.failed(life.history, life.age)
        fails = tentative & ~life.promoted & out
        lost = deletion_mask(
            misses=np.where(tentative, 0, life.misses),
            max_misses=cfg.max_misses,
            covariance=P,
            max_position_var_m2=cfg.max_position_std_m**2,
            ndim=P.shape[-1] // 2,
        )
        limit = np.maximum(cfg.max_coast_s, (cfg.max_misses + 0.5) * life.period_s)
        return np.asarray(fails | lost | (time_s - life.update_s > limit))
