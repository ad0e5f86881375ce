"""TEWA's data: the inputs (`Assets`, `Picture`), the outputs (`ThreatReport`, `Order`,
`PlanEvaluation`, `TewaResult`, `TewaStatistics`), the engine's records, and identity rules.

Identity (STANAG 1241, from the tracker's IFF fusion, `mcc.tracking.identity`): a track whose
identity is ``FRIEND`` or ``ASSUMED_FRIEND`` is never engaged (`FRIENDLY`); the others rank
``HOSTILE`` > ``SUSPECT`` > ``UNKNOWN`` > ``PENDING`` > ``NEUTRAL`` in threat value (`RANK_TIER`),
and the assignment values a threat at its kinematic score times `IDENTITY_WEIGHT`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from mcc.apps.scenario import Scenario
from mcc.errors import MccError
from mcc.types import (
    AirPicture,
    EngagementOrder,
    Identity,
    OrderStatus,
    TargetClass,
    Threat,
    TrackStatus,
    WeaponStatus,
)
from mcc.types.arrays import optional_field, packed_field

POLICIES = ("auto", "hungarian", "greedy")
Policy = Literal["auto", "hungarian", "greedy"]
ACTIVE = (OrderStatus.ORDER_ISSUED, OrderStatus.ORDER_IN_FLIGHT)
HELD = (OrderStatus.ORDER_PROPOSED, *ACTIVE)  # the order's weapon and track are busy
DONE = (OrderStatus.ORDER_KILL, OrderStatus.ORDER_MISS, OrderStatus.ORDER_ABORTED)
THREATS = (int(TrackStatus.TRACK_CONFIRMED.value), int(TrackStatus.TRACK_COASTING.value))

#: Identities never engaged: the hard rule, checked when assigning and again before an order
#: goes out (`mcc.apps.tewa_engine.TewaEngine.release`).
FRIENDLY = (int(Identity.IDENTITY_FRIEND.value), int(Identity.IDENTITY_ASSUMED_FRIEND.value))
_TIERS = {
    Identity.IDENTITY_HOSTILE: (5, 1.0),
    Identity.IDENTITY_SUSPECT: (4, 0.9),
    Identity.IDENTITY_UNKNOWN: (3, 0.8),
    Identity.IDENTITY_PENDING: (2, 0.7),
    Identity.IDENTITY_NEUTRAL: (1, 0.3),
    Identity.IDENTITY_ASSUMED_FRIEND: (0, 0.0),
    Identity.IDENTITY_FRIEND: (0, 0.0),
}
#: Per Identity value: the rank tier (higher ranks first) and the weight of its threat value.
RANK_TIER = np.array([_TIERS[i][0] for i in sorted(_TIERS, key=lambda i: int(i.value))])
IDENTITY_WEIGHT = np.array([_TIERS[i][1] for i in sorted(_TIERS, key=lambda i: int(i.value))])
_IDENTITY_MAX = len(Identity) - 1

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
log = logging.getLogger("mcc.app.tewa")


# -- inputs --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Assets:
    """The defended assets: ids, ENU positions ``(A, 3)``, values scaled to 0..1, radii (m)."""

    ids: tuple[str, ...]
    position_m: F64
    value: F64
    radius_m: F64

    @classmethod
    def from_scenario(cls, scenario: Scenario, *, radius_m: float = 1000.0) -> Assets:
        """The scenario's assets; values divided by the largest (threat scores are 0..1)."""
        values = np.array([a.value for a in scenario.assets], dtype=np.float64)
        top = float(values.max()) if values.size else 1.0
        return cls(
            ids=tuple(a.id for a in scenario.assets),
            position_m=np.array([a.position_m for a in scenario.assets], dtype=np.float64).reshape(
                -1, 3
            ),
            value=values / top,
            radius_m=np.full(values.size, float(radius_m)),
        )


@dataclass(frozen=True)
class Picture:
    """One air picture as arrays of N tracks: ids, TrackStatus and TargetClass values, state
    ``(N, 6)`` = x y z vx vy vz; ``time_ns`` the instant it is valid for, ``origin_ns`` the
    oldest detection in it; ``identity`` (Identity values) and ``iff`` (IffAnswer values):
    None (a tracker that predates them) is every track ``PENDING``, not interrogated."""

    time_ns: int
    origin_ns: int
    track_id: npt.NDArray[np.uint32]
    status: npt.NDArray[np.uint8]
    classification: npt.NDArray[np.uint8]
    state: F64
    identity: U8 | None = None
    iff: U8 | None = None

    def __post_init__(self) -> None:
        n = self.track_id.shape[0]
        for name in ("identity", "iff"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, np.zeros(n, np.uint8))
        if self.status.shape != (n,) or self.classification.shape != (n,):
            raise MccError(f"picture: status and classification must have shape ({n},)")
        if self.identity.shape != (n,) or self.iff.shape != (n,):  # type: ignore[union-attr]
            raise MccError(f"picture: identity and iff must have shape ({n},)")
        if n and int(self.identity.max()) > _IDENTITY_MAX:  # type: ignore[union-attr]
            bad = int(self.identity.max())  # type: ignore[union-attr]
            raise MccError(f"picture: identity {bad} is not an Identity (0..{_IDENTITY_MAX})")
        if self.state.shape != (n, 6):
            raise MccError(f"picture: state must have shape ({n}, 6), got {self.state.shape}")

    @property
    def count(self) -> int:
        return int(self.track_id.shape[0])

    @classmethod
    def from_msg(cls, msg: AirPicture) -> Picture:
        """The picture of ``msg``; ``MccError`` when its identity or iff answers are neither
        empty nor ``count`` valid values (the app counts and drops such a picture)."""
        try:
            identity, iff = optional_field(msg, "identity"), optional_field(msg, "iff")
        except ValueError as exc:
            raise MccError(f"picture: {exc}") from None
        return cls(
            time_ns=msg.time_ns,
            origin_ns=msg.origin_ns,
            track_id=np.array(packed_field(msg, "track_id"), dtype=np.uint32),
            status=np.array(packed_field(msg, "status"), dtype=np.uint8),
            classification=np.array(packed_field(msg, "classification"), dtype=np.uint8),
            state=np.array(packed_field(msg, "state"), dtype=np.float64).reshape(-1, 6),
            identity=None if identity is None else np.array(identity, dtype=np.uint8),
            iff=None if iff is None else np.array(iff, dtype=np.uint8),
        )


# -- outputs -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ThreatReport:
    """The threat evaluation of one picture's confirmed tracks, ``(N,)`` arrays.

    ``asset_idx`` indexes `Assets` (-1 with no asset); ``time_to_impact_s`` is -1 for never;
    ``course_rad`` is the direction of flight (clockwise from north), ``off_axis_rad`` the angle
    between it and the line to the asset (0 = straight at it); ``identity`` (Identity values)
    orders ``rank`` before the score does (`RANK_TIER`); ``witnesses``: how many radars see
    each track (`SensorScans`), None when not known.
    """

    time_ns: int
    origin_ns: int
    track_id: I64
    classification: npt.NDArray[np.uint8]
    asset_idx: I64
    score: F64
    rank: I64
    time_to_impact_s: F64
    cpa_m: F64
    time_to_cpa_s: F64
    speed_mps: F64
    course_rad: F64
    off_axis_rad: F64
    identity: U8 | None = None
    witnesses: I64 | None = None

    @property
    def count(self) -> int:
        return int(self.track_id.shape[0])

    @property
    def time_to_go_s(self) -> F64:
        """Time to impact, or to CPA for a track that never reaches its asset."""
        return np.where(self.time_to_impact_s >= 0, self.time_to_impact_s, self.time_to_cpa_s)

    def identity_values(self) -> U8:
        """``identity``, every track ``PENDING`` when the report has none."""
        if self.identity is None:
            return np.zeros(self.count, np.uint8)
        return self.identity

    def ranked(self) -> I64:
        """Indices from the most to the least threatening."""
        return np.argsort(self.rank, kind="stable")

    def to_msgs(self, asset_ids: tuple[str, ...]) -> list[Threat]:
        """One ``Threat`` per track, most threatening first."""
        out = []
        for i in self.ranked():
            a = int(self.asset_idx[i])
            out.append(
                Threat(
                    track_id=int(self.track_id[i]),
                    asset_id=asset_ids[a] if a >= 0 else "",
                    score=float(self.score[i]),
                    rank=int(self.rank[i]),
                    time_to_impact_s=float(self.time_to_impact_s[i]),
                    cpa_m=float(self.cpa_m[i]),
                    time_to_cpa_s=float(self.time_to_cpa_s[i]),
                    classification=_target_class(int(self.classification[i])),
                    update_ns=self.time_ns,
                    origin_ns=self.origin_ns,
                    identity=Identity(int(self.identity_values()[i])),
                    witnesses=0 if self.witnesses is None else int(self.witnesses[i]),
                )
            )
        return out


@dataclass(frozen=True)
class Order:
    """An engagement order issued by TEWA (``time_of_flight_s`` is its planned flyout)."""

    order_id: int
    weapon_id: str
    track_id: int
    pk: float
    rounds: int
    issue_ns: int
    origin_ns: int
    time_of_flight_s: float

    def to_msg(self, status: OrderStatus = OrderStatus.ORDER_ISSUED) -> EngagementOrder:
        return EngagementOrder(
            order_id=self.order_id,
            weapon_id=self.weapon_id,
            track_id=self.track_id,
            pk=self.pk,
            rounds=self.rounds,
            issue_ns=self.issue_ns,
            origin_ns=self.origin_ns,
            status=status,
        )


@dataclass(frozen=True)
class PlanEvaluation:
    """A Monte Carlo comparison of the assignment policies on one picture."""

    time_ns: int
    names: tuple[str, ...]
    annihilation_prob: tuple[float, ...]
    expected_leakers: tuple[float, ...]
    expected_rounds: tuple[float, ...]
    chosen: str
    separated: bool  # the winner's interval does not overlap the runner-up's
    threats: int
    reserve_rounds: tuple[int, ...]
    looks: int
    trials: int
    compute_ms: float

    def summary(self) -> str:
        """One line for a log or a heartbeat."""
        parts = [
            f"{name} P(annihilation) {pa:.2f} leakers {lk:.2f} rounds {rd:.1f}"
            for name, pa, lk, rd in zip(
                self.names,
                self.annihilation_prob,
                self.expected_leakers,
                self.expected_rounds,
                strict=True,
            )
        ]
        return (
            f"mc {self.threats} threats, {self.looks} look(s): {' | '.join(parts)} "
            f"-> {self.chosen} ({self.trials} trials, {self.compute_ms:.0f} ms)"
        )


@dataclass(frozen=True)
class TewaResult:
    """What one cycle produced: threats, orders to publish, the comparison if one ran, the
    tracks whose ``Threat`` is to be disposed, the policy that assigned, and the proposals
    withdrawn for want of a decision (approval mode: publish them ``ORDER_ABORTED``)."""

    threats: ThreatReport
    orders: tuple[Order, ...]
    comparison: PlanEvaluation | None
    dropped: tuple[int, ...]
    policy: str
    withdrawn: tuple[Order, ...] = ()


@dataclass(frozen=True)
class TewaStatistics:
    """TEWA's counts since start; ``in_flight`` and ``awaiting_approval`` are current."""

    cycles: int = 0
    issued: int = 0
    in_flight: int = 0
    kills: int = 0
    misses: int = 0
    aborted: int = 0
    expired: int = 0
    comparisons: int = 0
    proposed: int = 0
    awaiting_approval: int = 0
    rejected: int = 0
    withdrawn: int = 0
    friend_vetoes: int = 0  # (cycle, track) pairs: a friend kept out of the assignment
    friend_orders_stopped: int = 0  # orders stopped at release: their track turned friend
    uncorroborated: int = 0  # (cycle, track) pairs held back: fewer radars than min_sensors
    friend_clearance: int = 0  # (cycle, track) pairs held back: within the clearance of a friend
    implausible_outcomes: int = 0  # kills and misses before half the planned flyout


@dataclass
class WeaponSeen:
    """The latest ``WeaponStatus`` of a weapon and when it came."""

    status: WeaponStatus
    received_ns: int


@dataclass
class OrderRecord:
    """An order TEWA holds, with its status and the time it gives up waiting (``due_ns``)."""

    order: Order
    status: OrderStatus
    due_ns: int  # give up waiting for an outcome after this
    given_up: bool = False

    @property
    def active(self) -> bool:
        return self.status in ACTIVE and not self.given_up

    @property
    def held(self) -> bool:
        """Proposed or active: its weapon and track are not assigned again."""
        return self.status in HELD and not self.given_up


def _target_class(value: int) -> TargetClass:
    try:
        return TargetClass(value)
    except ValueError:
        return TargetClass.CLASS_UNKNOWN


@dataclass
class SensorScans:
    """The latest scan of each radar identity, to tell whether a track is corroborated: seen
    by ``count`` distinct radars, each with a detection within ``gate_m`` of the track (moved
    along its velocity to that scan's time) in a scan at most ``max_age_s`` old.

    One identity is one witness however many sensor ids it claims, so a stolen radar identity
    alone can corroborate nothing. At most ``max_sources`` radars and ``max_detections`` per
    scan are kept (larger scans are not kept; sources past the bound are ignored).
    """

    gate_m: float = 500.0
    max_age_s: float = 3.0
    max_sources: int = 64
    max_detections: int = 20_000
    #: source → (scan time, Unix ns; detections (M, 3) ENU m)
    scans: dict[str, tuple[int, npt.NDArray[np.float64]]] = field(default_factory=dict)

    def add(self, source: str, time_ns: int, positions_m: npt.NDArray[np.float64]) -> bool:
        """Keep ``source``'s scan if it is its newest; False when refused (bounds)."""
        if positions_m.shape[0] > self.max_detections:
            return False
        if source not in self.scans and len(self.scans) >= self.max_sources:
            return False
        old = self.scans.get(source)
        if old is None or time_ns >= old[0]:
            self.scans[source] = (time_ns, positions_m.reshape(-1, 3))
        return True

    def count(
        self,
        positions_m: npt.NDArray[np.float64],
        velocities_mps: npt.NDArray[np.float64],
        time_ns: int,
    ) -> npt.NDArray[np.int64]:
        """For each track (position and velocity at ``time_ns``), how many radars see it."""
        n = positions_m.shape[0]
        seen = np.zeros(n, np.int64)
        if n == 0:
            return seen
        max_age_ns = self.max_age_s * 1e9
        for scan_ns, detections in self.scans.values():
            if abs(time_ns - scan_ns) > max_age_ns or detections.shape[0] == 0:
                continue
            at_scan = positions_m + velocities_mps * ((scan_ns - time_ns) * 1e-9)
            # nearest detection per track: (N, M) distances, M is one scan
            d2 = ((at_scan[:, None, :] - detections[None, :, :]) ** 2).sum(axis=2)
            seen += d2.min(axis=1) <= self.gate_m**2
        return seen
