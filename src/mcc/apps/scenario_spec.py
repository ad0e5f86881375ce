"""Scenario files: the schema (pydantic models) and their validation, with messages that name
``file:line: field: what is wrong (got …)`` (docs/scenario.md).

`validate_spec` turns the mapping of a YAML file into a `ScenarioSpec` or raises
``ScenarioError`` listing every problem; `mcc.apps.scenario` builds the `Scenario` from it.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterator
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from mcc.errors import ScenarioError
from mcc.types import TargetClass
from mcc.yamlsource import lookup, nearest_line, yaml_path

#: YAML class names → IDL ``TargetClass`` (``cruise_missile`` ↔ ``CLASS_CRUISE_MISSILE``).
TARGET_CLASSES: dict[str, TargetClass] = {
    member.name.removeprefix("CLASS_").lower(): member for member in TargetClass
}

MOTION_MODELS = ("constant_velocity", "coordinated_turn", "direct", "dive")

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


def _duration(value: Any) -> float:
    if value == "endless":
        return math.inf
    if _is_number(value) and value > 0:
        return float(value)
    raise ValueError("must be a number of seconds > 0, or endless")


def _class_name(value: Any) -> Any:
    if isinstance(value, str) and value in TARGET_CLASSES:
        return value
    raise ValueError(f"must be one of {', '.join(TARGET_CLASSES)}")


Vec3 = Annotated[tuple[float, float, float], BeforeValidator(_vec3)]
PositiveSpan = Annotated[tuple[float, float], BeforeValidator(_positive_span)]
NonNegativeSpan = Annotated[tuple[float, float], BeforeValidator(_nonnegative_span)]
Sector = Annotated[tuple[float, float], BeforeValidator(_sector)]
ClassName = Annotated[str, BeforeValidator(_class_name)]
Duration = Annotated[float, BeforeValidator(_duration)]
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


class InterrogatorSpec(_Spec):
    """A radar's IFF interrogator (Mode 5): every detection gets an IFF answer."""

    p_reply: float = Field(
        ge=0, le=1, description="probability that a friend (iff.mode5) answers, per detection"
    )
    p_false_reply: float = Field(
        0.0,
        ge=0,
        le=1,
        description="probability of an invalid (garbled or spoofed) reply from a detection "
        "that does not answer Mode 5 (hostiles, unknowns, clutter)",
    )


class TargetIffSpec(_Spec):
    """What a target answers an IFF interrogation."""

    mode5: bool = Field(description="true: a friend with a working Mode 5 transponder")


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
    iff: InterrogatorSpec | None = Field(
        None, description="IFF interrogator; omitted: the radar does not interrogate"
    )


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
    iff: TargetIffSpec | None = Field(
        None, description="IFF transponder; omitted: answers no interrogation"
    )


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
    iff: TargetIffSpec | None = Field(
        None,
        description="IFF transponder of every target of the raid (mode5: friends that "
        "fly to the asset and land there: no impact)",
    )
    repeat_s: float | None = Field(
        None,
        gt=0,
        description="the raid comes again every repeat_s seconds, each wave drawn afresh "
        "from the seed, until the scenario ends; omitted: once",
    )


class ScenarioSpec(_Spec):
    """A whole scenario file."""

    id: Id | None = Field(None, description="scenario name; omitted: the file's stem")
    description: str = Field("", description="free text")
    seed: int = Field(ge=0, le=2**63 - 1, description="seed of every random draw")
    duration_s: Duration = Field(
        allow_inf_nan=True,
        description="length, seconds, every target ends then; or endless (a continuous "
        "scenario: repeating raids, no end)",
    )
    assets: list[AssetSpec] = Field(default_factory=list, description="defended assets")
    radars: list[RadarSpec] = Field(default_factory=list, description="radars")
    targets: list[TargetSpec] = Field(default_factory=list, description="individual targets")
    raids: list[RaidSpec] = Field(default_factory=list, description="raid generators")


# -- loading and error messages ------------------------------------------------------------


def validate_spec(
    data: dict[str, Any], *, source: str, lines: dict[tuple[Any, ...], int]
) -> ScenarioSpec:
    """The `ScenarioSpec` of ``data`` (a YAML file's mapping; ``lines``: where each key is),
    or ``ScenarioError`` listing every problem as ``file:line: field: what (got …)``."""
    try:
        spec = ScenarioSpec.model_validate(data)
    except ValidationError as exc:
        problems = [_describe(err, data, lines, source) for err in exc.errors()]
        raise ScenarioError("\n".join(problems)) from None
    problems = [
        _format(source, lines, path, lookup(data, path, value), message)
        for path, value, message in cross_check(spec)
    ]
    if problems:
        raise ScenarioError("\n".join(problems))
    return spec


def cross_check(spec: ScenarioSpec) -> Iterator[tuple[tuple[Any, ...], Any, str]]:
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
    elif kind in {"bool_type", "bool_parsing"}:
        message = "must be true or false"
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
    got = f" (got {short(value)})" if shown else ""
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


def short(value: Any) -> str:
    """``value`` as JSON for a message, shortened to 60 characters."""
    if isinstance(value, tuple):
        value = list(value)
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
