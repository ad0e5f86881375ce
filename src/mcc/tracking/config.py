"""`TrackerConfig`: every parameter of the tracker, with its type, bounds, default and unit; a
pydantic dataclass (not a ``BaseModel``: `dataclasses.replace` keeps working for its users)."""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin

import numpy as np
import yaml
from pydantic import BeforeValidator, ConfigDict, Field, ValidationError
from pydantic.dataclasses import dataclass
from pydantic_core import ErrorDetails

from mcc.compute.associate import chi2_gate_threshold
from mcc.errors import MccError
from mcc.yamlsource import parse_mapping

__all__ = ["TrackerConfig", "TrackerConfigError"]

#: An integer; NumPy's count too (``np.int64`` from an array's shape or a sum).
Count = Annotated[int, BeforeValidator(lambda v: int(v) if isinstance(v, np.integer) else v)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Probability = Annotated[float, Field(gt=0, lt=1)]
TurnRate = Annotated[float, Field(ge=-90, le=90)]
TurnRates = Annotated[tuple[TurnRate, ...], Field(min_length=1, max_length=16, strict=False)]
T = TypeVar("T")


class TrackerConfigError(MccError, ValueError):
    """A tracker parameter is unknown, of the wrong type or out of range (the message names it)."""


def _named_errors(cls: type[T]) -> type[T]:
    """Constructing ``cls`` raises `TrackerConfigError`, one line per bad field in the words of
    `_problem`, instead of pydantic's `ValidationError` (pydantic has no hook for that)."""
    validate = cls.__init__

    def __init__(self: T, *args: Any, **kwargs: Any) -> None:
        try:
            validate(self, *args, **kwargs)
        except ValidationError as exc:
            first: dict[tuple[Any, ...], ErrorDetails] = {}
            for err in exc.errors(include_url=False):
                first.setdefault(err["loc"][:1], err)  # one line a field, the first
            lines = [_problem(err, kwargs) for err in first.values()]
            raise TrackerConfigError("\n".join(lines)) from None

    cls.__init__ = __init__  # type: ignore[method-assign, assignment]
    return cls


@_named_errors
@dataclass(frozen=True, config=ConfigDict(strict=True, extra="forbid"))
class TrackerConfig:
    """Every parameter of `MultiTargetTracker`, declared once with its type, default and unit.

    The defaults are what a user gets with no configuration (``mcc track replay`` without
    ``--config``, the ``tracker`` app): an IMM whose turn rates cover 0-20 deg/s, an EKF on
    polar detections, track deletion that follows each radar's scan period. Round-trips
    through `to_dict`/`from_dict` and `to_yaml`/`from_yaml`; a bad value raises
    `TrackerConfigError` naming the field.
    """

    ndim: Annotated[Count, Field(ge=2, le=3)] = 3
    """Position dimensions: 2 (state ``[x y vx vy]``) or 3 (``[x y z vx vy vz]``)."""
    model: Literal["cv", "imm"] = "imm"
    """Motion model: ``cv`` (constant velocity) or ``imm`` (CV + coordinated turns at
    ``imm_turn_rates_dps``)."""
    sigma_a_mps2: NonNegative = 5.0
    """Process noise: standard deviation of the white acceleration, m/s² (each IMM model's;
    the turns are the models' business, so this stays small)."""
    sigma_a_straight_mps2: NonNegative = 0.3
    """IMM: process noise of the straight-flight (0 deg/s) model, m/s²: small, as a
    well-tuned constant-velocity filter's on straight flight (the turn models take the
    manoeuvres). ``model: cv`` uses ``sigma_a_mps2``."""
    noise_model: Literal["discrete", "continuous"] = "discrete"
    """``discrete``: Q = σ² G Gᵀ, G = [dt²/2, dt] (piecewise-constant acceleration per step);
    ``continuous``: σ² is the power spectral density (`kalman.cv_process_noise`)."""
    imm_turn_rates_dps: TurnRates = (0.0, 6.0, -6.0, 12.0, -12.0, 18.0, -18.0)
    """IMM: the turn rate of each model, degrees/s (0 = constant velocity, + = left turn).
    The default covers 0-20 deg/s, i.e. 3-6 g at 200-300 m/s, within 3 deg/s of a model."""
    imm_sojourn_s: Positive = 120.0
    """IMM: mean time spent flying straight (in the 0 deg/s model), seconds. The probability of
    staying in a model over a step of dt seconds is exp(-dt / sojourn), so slow radars switch
    more per scan; a straight model left goes evenly to the turns."""
    imm_turn_sojourn_s: Positive = 5.0
    """IMM: mean time spent in one turn model, seconds; a turn left goes half to the straight
    model, half evenly to the other turns."""
    imm_mix_floor: Annotated[float, Field(ge=0, lt=0.5)] = 0.02
    """IMM: a model whose probability is below this takes no part in the next mixing (it
    restarts from the other models' states with its prior probability): a turn model of
    probability 0.001 would otherwise widen the straight model's covariance at every step
    through the spread of the means (0 = the textbook IMM)."""
    measurement_update: Literal["ekf", "converted"] = "ekf"
    """Polar detections (`Scan.from_polar`): ``ekf`` updates in range/azimuth(/elevation)
    (/range-rate) with the Jacobian at the prediction; ``converted`` updates with the debiased
    Cartesian conversion and its linearised covariance. Cartesian scans are linear either way."""
    assignment_cost: Literal["likelihood", "distance"] = "likelihood"
    """GNN cost of a pair: ``likelihood`` = d² + ln|S| (−2 log of the Gaussian likelihood, so an
    uncertain track pays for its wide gate); ``distance`` = d² alone."""
    association: Literal["gnn", "jpda", "auto"] = "auto"
    """``gnn``: global nearest neighbour (`GNNAssociator`), one detection per track;
    ``jpda``: joint probabilistic data association (`JPDAAssociator`), each track updated
    with every gated detection weighted by its marginal probability; ``auto``: per cluster,
    JPDA* (JPDA keeping only the likeliest of the joint events that differ by which track took
    which detection, so close tracks do not coalesce) where confirmed tracks share a gated
    detection, GNN elsewhere (docs/tracking.md compares them)."""
    jpda_rank: Literal["straight", "mixture"] = "straight"
    """JPDA* (``association: auto``) with an IMM: the likelihood by which, of the joint events
    that differ only by which track took which detection, the one kept is chosen:
    ``straight``: the straightest model's (the 0 deg/s one of the defaults' turn rates);
    ``mixture``: the model mixture's. The events kept are weighed by the mixture either way.
    A turn model lets a track explain its neighbour's detection as the start of a turn, and
    who took which is where ids are exchanged: on the training draws of the bench's formation
    families, ``straight`` has 10 % fewer id switches (docs/tracking.md)."""
    jpda_max_cluster: Annotated[Count, Field(ge=1, le=12)] = 8
    """JPDA: clusters of more tracks than this use the approximate marginals (Fitzgerald's
    cheap JPDA) instead of enumerating every joint event, tracks."""
    gate_probability: Probability = 0.999
    """Chi-square gate: a true detection falls inside with this probability."""
    initiation: Literal["one_point", "two_point"] = "one_point"
    """``one_point``: a tentative track per left-over detection; ``two_point``: per pair of
    left-over detections of one sensor in consecutive scans (velocity from their difference;
    both count as hits)."""
    init_velocity_std_mps: Positive = 300.0
    """One-point initiation: prior velocity standard deviation per axis, m/s."""
    max_speed_mps: Positive = 1000.0
    """Two-point initiation: fastest target; farther pairs are not started, m/s."""
    track_logic: Literal["llr", "mofn"] = "llr"
    """Confirmation of tentative tracks: ``llr`` = a log-likelihood-ratio track score (each
    hit adds ln(p_d · N(y; 0, S) / λ), each covered miss ln(1 − p_d), λ the clutter density the
    tracker measures per radar), confirmed at ``confirm_score``, dropped below ``drop_score``
    or after ``max_tentative_scans``; ``mofn`` = ``confirm_m`` hits in ``confirm_n`` scans."""
    pd: Probability = 0.9
    """Track score: probability that a radar covering a target detects it."""
    confirm_score: Positive = 6.9
    """Track score: a tentative track is confirmed at this log-likelihood ratio (ln(1/α)
    with α ≈ 1e-3 false confirmations per track started)."""
    drop_score: Annotated[float, Field(lt=0, allow_inf_nan=False)] = -2.3
    """Track score: a tentative track is dropped below this log-likelihood ratio (ln 0.1)."""
    max_tentative_scans: Annotated[Count, Field(ge=1, le=64)] = 8
    """Track score: a tentative track not confirmed after this many covered scans is dropped."""
    confirm_m: Annotated[Count, Field(ge=1)] = 2
    """M of M-of-N: a tentative track is confirmed after ``confirm_m`` hits in ..."""
    confirm_n: Annotated[Count, Field(ge=1, le=32)] = 3
    """... its last ``confirm_n`` scans that covered it (deleted once out of reach)."""
    max_misses: Annotated[Count, Field(ge=0)] = 3
    """A confirmed track is deleted after more consecutive misses than this (scans)."""
    coast_after_misses: Annotated[Count, Field(ge=1)] = 1
    """A confirmed track is shown coasting after this many consecutive misses (scans)."""
    max_position_std_m: Positive = 5000.0
    """A track is deleted when ``sqrt(trace(P_position))`` exceeds this, metres."""
    max_coast_s: Positive = 3.0
    """A track not updated for longer than ``max(max_coast_s, (max_misses + ½) × period)`` is
    deleted, ``period`` being the scan period of the radar that last updated it, seconds: the
    rule that ends a track that left every sensor's coverage (where it counts no misses),
    never earlier than ``max_misses`` on a slow radar."""
    identity_closing_mps: Positive = 300.0
    """Identity: an unknown or suspect track closing on the frame's origin (the defended
    point) faster than this is hostile, m/s (`mcc.tracking.identity`)."""
    identity_assumed_misses: Annotated[Count, Field(ge=0)] = 2
    """Identity: a friend track stays assumed friend for this many IFF no-replies in a row,
    then becomes unknown."""
    max_tracks: Annotated[Count, Field(ge=1)] = 20_000
    """No track is started while the tracker holds this many (tentative ones included): a
    flood of detections costs a bounded amount of memory and time per scan."""

    def __post_init__(self) -> None:  # after pydantic's checks; a ValueError is one of them
        if self.confirm_m > self.confirm_n:
            raise ValueError(
                f"TrackerConfig.confirm_m={self.confirm_m!r} is out of range; "
                f"allowed 1..confirm_n ({self.confirm_n})"
            )

    @property
    def gate(self) -> float:
        """The squared-Mahalanobis gate on positions, ``chi2.ppf(gate_probability, ndim)``."""
        return chi2_gate_threshold(self.gate_probability, self.ndim)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "imm_turn_rates_dps": list(self.imm_turn_rates_dps)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "TrackerConfig") -> TrackerConfig:
        """A config from a mapping (e.g. YAML); unknown keys are errors, missing ones default."""
        if not isinstance(data, Mapping):
            raise TrackerConfigError(f"{source}: a tracker config is a mapping of field: value")
        try:
            return cls(**{str(key): value for key, value in data.items()})
        except TrackerConfigError as exc:
            lines = str(exc).splitlines()
            raise TrackerConfigError("\n".join(f"{source}: {line}" for line in lines)) from None

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    @classmethod
    def from_yaml(cls, text: str, *, source: str = "<yaml>") -> TrackerConfig:
        """``source`` names ``text`` in messages; an empty document (comments only): defaults."""
        if all(not line.split("#", 1)[0].strip() for line in text.splitlines()):
            return cls()
        data, where = parse_mapping(
            text,
            source=source,
            error=TrackerConfigError,
            expected="a tracker config is a mapping of field: value",
        )
        try:
            return cls.from_dict(data, source=source)
        except TrackerConfigError as exc:  # each problem at the line of its field
            lines = (_at_line(line, source, where) for line in str(exc).splitlines())
            raise TrackerConfigError("\n".join(lines)) from None

    @classmethod
    def load(cls, path: str | Path) -> TrackerConfig:
        """Read a YAML file of tracker parameters."""
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise TrackerConfigError(
                f"{path}: cannot read the tracker config ({exc.strerror})"
            ) from None
        return cls.from_yaml(text, source=str(path))


_FIELD_OF = re.compile(r"^(?:TrackerConfig\.(\w+)=|unknown field '(\w+)')")


def _at_line(message: str, source: str, where: Mapping[tuple[Any, ...], int]) -> str:
    """``SOURCE: TrackerConfig.NAME=…`` as ``SOURCE:LINE: …``, LINE that of NAME in the file."""
    head = f"{source}: "
    found = _FIELD_OF.match(message.removeprefix(head)) if message.startswith(head) else None
    line = where.get((found.group(1) or found.group(2),)) if found else None
    return f"{source}:{line}: {message.removeprefix(head)}" if line else message


_KINDS = {int: "an integer", float: "a number", tuple: "a list of numbers"}
_OPS = {"gt": ">", "ge": ">=", "lt": "<", "le": "<=", "min_length": ">=", "max_length": "<="}


def _problem(err: ErrorDetails, given: Mapping[str, Any]) -> str:
    """One pydantic error as ``TrackerConfig.NAME=VALUE has the wrong type; expected …`` or
    ``… is out of range; allowed …`` (the bounds read from the field's declaration)."""
    if not err["loc"]:  # `__post_init__`: its own words
        return str(err.get("ctx", {}).get("error", err["msg"]))
    name = str(err["loc"][0])
    fields = TrackerConfig.__pydantic_fields__  # type: ignore[attr-defined]  # pydantic's
    if name not in fields:
        close = [n for n in fields if name in n] or difflib.get_close_matches(name, fields, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown field {name!r}{hint}; fields: {', '.join(fields)}"
    value, info = given.get(name, err["input"]), fields[name]
    if err["type"].endswith("_type") or (
        err["type"] == "literal_error" and not isinstance(value, str)
    ):
        kind = _KINDS.get(get_origin(info.annotation) or info.annotation, "a string")
        return f"TrackerConfig.{name}={value!r} has the wrong type; expected {kind}"
    allowed = _allowed(info.annotation, info.metadata)
    return f"TrackerConfig.{name}={value!r} is out of range; allowed {allowed}"


def _allowed(annotation: Any, metadata: list[Any]) -> str:
    """What a field declared as ``annotation`` with bounds ``metadata`` allows: ``'cv' | 'imm'``,
    ``1..32``, ``(0, 1)``, ``[0, 0.5)``, ``>= 0``, ``a finite number > 0``, ``1..16 numbers,
    each in [-90, 90]``."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return " | ".join(repr(choice) for choice in args)
    if origin is tuple:  # tuple[Annotated[float, Field(...)], ...]
        item, *item_bounds = get_args(args[0])
        return f"{_allowed(int, metadata)} numbers, each in {_allowed(item, item_bounds)}"
    b = {
        k: getattr(x, k)
        for m in metadata
        for x in getattr(m, "metadata", [m])  # a FieldInfo of an Annotated carries its own
        for k in _OPS
        if getattr(x, k, None) is not None
    }
    if len(b) == 2:  # declared low bound first
        (low_op, low), (high_op, high) = b.items()
        if annotation is int:
            return f"{low}..{high}"
        return f"{'(' if low_op == 'gt' else '['}{low:g}, {high:g}{')' if high_op == 'lt' else ']'}"
    ((op, bound),) = b.items()
    return f"{_OPS[op]} {bound}" if annotation is int else f"a finite number {_OPS[op]} {bound:g}"
