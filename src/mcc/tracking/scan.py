"""What the tracker reads and writes: `Scan` (one radar's detections at one time), `TrackTable`
(tracks as parallel arrays) and `StepReport` (what one step did)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from mcc.compute import kalman

__all__ = ["Coverage", "PolarDetections", "Scan", "StepReport", "TrackTable"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Coverage = Callable[[F64], npt.NDArray[np.bool_]]
_NONE_U8: npt.NDArray[np.uint8] = np.zeros(0, np.uint8)  # "not given" (TrackTable.iff/identity)


@dataclass(frozen=True, eq=False)
class PolarDetections:
    """The raw polar measurements of a scan, for the EKF update: arrays ``(M,)`` and the
    radar's accuracy. ``elevation_rad`` is None in 2-D, ``range_rate_mps`` None without
    Doppler."""

    range_m: F64
    azimuth_rad: F64
    elevation_rad: F64 | None
    range_rate_mps: F64 | None
    sigma_range_m: float
    sigma_azimuth_rad: float
    sigma_elevation_rad: float
    sigma_range_rate_mps: float
    sensor_position_m: F64  # (3,)

    @property
    def dim(self) -> int:
        """Measurement dimension: range, azimuth, [elevation], [range rate]."""
        return 2 + int(self.elevation_rad is not None) + int(self.range_rate_mps is not None)

    def z(self) -> F64:
        """The measurements as rows ``(M, dim)`` (built once: gating and update both ask)."""
        cached = self.__dict__.get("_z")
        if cached is not None:
            return cached
        cols = [self.range_m, self.azimuth_rad, self.elevation_rad, self.range_rate_mps]
        z = np.stack([c for c in cols if c is not None], axis=1)
        self.__dict__["_z"] = z  # a frozen dataclass: the cache bypasses __setattr__
        return z

    def R(self) -> F64:
        """The (diagonal) measurement covariance ``(dim, dim)``."""
        sig = [self.sigma_range_m, self.sigma_azimuth_rad]
        if self.elevation_rad is not None:
            sig.append(self.sigma_elevation_rad)
        if self.range_rate_mps is not None:
            sig.append(self.sigma_range_rate_mps)
        return np.diag(np.square(sig))

    def angles(self) -> npt.NDArray[np.bool_]:
        """Which components are angles (wrapped in the innovation)."""
        return np.array([False, True] + [False] * (self.dim - 2))


@dataclass(frozen=True, eq=False)
class Scan:
    """One radar scan: ``M`` position measurements at ``time_s`` and their covariance.

    ``positions_m`` is ``(M, ndim)``; ``covariance_m2`` is ``(ndim, ndim)`` for all detections
    or ``(M, ndim, ndim)`` per detection. ``coverage(positions (N, ndim)) -> bool (N,)`` says
    which tracks the sensor could have seen; only those count a miss (None: all of them).
    ``polar``, set by `from_polar`, keeps the raw measurements for the EKF update. ``iff``
    ``(M,)`` uint8 is each detection's IFF answer (`mcc.types.IffAnswer` values; None: none
    was interrogated), folded into the identity of the track it updates (`mcc.tracking.identity`).
    ``pd`` and ``clutter_per_scan`` are what the sensor's owner says of it (SENSORS.yaml):
    its probability of detecting a target it covers, and its mean number of false alarms per
    scan; None (unknown) lets the tracker measure them online.
    """

    time_s: float
    positions_m: F64
    covariance_m2: F64
    sensor_id: str = ""
    coverage: Coverage | None = None
    polar: PolarDetections | None = None
    iff: npt.ArrayLike | None = None
    pd: float | None = None
    clutter_per_scan: float | None = None

    @property
    def count(self) -> int:
        return int(np.shape(self.positions_m)[0])

    @classmethod
    def from_polar(
        cls,
        time_s: float,
        range_m: npt.ArrayLike,
        azimuth_rad: npt.ArrayLike,
        elevation_rad: npt.ArrayLike | None = None,
        *,
        sigma_range_m: float,
        sigma_azimuth_rad: float,
        sigma_elevation_rad: float = 0.0,
        range_rate_mps: npt.ArrayLike | None = None,
        sigma_range_rate_mps: float = 1.0,
        sensor_position_m: npt.ArrayLike = (0.0, 0.0, 0.0),
        sensor_id: str = "",
        coverage: Coverage | None = None,
        iff: npt.ArrayLike | None = None,
        pd: float | None = None,
        clutter_per_scan: float | None = None,
    ) -> Scan:
        """A scan of range/azimuth (from north, clockwise)[/elevation][/range-rate] detections:
        3-D with elevation, 2-D (horizontal range) without. Positions are the debiased
        conversion with its linearised covariance (`kalman.polar_to_cartesian`), used to gate
        and start tracks; the update uses the polar measurements themselves (EKF)."""
        r = np.asarray(range_m, dtype=np.float64).reshape(-1)
        az = np.asarray(azimuth_rad, dtype=np.float64).reshape(-1)
        el = None if elevation_rad is None else np.asarray(elevation_rad, np.float64).reshape(-1)
        rr = None if range_rate_mps is None else np.asarray(range_rate_mps, np.float64).reshape(-1)
        sensor = np.zeros(3)
        given = np.asarray(sensor_position_m, dtype=np.float64).reshape(-1)
        sensor[: given.size] = given[:3]
        pos, cov = kalman.polar_to_cartesian(
            r,
            az,
            el,
            sigma_range_m=sigma_range_m,
            sigma_azimuth_rad=sigma_azimuth_rad,
            sigma_elevation_rad=sigma_elevation_rad,
            sensor_pos=sensor,
            xp=np,
        )
        polar = PolarDetections(
            r,
            az,
            el,
            rr,
            float(sigma_range_m),
            float(sigma_azimuth_rad),
            float(sigma_elevation_rad),
            float(sigma_range_rate_mps),
            sensor,
        )
        return cls(
            float(time_s),
            pos,
            cov,
            sensor_id=sensor_id,
            coverage=coverage,
            polar=polar,
            iff=iff,
            pd=pd,
            clutter_per_scan=clutter_per_scan,
        )


@dataclass(frozen=True, eq=False)
class TrackTable:
    """Tracks as parallel arrays of ``N`` rows (a snapshot, not a view of the tracker)."""

    ids: npt.NDArray[np.uint32]  # 0 for tentative tracks
    status: npt.NDArray[np.uint8]  # TrackStatus values
    x: F64  # (N, 2*ndim) state: positions then velocities
    P: F64  # (N, 2*ndim, 2*ndim)
    quality: F64  # (N,) hits in the last confirm_n covered scans / confirm_n
    hits: I64  # (N,) detections assigned since birth
    misses: I64  # (N,) consecutive misses
    update_s: F64  # (N,) time of the last detection assigned
    birth_s: F64  # (N,) time of the first detection
    iff: npt.NDArray[np.uint8] = field(default_factory=lambda: _NONE_U8)  # (N,) IffAnswer
    identity: npt.NDArray[np.uint8] = field(default_factory=lambda: _NONE_U8)  # (N,) Identity

    def __post_init__(self) -> None:
        # Tables built without them (tests, apps) get "not interrogated" / "pending" rows.
        for name in ("iff", "identity"):
            if getattr(self, name) is _NONE_U8:
                object.__setattr__(self, name, np.zeros(self.ids.shape[0], np.uint8))

    @property
    def count(self) -> int:
        return int(self.ids.shape[0])

    @property
    def ndim(self) -> int:
        return int(self.x.shape[1] // 2)

    @property
    def positions_m(self) -> F64:
        return self.x[:, : self.ndim]

    @property
    def velocities_mps(self) -> F64:
        return self.x[:, self.ndim :]


@dataclass(frozen=True, eq=False)
class StepReport:
    """What one `MultiTargetTracker.step` did."""

    time_s: float
    detections: int
    assigned: int  # detections assigned to tracks
    initiated: int  # tentative tracks started
    confirmed: npt.NDArray[np.uint32]  # ids of the tracks confirmed in this step
    deleted: npt.NDArray[np.uint32]  # ids of the confirmed tracks deleted in this step
    status_changed: npt.NDArray[np.uint32]  # ids that went confirmed <-> coasting
    tracks: int  # confirmed + coasting after the step
    tentative: int  # tentative tracks after the step
    not_initiated: int = 0  # detections left over that started no track: max_tracks reached
