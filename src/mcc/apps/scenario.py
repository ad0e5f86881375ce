"""Scenarios: defended assets, targets, raids and radars from YAML; truth and radar models.

A scenario file (schema: ``docs/scenario.md``) becomes a ``Scenario``: every target as arrays,
a closed-form, vectorised truth propagator ``truth_at(t_s)`` that depends only on the file (raids
are drawn from its seed), kills and impacts (leakers), which targets answer IFF Mode 5 (friends),
and one ``RadarModel`` per radar whose ``scan`` draws detections with Pd, measurement noise,
coverage limits, Poisson clutter and, with an interrogator, IFF answers.

The pieces live beside this module and are re-exported here: the schema and its validation
(`mcc.apps.scenario_spec`), the radars (`mcc.apps.scenario_radar`), the 2-D benchmark used to
compare trackers with Stone Soup (`mcc.apps.scenario_classic`).

Frame and units (as everywhere in MCC, idl/mcc.idl): metres in a local ENU frame (x east, y north, z
up), seconds of scenario time from its start, azimuth from north clockwise, radians in code (the
YAML says ``_deg`` where it takes degrees).

>>> scenario = load_scenario("scenarios/small.yaml")
>>> truth = scenario.truth_at(10.0)          # every target; truth.alive says which fly
>>> dets = scenario.radars[0].scan(truth, 10.0, np.random.default_rng(1))
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from mcc.apps.scenario_classic import Classic2D, classic_2d
from mcc.apps.scenario_radar import RCS_DBSM, Detections, RadarModel
from mcc.apps.scenario_spec import (
    MOTION_MODELS,
    TARGET_CLASSES,
    AssetSpec,
    ConstantVelocitySpec,
    CoordinatedTurnSpec,
    DiveSpec,
    RaidSpec,
    ScenarioSpec,
    cross_check,
    short,
    validate_spec,
)
from mcc.apps.scenario_truth import TruthState
from mcc.errors import ScenarioError
from mcc.resources import shipped
from mcc.yamlsource import parse_mapping, yaml_path

__all__ = [
    "MOTION_MODELS",
    "RCS_DBSM",
    "TARGET_CLASSES",
    "Classic2D",
    "Detections",
    "Impact",
    "RadarModel",
    "Scenario",
    "ScenarioSpec",
    "TruthState",
    "classic_2d",
    "load_scenario",
    "parse_scenario",
]

F64 = npt.NDArray[np.float64]


# Motion model codes in the target arrays.
_CV, _TURN, _PATH = 0, 1, 2

#: A wave of a repeating raid is let go this long after its last target may have ended (a
#: kill order may still name it a few seconds later).
HOLD_S = 30.0


# -- loading and error messages ------------------------------------------------------------


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file (a relative path may name a shipped one, see
    `mcc.resources.shipped`); ``ScenarioError`` lists every problem found."""
    path = shipped(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read the scenario ({exc.strerror})") from None
    return parse_scenario(text, source=str(path), default_id=path.stem)


def parse_scenario(
    text: str, *, source: str = "<scenario>", default_id: str = "scenario"
) -> Scenario:
    """Validate scenario YAML text; ``source`` names it in messages."""
    data, lines = parse_mapping(
        text,
        source=source,
        error=ScenarioError,
        expected="a scenario is a YAML mapping with at least 'seed:' and 'duration_s:' "
        "(see docs/scenario.md)",
    )
    return Scenario(validate_spec(data, source=source, lines=lines), default_id=default_id)


@dataclass(frozen=True)
class Impact:
    """A target that reached the asset it attacked: a leaker."""

    target_id: int
    asset_id: str
    time_s: float


class Scenario:
    """A validated scenario: assets, radars and every target as arrays (raids expanded).

    Targets follow closed-form paths, so ``truth_at(t_s)`` depends only on the file and on the
    kills recorded with ``kill`` — any process computes the same truth. A target lives from
    ``birth_s`` until it reaches its asset (an impact), is killed, or the scenario ends.
    """

    def __init__(self, spec: ScenarioSpec, *, default_id: str = "scenario") -> None:
        problems = [f"{yaml_path(p)}: {m} (got {short(v)})" for p, v, m in cross_check(spec)]
        if problems:
            raise ScenarioError("\n".join(problems))
        self.spec = spec
        self.id: str = spec.id or default_id
        self.seed: int = spec.seed
        self.duration_s: float = spec.duration_s
        self.assets: tuple[AssetSpec, ...] = tuple(spec.assets)
        self.radars: tuple[RadarModel, ...] = tuple(RadarModel.from_spec(r) for r in spec.radars)
        self._build_targets()

    # -- construction --------------------------------------------------------------------
    @classmethod
    def from_yaml(cls, path: str | Path) -> Scenario:
        """Same as ``load_scenario(path)``."""
        return load_scenario(path)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "<dict>") -> Scenario:
        """A scenario from the mapping a YAML file would hold (checked like a file)."""
        if not isinstance(data, dict):
            raise ScenarioError(f"{source}: a scenario is a mapping (see docs/scenario.md)")
        return cls(validate_spec(data, source=source, lines={}))

    def _build_targets(self) -> None:
        spec = self.spec
        asset_index = {a.id: i for i, a in enumerate(spec.assets)}
        self._asset_index = asset_index
        rows: list[dict[str, Any]] = []
        for t in spec.targets:
            row: dict[str, Any] = {
                "id": t.id,
                "class": TARGET_CLASSES[t.class_],
                "mode5": t.iff is not None and t.iff.mode5,
                "birth": t.birth_s,
                "p0": t.position_m,
                "asset": -1,
            }
            m = t.motion
            if isinstance(m, ConstantVelocitySpec):
                row.update(model=_CV, v0=m.velocity_mps)
            elif isinstance(m, CoordinatedTurnSpec):
                end = m.start_s + m.duration_s if m.duration_s is not None else math.inf
                row.update(
                    model=_TURN,
                    v0=m.velocity_mps,
                    omega=math.radians(m.turn_rate_dps),
                    on=m.start_s,
                    off=end,
                )
            else:
                dive = m.dive_range_m if isinstance(m, DiveSpec) else math.inf
                row.update(model=_PATH, asset=asset_index[m.towards], speed=m.speed_mps, dive=dive)
            rows.append(row)
        rng = np.random.default_rng(spec.seed)
        for raid in spec.raids:
            if raid.repeat_s is None:
                index = asset_index[raid.towards]
                rows.extend(self._expand(raid, index, spec.assets[index].position_m, rng))

        used = {r["id"] for r in rows if r["id"] is not None}
        next_id = 1
        for r in rows:
            if r["id"] is None:
                while next_id in used:
                    next_id += 1
                r["id"] = next_id
                used.add(next_id)
        self._static_rows = rows
        self._static_ids = np.array([r["id"] for r in rows], dtype=np.uint32)
        self._static_friends = np.array([r["id"] for r in rows if r["mode5"]], dtype=np.uint32)
        # Repeating raids (a continuous scenario): wave k of raid r is drawn from
        # SeedSequence([seed, r, k]) and held only while it may fly (`_advance`). Target ids:
        # base + 1 + k * per_cycle + offset of the raid + i, past every other target's id.
        self._repeating = [(i, r) for i, r in enumerate(spec.raids) if r.repeat_s is not None]
        counts = [r.count for _, r in self._repeating]
        self._offsets = np.cumsum([0, *counts])
        self._per_cycle = int(self._offsets[-1])
        self._id_base = int(max(used, default=0))
        self._waves: dict[tuple[int, int], list[dict[str, Any]]] = {}
        self._next_wave = [0] * len(self._repeating)
        self._killed: dict[int, float] = {}
        #: Targets of waves let go (flown out, no longer held): (threats, friends).
        self.retired_targets = [0, 0]
        self._horizon_s = -math.inf
        self._set_rows()

    def _wave_life_s(self, raid: RaidSpec) -> float:
        """An upper bound of how long a target of ``raid`` flies: its longest path (range plus
        altitude) at its lowest speed, after its latest birth."""
        return (raid.range_m[1] + raid.altitude_m[1]) / raid.speed_mps[0] + raid.birth_s[1]

    def _advance(self, t_s: float) -> None:
        """Hold the waves of the repeating raids that may fly at ``t_s``, let go of older ones
        (``HOLD_S`` after the last of their targets may have ended)."""
        if not self._repeating or t_s <= self._horizon_s:
            return
        self._horizon_s = t_s
        changed = False
        for n, (index, raid) in enumerate(self._repeating):
            period = float(raid.repeat_s or math.inf)
            life = self._wave_life_s(raid)
            # the first wave still worth holding (a process started late skips the others)
            first = max(0, math.floor((t_s - life - HOLD_S) / period))
            if self._next_wave[n] < first:
                skipped = first - self._next_wave[n]
                self.retired_targets[1 if _is_friend(raid) else 0] += skipped * raid.count
                self._next_wave[n] = first
            last = math.floor((t_s - raid.birth_s[0]) / period)
            while self._next_wave[n] <= last:
                k = self._next_wave[n]
                if k * period >= self.duration_s:
                    break
                self._waves[(n, k)] = self._wave(n, index, raid, k)
                self._next_wave[n] += 1
                changed = True
            for key in [key for key in self._waves if key[0] == n]:
                if key[1] * period + life + HOLD_S < t_s:
                    gone = self._waves.pop(key)
                    for row in gone:
                        self._killed.pop(row["id"], None)
                    self.retired_targets[1 if _is_friend(raid) else 0] += len(gone)
                    changed = True
        if changed:
            self._set_rows()

    def _wave(self, n: int, index: int, raid: RaidSpec, k: int) -> list[dict[str, Any]]:
        asset = self._asset_index[raid.towards]
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, index, k]))
        rows = self._expand(raid, asset, self.spec.assets[asset].position_m, rng)
        first = self._id_base + 1 + k * self._per_cycle + int(self._offsets[n])
        if first + raid.count - 1 > 2**32 - 1:
            raise ScenarioError(
                f"scenario {self.id!r}: raids[{index}] wave {k} runs out of target ids (u32)"
            )
        shift = k * float(raid.repeat_s or 0.0)
        for i, row in enumerate(rows):
            row["id"] = first + i
            row["birth"] += shift
        return rows

    def _set_rows(self) -> None:
        rows = [*self._static_rows, *(r for wave in self._waves.values() for r in wave)]
        n = len(rows)
        spec = self.spec
        self.ids = np.array([r["id"] for r in rows], dtype=np.uint32)
        self.classes = np.array([int(r["class"].value) for r in rows], dtype=np.uint8)
        #: Per target: a friend answering IFF Mode 5 (it lands at an asset it flies to).
        self.mode5 = np.array([r["mode5"] for r in rows], dtype=bool)
        self.birth_s = np.array([r["birth"] for r in rows], dtype=np.float64)
        self.asset_index = np.array([r["asset"] for r in rows], dtype=np.int64)
        self._model = np.array([r["model"] for r in rows], dtype=np.int8)
        self._p0 = np.array([r["p0"] for r in rows], dtype=np.float64).reshape(n, 3)
        self._v0 = np.array([r.get("v0", (0.0, 0.0, 0.0)) for r in rows]).reshape(n, 3)
        self._omega = np.array([r.get("omega", 0.0) for r in rows], dtype=np.float64)
        self._on = np.array([r.get("on", 0.0) for r in rows], dtype=np.float64)
        self._off = np.array([r.get("off", math.inf) for r in rows], dtype=np.float64)
        self._speed = np.array([r.get("speed", 0.0) for r in rows], dtype=np.float64)
        assets = np.array([a.position_m for a in spec.assets], dtype=np.float64).reshape(-1, 3)
        # Attack paths: p0 -> p1 (dive point, level with p0) -> p2 (the asset).
        self._p2 = (
            np.where(
                self.asset_index[:, None] >= 0, assets[np.maximum(self.asset_index, 0)], self._p0
            )
            if len(assets)
            else self._p0.copy()
        )
        dive_m = np.array([r.get("dive", math.inf) for r in rows], dtype=np.float64)
        flat = self._p0[:, :2] - self._p2[:, :2]
        d0 = np.hypot(flat[:, 0], flat[:, 1])
        scale = np.where(d0 > dive_m, dive_m / np.maximum(d0, 1e-9), 1.0)
        self._p1 = self._p0.copy()
        self._p1[:, :2] = self._p2[:, :2] + flat * scale[:, None]
        leg1 = np.linalg.norm(self._p1 - self._p0, axis=1)
        leg2 = np.linalg.norm(self._p2 - self._p1, axis=1)
        speed = np.maximum(self._speed, 1e-12)
        self._t1 = leg1 / speed
        self._u1 = (self._p1 - self._p0) / np.maximum(leg1, 1e-12)[:, None]
        self._u2 = (self._p2 - self._p1) / np.maximum(leg2, 1e-12)[:, None]
        is_path = self._model == _PATH
        #: Absolute impact time per target (seconds), inf for targets that attack nothing.
        self.impact_s = np.where(is_path, self.birth_s + (leg1 + leg2) / speed, math.inf)
        self._row = {int(t): i for i, t in enumerate(self.ids)}
        #: Absolute kill time per target (seconds), inf while not killed.
        self.kill_s = np.full(n, math.inf)
        for target_id, t_s in self._killed.items():
            row = self._row.get(target_id)
            if row is not None:
                self.kill_s[row] = t_s

    @staticmethod
    def _expand(
        raid: RaidSpec, asset: int, at: tuple[float, float, float], rng: np.random.Generator
    ) -> list[dict[str, Any]]:
        n = raid.count
        # Draw every parameter for the whole raid in a fixed order: the seed fixes the raid.
        bearing = np.radians(raid.from_bearing_deg + raid.spread_deg * (rng.random(n) - 0.5))
        ranges = rng.uniform(*raid.range_m, n)
        altitude = rng.uniform(*raid.altitude_m, n)
        speed = rng.uniform(*raid.speed_mps, n)
        birth = rng.uniform(*raid.birth_s, n)
        return [
            {
                "id": None,
                "class": TARGET_CLASSES[raid.class_],
                "mode5": raid.iff is not None and raid.iff.mode5,
                "birth": float(birth[i]),
                "p0": (
                    at[0] + float(ranges[i] * np.sin(bearing[i])),
                    at[1] + float(ranges[i] * np.cos(bearing[i])),
                    float(altitude[i]),
                ),
                "asset": asset,
                "model": _PATH,
                "speed": float(speed[i]),
                "dive": raid.dive_range_m if raid.dive_range_m is not None else math.inf,
            }
            for i in range(n)
        ]

    # -- queries -------------------------------------------------------------------------
    @property
    def n_targets(self) -> int:
        """Targets held: all of them, or for repeating raids those of the waves held now."""
        return int(self.ids.shape[0])

    @property
    def continuous(self) -> bool:
        """True when raids repeat (targets keep coming): only recent waves are held."""
        return bool(self._repeating)

    def spawned(self, t_s: float) -> tuple[int, int]:
        """Targets born by ``t_s``, (threats, friends), counting waves already let go."""
        self._advance(t_s)
        born = self.birth_s <= t_s
        return (
            self.retired_targets[0] + int(np.count_nonzero(born & ~self.mode5)),
            self.retired_targets[1] + int(np.count_nonzero(born & self.mode5)),
        )

    def is_friend(self, target_ids: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Which of ``target_ids`` are IFF Mode 5 friends (any wave, held or not)."""
        ids = np.asarray(target_ids, dtype=np.int64)
        out = np.isin(ids, self._static_friends)
        if self._repeating:
            j = ids - self._id_base - 1
            wave = j >= 0
            raid = np.searchsorted(self._offsets, np.where(wave, j, 0) % self._per_cycle, "right")
            friends = np.array([False, *(_is_friend(r) for _, r in self._repeating)])
            out |= wave & friends[np.clip(raid, 0, len(friends) - 1)]
        return out

    def radar(self, radar_id: str) -> RadarModel:
        """The radar named ``radar_id``; ``ScenarioError`` naming the known ones otherwise."""
        for r in self.radars:
            if r.id == radar_id:
                return r
        known = ", ".join(r.id for r in self.radars) or "none"
        raise ScenarioError(f"scenario {self.id!r} has no radar {radar_id!r}; radars: {known}")

    def asset_ids(self) -> list[str]:
        return [a.id for a in self.assets]

    def end_s(self) -> F64:
        """Per target: when it stops flying (impact, kill or scenario end), seconds."""
        return np.minimum(np.minimum(self.impact_s, self.kill_s), self.duration_s)

    def truth_at(self, t_s: float) -> TruthState:
        """Every target at scenario time ``t_s`` (seconds); ``alive`` marks those flying.

        Targets not yet born sit at their birth state, ended ones where they ended. With
        repeating raids, the waves held are those that may fly at the latest time asked.
        """
        self._advance(t_s)
        tau = np.clip(np.minimum(t_s, self.end_s()) - self.birth_s, 0.0, None)
        pos = self._p0 + self._v0 * tau[:, None]
        vel = self._v0.copy()
        turn = np.flatnonzero(self._model == _TURN)
        if turn.size:
            pos[turn], vel[turn] = _turn(
                self._p0[turn],
                self._v0[turn],
                self._omega[turn],
                self._on[turn],
                self._off[turn],
                tau[turn],
            )
        path = np.flatnonzero(self._model == _PATH)
        if path.size:
            tt = tau[path]
            s = self._speed[path]
            t1 = self._t1[path]
            l1 = np.minimum(tt, t1) * s
            l2 = np.maximum(tt - t1, 0.0) * s
            pos[path] = self._p0[path] + self._u1[path] * l1[:, None] + self._u2[path] * l2[:, None]
            on_leg1 = (tt < t1)[:, None]
            vel[path] = np.where(on_leg1, self._u1[path], self._u2[path]) * s[:, None]
        alive = (self.birth_s <= t_s) & (t_s < self.end_s())
        return TruthState(
            float(t_s), self.ids.copy(), self.classes.copy(), pos, vel, alive, self.mode5.copy()
        )

    def with_iff(self, state: TruthState) -> TruthState:
        """``state`` (e.g. from a ``Truth`` sample, which does not carry IFF) with this
        scenario's Mode 5 friends marked by target id."""
        return dataclasses.replace(state, mode5=self.is_friend(state.ids))

    def kill(self, target_id: int, t_s: float) -> bool:
        """Kill ``target_id`` at ``t_s``; False if it is unknown or not alive then."""
        row = self._row.get(int(target_id))
        if row is None:
            return False
        if not (self.birth_s[row] <= t_s < self.end_s()[row]):
            return False
        self.kill_s[row] = t_s
        self._killed[int(target_id)] = t_s
        return True

    def kills(self) -> dict[int, float]:
        """Killed targets: id → kill time (seconds)."""
        done = np.flatnonzero(np.isfinite(self.kill_s))
        return {int(self.ids[i]): float(self.kill_s[i]) for i in done}

    def impacts(self, until_s: float = math.inf, *, since_s: float = -math.inf) -> list[Impact]:
        """Targets that reached their asset after ``since_s``, by ``until_s`` (not killed
        first): the leakers (of the waves held, for repeating raids)."""
        if math.isfinite(until_s):
            self._advance(until_s)
        hit = (
            (self.impact_s <= until_s)
            & (self.impact_s > since_s)
            & (self.impact_s < self.kill_s)
            & (self.impact_s <= self.duration_s)
            & ~self.mode5  # a friend lands there
        )
        order = np.argsort(self.impact_s[hit], kind="stable")
        rows = np.flatnonzero(hit)[order]
        return [
            Impact(int(self.ids[i]), self.assets[self.asset_index[i]].id, float(self.impact_s[i]))
            for i in rows
        ]


def _is_friend(raid: RaidSpec) -> bool:
    return raid.iff is not None and raid.iff.mode5


def _turn(p0: F64, v0: F64, omega: F64, on: F64, off: F64, tau: F64) -> tuple[F64, F64]:
    """Straight until ``on``, turning at ``omega`` (rad/s, > 0 clockwise) until ``off``."""
    a = np.minimum(tau, on)  # straight, before the turn
    b = np.clip(tau - on, 0.0, off - on)  # in the turn
    c = np.maximum(tau - off, 0.0)  # straight, after it
    speed = np.hypot(v0[:, 0], v0[:, 1])
    psi0 = np.arctan2(v0[:, 0], v0[:, 1])  # heading from north, clockwise
    half = 0.5 * omega * b
    # Closed form of the turn, written with sinc so that omega -> 0 is exact and stable:
    # x' = s sin(psi), y' = s cos(psi), psi = psi0 + omega t.
    chord = speed * b * np.sinc(half / np.pi)
    psi = psi0 + omega * b
    pos = p0 + v0 * a[:, None]
    pos[:, 0] += chord * np.sin(psi0 + half)
    pos[:, 1] += chord * np.cos(psi0 + half)
    pos[:, 2] += v0[:, 2] * b
    vel = np.stack([speed * np.sin(psi), speed * np.cos(psi), v0[:, 2]], axis=1)
    pos += vel * c[:, None]
    return pos, vel
