"""Scenarios: defended assets, targets, raids and radars from YAML; truth and radar models.

A scenario file (schema: ``docs/scenario.md``) becomes a ``Scenario``: every target as arrays,
a closed-form, vectorised truth propagator ``truth_at(t_s)`` that depends only on the file (raids
are drawn from its seed), kills and impacts (leakers), and one ``RadarModel`` per radar whose
``scan`` draws detections with Pd, measurement noise, coverage limits and Poisson clutter.
``classic_2d`` generates the 2-D multi-target benchmark used to compare trackers with Stone Soup.

Frame and units (DESIGN.md): metres in a local ENU frame (x east, y north, z up), seconds of
scenario time from its start, azimuth from north clockwise, radians in code (the YAML says
``_deg`` where it takes degrees).

>>> scenario = load_scenario("scenarios/small.yaml")
>>> truth = scenario.truth_at(10.0)          # every target; truth.alive says which fly
>>> dets = scenario.radars[0].scan(truth, 10.0, np.random.default_rng(1))
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from mcc.apps.args import shipped_path
from mcc.errors import ScenarioError
from mcc.types import DetectionBatch, TargetClass, Truth
from mcc.types.arrays import pack, packed_field
from mcc.yamlsource import lookup, nearest_line, parse_mapping, yaml_path

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

#: YAML class names → IDL ``TargetClass`` (``cruise_missile`` ↔ ``CLASS_CRUISE_MISSILE``).
TARGET_CLASSES: dict[str, TargetClass] = {
    member.name.removeprefix("CLASS_").lower(): member for member in TargetClass
}

#: Nominal radar cross-section per class (dBsm); it only shapes the reported SNR.
RCS_DBSM: dict[TargetClass, float] = {
    TargetClass.CLASS_UNKNOWN: 0.0,
    TargetClass.CLASS_AIRCRAFT: 10.0,
    TargetClass.CLASS_CRUISE_MISSILE: -10.0,
    TargetClass.CLASS_HELICOPTER: 10.0,
    TargetClass.CLASS_BALLISTIC: -10.0,
    TargetClass.CLASS_UAV: -15.0,
    TargetClass.CLASS_DECOY: 0.0,
}

# RCS_DBSM indexed by TargetClass value (unknown values clip to the last, decoy: 0 dBsm).
_RCS_TABLE = np.array([RCS_DBSM[c] for c in sorted(RCS_DBSM, key=lambda c: int(c.value))])

MOTION_MODELS = ("constant_velocity", "coordinated_turn", "direct", "dive")

# Motion model codes in the target arrays.
_CV, _TURN, _PATH = 0, 1, 2
# Clutter radial velocities are uniform in +-_CLUTTER_VR_MPS (about Mach 1).
_CLUTTER_VR_MPS = 340.0


# -- the schema ----------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _vec3(value: Any) -> Any:
    if isinstance(value, list | tuple) and len(value) == 3 and all(map(_is_number, value)):
        return tuple(float(v) for v in value)
    raise ValueError("must be [x, y, z] in metres (east, north, up), three numbers")


def _span(value: Any, *, minimum: float, strict: bool) -> tuple[float, float]:
    op = ">" if strict else ">="
    help_ = f"must be a number or [min, max] with {op} {minimum:g} and min <= max"
    if _is_number(value):
        lo = hi = float(value)
    elif isinstance(value, list | tuple) and len(value) == 2 and all(map(_is_number, value)):
        lo, hi = float(value[0]), float(value[1])
    else:
        raise ValueError(help_)
    if lo > hi or lo < minimum or (strict and lo == minimum):
        raise ValueError(help_)
    return lo, hi


def _positive_span(value: Any) -> tuple[float, float]:
    return _span(value, minimum=0.0, strict=True)


def _nonnegative_span(value: Any) -> tuple[float, float]:
    return _span(value, minimum=0.0, strict=False)


def _sector(value: Any) -> tuple[float, float]:
    help_ = (
        "must be [from, to] in degrees clockwise from north, 0 <= from < 360, "
        "0 < to <= 360, from != to (e.g. [300, 60]; [0, 360] is all round)"
    )
    if not (isinstance(value, list | tuple) and len(value) == 2 and all(map(_is_number, value))):
        raise ValueError(help_)
    start, end = float(value[0]), float(value[1])
    if not (0 <= start < 360 and 0 < end <= 360 and start != end):
        raise ValueError(help_)
    return start, end


def _class_name(value: Any) -> Any:
    if isinstance(value, str) and value in TARGET_CLASSES:
        return value
    raise ValueError(f"must be one of {', '.join(TARGET_CLASSES)}")


Vec3 = Annotated[tuple[float, float, float], BeforeValidator(_vec3)]
PositiveSpan = Annotated[tuple[float, float], BeforeValidator(_positive_span)]
NonNegativeSpan = Annotated[tuple[float, float], BeforeValidator(_nonnegative_span)]
Sector = Annotated[tuple[float, float], BeforeValidator(_sector)]
ClassName = Annotated[str, BeforeValidator(_class_name)]
Id = Annotated[str, Field(min_length=1, max_length=64)]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class AssetSpec(_Spec):
    """A defended asset: what the raids attack and the weapons protect."""

    id: Id = Field(description="asset name, unique in the scenario")
    position_m: Vec3 = Field(description="[x, y, z] ENU, metres")
    value: float = Field(1.0, gt=0, description="relative value for threat evaluation, > 0")


class CoverageSpec(_Spec):
    """Where a radar can see: a spherical sector around it."""

    max_range_m: float = Field(gt=0, description="instrumented range, metres")
    min_range_m: float = Field(0.0, ge=0, description="blind range, metres")
    min_elevation_deg: float = Field(0.0, ge=-90, le=90, description="lowest beam, degrees")
    max_elevation_deg: float = Field(60.0, ge=-90, le=90, description="highest beam, degrees")
    sector_deg: Sector = Field(
        (0.0, 360.0), description="[from, to] azimuth sector clockwise from north, degrees"
    )


class RadarSpec(_Spec):
    """A surveillance radar: geometry, scan period, accuracy, Pd and clutter."""

    id: Id = Field(description="radar name, unique; the DetectionBatch sensor_id")
    position_m: Vec3 = Field(description="[x, y, z] ENU, metres")
    scan_period_s: float = Field(gt=0, description="time between scans, seconds")
    sigma_range_m: float = Field(ge=0, description="range noise std, metres")
    sigma_azimuth_rad: float = Field(ge=0, description="azimuth noise std, radians")
    sigma_elevation_rad: float = Field(ge=0, description="elevation noise std, radians")
    sigma_radial_velocity_mps: float = Field(1.0, ge=0, description="Doppler noise std, m/s")
    pd: float = Field(ge=0, le=1, description="detection probability per target and scan")
    clutter_rate: float = Field(ge=0, description="false alarms per scan (Poisson mean)")
    snr_ref_db: float = Field(13.0, description="SNR of a 0 dBsm target at max range, dB")
    coverage: CoverageSpec = Field(description="the volume the radar sees")


class ConstantVelocitySpec(_Spec):
    """Straight, level or climbing flight at a constant velocity."""

    model: Literal["constant_velocity"]
    velocity_mps: Vec3 = Field(description="[vx, vy, vz], m/s")


class CoordinatedTurnSpec(_Spec):
    """Constant velocity, then a turn at a constant rate and speed, then straight again."""

    model: Literal["coordinated_turn"]
    velocity_mps: Vec3 = Field(description="[vx, vy, vz] at birth, m/s")
    turn_rate_dps: float = Field(description="degrees per second; > 0 turns right (clockwise)")
    start_s: float = Field(0.0, ge=0, description="turn start after birth, seconds")
    duration_s: float | None = Field(
        None, gt=0, description="turn length, seconds; omitted: turns until it ends"
    )


class DirectSpec(_Spec):
    """A straight line from the birth position to an asset at constant speed; impact there."""

    model: Literal["direct"]
    towards: Id = Field(description="the asset attacked")
    speed_mps: float = Field(gt=0, description="speed along the path, m/s")


class DiveSpec(_Spec):
    """Level flight towards an asset, then a straight dive onto it from ``dive_range_m``."""

    model: Literal["dive"]
    towards: Id = Field(description="the asset attacked")
    speed_mps: float = Field(gt=0, description="speed along the path, m/s")
    dive_range_m: float = Field(
        gt=0, description="horizontal range to the asset where the dive starts"
    )


MotionSpec = Annotated[
    Union[ConstantVelocitySpec, CoordinatedTurnSpec, DirectSpec, DiveSpec],  # noqa: UP007
    Field(discriminator="model"),
]


class TargetSpec(_Spec):
    """One target: class, birth time and position, motion model."""

    model_config = ConfigDict(populate_by_name=True)

    id: int | None = Field(
        None, ge=1, le=2**32 - 1, description="target id (u32); omitted: the next free id"
    )
    class_: ClassName = Field(alias="class", description="target class (IDL TargetClass)")
    position_m: Vec3 = Field(description="[x, y, z] at birth, ENU, metres")
    birth_s: float = Field(0.0, ge=0, description="appearance time, seconds from start")
    motion: MotionSpec = Field(description="motion model")


class RaidSpec(_Spec):
    """``count`` targets of one class from one direction, towards one asset, drawn from the seed."""

    model_config = ConfigDict(populate_by_name=True)

    count: int = Field(ge=1, le=100_000, description="number of targets")
    class_: ClassName = Field(alias="class", description="target class (IDL TargetClass)")
    towards: Id = Field(description="the asset attacked")
    from_bearing_deg: float = Field(
        ge=-360, le=360, description="bearing from the asset to the raid, clockwise from north"
    )
    spread_deg: float = Field(0.0, ge=0, le=360, description="bearings uniform in +-spread/2")
    range_m: PositiveSpan = Field(description="horizontal distance from the asset at birth")
    altitude_m: NonNegativeSpan = Field((100.0, 100.0), description="z at birth, metres")
    speed_mps: PositiveSpan = Field(description="speed along the path, m/s")
    dive_range_m: float | None = Field(
        None, gt=0, description="dive range (dive model); omitted: a direct path"
    )
    birth_s: NonNegativeSpan = Field((0.0, 0.0), description="birth times uniform in [min, max]")


class ScenarioSpec(_Spec):
    """A whole scenario file."""

    id: Id | None = Field(None, description="scenario name; omitted: the file's stem")
    description: str = Field("", description="free text")
    seed: int = Field(ge=0, le=2**63 - 1, description="seed of every random draw")
    duration_s: float = Field(gt=0, description="length, seconds; every target ends then")
    assets: list[AssetSpec] = Field(default_factory=list, description="defended assets")
    radars: list[RadarSpec] = Field(default_factory=list, description="radars")
    targets: list[TargetSpec] = Field(default_factory=list, description="individual targets")
    raids: list[RaidSpec] = Field(default_factory=list, description="raid generators")


# -- loading and error messages ------------------------------------------------------------


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file (a relative path may name a shipped one, see
    `shipped_path`); ``ScenarioError`` lists every problem found."""
    path = shipped_path(path)
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
    return _validate(data, source=source, lines=lines, default_id=default_id)


def _validate(
    data: dict[str, Any],
    *,
    source: str,
    lines: dict[tuple[Any, ...], int],
    default_id: str,
) -> Scenario:
    try:
        spec = ScenarioSpec.model_validate(data)
    except ValidationError as exc:
        problems = [_describe(err, data, lines, source) for err in exc.errors()]
        raise ScenarioError("\n".join(problems)) from None
    problems = [
        _format(source, lines, path, lookup(data, path, value), message)
        for path, value, message in _cross_check(spec)
    ]
    if problems:
        raise ScenarioError("\n".join(problems))
    return Scenario(spec, default_id=default_id)


def _cross_check(spec: ScenarioSpec) -> Iterator[tuple[tuple[Any, ...], Any, str]]:
    """Problems pydantic cannot see: duplicate ids, unknown assets, inverted limits."""
    named = {"assets": [a.id for a in spec.assets], "radars": [r.id for r in spec.radars]}
    for kind, names in named.items():
        seen: dict[str, int] = {}
        for i, name in enumerate(names):
            if name in seen:
                yield (kind, i, "id"), name, f"duplicate id (also {kind}[{seen[name]}])"
            seen.setdefault(name, i)
    seen_ids: dict[int, int] = {}
    for i, target in enumerate(spec.targets):
        if target.id is not None:
            if target.id in seen_ids:
                yield (
                    ("targets", i, "id"),
                    target.id,
                    f"duplicate id (also targets[{seen_ids[target.id]}])",
                )
            seen_ids.setdefault(target.id, i)
    assets = {a.id: a for a in spec.assets}
    known = list(assets)

    def unknown(name: str) -> str:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"no such asset; defined assets: {', '.join(known) or 'none'}{hint}"

    for i, target in enumerate(spec.targets):
        motion = target.motion
        if isinstance(motion, DirectSpec | DiveSpec):
            asset = assets.get(motion.towards)
            if asset is None:
                yield ("targets", i, "motion", "towards"), motion.towards, unknown(motion.towards)
            elif math.dist(target.position_m, asset.position_m) < 1.0:
                yield (
                    ("targets", i, "position_m"),
                    list(target.position_m),
                    f"must be away from asset {asset.id!r}, its destination",
                )
    for i, raid in enumerate(spec.raids):
        if raid.towards not in assets:
            yield ("raids", i, "towards"), raid.towards, unknown(raid.towards)
    for i, radar in enumerate(spec.radars):
        cov = radar.coverage
        if cov.min_range_m >= cov.max_range_m:
            yield (
                ("radars", i, "coverage", "min_range_m"),
                cov.min_range_m,
                f"must be < max_range_m ({cov.max_range_m:g})",
            )
        if cov.min_elevation_deg >= cov.max_elevation_deg:
            yield (
                ("radars", i, "coverage", "min_elevation_deg"),
                cov.min_elevation_deg,
                f"must be < max_elevation_deg ({cov.max_elevation_deg:g})",
            )


def _describe(err: Any, data: Any, lines: dict[tuple[Any, ...], int], source: str) -> str:
    loc, owner = _walk_loc(tuple(err["loc"]))
    kind = err["type"]
    value = err.get("input")
    ctx = err.get("ctx", {})
    if kind == "missing":
        field_info = owner.model_fields.get(_field_name(owner, loc[-1])) if owner else None
        what = f": {field_info.description}" if field_info and field_info.description else ""
        return _format(source, lines, loc, None, f"required field is missing{what}", shown=False)
    if kind == "extra_forbidden":
        allowed = _allowed_fields(owner)
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return _format(
            source, lines, loc, value, f"unknown field; allowed here: {', '.join(allowed)}{hint}"
        )
    if kind in {"union_tag_invalid", "union_tag_not_found"}:
        models = ", ".join(MOTION_MODELS)
        if kind == "union_tag_not_found":
            message = f"required field is missing: the motion model, one of {models}"
            return _format(source, lines, (*loc, "model"), None, message, shown=False)
        value = value.get("model") if isinstance(value, dict) else value
        return _format(source, lines, (*loc, "model"), value, f"must be one of {models}")
    ops = {
        "greater_than": ">",
        "greater_than_equal": ">=",
        "less_than": "<",
        "less_than_equal": "<=",
    }
    if kind in ops:
        message = f"must be {ops[kind]} {next(iter(ctx.values()))}"
    elif kind == "value_error":
        message = str(ctx.get("error", err["msg"]))
    elif kind in {"float_type", "float_parsing", "finite_number"}:
        message = "must be a finite number"
    elif kind in {"int_type", "int_parsing", "int_from_float"}:
        message = "must be an integer"
    elif kind in {"string_type"}:
        message = "must be a string"
    elif kind in {"list_type"}:
        message = "must be a list"
    elif kind in {"model_type", "model_attributes_type", "dict_type"}:
        message = "must be a mapping of fields"
    elif kind in {"string_too_short", "string_too_long"}:
        message = "must be 1 to 64 characters"
    else:
        msg = str(err["msg"])
        message = msg[0].lower() + msg[1:]
    return _format(source, lines, loc, value, message)


def _format(
    source: str,
    lines: dict[tuple[Any, ...], int],
    loc: tuple[Any, ...],
    value: Any,
    message: str,
    *,
    shown: bool = True,
) -> str:
    line = nearest_line(lines, loc)
    where = f"{source}:{line}" if line else source
    path = yaml_path(loc) or "(top level)"
    got = f" (got {_short(value)})" if shown else ""
    return f"{where}: {path}: {message}{got}"


def _walk_loc(loc: tuple[Any, ...]) -> tuple[tuple[Any, ...], type[BaseModel] | None]:
    """Pydantic's ``loc`` without union tags, and the model that owns its last field."""
    tp: Any = ScenarioSpec
    owner: type[BaseModel] | None = None
    out: list[Any] = []
    for part in loc:
        tp = _strip(tp)
        if isinstance(part, int):
            args = get_args(tp) if get_origin(tp) is list else ()
            tp = args[0] if args else None
            out.append(part)
            continue
        members = _union_members(tp)
        if members:
            tagged = [m for m in members if _tag(m) == part]
            if tagged:  # a discriminated union's tag: not a YAML key
                tp = tagged[0]
                continue
            tp = None
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            owner = tp
            info = tp.model_fields.get(_field_name(tp, part))
            tp = info.annotation if info is not None else None
        else:
            owner, tp = None, None
        out.append(part)
    return tuple(out), owner


def _strip(tp: Any) -> Any:
    if get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    members = [a for a in get_args(tp) if a is not type(None)] if _is_union(tp) else []
    return members[0] if len(members) == 1 else tp


def _is_union(tp: Any) -> bool:
    import types

    return get_origin(tp) in (Union, types.UnionType)


def _union_members(tp: Any) -> list[Any]:
    return [a for a in get_args(tp) if a is not type(None)] if _is_union(tp) else []


def _tag(model: Any) -> Any:
    if isinstance(model, type) and issubclass(model, BaseModel) and "model" in model.model_fields:
        args = get_args(model.model_fields["model"].annotation)
        return args[0] if args else None
    return None


def _field_name(model: type[BaseModel], key: Any) -> str:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return name
    return str(key)


def _allowed_fields(model: type[BaseModel] | None) -> list[str]:
    if model is None:
        return []
    return [info.alias or name for name, info in model.model_fields.items()]


def _short(value: Any) -> str:
    if isinstance(value, tuple):
        value = list(value)
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# -- truth ---------------------------------------------------------------------------------


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
        )

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

        def col(name: str) -> F64:
            return np.asarray(packed_field(msg, name), dtype=np.float64)

        return cls(
            msg.time_ns * 1e-9,
            np.array(packed_field(msg, "target_id"), dtype=np.uint32),
            np.array(packed_field(msg, "target_class"), dtype=np.uint8),
            np.stack([col("x_m"), col("y_m"), col("z_m")], axis=1).reshape(-1, 3),
            np.stack([col("vx_mps"), col("vy_mps"), col("vz_mps")], axis=1).reshape(-1, 3),
            np.ones(msg.count, bool),
        )


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
        problems = [f"{yaml_path(p)}: {m} (got {_short(v)})" for p, v, m in _cross_check(spec)]
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
        return _validate(data, source=source, lines={}, default_id="scenario")

    def _build_targets(self) -> None:
        spec = self.spec
        asset_index = {a.id: i for i, a in enumerate(spec.assets)}
        rows: list[dict[str, Any]] = []
        for t in spec.targets:
            row: dict[str, Any] = {
                "id": t.id,
                "class": TARGET_CLASSES[t.class_],
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

        n = len(rows)
        self.ids = np.array([r["id"] for r in rows], dtype=np.uint32)
        self.classes = np.array([int(r["class"].value) for r in rows], dtype=np.uint8)
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
        #: Absolute kill time per target (seconds), inf while not killed.
        self.kill_s = np.full(n, math.inf)
        self._row = {int(t): i for i, t in enumerate(self.ids)}

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
        return int(self.ids.shape[0])

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

        Targets not yet born sit at their birth state, ended ones where they ended.
        """
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
        return TruthState(float(t_s), self.ids.copy(), self.classes.copy(), pos, vel, alive)

    def kill(self, target_id: int, t_s: float) -> bool:
        """Kill ``target_id`` at ``t_s``; False if it is unknown or not alive then."""
        row = self._row.get(int(target_id))
        if row is None:
            return False
        if not (self.birth_s[row] <= t_s < self.end_s()[row]):
            return False
        self.kill_s[row] = t_s
        return True

    def kills(self) -> dict[int, float]:
        """Killed targets: id → kill time (seconds)."""
        done = np.flatnonzero(np.isfinite(self.kill_s))
        return {int(self.ids[i]): float(self.kill_s[i]) for i in done}

    def impacts(self, until_s: float = math.inf) -> list[Impact]:
        """Targets that reached their asset by ``until_s`` (not killed first): the leakers."""
        hit = (
            (self.impact_s <= until_s)
            & (self.impact_s < self.kill_s)
            & (self.impact_s <= self.duration_s)
        )
        order = np.argsort(self.impact_s[hit], kind="stable")
        rows = np.flatnonzero(hit)[order]
        return [
            Impact(int(self.ids[i]), self.assets[self.asset_index[i]].id, float(self.impact_s[i]))
            for i in rows
        ]


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


# -- radars --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Detections:
    """One scan's detections as parallel arrays of M items (time ``time_s``)."""

    time_s: float
    range_m: F64
    azimuth_rad: F64  # from north, clockwise, in [0, 2 pi)
    elevation_rad: F64
    radial_velocity_mps: F64  # positive = receding
    snr_db: F64
    x_m: F64  # ENU, absolute (sensor position added)
    y_m: F64
    z_m: F64
    target_id: npt.NDArray[np.int64] = field(
        default_factory=lambda: np.zeros(0, np.int64)
    )  # the target seen, -1 for clutter (simulation only, not on the wire)

    @property
    def count(self) -> int:
        return int(self.range_m.shape[0])

    @property
    def positions_m(self) -> F64:
        """(M, 3) ENU positions."""
        return np.stack([self.x_m, self.y_m, self.z_m], axis=1).reshape(-1, 3)

    def to_msg(
        self,
        *,
        sensor_id: str,
        scan_id: int,
        origin_ns: int,
        publish_ns: int,
        sensor_position_m: Sequence[float],
    ) -> DetectionBatch:
        """A ``DetectionBatch`` for the wire."""
        return DetectionBatch(
            sensor_id=sensor_id,
            scan_id=scan_id,
            origin_ns=origin_ns,
            publish_ns=publish_ns,
            sensor_x_m=float(sensor_position_m[0]),
            sensor_y_m=float(sensor_position_m[1]),
            sensor_z_m=float(sensor_position_m[2]),
            count=self.count,
            range_m=pack(self.range_m, "<f8"),
            azimuth_rad=pack(self.azimuth_rad, "<f8"),
            elevation_rad=pack(self.elevation_rad, "<f8"),
            radial_velocity_mps=pack(self.radial_velocity_mps, "<f8"),
            snr_db=pack(self.snr_db, "<f8"),
            x_m=pack(self.x_m, "<f8"),
            y_m=pack(self.y_m, "<f8"),
            z_m=pack(self.z_m, "<f8"),
        )

    @classmethod
    def from_msg(cls, msg: DetectionBatch) -> Detections:
        """The detections of a ``DetectionBatch`` (``time_s`` = origin, Unix seconds)."""

        def col(name: str) -> F64:
            return np.asarray(packed_field(msg, name), dtype=np.float64)

        return cls(
            msg.origin_ns * 1e-9,
            col("range_m"),
            col("azimuth_rad"),
            col("elevation_rad"),
            col("radial_velocity_mps"),
            col("snr_db"),
            col("x_m"),
            col("y_m"),
            col("z_m"),
            np.full(msg.count, -1, np.int64),
        )


@dataclass(frozen=True)
class RadarModel:
    """A radar: a snapshot scan with Pd, Gaussian polar noise, coverage and Poisson clutter.

    Angles in radians, azimuth from north clockwise; ``sector_width_rad`` = 2 pi is all round.
    """

    id: str
    position_m: tuple[float, float, float]
    scan_period_s: float
    sigma_range_m: float
    sigma_azimuth_rad: float
    sigma_elevation_rad: float
    sigma_radial_velocity_mps: float
    pd: float
    clutter_rate: float
    max_range_m: float
    min_range_m: float = 0.0
    min_elevation_rad: float = 0.0
    max_elevation_rad: float = math.radians(60.0)
    sector_start_rad: float = 0.0
    sector_width_rad: float = 2 * math.pi
    snr_ref_db: float = 13.0

    @classmethod
    def from_spec(cls, spec: RadarSpec) -> RadarModel:
        cov = spec.coverage
        start, end = cov.sector_deg
        width = (end - start) % 360.0 or 360.0
        return cls(
            id=spec.id,
            position_m=spec.position_m,
            scan_period_s=spec.scan_period_s,
            sigma_range_m=spec.sigma_range_m,
            sigma_azimuth_rad=spec.sigma_azimuth_rad,
            sigma_elevation_rad=spec.sigma_elevation_rad,
            sigma_radial_velocity_mps=spec.sigma_radial_velocity_mps,
            pd=spec.pd,
            clutter_rate=spec.clutter_rate,
            max_range_m=cov.max_range_m,
            min_range_m=cov.min_range_m,
            min_elevation_rad=math.radians(cov.min_elevation_deg),
            max_elevation_rad=math.radians(cov.max_elevation_deg),
            sector_start_rad=math.radians(start),
            sector_width_rad=math.radians(width),
            snr_ref_db=spec.snr_ref_db,
        )

    def polar(self, positions_m: npt.ArrayLike) -> tuple[F64, F64, F64]:
        """Range (m), azimuth (rad, [0, 2 pi)) and elevation (rad) of ENU ``positions_m`` (N, 3)."""
        rel = np.asarray(positions_m, dtype=np.float64).reshape(-1, 3) - np.asarray(self.position_m)
        ground = np.hypot(rel[:, 0], rel[:, 1])
        rng = np.hypot(ground, rel[:, 2])
        az = np.mod(np.arctan2(rel[:, 0], rel[:, 1]), 2 * np.pi)
        el = np.arctan2(rel[:, 2], ground)
        return rng, az, el

    def _in_sector(self, az: F64) -> npt.NDArray[np.bool_]:
        if self.sector_width_rad >= 2 * math.pi:
            return np.ones(az.shape, bool)
        return np.mod(az - self.sector_start_rad, 2 * np.pi) <= self.sector_width_rad

    def in_coverage(self, positions_m: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Which ENU ``positions_m`` (N, 3) the radar covers (range, elevation, sector)."""
        rng, az, el = self.polar(positions_m)
        return (
            (rng >= self.min_range_m)
            & (rng <= self.max_range_m)
            & (el >= self.min_elevation_rad)
            & (el <= self.max_elevation_rad)
            & self._in_sector(az)
        )

    def scan(self, truth: TruthState, t_s: float, rng: np.random.Generator) -> Detections:
        """Detections of one scan at ``t_s`` (same time base as ``truth.time_s``).

        The live targets of ``truth`` are moved to ``t_s`` with their velocities, detected
        with probability ``pd`` when in coverage, measured with Gaussian noise in range,
        azimuth, elevation and radial velocity; ``Poisson(clutter_rate)`` false alarms are
        uniform in the coverage volume. Detections come shuffled.
        """
        live = truth.live()
        dt = t_s - truth.time_s
        pos = live.positions_m + live.velocities_mps * dt
        r, az, el = self.polar(pos)
        seen = self.in_coverage(pos) & (rng.random(live.count) < self.pd)
        idx = np.flatnonzero(seen)
        n = idx.size
        rel = pos[idx] - np.asarray(self.position_m)
        r_true = r[idx]
        vr = np.einsum("ij,ij->i", rel, live.velocities_mps[idx]) / np.maximum(r_true, 1e-9)
        rcs = _RCS_TABLE[np.minimum(live.classes[idx], len(_RCS_TABLE) - 1)]
        snr = self.snr_ref_db + rcs + 40.0 * np.log10(self.max_range_m / np.maximum(r_true, 1.0))
        m_r = r_true + self.sigma_range_m * rng.standard_normal(n)
        m_az = az[idx] + self.sigma_azimuth_rad * rng.standard_normal(n)
        m_el = el[idx] + self.sigma_elevation_rad * rng.standard_normal(n)
        m_vr = vr + self.sigma_radial_velocity_mps * rng.standard_normal(n)

        k = int(rng.poisson(self.clutter_rate)) if self.clutter_rate > 0 else 0
        c_r, c_az, c_el = self._clutter(k, rng)
        c_vr = rng.uniform(-_CLUTTER_VR_MPS, _CLUTTER_VR_MPS, k)
        c_snr = self.snr_ref_db - 3.0 + rng.exponential(2.0, k)

        out_r = np.concatenate([m_r, c_r])
        out_az = np.mod(np.concatenate([m_az, c_az]), 2 * np.pi)
        out_el = np.concatenate([m_el, c_el])
        ids = np.concatenate([live.ids[idx].astype(np.int64), np.full(k, -1, np.int64)])
        order = rng.permutation(n + k)
        out_r, out_az, out_el, ids = out_r[order], out_az[order], out_el[order], ids[order]
        ground = out_r * np.cos(out_el)
        sx, sy, sz = self.position_m
        return Detections(
            time_s=float(t_s),
            range_m=out_r,
            azimuth_rad=out_az,
            elevation_rad=out_el,
            radial_velocity_mps=np.concatenate([m_vr, c_vr])[order],
            snr_db=np.concatenate([snr, c_snr])[order],
            x_m=sx + ground * np.sin(out_az),
            y_m=sy + ground * np.cos(out_az),
            z_m=sz + out_r * np.sin(out_el),
            target_id=ids,
        )

    def _clutter(self, k: int, rng: np.random.Generator) -> tuple[F64, F64, F64]:
        """``k`` points uniform in the coverage volume (a spherical sector shell)."""
        r0, r1 = self.min_range_m, self.max_range_m
        # Volume element r^2 cos(el) dr daz del: r^3 and sin(el) are uniform.
        r = np.cbrt(r0**3 + rng.random(k) * (r1**3 - r0**3))
        az = np.mod(self.sector_start_rad + rng.random(k) * self.sector_width_rad, 2 * np.pi)
        s0, s1 = math.sin(self.min_elevation_rad), math.sin(self.max_elevation_rad)
        el = np.arcsin(s0 + rng.random(k) * (s1 - s0))
        return r, az, el


# -- the classic 2-D benchmark -------------------------------------------------------------


@dataclass(frozen=True)
class Classic2D:
    """A 2-D multi-target scenario with per-scan truths and measurements.

    State order ``[x, vx, y, vy]`` (Stone Soup's); ``F``, ``Q``, ``H``, ``R`` are the exact
    models the data were drawn with, so a filter under test can use them as they are.
    """

    times_s: F64  # (K,)
    truth_ids: list[npt.NDArray[np.int64]]  # per scan (n_k,)
    truth_positions: list[F64]  # per scan (n_k, 2), metres
    truth_velocities: list[F64]  # per scan (n_k, 2), m/s
    measurements: list[F64]  # per scan (m_k, 2), metres
    measurement_ids: list[npt.NDArray[np.int64]]  # per scan (m_k,), target id or -1 (clutter)
    F: F64  # (4, 4) transition
    Q: F64  # (4, 4) process noise
    H: F64  # (2, 4) measurement
    R: F64  # (2, 2) measurement noise
    region: tuple[tuple[float, float], tuple[float, float]]  # ((xmin, xmax), (ymin, ymax))
    p_d: float
    p_s: float
    clutter_rate: float  # false alarms per scan (Poisson mean)
    dt_s: float
    seed: int

    @property
    def scans(self) -> int:
        return int(self.times_s.shape[0])

    @property
    def clutter_density(self) -> float:
        """False alarms per square metre and scan."""
        (x0, x1), (y0, y1) = self.region
        return self.clutter_rate / ((x1 - x0) * (y1 - y0))


def classic_2d(
    n_targets: int,
    *,
    scans: int = 100,
    dt_s: float = 1.0,
    sigma_v: float = 5.0,
    p_s: float = 0.99,
    R: npt.ArrayLike | None = None,  # noqa: N803 (the textbook's name)
    p_d: float = 0.98,
    clutter_rate: float | None = None,
    region: tuple[tuple[float, float], tuple[float, float]] | None = None,
    seed: int = 0,
    birth_speed_mps: float = 10.0,
) -> Classic2D:
    """The classic 2-D RFS benchmark (after Vo & Ma's GM-PHD paper), scaled to ``n_targets``.

    Nearly-constant-velocity targets with discrete white-noise acceleration of std ``sigma_v``
    (m/s²): ``Q = sigma_v² G Gᵀ`` per axis, ``G = [dt²/2, dt]``. Each scan a target survives
    with ``p_s`` and dies when it leaves ``region``; births are ``Poisson(n·(1−p_s) +
    deficit/2)`` where ``deficit = max(n − alive, 0)``, uniform in the inner 80 % of the region
    with velocity ``N(0, birth_speed_mps²)`` per axis, so about ``n_targets`` fly at any time.
    A live target is detected with ``p_d`` as ``H x + N(0, R)`` (default ``R = diag(10², 10²)``).
    Clutter is ``Poisson(clutter_rate)`` uniform in ``region``; defaults scale with the target
    count so that densities stay those of 10 targets in [-1000, 1000]²: ``clutter_rate = 3·n``
    and ``region = [-L, L]²`` with ``L = 1000·sqrt(n/10)`` m.
    """
    if n_targets < 1 or scans < 1 or dt_s <= 0 or not 0 < p_s <= 1 or not 0 <= p_d <= 1:
        raise ValueError(
            f"classic_2d(n_targets={n_targets}, scans={scans}, dt_s={dt_s}, p_s={p_s}, "
            f"p_d={p_d}): need n_targets >= 1, scans >= 1, dt_s > 0, 0 < p_s <= 1, 0 <= p_d <= 1"
        )
    half = 1000.0 * math.sqrt(n_targets / 10.0)
    region = region or ((-half, half), (-half, half))
    (x0, x1), (y0, y1) = region
    lam = 30.0 * n_targets / 10.0 if clutter_rate is None else float(clutter_rate)
    r_cov = np.diag([100.0, 100.0]) if R is None else np.asarray(R, dtype=np.float64)
    r_chol = np.linalg.cholesky(r_cov)
    f1 = np.array([[1.0, dt_s], [0.0, 1.0]])
    g = np.array([dt_s**2 / 2.0, dt_s])
    F = np.kron(np.eye(2), f1)
    Q = np.kron(np.eye(2), np.outer(g, g)).astype(np.float64) * sigma_v**2
    H = np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]])
    rng = np.random.default_rng(seed)

    def births(k: int) -> np.ndarray:
        x = np.empty((k, 4))
        x[:, 0] = rng.uniform(x0 + 0.1 * (x1 - x0), x1 - 0.1 * (x1 - x0), k)
        x[:, 2] = rng.uniform(y0 + 0.1 * (y1 - y0), y1 - 0.1 * (y1 - y0), k)
        x[:, 1] = rng.normal(0.0, birth_speed_mps, k)
        x[:, 3] = rng.normal(0.0, birth_speed_mps, k)
        return x

    states = births(n_targets)
    ids = np.arange(1, n_targets + 1, dtype=np.int64)
    next_id = n_targets + 1
    out_ids, out_pos, out_vel, out_z, out_zid = [], [], [], [], []
    for k in range(scans):
        if k > 0:
            survive = rng.random(len(ids)) < p_s
            accel = rng.normal(0.0, sigma_v, (len(ids), 2))
            states = states @ F.T
            states[:, [0, 2]] += accel * g[0]
            states[:, [1, 3]] += accel * g[1]
            inside = (
                (states[:, 0] >= x0)
                & (states[:, 0] <= x1)
                & (states[:, 2] >= y0)
                & (states[:, 2] <= y1)
            )
            keep = survive & inside
            states, ids = states[keep], ids[keep]
            mean = n_targets * (1.0 - p_s) + 0.5 * max(n_targets - len(ids), 0)
            born = int(rng.poisson(mean))
            states = np.vstack([states, births(born)])
            ids = np.concatenate([ids, np.arange(next_id, next_id + born, dtype=np.int64)])
            next_id += born
        detected = rng.random(len(ids)) < p_d
        z = states[detected] @ H.T + rng.standard_normal((int(detected.sum()), 2)) @ r_chol.T
        c = int(rng.poisson(lam))
        clutter = np.column_stack([rng.uniform(x0, x1, c), rng.uniform(y0, y1, c)])
        zs = np.vstack([z, clutter])
        zid = np.concatenate([ids[detected], np.full(c, -1, np.int64)])
        order = rng.permutation(len(zs))
        out_ids.append(ids.copy())
        out_pos.append(states[:, [0, 2]].copy())
        out_vel.append(states[:, [1, 3]].copy())
        out_z.append(zs[order])
        out_zid.append(zid[order])
    return Classic2D(
        times_s=np.arange(scans, dtype=np.float64) * float(dt_s),
        truth_ids=out_ids,
        truth_positions=out_pos,
        truth_velocities=out_vel,
        measurements=out_z,
        measurement_ids=out_zid,
        F=F,
        Q=Q,
        H=H,
        R=r_cov,
        region=region,
        p_d=p_d,
        p_s=p_s,
        clutter_rate=lam,
        dt_s=dt_s,
        seed=seed,
    )
