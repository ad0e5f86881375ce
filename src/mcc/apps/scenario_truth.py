"""What the scenario flies at one instant (`TruthState`): every target's id, class, position
and velocity as parallel arrays, and its ``Truth`` sample on the bus."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from mcc.types import Truth
from mcc.types.arrays import float_field, pack, packed_field

__all__ = ["TruthState"]

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class TruthState:
    """Every target at one instant, as parallel arrays of N items.

    ``time_s`` is in the time base of whoever made it: scenario seconds for ``truth_at``,
    Unix seconds for ``from_msg``. ``alive`` marks the targets flying at that instant.
    """

    time_s: float
    ids: npt.NDArray[np.uint32]  # (N,)
    classes: npt.NDArray[np.uint8]  # (N,), TargetClass values
    positions_m: F64  # (N, 3) ENU
    velocities_mps: F64  # (N, 3)
    alive: npt.NDArray[np.bool_]  # (N,)
    mode5: npt.NDArray[np.bool_] | None = None  # (N,) answers IFF Mode 5; None: not known

    @property
    def count(self) -> int:
        return int(self.ids.shape[0])

    def live(self) -> TruthState:
        """Only the targets alive at ``time_s``."""
        a = self.alive
        return TruthState(
            self.time_s,
            self.ids[a],
            self.classes[a],
            self.positions_m[a],
            self.velocities_mps[a],
            self.alive[a],
            None if self.mode5 is None else self.mode5[a],
        )

    def answers_mode5(self, target_ids: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Which of ``target_ids`` (detections' targets, -1 for clutter) answer IFF Mode 5."""
        ids = np.asarray(target_ids)
        if self.mode5 is None or not self.mode5.any():
            return np.zeros(ids.shape, bool)
        return np.isin(ids, self.ids[self.mode5])

    @classmethod
    def empty(cls, time_s: float = 0.0) -> TruthState:
        """No target at all."""
        return cls(
            time_s,
            np.zeros(0, np.uint32),
            np.zeros(0, np.uint8),
            np.zeros((0, 3)),
            np.zeros((0, 3)),
            np.zeros(0, bool),
        )

    def to_msg(self, *, scenario_id: str, time_ns: int) -> Truth:
        """A ``Truth`` sample with the live targets, stamped ``time_ns`` (Unix ns)."""
        s = self.live()
        p, v = s.positions_m, s.velocities_mps
        return Truth(
            scenario_id=scenario_id,
            time_ns=time_ns,
            count=s.count,
            target_id=pack(s.ids, "<u4"),
            target_class=pack(s.classes, "u1"),
            x_m=pack(p[:, 0], "<f8"),
            y_m=pack(p[:, 1], "<f8"),
            z_m=pack(p[:, 2], "<f8"),
            vx_mps=pack(v[:, 0], "<f8"),
            vy_mps=pack(v[:, 1], "<f8"),
            vz_mps=pack(v[:, 2], "<f8"),
        )

    @classmethod
    def from_msg(cls, msg: Truth) -> TruthState:
        """The targets of a ``Truth`` sample; ``time_s`` is Unix seconds."""

        def xyz(*names: str) -> F64:
            return np.stack([float_field(msg, n) for n in names], axis=1).reshape(-1, 3)

        return cls(
            msg.time_ns * 1e-9,
            np.array(packed_field(msg, "target_id"), dtype=np.uint32),
            np.array(packed_field(msg, "target_class"), dtype=np.uint8),
            xyz("x_m", "y_m", "z_m"),
            xyz("vx_mps", "vy_mps", "vz_mps"),
            np.ones(msg.count, bool),
        )
