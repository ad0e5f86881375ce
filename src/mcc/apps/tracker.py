"""The ``tracker`` app: `mcc.tracking.MultiTargetTracker` on the bus.

``DetectionBatch`` (all radars) in, one ``AirPicture`` per cycle and keyed ``Track`` samples
out (see `tracker`). The tracking itself (configuration, pipeline steps, defaults) lives in
`mcc.tracking`; this module is the bus wiring: reordering, bounds on hostile input, time base,
publication.
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import math
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from mcc import settings
from mcc.apps.statefile import StateFile, open_state
from mcc.errors import ComputeError, MccError
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


def _scenario(path: str) -> object:
    from mcc.apps.scenario import load_scenario

    return load_scenario(path)


#: Files its arguments name, with their loaders: `mcc validate` checks they exist and parse.
FILE_ARGS = {"--scenario": _scenario}
BUS_TOPICS = {"tracker": Topics(publish=("AirPicture", "Track"), subscribe=("DetectionBatch",))}

__all__ = [
    "MultiTargetTracker",
    "Scan",
    "StepReport",
    "TrackTable",
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


def tracker(ctx: AppContext) -> int:
    """Track every radar's ``DetectionBatch``; publish ``AirPicture`` and ``Track`` samples.

    Each cycle takes the batches that have arrived, holds each until ``--reorder-ms`` past
    its ``origin_ns`` (so batches of several radars are folded in time order), runs
    `MultiTargetTracker.step` per batch and publishes one ``AirPicture`` (confirmed and
    coasting tracks; ``origin_ns`` = the oldest detection origin folded in, ``time_ns`` = the
    newest). Confirmed tracks are also published on the keyed ``Track`` topic every
    ``--track-period-s`` and on a status change; a deleted track gets a last sample with
    ``TRACK_DELETED`` and is then disposed. A batch older than the tracker's time is late:
    counted and dropped. The heartbeat counts batches in and pictures out and records
    publish − origin of every batch folded in.

    What a sender stamps never decides what the tracker holds: on arrival, a batch whose
    ``origin_ns`` is more than ``--max-future-ms`` ahead of the receive time, or more than
    ``--max-age-s`` behind it, is dropped, as is one of more than ``--max-detections``
    detections, one of a radar past the ``--max-sensors`` first, and one that would make the
    batches held for reordering more than ``--max-pending`` (or their detections more than
    ``--max-pending-detections``), and one whose ``iff`` answers are not empty or ``count``
    `IffAnswer` values (the rule the bus holds other packed arrays to). Each is counted by
    reason and the first of each logged. The IFF answers go with the detections to the tracker,
    which fuses them into each track's STANAG 1241 ``identity`` (`mcc.tracking.identity`),
    published with the track's latest ``iff`` on ``AirPicture`` and ``Track``.

    Args (``ctx.args``): ``--config FILE`` (YAML `TrackerConfig`; the flags below override
    it), ``--model cv|imm``, ``--gate P`` (gate probability), ``--confirm M/N``,
    ``--max-misses K``, ``--sigma-a`` (m/s²), ``--initiation one_point|two_point``,
    ``--init-velocity-std`` (m/s), ``--scenario FILE`` (radar accuracy and coverage by
    ``sensor_id``), ``--sigma-range-m``/``--sigma-azimuth-rad``/``--sigma-elevation-rad``
    (radars the scenario does not name), ``--reorder-ms`` (20), ``--track-period-s`` (1),
    ``--epoch-ns`` (time base; default ``MCC_EPOCH_NS``, else the first batch's second),
    ``--max-future-ms`` (2000), ``--max-age-s`` (300), ``--max-detections`` (20 000),
    ``--max-sensors`` (64), ``--max-pending`` (1024), ``--max-pending-detections`` (200 000),
    ``--max-tracks`` (`TrackerConfig.max_tracks`).
    """
    parser = _app_parser()
    opts = parser.parse_args(ctx.args)
    try:
        config = _app_config(opts)
        sensors = _app_sensors(opts.scenario)
    except MccError as exc:
        print(f"mcc: error: {exc}", file=sys.stderr)
        return 2
    _TrackerApp(ctx, config, sensors, opts).run()
    return 0


def _app_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcc.apps.tracker:tracker", description="the multi-radar multi-target tracker"
    )
    parser.add_argument("--config", type=Path, help="YAML file of TrackerConfig fields")
    parser.add_argument("--model", choices=("cv", "imm"), help="motion model")
    parser.add_argument("--gate", type=float, help="gate probability, e.g. 0.999")
    parser.add_argument("--confirm", metavar="M/N", help="confirm after M hits in N scans")
    parser.add_argument("--max-misses", type=int, help="delete after more misses than this")
    parser.add_argument("--sigma-a", type=float, help="process noise: acceleration std, m/s²")
    parser.add_argument("--initiation", choices=("one_point", "two_point"))
    parser.add_argument("--init-velocity-std", type=float, help="one-point velocity std, m/s")
    parser.add_argument("--scenario", help="scenario YAML: radar accuracy and coverage")
    parser.add_argument("--sigma-range-m", type=float, default=DEFAULT_SIGMA_RANGE_M)
    parser.add_argument("--sigma-azimuth-rad", type=float, default=DEFAULT_SIGMA_AZIMUTH_RAD)
    parser.add_argument("--sigma-elevation-rad", type=float, default=DEFAULT_SIGMA_ELEVATION_RAD)
    parser.add_argument("--reorder-ms", type=float, default=20.0, help="hold after origin, ms")
    parser.add_argument("--track-period-s", type=float, default=1.0, help="Track sample period")
    parser.add_argument("--epoch-ns", type=int, help="time base, Unix ns")
    parser.add_argument(
        "--state",
        metavar="FILE",
        help="the picture kept across restarts (default RUN_DIR/state/SYSTEM-INDEX.json)",
    )
    parser.add_argument(
        "--checkpoint-s", type=float, default=1.0, help="picture saved this often (%(default)s s)"
    )
    bound = parser.add_argument_group("bounds (hostile input is normal input)")
    bound.add_argument(
        "--max-future-ms",
        type=float,
        default=2000.0,
        help="drop batches stamped further ahead of the receive time (default %(default)s)",
    )
    bound.add_argument(
        "--max-age-s",
        type=float,
        default=300.0,
        help="drop batches stamped further behind the receive time (default %(default)s)",
    )
    bound.add_argument("--max-detections", type=int, default=20_000, help="per batch")
    bound.add_argument("--max-sensors", type=int, default=64, help="radars tracked")
    bound.add_argument("--max-pending", type=int, default=1024, help="batches held to reorder")
    bound.add_argument(
        "--max-pending-detections", type=int, default=200_000, help="detections held to reorder"
    )
    bound.add_argument("--max-tracks", type=int, help="tracks held (TrackerConfig.max_tracks)")
    return parser


def _app_config(opts: argparse.Namespace) -> TrackerConfig:
    for flag in ("max_detections", "max_sensors", "max_pending", "max_pending_detections"):
        if getattr(opts, flag) < 1:
            raise TrackerConfigError(f"--{flag.replace('_', '-')} {getattr(opts, flag)}: >= 1")
    for flag in ("max_future_ms", "max_age_s"):
        if not (math.isfinite(getattr(opts, flag)) and getattr(opts, flag) >= 0):
            raise TrackerConfigError(
                f"--{flag.replace('_', '-')} {getattr(opts, flag)}: a finite number >= 0"
            )
    base = TrackerConfig.load(opts.config) if opts.config else TrackerConfig()
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
        m, sep, n = opts.confirm.partition("/")
        if not (sep and m.strip().isdigit() and n.strip().isdigit()):
            raise TrackerConfigError(f"--confirm {opts.confirm!r}: expected M/N, e.g. 3/4")
        overrides["confirm_m"], overrides["confirm_n"] = int(m), int(n)
    config = TrackerConfig.from_dict({**base.to_dict(), **overrides}, source="tracker options")
    if config.ndim != 3:
        raise TrackerConfigError(f"TrackerConfig.ndim={config.ndim}: the tracker app is 3-D")
    return config


def _app_sensors(scenario_path: str | None) -> dict[str, _Sensor]:
    if not scenario_path:
        return {}
    from mcc.apps.scenario import load_scenario

    return {
        radar.id: _Sensor(
            radar.sigma_range_m,
            radar.sigma_azimuth_rad,
            radar.sigma_elevation_rad,
            radar.in_coverage,
        )
        for radar in load_scenario(scenario_path).radars
    }


@dataclass
class _TrackerApp:
    ctx: AppContext
    config: TrackerConfig
    sensors: dict[str, _Sensor]
    opts: argparse.Namespace
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
        elif settings.current().epoch_ns is not None:
            self.epoch_ns = settings.current().epoch_ns
        self.default_sensor = _Sensor(
            self.opts.sigma_range_m, self.opts.sigma_azimuth_rad, self.opts.sigma_elevation_rad
        )
        self._resume()
        self.reorder_ns = int(max(self.opts.reorder_ms, 0.0) * 1e6)
        self.max_future_ns = int(self.opts.max_future_ms * 1e6)
        self.max_age_ns = int(self.opts.max_age_s * 1e9)
        self.seq = 0

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
                self._hold(batch, time.time_ns())
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

    def _refusal(self, batch: DetectionBatch, receive_ns: int) -> tuple[str, str]:
        """Why ``batch`` is not held, as (kind, message); ("", "") when it is held. Times are
        checked against the receive clock, never against another sender's stamp."""
        opts = self.opts
        ahead_ns = batch.origin_ns - receive_ns
        if ahead_ns > self.max_future_ns:
            return "future", f"stamped {ahead_ns / 1e9:.3g} s ahead (--max-future-ms)"
        if -ahead_ns > self.max_age_ns:
            return "old", f"stamped {-ahead_ns / 1e9:.3g} s behind (--max-age-s)"
        if batch.count > opts.max_detections:
            return "large", f"{batch.count} detections (--max-detections {opts.max_detections})"
        if batch.sensor_id not in self.heard and len(self.heard) >= opts.max_sensors:
            return "sensors", f"one radar too many (--max-sensors {opts.max_sensors})"
        if len(self.pending) >= opts.max_pending:
            return "held", f"{len(self.pending)} batches held to reorder (--max-pending)"
        if self.pending_detections + batch.count > opts.max_pending_detections:
            return "held", f"{self.pending_detections} detections held (--max-pending-detections)"
        return _iff_refusal(batch)

    def _hold(self, batch: DetectionBatch, receive_ns: int) -> None:
        """Hold ``batch`` until its reorder time, or drop it (counted, first of a kind logged)."""
        kind, why = self._refusal(batch, receive_ns)
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
                        batch.sensor_id,
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
                    batch.sensor_id,
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
            sensor_position_m=(batch.sensor_x_m, batch.sensor_y_m, batch.sensor_z_m),
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
            self.tracks_out.dispose(final)

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
