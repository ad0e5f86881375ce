"""`MultiTargetTracker`: one of each pipeline step (`mcc.tracking.base`), vectorised over tracks.

Every track is a row of arrays; one `Scan` (the detections of one radar at one time) goes
through `MultiTargetTracker.step`:

1. **predict** every track to the scan time (per-track ``dt``): `CVPredictor` or
   `IMMPredictor` (a straight model of small process noise and turn models covering
   0-20 deg/s, transitions from the step, mixing weights below ``imm_mix_floor`` dropped);
2. **gate** (`Chi2Gater`): squared Mahalanobis distance of the updater's innovation against
   the chi-square gate of ``gate_probability``, only for the pairs a spatial grid finds close;
   for an IMM a pair is in the gate when one of its models has it there, and it is judged by
   the model mixture's likelihood (`IMMPredictor.model_gate`);
3. **associate** (``association: auto``, the default): JPDA* (`JPDAAssociator`) for the
   confirmed tracks that share a gated detection, GNN (`GNNAssociator`) for the others and then
   for the tentative tracks on the detections left, a track left without a detection when a
   miss is likelier; ``gnn`` or ``jpda`` for all;
4. **update** the assigned tracks: `PositionUpdater` (Cartesian detections) or
   `PolarEKFUpdater` (range/azimuth[/elevation][/range-rate] from `Scan.from_polar`);
5. **track life** (`ScanPeriodDeleter`): a log-likelihood-ratio score with the radar's own
   p_d and clutter density (``Scan.pd``/``clutter_per_scan``, else measured online:
   `DetectionProbability`, `ClutterDensity`) confirms tentative tracks (or M-of-N), misses
   counted only where the sensor covers the track (``Scan.coverage``), coasting after
   ``coast_after_misses``, deletion after ``max_misses``, on covariance growth, or when not
   updated for ``max(max_coast_s, (max_misses + ½) × the radar's scan period)``;
6. **initiate** tentative tracks from the detections left over (`OnePointInitiator`,
   `TwoPointInitiator`);
7. **identity**: the IFF answers of the assigned detections (``Scan(iff=...)``) go into each
   track's evidence; `tracks` fuses it with the kinematics (`mcc.tracking.identity`).

Tracks get their id (a counter from 1, never reused) when confirmed; tentative tracks are
internal and have id 0. 2-D (``ndim=2``, state ``[x y vx vy]``) or 3-D (``[x y z vx vy vz]``,
the bus order of ``Track``/``AirPicture``). Metres, seconds, m/s.

>>> import numpy as np
>>> trk = MultiTargetTracker(TrackerConfig(ndim=2, sigma_a_mps2=5.0))
>>> for k in range(4):                # one target at 10 m/s, a radar with 10 m noise
...     report = trk.step(Scan(float(k), np.array([[10.0 * k, 0.0]]), np.diag([100.0, 100.0])))
>>> trk.tracks().ids                  # confirmed and coasting tracks, as arrays
array([1], dtype=uint32)
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from mcc.compute.associate import MofNInitiator, count_misses
from mcc.errors import ComputeError
from mcc.tracking.associators import (
    GNNAssociator,
    bipartite_components,
    run_starts,
    small_unique,
)
from mcc.tracking.base import Gated, Measurements, TrackLife, grown
from mcc.tracking.classify import classify
from mcc.tracking.config import TrackerConfig
from mcc.tracking.deleters import ScanPeriodDeleter
from mcc.tracking.gaters import Chi2Gater
from mcc.tracking.identity import IffEvidence, fuse_identity
from mcc.tracking.initiators import make_initiator
from mcc.tracking.jpda import JPDAAssociator
from mcc.tracking.predictors import IMMPredictor, make_predictor
from mcc.tracking.scan import Scan, StepReport, TrackTable
from mcc.tracking.score import ClutterDensity, DetectionProbability, LLRScore
from mcc.tracking.updaters import PolarEKFUpdater, PositionUpdater
from mcc.types import TrackStatus

__all__ = ["MultiTargetTracker"]

_log = logging.getLogger(__name__)

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

_TENTATIVE = int(TrackStatus.TRACK_TENTATIVE.value)
_CONFIRMED = int(TrackStatus.TRACK_CONFIRMED.value)
_COASTING = int(TrackStatus.TRACK_COASTING.value)
_EMPTY_I64 = np.zeros(0, np.int64)
_MAX_SENSORS = 256  # sensors whose scan period is remembered
# JPDA: a detection whose probabilities of belonging to the confirmed tracks sum to this or
# more is theirs; below it, tentative tracks and initiation may use it.
_JPDA_TAKEN = 0.5
_LOG_2PI = math.log(2.0 * math.pi)
_IFF_FIELDS = ("_iff", "_iff_friend", "_iff_silent", "_iff_invalid")


def _shared_clusters(ti: I64, mj: I64, sel: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    """Which pairs ``sel`` belong to a cluster of two tracks or more (tracks linked by
    gated detections they share, among the pairs ``sel``)."""
    out = np.zeros(ti.size, bool)
    if not sel.any():
        return out
    tracks, t = small_unique(ti[sel])
    meas, m = small_unique(mj[sel])
    label = bipartite_components(t, m, tracks.size, meas.size)
    size = np.bincount(label, minlength=tracks.size)
    out[np.flatnonzero(sel)] = size[label[t]] >= 2
    return out


class MultiTargetTracker:
    """A multi-radar, multi-target tracker vectorised over tracks (module docstring).

    Feed scans in time order with `step`; read tracks with `tracks`. Not thread-safe.
    """

    def __init__(self, config: TrackerConfig | None = None) -> None:
        self.config = config = config or TrackerConfig()
        self.d = config.ndim
        self.gate = config.gate
        self.mofn = MofNInitiator(m=config.confirm_m, n=config.confirm_n)
        self.predictor = make_predictor(config)
        self.gater = Chi2Gater(config.gate_probability, config.ndim)
        # IMM candidates: a gate 100x less likely to miss, on the models' equal-weight mix.
        self.wide_gater = Chi2Gater(1.0 - (1.0 - config.gate_probability) / 100, config.ndim)
        self.associator = GNNAssociator(self.gate, cost=config.assignment_cost)
        self.jpda = (
            JPDAAssociator(
                config.pd,
                config.gate_probability,
                max_cluster=config.jpda_max_cluster,
                star=config.association == "auto",
            )
            if config.association in ("jpda", "auto")
            else None
        )
        self.linear = PositionUpdater(config.ndim)
        self.ekf = PolarEKFUpdater(config.ndim)
        self.initiator = make_initiator(config)
        self.deleter = ScanPeriodDeleter(config)
        self.clutter = ClutterDensity()
        self.score = LLRScore(config.pd)
        self.pd = DetectionProbability(config.pd)
        self.time_s: float | None = None
        self.next_id = 1
        self.scans = 0
        self.iff_rejected = 0  # IFF answers outside IffAnswer's values, read as not asked
        self._ids = np.zeros(0, np.uint32)
        self._status = np.zeros(0, np.uint8)
        self._history = np.zeros(0, np.uint32)
        self._age = np.zeros(0, np.int64)
        self._hits = np.zeros(0, np.int64)
        self._misses = np.zeros(0, np.int64)
        self._time = np.zeros(0, np.float64)
        self._update = np.zeros(0, np.float64)
        self._birth = np.zeros(0, np.float64)
        self._period = np.zeros(0, np.float64)
        self._score = np.zeros(0, np.float64)
        self._iff = np.zeros(0, np.uint8)
        self._iff_friend = np.zeros(0, np.int64)
        self._iff_silent = np.zeros(0, np.int64)
        self._iff_invalid = np.zeros(0, np.int64)
        self._sensor_time: dict[str, float] = {}
        self._sensor_period: dict[str, float] = {}

    def __len__(self) -> int:
        """Every track, tentative ones included."""
        return int(self._ids.shape[0])

    # -- public -------------------------------------------------------------------------------
    def tracks(self, *, include_tentative: bool = False) -> TrackTable:
        """Confirmed and coasting tracks (and tentative ones when asked), as arrays."""
        rows = (
            np.arange(len(self))
            if include_tentative
            else np.flatnonzero(self._status != _TENTATIVE)
        )
        x, P = self.predictor.estimate()
        quality = self.mofn.hit_count(self._history[rows]) / float(self.config.confirm_n)
        xr = x[rows]
        return TrackTable(
            ids=self._ids[rows].copy(),
            status=self._status[rows].copy(),
            x=xr.copy(),
            P=P[rows].copy(),
            quality=np.asarray(quality, dtype=np.float64),
            hits=self._hits[rows].copy(),
            misses=self._misses[rows].copy(),
            update_s=self._update[rows].copy(),
            birth_s=self._birth[rows].copy(),
            iff=self._iff[rows].copy(),
            identity=self._identity(rows, xr),
        )

    def _evidence(self) -> IffEvidence:
        return IffEvidence(self._iff, self._iff_friend, self._iff_silent, self._iff_invalid)

    def _identity(self, rows: I64, x: F64) -> npt.NDArray[np.uint8]:
        """`fuse_identity` of tracks ``rows`` (PENDING without a call to `classify` while no
        track of them was interrogated)."""
        if not self._iff[rows].any():
            return np.zeros(rows.size, np.uint8)
        classes = classify(x, ndim=self.d)[0]
        cfg = self.config
        return fuse_identity(
            self._evidence(),
            rows,
            x,
            classes,
            ndim=self.d,
            closing_mps=cfg.identity_closing_mps,
            assumed_misses=cfg.identity_assumed_misses,
        )

    def step(self, scan: Scan) -> StepReport:
        """Predict every track to ``scan.time_s``, associate, update, confirm, delete, initiate."""
        t = float(scan.time_s)
        if not math.isfinite(t):
            raise ComputeError(f"scan time_s={scan.time_s!r} must be finite seconds")
        if self.time_s is not None and t < self.time_s:
            raise ComputeError(
                f"scan of {scan.sensor_id or 'a sensor'} at t={t:.6f} s is older than the "
                f"tracker's time {self.time_s:.6f} s; feed scans in time order"
            )
        meas = self._measurements(scan)
        period = self._scan_period(scan.sensor_id, t)
        # This radar's p_d (its owner's, or measured) and false alarms per scan (its owner's,
        # else measured by `ClutterDensity`): for the track score and JPDA.
        pd = self.pd.of(scan.sensor_id, scan.pd)
        self.score.set_pd(pd)
        if self.jpda is not None:
            self.jpda.set_pd(pd)
        given_clutter = scan.clutter_per_scan
        updater = (
            self.ekf
            if meas.polar is not None and self.config.measurement_update == "ekf"
            else self.linear
        )
        n = len(self)
        ti = mj = _EMPTY_I64
        confirmed = deleted = changed = np.zeros(0, np.uint32)
        gain = np.zeros(0)
        free = np.ones(meas.count, bool)
        if n:
            self.predictor.predict(np.maximum(t - self._time, 0.0))
            self._time[:] = t
            # The predicted combined estimate only where it is read before the update: an
            # IMM gates on its models and combines once, after the update (`_track_life`).
            imm = isinstance(self.predictor, IMMPredictor)
            x = None if imm and scan.coverage is None else self.predictor.estimate()[0]
            if meas.count:
                gated, nll = self._gate(meas, updater)
                first = self._status[gated.ti] != _TENTATIVE
                miss = self._miss_cost(meas, updater, pd, given_clutter)
                if self.jpda is None:
                    ti, mj = self.associator.associate(gated, first, meas.count, nll, miss)
                    if ti.size:
                        self.predictor.update(ti, updater, meas, mj)
                else:
                    # auto: JPDA* where confirmed tracks share a detection, GNN elsewhere.
                    joint = first
                    if self.config.association == "auto":
                        joint = first & _shared_clusters(gated.ti, gated.mj, first)
                    ti, mj = self._jpda_step(
                        gated, joint, first, meas, updater, free, given_clutter, nll, miss
                    )
                if ti.size:
                    if meas.iff is not None:
                        self._evidence().record(ti, meas.iff[mj])
                    self._period[ti] = period
                    # The score of each assigned pair, from its gating distance.
                    keys = gated.ti * meas.count + gated.mj
                    order = np.argsort(keys)
                    at = order[np.searchsorted(keys[order], ti * meas.count + mj)]
                    taken = int(np.count_nonzero(self._status[ti] != _TENTATIVE))
                    density = self.clutter.observe(
                        meas, updater is self.ekf, meas.count - taken, given_clutter
                    )
                    cost = gated.d2[at] + gated.logdet[at] if nll is None else nll[at]
                    gain = self.score.hit(cost, updater.dim(meas), density)
            covered = (
                np.ones(n, bool)
                if scan.coverage is None or x is None
                else np.asarray(scan.coverage(x[:, : self.d]), dtype=bool).reshape(n)
            )
            confirmed, deleted, changed = self._track_life(ti, gain, covered, t, scan.sensor_id)
        if gain.size == 0:
            self.clutter.observe(meas, updater is self.ekf, meas.count, given_clutter)
        free[mj] = False
        initiated, refused = self._initiate(meas.subset(np.flatnonzero(free)), period)
        self.time_s = t
        self.scans += 1
        n_confirmed = int(np.count_nonzero(self._status != _TENTATIVE))
        return StepReport(
            time_s=t,
            detections=meas.count,
            assigned=int(mj.size),
            initiated=initiated,
            confirmed=confirmed,
            deleted=deleted,
            status_changed=changed,
            tracks=n_confirmed,
            tentative=len(self) - n_confirmed,
            not_initiated=refused,
        )

    _LIFE = ("_ids", "_status", "_history", "_age", "_hits", "_misses", "_time", "_update",
             "_birth", "_period", "_score", *_IFF_FIELDS)  # fmt: skip

    def snapshot(self) -> dict[str, Any]:
        """The picture as a JSON-able document: every track's combined estimate, IMM model
        probabilities and life counters, the next id, the time and the radars' scan periods.
        `restore` takes it back (a restarted tracker keeps its track ids)."""
        x, P = self.predictor.estimate()
        doc: dict[str, Any] = {
            "time_s": self.time_s,
            "next_id": self.next_id,
            "scans": self.scans,
            "ndim": self.d,
            "x": x.tolist(),
            "P": P.tolist(),
            "sensor_time": dict(self._sensor_time),
            "sensor_period": dict(self._sensor_period),
        }
        if isinstance(self.predictor, IMMPredictor):
            doc["mu"] = self.predictor.state.mu.tolist()
        for name in self._LIFE:
            doc[name[1:]] = getattr(self, name).tolist()
        return doc

    def restore(self, doc: Mapping[str, Any]) -> None:
        """Take back a `snapshot` (into a tracker with no track yet). `ComputeError` naming
        the field when the document does not fit this tracker's configuration."""
        if len(self):
            raise ComputeError("restore: the tracker already has tracks")
        try:
            n = len(doc["ids"])
            d, m = self.d, 2 * self.d
            if doc["ndim"] != d:
                raise ComputeError(f"restore: ndim {doc['ndim']!r}, this tracker is {d}-D")
            x = np.array(doc["x"], dtype=np.float64).reshape(n, m)
            P = np.array(doc["P"], dtype=np.float64).reshape(n, m, m)
            life = {}
            for name, arr in zip(self._LIFE, self._life_arrays(), strict=True):
                # A snapshot from before IFF has no evidence: not interrogated.
                value = doc.get(name[1:], [0] * n) if name in _IFF_FIELDS else doc[name[1:]]
                life[name] = np.array(value, dtype=arr.dtype).reshape(n)
            mu = None
            if isinstance(self.predictor, IMMPredictor) and "mu" in doc:
                mu = np.array(doc["mu"], dtype=np.float64).reshape(n, -1)
                if mu.shape[1] != self.predictor.mu0.size:
                    mu = None  # another model set: start from the prior probabilities
            time_s = None if doc["time_s"] is None else float(doc["time_s"])
            next_id = int(doc["next_id"])
            sensor_time = {str(k): float(v) for k, v in dict(doc["sensor_time"]).items()}
            sensor_period = {str(k): float(v) for k, v in dict(doc["sensor_period"]).items()}
        except (KeyError, TypeError, ValueError) as exc:
            raise ComputeError(f"restore: not a tracker snapshot ({exc!r})") from None
        if not (np.isfinite(x).all() and np.isfinite(P).all()):
            raise ComputeError("restore: the snapshot has NaN/inf states")
        for name, arr in life.items():
            setattr(self, name, arr)
        self.predictor.append(x, P)
        if mu is not None and isinstance(self.predictor, IMMPredictor):
            self.predictor.state.mu[:] = mu / mu.sum(axis=1, keepdims=True)
        self.time_s, self.next_id = time_s, max(next_id, int(life["_ids"].max(initial=0)) + 1)
        self.scans = int(doc.get("scans", 0))
        self._sensor_time, self._sensor_period = sensor_time, sensor_period

    def _life_arrays(self) -> list[npt.NDArray[Any]]:
        return [getattr(self, name) for name in self._LIFE]

    # -- steps --------------------------------------------------------------------------------
    def _measurements(self, scan: Scan) -> Measurements:
        d = self.d
        z = np.asarray(scan.positions_m, dtype=np.float64)
        if z.size == 0:
            z = z.reshape(0, d)
        R = np.asarray(scan.covariance_m2, dtype=np.float64)
        if z.ndim != 2 or z.shape[1] != d:
            raise ComputeError(
                f"scan positions_m must be (M, {d}) for a {d}-D tracker, got {z.shape}"
            )
        if R.shape not in ((d, d), (z.shape[0], d, d)):
            raise ComputeError(
                f"scan covariance_m2 must be ({d}, {d}) or ({z.shape[0]}, {d}, {d}), got {R.shape}"
            )
        if not (np.isfinite(z).all() and np.isfinite(R).all()):
            raise ComputeError("scan positions_m/covariance_m2 have NaN/inf values")
        polar = scan.polar
        if polar is not None and not np.isfinite(polar.z()).all():
            raise ComputeError("scan polar measurements have NaN/inf values")
        return Measurements(scan.sensor_id, float(scan.time_s), z, R, polar, self._iff_of(scan))

    def _iff_of(self, scan: Scan) -> npt.NDArray[np.uint8] | None:
        """The scan's IFF answers, ``(M,)`` uint8; a value outside 0..3 is counted in
        ``iff_rejected``, logged once and read as not interrogated."""
        if scan.iff is None:
            return None
        raw = np.asarray(scan.iff)
        m = scan.count
        if raw.shape != (m,) or not np.issubdtype(raw.dtype, np.number):
            raise ComputeError(
                f"scan iff must be ({m},) IffAnswer values 0..3, got shape {raw.shape} "
                f"of {raw.dtype}"
            )
        ok = (raw >= 0) & (raw <= 3) & (raw == np.round(raw))
        if not ok.all():
            if not self.iff_rejected:
                _log.warning(
                    "scan of %s at t=%.3f s: IFF answer %r is not an IffAnswer value (0..3); "
                    "read as not interrogated (counted in iff_rejected, logged once)",
                    scan.sensor_id or "a sensor",
                    scan.time_s,
                    raw[~ok][0],
                )
            self.iff_rejected += int(np.count_nonzero(~ok))
        return np.where(ok, raw, 0).astype(np.uint8)

    def _miss_cost(
        self,
        meas: Measurements,
        updater: PolarEKFUpdater | PositionUpdater,
        pd: float,
        given_clutter: float | None,
    ) -> float | None:
        """The GNN's cost of leaving a track without a detection, in units of d² + ln|S|: a
        pair is taken only if its likelihood ratio to clutter, p_d N(y; 0, S) / λ (the track
        score's gain), beats a miss's 1 − p_d p_g. None with ``track_logic: mofn`` (no λ)."""
        if self.config.track_logic != "llr":
            return None
        density = self.clutter.observe(meas, updater is self.ekf, None, given_clutter)
        dim = updater.dim(meas)
        miss = math.log(1.0 - pd * self.config.gate_probability)
        return -2.0 * miss + 2.0 * math.log(pd / density) - dim * _LOG_2PI

    def _gate(
        self, meas: Measurements, updater: PolarEKFUpdater | PositionUpdater
    ) -> tuple[Gated, F64 | None]:
        """The gated pairs and, for an IMM, each pair's −2 ln likelihood (less m ln 2π) under
        the model mixture. An IMM's pair is gated when *one* of its models has it within the
        chi-square gate (a track starting a turn finds its detection in the turn models' gate
        even while its straight model is the likeliest): candidates from the models'
        equal-weight combination under a wider gate, then each model's own distance."""
        if not isinstance(self.predictor, IMMPredictor):
            x, P = self.predictor.estimate()
            return self.gater.gate(x, P, meas, updater), None
        xg, Pg = self.predictor.gate_estimate()
        cand = self.wide_gater.gate(xg, Pg, meas, updater)
        d2, logdet, ll = self.predictor.model_gate(cand.ti, updater, meas, cand.mj)
        dim = updater.dim(meas)
        ok = d2 <= self.gater.threshold(dim)
        gated = Gated(cand.ti[ok], cand.mj[ok], d2[ok], logdet[ok])
        return gated, -2.0 * ll[ok] - dim * _LOG_2PI

    def _jpda_step(
        self,
        gated: Gated,
        joint: npt.NDArray[np.bool_],
        first: npt.NDArray[np.bool_],
        meas: Measurements,
        updater: PolarEKFUpdater | PositionUpdater,
        free: npt.NDArray[np.bool_],
        scan_clutter: float | None = None,
        nll: F64 | None = None,
        miss: float | None = None,
    ) -> tuple[I64, I64]:
        """JPDA for the pairs ``joint`` (confirmed tracks, updated in place by
        `Predictor.pda_update`), GNN for the other pairs on the detections JPDA leaves,
        ``first`` (confirmed) tracks choosing first. Returns each track's detection for its life
        counters and IFF: a JPDA track's most probable one when likelier than no detection.
        Clears ``free`` where a detection is taken."""
        assert self.jpda is not None
        jpda = self.jpda
        ti, mj = gated.ti[joint], gated.mj[joint]
        claimed = np.zeros(meas.count)
        t1 = m1 = _EMPTY_I64
        if ti.size:
            density = self.clutter.observe(meas, updater is self.ekf, None, scan_clutter)

            def weigh(ll: F64, rank: F64 | None) -> tuple[F64, I64, F64]:
                ranked = None if rank is None else jpda.log_ratio(rank, density)
                return jpda.marginals(ti, mj, jpda.log_ratio(ll, density), ranked)

            beta, tracks, beta0 = self.predictor.pda_update(ti, updater, meas, mj, weigh)
            order = np.lexsort((-beta, ti))
            best = order[run_starts(ti[order])]
            hit = beta[best] > beta0[np.searchsorted(tracks, ti[best])]
            t1, m1 = ti[best][hit], mj[best][hit]
            claimed = np.bincount(mj, weights=beta, minlength=meas.count).astype(np.float64)
        free &= claimed < _JPDA_TAKEN
        second = ~joint & free[gated.mj]
        rest = Gated(gated.ti[second], gated.mj[second], gated.d2[second], gated.logdet[second])
        t2, m2 = self.associator.associate(
            rest, first[second], meas.count, None if nll is None else nll[second], miss
        )
        if t2.size:
            self.predictor.update(t2, updater, meas, m2)
        return np.concatenate([t1, t2]), np.concatenate([m1, m2])

    def _scan_period(self, sensor_id: str, t: float) -> float:
        """The latest scan period of ``sensor_id`` (0 until its second scan)."""
        last = self._sensor_time.get(sensor_id)
        if last is not None and t > last:
            self._sensor_period[sensor_id] = t - last
        if sensor_id not in self._sensor_time and len(self._sensor_time) >= _MAX_SENSORS:
            gone = next(iter(self._sensor_time))
            del self._sensor_time[gone]
            self._sensor_period.pop(gone, None)
        self._sensor_time[sensor_id] = t
        return self._sensor_period.get(sensor_id, 0.0)

    def _track_life(
        self, ti: I64, gain: F64, covered: npt.NDArray[np.bool_], t: float, sensor_id: str
    ) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32], npt.NDArray[np.uint32]]:
        cfg = self.config
        n = len(self)
        hit = np.zeros(n, bool)
        hit[ti] = True
        held = covered & (self._status != _TENTATIVE)
        self.pd.observe(sensor_id, int(held.sum()), int((held & hit).sum()))
        seen = np.flatnonzero(covered | hit)
        self._history[seen] = self.mofn.update(self._history[seen], hit[seen])
        self._age[seen] += 1
        self._misses[seen] = count_misses(self._misses[seen], hit[seen])
        self._hits += hit
        self._update[hit] = t
        self._score[ti] += gain
        self._score[covered & ~hit] += self.score.log_miss

        status = self._status
        tentative = status == _TENTATIVE
        if cfg.track_logic == "llr":
            promote = tentative & (self._score >= cfg.confirm_score)
        else:
            promote = tentative & self.mofn.confirmed(self._history)
        active = ~tentative  # confirmed or coasting before this step
        new_status = np.where(self._misses >= cfg.coast_after_misses, _COASTING, _CONFIRMED)
        changed_rows = active & (new_status != status)
        status[active] = new_status[active]
        n_new = int(promote.sum())
        if n_new:
            status[promote] = _CONFIRMED
            self._ids[promote] = np.arange(self.next_id, self.next_id + n_new, dtype=np.uint32)
            self.next_id += n_new

        _, P = self.predictor.estimate()
        life = TrackLife(
            tentative,
            promote,
            self._history,
            self._age,
            self._misses,
            self._update,
            self._period,
            self._score,
        )
        delete = self.deleter.delete(life, P, t)
        deleted = self._ids[delete & (status != _TENTATIVE)]
        confirmed = self._ids[promote & ~delete]
        changed = self._ids[changed_rows & ~delete]
        if delete.any():
            self._keep(~delete)
        return confirmed, deleted, changed

    def _keep(self, mask: npt.NDArray[np.bool_]) -> None:
        for name in self._LIFE:
            setattr(self, name, getattr(self, name)[mask])
        self.predictor.keep(mask)

    def _initiate(self, meas: Measurements, period: float) -> tuple[int, int]:
        """Start tentative tracks: (started, not started for want of room: ``max_tracks``)."""
        room = max(self.config.max_tracks - len(self), 0)
        births, refused = self.initiator.initiate(meas, room)
        if births is None or births.x.shape[0] == 0:
            return 0, refused
        k = births.x.shape[0]
        n_old = len(self)
        t = meas.time_s
        self._ids = grown(self._ids, k, 0)
        self._status = grown(self._status, k, _TENTATIVE)
        self._history = grown(self._history, k, births.history)
        self._age = grown(self._age, k, births.age)
        self._hits = grown(self._hits, k, births.hits)
        self._misses = grown(self._misses, k, 0)
        self._time = grown(self._time, k, t)
        self._update = grown(self._update, k, t)
        self._birth = grown(self._birth, k, t)
        self._period = grown(self._period, k, period)
        self._score = grown(self._score, k, 0.0)
        for name in _IFF_FIELDS:
            setattr(self, name, grown(getattr(self, name), k, 0))
        if meas.iff is not None and births.cols is not None:
            self._evidence().record(np.arange(n_old, n_old + k), meas.iff[births.cols])
        self.predictor.append(births.x, births.P)
        return k, refused
