"""Simulation apps: ``truth`` (the one simulation authority) and ``radar`` (one per sensor).

``truth`` propagates a scenario on wall time from an epoch and publishes ``Truth`` at a fixed
rate; it takes kills from the bus (``EngagementOrder`` with status ``ORDER_KILL``: the target
nearest the order's track) and logs impacts. ``radar`` turns the newest ``Truth`` into one
``DetectionBatch`` per scan, paced on wall time, ``origin_ns`` = the scan time. So every radar
sees the same targets, and a killed target vanishes from all of them, without the radars
talking to each other (docs/scenario.md). A radar with an IFF interrogator in the scenario
(``iff: {p_reply: …}``) sets each detection's ``iff`` answer (the scenario's
``iff: {mode5: true}`` targets are the friends); one without leaves ``iff`` empty.

Bounds: a radar takes the newest ``Truth`` by its stamp, but never one stamped further ahead of
its own clock than ``--max-truth-age-s`` (it would stay "the newest" and blind the radar until
then); the truth app keeps at most ``MAX_TRACKS`` tracks and ``MAX_ORDERS`` orders, and
extrapolates a track by at most ``MAX_TRACK_AGE_S``. What is dropped is counted and logged once.

    python -m mcc.orchestrate.runtime mcc.apps.radar:truth --scenario scenarios/sam-toc.yaml
    python -m mcc.orchestrate.runtime mcc.apps.radar:radar --scenario scenarios/sam-toc.yaml \
        --radar search
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mcc import settings
from mcc.apps.args import positive_float
from mcc.apps.scenario import RadarModel, Scenario, TruthState, load_scenario
from mcc.errors import MccError
from mcc.files import write_atomic
from mcc.orchestrate.runtime import AppContext
from mcc.security.mission import Topics
from mcc.types import EngagementOrder, OrderStatus, Track, TrackStatus, Truth

#: Files its arguments name, with their loaders: `mcc validate` checks they exist and parse.
FILE_ARGS = {"--scenario": load_scenario}
BUS_TOPICS = {
    "truth": Topics(publish=("Truth",), subscribe=("EngagementOutcome", "Track")),
    "radar": Topics(publish=("DetectionBatch",), subscribe=("Truth",)),
}

__all__ = ["default_epoch_ns", "radar", "truth"]

DEFAULT_SCENARIO = "scenarios/sam-toc.yaml"
#: What the truth app keeps: tracks heard of, kill orders waiting or done; how far it moves a
#: track along its velocity to find the target an order names.
MAX_TRACKS = 10_000
MAX_ORDERS = 10_000
MAX_TRACK_AGE_S = 10.0


def default_epoch_ns(now_ns: int | None = None) -> int:
    """The default scenario start (Unix ns): the mission's epoch (``MCC_EPOCH_NS``, set by the
    supervisor, so a replaced instance resumes the scenario where it was), else now rounded
    down to the whole second."""
    epoch_ns = settings.current().epoch_ns
    if now_ns is None and epoch_ns is not None:
        return epoch_ns
    now_ns = time.time_ns() if now_ns is None else now_ns
    return now_ns - now_ns % 1_000_000_000


# -- truth ---------------------------------------------------------------------------------


def truth(ctx: AppContext) -> int:
    """Publish the scenario's ``Truth`` at ``--rate-hz`` until stopped; apply kills from the bus.

    Args (``ctx.args``): ``--scenario FILE``, ``--epoch-ns NS`` (scenario time 0; default: now
    rounded down to the second), ``--rate-hz`` (10), ``--kill-gate-m`` (1000: how far the
    killed track may be from the target it names), ``--summary FILE`` (kills and impacts as
    JSON at exit; default ``<run_dir>/truth-summary.json``), ``--exit-at-end``.
    """
    parser = _parser("truth", "publish the scenario's ground truth")
    parser.add_argument(
        "--rate-hz", type=positive_float, default=10.0, help="Truth samples per second"
    )
    parser.add_argument("--kill-gate-m", type=positive_float, default=1000.0)
    parser.add_argument("--summary", type=Path, default=None, help="kills and impacts (JSON)")
    parser.add_argument("--exit-at-end", action="store_true", help="return at duration_s")
    opts = parser.parse_args(ctx.args)
    try:
        scenario = _load(opts.scenario)
    except MccError as exc:
        return _fail(exc)
    epoch_ns = opts.epoch_ns if opts.epoch_ns is not None else default_epoch_ns()
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
    reported = 0
    t_s = 0.0
    last_summary_ns = 0
    for tick_ns in _ticks(ctx, 1.0 / opts.rate_hz, start_ns=epoch_ns):
        t_s = (tick_ns - epoch_ns) * 1e-9
        desk.poll(t_s, tick_ns)
        writer.write(scenario.truth_at(t_s).to_msg(scenario_id=scenario.id, time_ns=tick_ns))
        ctx.heartbeat.count_out()
        impacts = scenario.impacts(t_s)
        for hit in impacts[reported:]:
            ctx.log.warning(
                "impact: target %d reached %s at t=%.1f s", hit.target_id, hit.asset_id, hit.time_s
            )
        reported = len(impacts)
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
    records: list[dict[str, object]] = field(default_factory=list)
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
    impacts = scenario.impacts(end_s)
    friends = set(scenario.ids[scenario.mode5].tolist())
    summary = {
        "scenario": scenario.id,
        "epoch_ns": epoch_ns,
        "end_s": round(end_s, 6),
        "targets": int(np.count_nonzero(~scenario.mode5)),  # the threats: friends apart
        "friends": int(np.count_nonzero(scenario.mode5)),
        # Friends (IFF Mode 5) killed: fratricide; TEWA must keep this empty.
        "friends_killed": [k["target_id"] for k in desk.records if k["target_id"] in friends],
        "kills": desk.records,
        "impacts": [{**vars(hit), "time_s": round(hit.time_s, 6)} for hit in impacts],
        "leakers": len(impacts),
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(summary, indent=2) + "\n")
    except OSError as exc:
        print(f"mcc: warning: cannot write {path} ({exc.strerror})", file=sys.stderr)


# -- radar ---------------------------------------------------------------------------------


def radar(ctx: AppContext) -> int:
    """Publish one ``DetectionBatch`` per scan of one scenario radar until stopped.

    Args (``ctx.args``): ``--scenario FILE``, ``--radar ID`` (default: the scenario's radar
    number ``index`` of this instance), ``--truth-source bus|scenario`` (bus: the newest
    ``Truth`` sample, the default; scenario: propagate the file itself from ``--epoch-ns``, with
    no kills — a radar without a simulation process), ``--max-truth-age-s`` (2: older truth is
    ignored and the radar sees clutter only), ``--epoch-ns`` (default: now rounded down to the
    second): scans fall at ``epoch + k * scan_period_s``.
    """
    parser = _parser("radar", "publish the detections of one scenario radar")
    parser.add_argument("--radar", default=None, help="radar id (default: by instance index)")
    parser.add_argument("--truth-source", choices=("bus", "scenario"), default="bus")
    parser.add_argument("--max-truth-age-s", type=positive_float, default=2.0)
    opts = parser.parse_args(ctx.args)
    try:
        scenario = _load(opts.scenario)
        model, number = _pick_radar(scenario, opts.radar, ctx.identity.index)
    except MccError as exc:
        return _fail(exc)
    epoch_ns = opts.epoch_ns if opts.epoch_ns is not None else default_epoch_ns()
    # A stream of its own per radar, fixed by the scenario's seed.
    rng = np.random.default_rng(np.random.SeedSequence([scenario.seed, number]))
    writer = ctx.bus.writer("DetectionBatch")
    source = _BusTruth(ctx, max_age_s=opts.max_truth_age_s) if opts.truth_source == "bus" else None
    ctx.log.info(
        "radar %s of %s: scan %.2f s, truth from %s",
        model.id,
        scenario.id,
        model.scan_period_s,
        opts.truth_source,
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
        writer.write(
            dets.to_msg(
                sensor_id=model.id,
                scan_id=scan_id,
                origin_ns=tick_ns,
                publish_ns=time.time_ns(),
                sensor_position_m=model.position_m,
            )
        )
        ctx.heartbeat.count_out()
    return 0


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


def _parser(prog: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"mcc.apps.radar:{prog}", description=description)
    parser.add_argument("--scenario", default=DEFAULT_SCENARIO, help="scenario YAML file")
    parser.add_argument(
        "--epoch-ns", type=int, default=None, help="scenario start, Unix ns (default: now, s)"
    )
    return parser


def _load(name: str) -> Scenario:
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
