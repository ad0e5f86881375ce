"""The ``tracker`` app: `mcc.tracking.MultiTargetTracker` on the bus.

``DetectionBatch`` (all radars) in, one ``AirPicture`` per cycle and keyed ``Track`` samples
out (see `tracker`). The tracking itself (configuration, pipeline steps, defaults) lives in
`mcc.tracking`; this module is the bus wiring: reordering, bounds on hostile input, time base,
publication.
"""

from __future__ import annotations

import dataclasses
import heapq
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import Field

from mcc.apps.args import ScenarioFile
from mcc.apps.sources import SourceGuard, Speaker, speaker_of
from mcc.apps.statefile import StateFile, open_state
from mcc.errors import ComputeError, MccError
from mcc.orchestrate.appconfig import AppConfig, NonNegative, Positive, app_config, loaded_by
from mcc.orchestrate.appspec import app
from mcc.orchestrate.runtime import AppContext
from mcc.security.mission import Topics
from mcc.tracking import (
    MultiTargetTracker,
    Scan,
    StepReport,
    TrackerConfig,
    TrackerConfigError,
    TrackTable,
)
from mcc.tracking.classify import classify
from mcc.tracking.scan import Coverage
from mcc.types import (
    AirPicture,
    DetectionBatch,
    Identity,
    IffAnswer,
    TargetClass,
    Track,
    TrackStatus,
)
from mcc.types.arrays import optional_field, pack, packed_field

__all__ = [
    "MultiTargetTracker",
    "Scan",
    "StepReport",
    "TrackTable",
    "TrackerAppConfig",
    "TrackerConfig",
    "TrackerConfigError",
    "tracker",
]

_TENTATIVE = int(TrackStatus.TRACK_TENTATIVE.value)
_IFF_MAX = max(int(a.value) for a in IffAnswer)


# ---------------------------------------------------------------------------------------------
# The app


DEFAULT_SIGMA_RANGE_M = 30.0
DEFAULT_SIGMA_AZIMUTH_RAD = 0.003
DEFAULT_SIGMA_ELEVATION_RAD = 0.005


@dataclass(frozen=True)
class _Sensor:
    """What the tracker knows of one radar: its accuracy and, when known, its coverage."""

    sigma_range_m: float
    sigma_azimuth_rad: float
    sigma_elevation_rad: float
    coverage: Coverage | None = None
    #: Its site from the mission's scenario: a batch's own sensor position is not used then.
    position_m: tuple[float, float, float] | None = None
    scan_period_s: float | None = None


def _load_tracker_config(path: Path) -> object:
    return TrackerConfig.load(path)


class TrackerAppConfig(AppConfig):
    """The tracker app's ``config:`` block (every field optional). The tracking fields left
    out (None) keep the `TrackerConfig` value (of ``tracker_config`` when given)."""

    tracker_config: Annotated[Path, loaded_by(_load_tracker_config)] | None = Field(
        default=None, description="YAML file of TrackerConfig fields; the fields below override it"
    )
    model: Literal["cv", "imm"] | None = Field(default=None, description="motion model")
    gate: float | None = Field(default=None, gt=0, lt=1, description="gate probability, e.g. 0.999")
    confirm: str | None = Field(
        default=None,
        pattern=r"^\s*[0-9]+\s*/\s*[0-9]+\s*$",
        description="confirm after M hits in N scans, as 'M/N'",
    )
    max_misses: int | None = Field(default=None, ge=0, description="delete after more misses")
    sigma_a: Positive | None = Field(
        default=None, description="process noise: acceleration std, m/s²"
    )
    initiation: Literal["one_point", "two_point"] | None = Field(
        default=None, description="track initiation"
    )
    init_velocity_std: Positive | None = Field(
        default=None, description="one-point initiation velocity std, m/s"
    )
    scenario: ScenarioFile | None = Field(
        default=None, description="scenario YAML: radar accuracy and coverage by sensor_id"
    )
    sigma_range_m: Positive = Field(
        default=DEFAULT_SIGMA_RANGE_M, description="range std of a radar the scenario lacks, m"
    )
    sigma_azimuth_rad: Positive = Field(
        default=DEFAULT_SIGMA_AZIMUTH_RAD, description="its azimuth std, rad"
    )
    sigma_elevation_rad: Positive = Field(
        default=DEFAULT_SIGMA_ELEVATION_RAD, description="its elevation std, rad"
    )
    reorder_ms: NonNegative = Field(default=20.0, description="hold a batch after its origin, ms")
    track_period_s: Positive = Field(default=1.0, description="Track sample period, s")
    epoch_ns: int | None = Field(
        default=None, ge=0, description="time base, Unix ns (default: the mission's epoch)"
    )
    state: Path | None = Field(
        default=None, description="picture kept across restarts (RUN_DIR/state/SYSTEM-INDEX.json)"
    )
    checkpoint_s: NonNegative = Field(
        default=1.0,
        description="picture saved this often, s (0: each cycle)",
    )
    max_future_ms: NonNegative = Field(
        default=2000.0,
        description="drop batches stamped further ahead of the receive time, ms",
    )
    max_age_s: NonNegative = Field(
        default=300.0,
        description="drop batches stamped further behind the receive time, s",
    )
    max_detections: int = Field(default=20_000, ge=1, description="detections per batch")
    min_scan_fraction: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="a source's batches closer than this fraction of its radar's scan period "
        "(of min_scan_interval_ms when the scenario does not say) are dropped",
    )
    min_scan_interval_ms: NonNegative = Field(
        default=100.0, description="scan period assumed for a radar the scenario lacks, ms"
    )
    max_sensors: int = Field(default=64, ge=1, description="radars tracked")
    max_pending: int = Field(default=1024, ge=1, description="batches held to reorder")
    max_pending_detections: int = Field(
        default=200_000, ge=1, description="detections held to reorder"
    )
    max_tracks: int | None = Field(
        default=None, ge=1, description="tracks held (TrackerConfig.max_tracks)"
    )


@app(
    topics=Topics(publish=("AirPicture", "Track"), subscribe=("DetectionBatch",)),
    config=TrackerAppConfig,
)
def tracker(ctx: AppContext) -> int:
    """Track every radar's ``DetectionBatch``; publish ``AirPicture`` and ``Track`` samples.

    Each cycle takes the batches that have arrived, holds each until ``reorder_ms`` past
    its ``origin_ns`` (so batches of several radars are folded in time order), runs
    `MultiTargetTracker.step` per batch and publishes one ``AirPicture`` (confirmed and
    coasting tracks; ``origin_ns`` = the oldest detection origin folded in, ``time_ns`` = the
    newest). Confirmed tracks are also published on the keyed ``Track`` topic every
    ``track_period_s`` and on a status change; a deleted track gets a last sample with
    ``TRACK_DELETED`` and is then disposed. A batch older than the tracker's time is late:
    counted and dropped. The heartbeat counts batches in and pictures out and records
    publish − origin of every batch folded in.

    What a sender stamps never decides what the tracker holds: on arrival, a batch whose
    ``origin_ns`` is more than ``max_future_ms`` ahead of the receive time, or more than
    ``max_age_s`` behind it, is dropped, as is one of more than ``max_detections``
    detections, one of a radar past the ``max_sensors`` first, and one that would make the
    batches held for reordering more than ``max_pending`` (or their detections more than
    ``max_pending_detections``), and one whose ``iff`` answers are not empty or ``count``
    `IffAnswer` values (the rule the bus holds other packed arrays to). Each is counted by
    reason and the first of each logged. The IFF answers go with the detections to the tracker,
    which fuses them into each track's STANAG 1241 ``identity`` (`mcc.tracking.identity`),
    published with the track's latest ``iff`` on ``AirPicture`` and ``Track``.

    Settings: `TrackerAppConfig` (``ctx.config``); the time base is ``epoch_ns``, else the
    mission's epoch (``ctx.settings.epoch_ns``), else the first batch's second.
    """
    try:
        opts = app_config(ctx, TrackerAppConfig)
        config = _app_config(opts)
        sensors = _app_sensors(opts.scenario)
    except MccError as exc:
        print(f"mcc: error: {exc}", file=sys.stderr)
        return 2
    _TrackerApp(ctx, config, sensors, opts).run()
    return 0


def _app_config(opts: TrackerAppConfig) -> TrackerConfig:
    base = TrackerConfig.load(opts.tracker_config) if opts.tracker_config else TrackerConfig()
    overrides: dict[str, Any] = {}
    for flag, name in (
        ("model", "model"),
        ("gate", "gate_probability"),
        ("max_misses", "max_misses"),
        ("sigma_a", "sigma_a_mps2"),
        ("initiation", "initiation"),
        ("init_velocity_std", "init_velocity_std_mps"),
        ("max_tracks", "max_tracks"),
    ):
        if getattr(opts, flag) is not None:
            overrides[name] = getattr(opts, flag)
    if opts.confirm is not None:
        m, _, n = opts.confirm.partition("/")
        overrides["confirm_m"], overrides["confirm_n"] = int(m), int(n)
    config = TrackerConfig.from_dict({**base.to_dict(), **overrides}, source="tracker options")
    if config.ndim != 3:
        raise TrackerConfigError(f"TrackerConfig.ndim={config.ndim}: the tracker app is 3-D")
    return config


def _app_sensors(scenario_path: str | Path | None) -> dict[str, _Sensor]:
    if not scenario_path:
        return {}
    from mcc.apps.scenario import load_scenario

    return {
        radar.id: _Sensor(
            radar.sigma_range_m,
            radar.sigma_azimuth_rad,
            radar.sigma_elevation_rad,
            radar.in_coverage,
            radar.position_m,
            radar.scan_period_s,
        )
        for radar in load_scenario(scenario_path).radars
    }


@dataclass
class _TrackerApp:
    ctx: AppContext
    config: TrackerConfig
    sensors: dict[str, _Sensor]
    opts: TrackerAppConfig
    epoch_ns: int | None = None
    cycle: int = 0
    late: int = 0
    pending: list[tuple[int, int, DetectionBatch]] = field(default_factory=list)
    pending_detections: int = 0
    sent: dict[int, tuple[float, Track]] = field(default_factory=dict)
    step_ms: list[float] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)  # batches refused on arrival
    heard: set[str] = field(default_factory=set)  # radars whose batches were held
    classes: npt.NDArray[np.uint8] = field(default_factory=lambda: np.zeros(0, np.uint8))

    def __post_init__(self) -> None:
        self.tracker = MultiTargetTracker(self.config)
        self.tracker_id = self.ctx.identity.id
        ident = self.ctx.identity
        self.record: StateFile = open_state(
            self.opts.state,
            run_dir=self.ctx.run_dir,
            system=ident.system,
            index=ident.index,
            kind="tracker",
        )
        self.saved_at = 0.0
        if self.opts.epoch_ns is not None:
            self.epoch_ns = self.opts.epoch_ns
        elif self.ctx.settings.epoch_ns is not None:
            self.epoch_ns = self.ctx.settings.epoch_ns
        self.default_sensor = _Sensor(
            self.opts.sigma_range_m, self.opts.sigma_azimuth_rad, self.opts.sigma_elevation_rad
        )
        self._resume()
        self.reorder_ns = int(max(self.opts.reorder_ms, 0.0) * 1e6)
        self.max_future_ns = int(self.opts.max_future_ms * 1e6)
        self.max_age_ns = int(self.opts.max_age_s * 1e9)
        self.seq = 0
        self.sources = SourceGuard(
            {k: s.scan_period_s for k, s in self.sensors.items() if s.scan_period_s},
            min_fraction=self.opts.min_scan_fraction,
            default_period_s=self.opts.min_scan_interval_ms / 1e3,
            max_sources=self.opts.max_sensors,
            known_only=self.ctx.bus.secured and bool(self.sensors),
        )

    def run(self) -> None:
        ctx = self.ctx
        reader = ctx.bus.reader("DetectionBatch")
        self.pictures = ctx.bus.writer("AirPicture")
        self.tracks_out = ctx.bus.writer("Track")
        ctx.log.info(
            "tracker %s: model %s, gate %.4g, confirm %d/%d, max misses %d, %d known radars",
            self.tracker_id,
            self.config.model,
            self.config.gate_probability,
            self.config.confirm_m,
            self.config.confirm_n,
            self.config.max_misses,
            len(self.sensors),
        )
        next_log = time.monotonic() + 10.0
        while not ctx.stopping:
            timeout_s = 0.1
            if self.pending:
                due_ns = self.pending[0][0] + self.reorder_ns
                timeout_s = min(max((due_ns - time.time_ns()) * 1e-9, 0.0), 0.1)
            if timeout_s > 0:
                reader.wait(timeout_s)
            for batch in reader.take(256):
                ctx.heartbeat.count_in()
                self._hold(batch, time.time_ns(), speaker_of(reader, batch))
            now_ns = time.time_ns()
            due = []
            while self.pending and self.pending[0][0] + self.reorder_ns <= now_ns:
                batch = heapq.heappop(self.pending)[2]
                self.pending_detections -= int(batch.count)
                due.append(batch)
            if due:
                self._cycle(due)
            if time.monotonic() >= next_log:
                next_log += 10.0
                self._log_status()

    def _resume(self) -> None:
        """Take back the picture a previous instance of this identity saved: same tracks,
        same ids, the same time base (published again at the first cycle)."""
        doc = self.record.load()
        if doc is None:
            return
        try:
            epoch_ns, cycle = int(doc["epoch_ns"]), int(doc["cycle"])
            self.tracker.restore(doc["tracker"])
        except (KeyError, TypeError, ValueError, ComputeError) as exc:
            self.tracker = MultiTargetTracker(self.config)
            self.record.reject(f"not a picture of this tracker ({str(exc)[:160]})")
            return
        self.epoch_ns, self.cycle = epoch_ns, cycle
        self.ctx.log.info(
            "tracker %s: resumed %d tracks (next id %d) from %s",
            self.tracker_id,
            len(self.tracker),
            self.tracker.next_id,
            self.record.path,
        )

    def _checkpoint(self) -> None:
        now = time.monotonic()
        if self.record.path is None or now - self.saved_at < self.opts.checkpoint_s:
            return
        self.saved_at = now
        self.record.save(
            {"epoch_ns": self.epoch_ns, "cycle": self.cycle, "tracker": self.tracker.snapshot()}
        )

    def _refusal(
        self, batch: DetectionBatch, receive_ns: int, speaker: Speaker | None = None
    ) -> tuple[str, str]:
        """Why ``batch`` is not held, as (kind, message); ("", "") when it is held. Times are
        checked against the receive clock, never against another sender's stamp."""
        opts = self.opts
        if speaker is None and self.ctx.bus.secured:
            return "unsourced", "its writer speaks for no identity (no source partition)"
        if speaker is not None:
            kind, why = self.sources.refusal(batch, receive_ns, speaker)
            if kind:
                return kind, why
        ahead_ns = batch.origin_ns - receive_ns
        if ahead_ns > self.max_future_ns:
            return "future", f"stamped {ahead_ns / 1e9:.3g} s ahead (max_future_ms)"
        if -ahead_ns > self.max_age_ns:
            return "old", f"stamped {-ahead_ns / 1e9:.3g} s behind (max_age_s)"
        if batch.count > opts.max_detections:
            return "large", f"{batch.count} detections (max_detections {opts.max_detections})"
        if batch.sensor_id not in self.heard and len(self.heard) >= opts.max_sensors:
            return "sensors", f"one radar too many (max_sensors {opts.max_sensors})"
        if len(self.pending) >= opts.max_pending:
            return "held", f"{len(self.pending)} batches held to reorder (max_pending)"
        if self.pending_detections + batch.count > opts.max_pending_detections:
            return "held", f"{self.pending_detections} detections held (max_pending_detections)"
        return _iff_refusal(batch)

    def _hold(self, batch: DetectionBatch, receive_ns: int, speaker: Speaker | None = None) -> None:
        """Hold ``batch`` until its reorder time, or drop it (counted, first of a kind logged)."""
        kind, why = self._refusal(batch, receive_ns, speaker)
        if kind:
            self.dropped[kind] += 1
            if self.dropped[kind] == 1:
                self.ctx.log.warning(
                    "batch %d of radar %r dropped: %s; further ones are counted, not logged",
                    batch.scan_id,
                    batch.sensor_id[:80],
                    why,
                )
            return
        self.heard.add(batch.sensor_id)
        if speaker is not None:
            self.sources.accept(batch, receive_ns, speaker)
        self.seq += 1
        heapq.heappush(self.pending, (batch.origin_ns, self.seq, batch))
        self.pending_detections += int(batch.count)

    def _cycle(self, batches: list[DetectionBatch]) -> None:
        folded: list[DetectionBatch] = []
        confirmed: list[npt.NDArray[np.uint32]] = []
        deleted: list[npt.NDArray[np.uint32]] = []
        changed: list[npt.NDArray[np.uint32]] = []
        if self.epoch_ns is None:
            first = batches[0].origin_ns
            self.epoch_ns = first - first % 1_000_000_000
        for batch in batches:
            t_s = (batch.origin_ns - self.epoch_ns) * 1e-9
            if self.tracker.time_s is not None and t_s < self.tracker.time_s:
                self.late += 1
                if self.late == 1 or self.late % 100 == 0:
                    self.ctx.log.warning(
                        "late batch from %s (%.3f s behind the tracker; %d late so far): "
                        "dropped; raise --reorder-ms?",
                        batch.sensor_id[:80],
                        self.tracker.time_s - t_s,
                        self.late,
                    )
                continue
            start = time.perf_counter()
            report = self.tracker.step(self._scan(batch, t_s))
            self.step_ms.append((time.perf_counter() - start) * 1e3)
            confirmed.append(report.confirmed)
            deleted.append(report.deleted)
            changed.append(report.status_changed)
            folded.append(batch)
        if not folded:
            return
        table = self.tracker.tracks()
        publish_ns = self._publish_picture(table, min(b.origin_ns for b in folded))
        for batch in folded:
            self.ctx.heartbeat.record_latency_ns(publish_ns - batch.origin_ns)
        self._publish_tracks(
            table, np.concatenate(confirmed + changed), np.concatenate(deleted), publish_ns
        )
        self._checkpoint()

    def _scan(self, batch: DetectionBatch, t_s: float) -> Scan:
        sensor = self.sensors.get(batch.sensor_id)
        if sensor is None:
            if self.sensors:
                self.ctx.log.warning(
                    "radar %r is not in the scenario; using the default accuracies",
                    batch.sensor_id[:80],
                )
            sensor = self.sensors[batch.sensor_id] = self.default_sensor
        return Scan.from_polar(
            t_s,
            packed_field(batch, "range_m"),
            packed_field(batch, "azimuth_rad"),
            packed_field(batch, "elevation_rad"),
            sigma_range_m=sensor.sigma_range_m,
            sigma_azimuth_rad=sensor.sigma_azimuth_rad,
            sigma_elevation_rad=sensor.sigma_elevation_rad,
            sensor_position_m=sensor.position_m
            or (batch.sensor_x_m, batch.sensor_y_m, batch.sensor_z_m),
            sensor_id=batch.sensor_id,
            coverage=sensor.coverage,
            iff=optional_field(batch, "iff"),  # checked on arrival (_iff_refusal)
        )

    def _ns(self, t_s: float) -> int:
        assert self.epoch_ns is not None
        return self.epoch_ns + int(round(t_s * 1e9))

    def _publish_picture(self, table: TrackTable, origin_ns: int) -> int:
        self.cycle += 1
        n = table.count
        self.classes = classify(table.x, ndim=table.ndim)[0]
        publish_ns = time.time_ns()
        self.pictures.write(
            AirPicture(
                tracker_id=self.tracker_id,
                cycle=self.cycle,
                time_ns=self._ns(self.tracker.time_s or 0.0),
                origin_ns=origin_ns,
                publish_ns=publish_ns,
                count=n,
                track_id=pack(table.ids, "<u4"),
                status=pack(table.status, "u1"),
                classification=pack(self.classes, "u1"),
                quality=pack(table.quality, "<f8"),
                state=pack(table.x, "<f8"),
                covariance=pack(table.P, "<f8"),
                identity=pack(table.identity, "u1"),
                iff=pack(table.iff, "u1"),
            )
        )
        self.ctx.heartbeat.count_out()
        return publish_ns

    def _publish_tracks(
        self,
        table: TrackTable,
        news: npt.NDArray[np.uint32],
        gone: npt.NDArray[np.uint32],
        now_ns: int,
    ) -> None:
        # Keyed state at a low rate: one sample per track per period, or on a change.
        period_ns = int(self.opts.track_period_s * 1e9)
        urgent = set(news.tolist())
        for row, track_id in enumerate(table.ids.tolist()):
            last = self.sent.get(track_id)
            if last is not None and track_id not in urgent and now_ns - last[0] < period_ns:
                continue
            x, P = table.x[row], table.P[row]
            update_ns = self._ns(float(table.update_s[row]))
            sample = Track(
                track_id=track_id,
                tracker_id=self.tracker_id,
                status=TrackStatus(int(table.status[row])),
                classification=TargetClass(int(self.classes[row])),
                x_m=float(x[0]),
                y_m=float(x[1]),
                z_m=float(x[2]),
                vx_mps=float(x[3]),
                vy_mps=float(x[4]),
                vz_mps=float(x[5]),
                covariance=P.reshape(36).tolist(),
                quality=float(table.quality[row]),
                hits=int(table.hits[row]),
                misses=int(table.misses[row]),
                update_ns=update_ns,
                origin_ns=update_ns,
                identity=Identity(int(table.identity[row])),
                iff=IffAnswer(int(table.iff[row])),
            )
            self.tracks_out.write(sample)
            self.sent[track_id] = (now_ns, sample)
        for track_id in gone.tolist():
            entry = self.sent.pop(track_id, None)
            if entry is None:
                continue
            final = dataclasses.replace(entry[1], status=TrackStatus.TRACK_DELETED)
            self.tracks_out.write(final)
            self.tracks_out.retire(final)

    def _log_status(self) -> None:
        ms = self.step_ms
        self.step_ms = []
        n_conf = int(np.count_nonzero(self.tracker._status != _TENTATIVE))
        self.ctx.log.info(
            "cycle %d: %d tracks, %d tentative, step p50 %.2f ms max %.2f ms, %d late batches%s",
            self.cycle,
            n_conf,
            len(self.tracker) - n_conf,
            float(np.median(ms)) if ms else 0.0,
            max(ms) if ms else 0.0,
            self.late,
            "".join(f", {n} dropped {kind}" for kind, n in sorted(self.dropped.items())),
        )


def _iff_refusal(batch: DetectionBatch) -> tuple[str, str]:
    """Why the IFF answers of ``batch`` are refused, as (kind, message); ("", "") when they are
    fine: none (not interrogated) or ``count`` `IffAnswer` values."""
    try:
        iff = optional_field(batch, "iff")
    except ValueError as exc:
        return "iff", str(exc)
    if iff is not None and iff.size and int(iff.max()) > _IFF_MAX:
        bad = int(np.flatnonzero(iff > _IFF_MAX)[0])
        return "iff", f"iff[{bad}] = {int(iff[bad])} is not an IffAnswer (0..{_IFF_MAX})"
    return "", ""
