"""Simulation apps: ``truth`` (the one simulation authority) and ``radar`` (one per sensor).

``truth`` propagates a scenario on wall time from an epoch and publishes ``Truth`` at a fixed
rate; it takes kills from the bus (``EngagementOrder`` with status ``ORDER_KILL``: the target
nearest the order's track) and logs impacts. ``radar`` turns the newest ``Truth`` into one
``DetectionBatch`` per scan, paced on wall time, ``origin_ns`` = the scan time. So every radar
sees the same targets, and a killed target vanishes from all of them, without the radars
talking to each other (docs/scenario.md). A radar with an IFF interrogator in the scenario
(``iff: {p_reply: …}``) sets each detection's ``iff`` answer (the scenario's
``iff: {mode5: true}`` targets are the friends); one without leaves ``iff`` empty. With
``asterix_to`` a radar also sends each scan as ASTERIX CAT048 plots and a CAT034 north marker
over UDP (`mcc.asterix.emit`), for a gateway to take (docs/asterix.md); with
``detections_on_bus: false`` it sends them only that way.

Bounds: a radar takes the newest ``Truth`` by its stamp, but never one stamped further ahead of
its own clock than ``max_truth_age_s`` (it would stay "the newest" and blind the radar until
then); the truth app keeps at most ``MAX_TRACKS`` tracks and ``MAX_ORDERS`` orders, and
extrapolates a track by at most ``MAX_TRACK_AGE_S``. What is dropped is counted and logged once.

Their settings are the system's ``config:`` block (`TruthConfig`, `RadarConfig`)::

    truth: {app: mcc.apps.radar:truth, config: {scenario: scenarios/sam-toc.yaml}}
    radar: {app: mcc.apps.radar:radar, config: {scenario: scenarios/sam-toc.yaml, radar: search}}
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from mcc.apps.args import DEFAULT_SCENARIO, ScenarioFile
from mcc.apps.scenario import Impact, RadarModel, Scenario, TruthState, load_scenario
from mcc.asterix.emit import PlotEmitter
from mcc.asterix.udp import check_address, check_ipv4
from mcc.errors import MccError
from mcc.files import write_atomic
from mcc.orchestrate.appconfig import AppConfig, Positive, app_config
from mcc.orchestrate.appspec import app
from mcc.orchestrate.runtime import AppContext
from mcc.security.mission import Topics
from mcc.types import EngagementOrder, OrderStatus, Track, TrackStatus, Truth

__all__ = ["RadarConfig", "TruthConfig", "default_epoch_ns", "radar", "truth"]


class _SimConfig(AppConfig):
    scenario: ScenarioFile = Field(
        default=Path(DEFAULT_SCENARIO), description="scenario YAML file (docs/scenario.md)"
    )
    epoch_ns: int | None = Field(
        default=None,
        ge=0,
        description="scenario time 0, Unix ns (default: the mission's epoch, else now, whole s)",
    )


class TruthConfig(_SimConfig):
    """The truth app's ``config:`` block (every field optional)."""

    rate_hz: Positive = Field(default=10.0, description="Truth samples per second")
    kill_gate_m: Positive = Field(
        default=1000.0, description="how far a killed track may be from the target it names, m"
    )
    summary: Path | None = Field(
        default=None, description="kills and impacts, JSON (default <run_dir>/truth-summary.json)"
    )
    exit_at_end: bool = Field(default=False, description="return at the scenario's duration_s")


class RadarConfig(_SimConfig):
    """A radar app's ``config:`` block (every field optional)."""

    radar: str | None = Field(
        default=None, description="scenario radar id (default: the instance index's radar)"
    )
    truth_source: Literal["bus", "scenario"] = Field(
        default="bus",
        description="bus: the newest Truth sample; scenario: propagate the file, no kills",
    )
    max_truth_age_s: Positive = Field(
        default=2.0, description="older (or further ahead) truth is ignored: clutter only"
    )
    asterix_to: str | None = Field(
        default=None,
        description="also send each scan as ASTERIX CAT048 + CAT034 to this UDP HOST:PORT",
    )
    asterix_interface: str | None = Field(
        default=None, description="interface address for a multicast asterix_to"
    )
    asterix_sac: int = Field(default=0, ge=0, le=255, description="SAC of its ASTERIX")
    asterix_sic: int | None = Field(
        default=None, ge=0, le=255, description="SIC (default: 1 + its number in the scenario)"
    )
    detections_on_bus: bool = Field(
        default=True, description="publish DetectionBatch (false: ASTERIX only)"
    )

    @field_validator("asterix_to")
    @classmethod
    def _asterix_to(cls, value: str | None) -> str | None:
        return value if value is None else check_address(value)

    @field_validator("asterix_interface")
    @classmethod
    def _asterix_interface(cls, value: str | None) -> str | None:
        return value if value is None else check_ipv4(value)


#: What the truth app keeps: tracks heard of, kill orders waiting or done; how far it moves a
#: track along its velocity to find the target an order names.
MAX_TRACKS = 10_000
MAX_ORDERS = 10_000
MAX_TRACK_AGE_S = 10.0
#: Kills and impacts listed in truth-summary.json (the latest; every one is counted). Each
#: listed kill held about 1.5 kB of the process's memory (its record and the summary rewritten
#: every second): at 1000, a raid that never ends grew the truth's RSS 1.5 MB over its first
#: hour of kills (measured: 0.13 MB at 100), the slope the 2-hour soak saw.
MAX_LISTED = 100
#: Friends killed, listed: their count is the summary's fratricide (none, when TEWA is right).
MAX_FRIENDS_LISTED = 1000


def default_epoch_ns(now_ns: int | None = None, *, epoch_ns: int | None = None) -> int:
    """The default scenario start (Unix ns): the mission's epoch (``epoch_ns``, an instance's
    ``ctx.settings.epoch_ns``, set by the supervisor, so a replaced instance resumes the
    scenario where it was), else now rounded down to the whole second."""
    if now_ns is None and epoch_ns is not None:
        return epoch_ns
    now_ns = time.time_ns() if now_ns is None else now_ns
    return now_ns - now_ns % 1_000_000_000


# -- truth ---------------------------------------------------------------------------------


@app(
    topics=Topics(publish=("Truth",), subscribe=("EngagementOutcome", "Track")), config=TruthConfig
)
def truth(ctx: AppContext) -> int:
    """Publish the scenario's ``Truth`` at ``rate_hz`` until stopped; apply kills from the bus.

    Settings: `TruthConfig` (``ctx.config``): the scenario, its epoch, the rate, the kill gate,
    where the summary goes (kills and impacts as JSON at exit), whether to stop at its end.
    """
    try:
        opts = app_config(ctx, TruthConfig)
        scenario = _load(opts.scenario)
    except MccError as exc:
        return _fail(exc)
    epoch_ns = _epoch(ctx, opts)
    summary_path = opts.summary or ctx.run_dir / "truth-summary.json"
    writer = ctx.bus.writer("Truth")
    desk = _KillDesk(ctx, scenario, gate_m=opts.kill_gate_m)
    ctx.log.info(
        "scenario %s: %d targets, %d radars, epoch %d ns, %.1f Hz",
        scenario.id,
        scenario.n_targets,
        len(scenario.radars),
        epoch_ns,
        opts.rate_hz,
    )
    t_s = 0.0
    last_summary_ns = 0
    for tick_ns in _ticks(ctx, 1.0 / opts.rate_hz, start_ns=epoch_ns):
        t_s = (tick_ns - epoch_ns) * 1e-9
        desk.poll(t_s, tick_ns)
        writer.write(scenario.truth_at(t_s).to_msg(scenario_id=scenario.id, time_ns=tick_ns))
        ctx.heartbeat.count_out()
        for hit in scenario.impacts(t_s, since_s=desk.impacts_until_s):
            ctx.log.warning(
                "impact: target %d reached %s at t=%.1f s", hit.target_id, hit.asset_id, hit.time_s
            )
            desk.impacts.append(hit)
            desk.leakers += 1
        desk.impacts_until_s = t_s
        if tick_ns - last_summary_ns >= 1_000_000_000:  # live figures for consoles
            last_summary_ns = tick_ns
            _write_summary(summary_path, scenario, epoch_ns, t_s, desk)
        if opts.exit_at_end and t_s >= scenario.duration_s:
            break
    _write_summary(summary_path, scenario, epoch_ns, t_s, desk)
    return 0


@dataclass
class _KillDesk:
    """Turns ``ORDER_KILL`` orders into kills of the target nearest the order's track."""

    ctx: AppContext
    scenario: Scenario
    gate_m: float
    wait_s: float = 5.0  # how long an order may wait for its track to be heard of
    tracks: dict[int, Track] = field(default_factory=dict)
    pending: dict[int, tuple[EngagementOrder, float]] = field(default_factory=dict)
    done: dict[int, None] = field(default_factory=dict)  # in order: the oldest go first
    #: The latest kills and impacts (all of them are counted): a continuous scenario has no end.
    records: deque[dict[str, object]] = field(default_factory=lambda: deque(maxlen=MAX_LISTED))
    impacts: deque[Impact] = field(default_factory=lambda: deque(maxlen=MAX_LISTED))
    friends_killed: deque[int] = field(default_factory=lambda: deque(maxlen=MAX_FRIENDS_LISTED))
    kills_total: int = 0
    leakers: int = 0
    impacts_until_s: float = -math.inf  # impacts up to then are logged and counted
    dropped: Counter[str] = field(default_factory=Counter)
    max_tracks: int = MAX_TRACKS
    max_orders: int = MAX_ORDERS

    def __post_init__(self) -> None:
        self._tracks = self.ctx.bus.reader("Track")
        self._orders = self.ctx.bus.reader("EngagementOutcome")

    def _drop(self, reason: str, detail: str) -> None:
        self.dropped[reason] += 1
        if self.dropped[reason] == 1:
            self.ctx.log.warning(
                "%s (%s); further ones are counted, not logged", reason, detail[:200]
            )

    def poll(self, t_s: float, now_ns: int) -> None:
        for track in self._tracks.take(4096):
            if track.status == TrackStatus.TRACK_DELETED:
                self.tracks.pop(track.track_id, None)
            elif track.track_id in self.tracks or len(self.tracks) < self.max_tracks:
                self.tracks[track.track_id] = track
            else:
                self._drop("track past the bound of tracks kept", f"track {track.track_id}")
        for order in self._orders.take(1024):
            self.ctx.heartbeat.count_in()
            if order.status != OrderStatus.ORDER_KILL or order.order_id in self.done:
                continue
            if order.order_id not in self.pending and len(self.pending) >= self.max_orders:
                self._drop("kill order past the bound of orders waiting", f"{order.order_id}")
                continue
            self.pending.setdefault(order.order_id, (order, t_s))
        for order_id, (order, since_s) in list(self.pending.items()):
            track = self.tracks.get(order.track_id)
            if track is None and t_s - since_s < self.wait_s:
                continue  # the track may not have reached us yet
            del self.pending[order_id]
            if len(self.done) >= self.max_orders:
                del self.done[next(iter(self.done))]
            self.done[order_id] = None
            self._kill(order, track, t_s, now_ns)

    def _kill(self, order: EngagementOrder, track: Track | None, t_s: float, now_ns: int) -> None:
        if track is None:
            self._drop(
                "kill order of an unknown track (no Track sample): nothing killed",
                f"order {order.order_id}, track {order.track_id}",
            )
            return
        # The track's own stamp, bounded: a stamp far ahead or behind moves it nowhere sensible.
        age_s = (now_ns - track.update_ns) * 1e-9 if track.update_ns else 0.0
        age_s = min(max(age_s, 0.0), MAX_TRACK_AGE_S)
        guess = np.array([track.x_m, track.y_m, track.z_m]) + age_s * np.array(
            [track.vx_mps, track.vy_mps, track.vz_mps]
        )
        live = self.scenario.truth_at(t_s).live()
        if live.count == 0:
            return
        dist = np.linalg.norm(live.positions_m - guess, axis=1)
        best = int(np.argmin(dist))
        if dist[best] > self.gate_m:
            self._drop(
                f"kill order with no target within {self.gate_m:.0f} m of its track",
                f"order {order.order_id}, track {order.track_id}, nearest {dist[best]:.0f} m",
            )
            return
        target_id = int(live.ids[best])
        self.scenario.kill(target_id, t_s)
        self.kills_total += 1
        if self.scenario.is_friend([target_id])[0]:
            self.friends_killed.append(target_id)
        self.records.append(
            {
                "target_id": target_id,
                "time_s": round(t_s, 6),
                "order_id": order.order_id,
                "track_id": order.track_id,
                "weapon_id": order.weapon_id,
                "miss_distance_m": float(dist[best]),
            }
        )
        self.ctx.log.info(
            "kill: target %d (track %d, order %d, weapon %s) at t=%.1f s",
            target_id,
            order.track_id,
            order.order_id,
            order.weapon_id,
            t_s,
        )


def _write_summary(
    path: Path, scenario: Scenario, epoch_ns: int, end_s: float, desk: _KillDesk
) -> None:
    if scenario.continuous:
        threats, friends = scenario.spawned(end_s)  # born so far: the raids keep coming
    else:
        threats = int(np.count_nonzero(~scenario.mode5))
        friends = int(np.count_nonzero(scenario.mode5))
    summary = {
        "scenario": scenario.id,
        "epoch_ns": epoch_ns,
        "end_s": round(end_s, 6),
        "targets": threats,  # the threats: friends apart
        "friends": friends,
        # Friends (IFF Mode 5) killed: fratricide; TEWA must keep this empty.
        "friends_killed": list(desk.friends_killed),
        "kills_total": desk.kills_total,
        "kills": list(desk.records),  # the latest MAX_LISTED
        "impacts": [{**vars(hit), "time_s": round(hit.time_s, 6)} for hit in desk.impacts],
        "leakers": desk.leakers,
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(summary, indent=2) + "\n")
    except OSError as exc:
        print(f"mcc: warning: cannot write {path} ({exc.strerror})", file=sys.stderr)


# -- radar ---------------------------------------------------------------------------------


@app(topics=Topics(publish=("DetectionBatch",), subscribe=("Truth",)), config=RadarConfig)
def radar(ctx: AppContext) -> int:
    """Publish one ``DetectionBatch`` per scan of one scenario radar until stopped.

    Settings: `RadarConfig` (``ctx.config``): the scenario and which of its radars (default:
    number ``index`` of this instance), where the truth comes from (bus: the newest ``Truth``
    sample; scenario: propagate the file itself from the epoch, with no kills — a radar
    without a simulation process), how old a truth may be (older: clutter only). Scans fall at
    ``epoch + k * scan_period_s``.
    """
    try:
        opts = app_config(ctx, RadarConfig)
        scenario = _load(opts.scenario)
        model, number = _pick_radar(scenario, opts.radar, ctx.identity.index)
    except MccError as exc:
        return _fail(exc)
    epoch_ns = _epoch(ctx, opts)
    # A stream of its own per radar, fixed by the scenario's seed.
    rng = np.random.default_rng(np.random.SeedSequence([scenario.seed, number]))
    writer = ctx.bus.writer("DetectionBatch") if opts.detections_on_bus else None
    source = _BusTruth(ctx, max_age_s=opts.max_truth_age_s) if opts.truth_source == "bus" else None
    try:
        emitter = _emitter(ctx, opts, model, number)
    except OSError as exc:
        print(f"mcc: error: cannot send ASTERIX to {opts.asterix_to}: {exc}", file=sys.stderr)
        return 1
    ctx.log.info(
        "radar %s of %s: scan %.2f s, truth from %s%s",
        model.id,
        scenario.id,
        model.scan_period_s,
        opts.truth_source,
        f", ASTERIX to {opts.asterix_to}" if emitter is not None else "",
    )
    # Scans fall at epoch + k * scan_period_s: radars started apart still scan in step.
    for scan_id, tick_ns in enumerate(_ticks(ctx, model.scan_period_s, start_ns=epoch_ns)):
        if source is not None:
            # Truth samples do not say who answers IFF: the scenario's friends, by target id.
            state, t_s = scenario.with_iff(source.latest(tick_ns)), tick_ns * 1e-9
        else:
            t_s = (tick_ns - epoch_ns) * 1e-9
            state = scenario.truth_at(t_s)
        dets = model.scan(state, t_s, rng)
        if writer is not None:
            writer.write(
                dets.to_msg(
                    sensor_id=model.id,
                    scan_id=scan_id,
                    origin_ns=tick_ns,
                    publish_ns=time.time_ns(),
                    sensor_position_m=model.position_m,
                )
            )
        if emitter is not None:  # after the bus: writing ASTERIX costs ~0.2 ms a plot
            emitter.send_scan(
                tick_ns,
                range_m=dets.range_m,
                azimuth_rad=dets.azimuth_rad,
                height_m=dets.z_m,
                iff=dets.iff,
                doppler_mps=dets.radial_velocity_mps,
                amplitude_db=dets.snr_db,
            )
        ctx.heartbeat.count_out()
    if emitter is not None:
        emitter.close()
    return 0


def _emitter(
    ctx: AppContext, opts: RadarConfig, model: RadarModel, number: int
) -> PlotEmitter | None:
    """The radar's ASTERIX sender, None when it sends none (libasterix, imported on first use,
    is loaded only by radars that send)."""
    if opts.asterix_to is None:
        return None
    return PlotEmitter(
        opts.asterix_to,
        sac=opts.asterix_sac,
        sic=opts.asterix_sic if opts.asterix_sic is not None else number + 1,
        rotation_s=model.scan_period_s,
        interface=opts.asterix_interface,
        log=ctx.log,
    )


class _BusTruth:
    """The newest ``Truth`` sample from the bus, as a ``TruthState`` in Unix seconds."""

    def __init__(self, ctx: AppContext, *, max_age_s: float) -> None:
        self.ctx = ctx
        self.max_age_ns = int(max_age_s * 1e9)
        self.reader = ctx.bus.reader("Truth")
        self.newest: Truth | None = None
        self.warned = False
        self.future = 0  # samples stamped ahead of this clock by more than max_age_s

    def latest(self, now_ns: int) -> TruthState:
        for sample in self.reader.take(256):
            self.ctx.heartbeat.count_in()
            if sample.time_ns - time.time_ns() > self.max_age_ns:
                # It would stay "the newest" until its stamp comes: no truth till then.
                self.future += 1
                if self.future == 1:
                    self.ctx.log.warning(
                        "Truth stamped %.3g s ahead of this clock dropped; further ones are "
                        "counted, not logged",
                        (sample.time_ns - time.time_ns()) / 1e9,
                    )
                continue
            if self.newest is None or sample.time_ns >= self.newest.time_ns:
                self.newest = sample
        if self.newest is None or abs(now_ns - self.newest.time_ns) > self.max_age_ns:
            if not self.warned:
                self.ctx.log.warning("no recent Truth on the bus: the radar sees clutter only")
                self.warned = True
            return TruthState.empty(now_ns * 1e-9)
        self.warned = False
        return TruthState.from_msg(self.newest)


def _pick_radar(scenario: Scenario, radar_id: str | None, index: int) -> tuple[RadarModel, int]:
    if not scenario.radars:
        raise MccError(f"scenario {scenario.id!r} has no radars; add one under 'radars:'")
    if radar_id is None:
        number = index % len(scenario.radars)
        return scenario.radars[number], number
    model = scenario.radar(radar_id)
    return model, scenario.radars.index(model)


# -- shared --------------------------------------------------------------------------------


def _epoch(ctx: AppContext, opts: _SimConfig) -> int:
    if opts.epoch_ns is not None:
        return opts.epoch_ns
    return default_epoch_ns(epoch_ns=ctx.settings.epoch_ns)


def _load(name: str | Path) -> Scenario:
    """Load ``name``: as given, else relative to the repository (the shipped scenarios)."""
    return load_scenario(name)


def _fail(exc: MccError) -> int:
    # A user's mistake (a bad scenario, an unknown radar): the message, not a traceback.
    print(f"mcc: error: {exc}", file=sys.stderr)
    return 2


def _ticks(ctx: AppContext, period_s: float, *, start_ns: int) -> Iterator[int]:
    """Wall-clock instants ``start_ns + k·period_s`` (Unix ns) as they come, until stopped.

    Ticks already past when due (a start after ``start_ns``, a stall) are skipped, not bunched.
    """
    period_ns = int(round(period_s * 1e9))
    k = max(0, -(-(time.time_ns() - start_ns) // period_ns))
    while not ctx.stopping:
        tick_ns = start_ns + k * period_ns
        delay_s = (tick_ns - time.time_ns()) * 1e-9
        if delay_s > 0 and ctx.wait(delay_s):
            return
        late_ns = time.time_ns() - tick_ns
        if late_ns > period_ns:
            k += late_ns // period_ns
            continue
        yield tick_ns
        k += 1
