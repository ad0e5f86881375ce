"""`TrackerConfig`: every parameter of the tracker, with its type, default and unit."""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml

from mcc.compute.associate import chi2_gate_threshold
from mcc.errors import MccError

__all__ = ["TrackerConfig", "TrackerConfigError"]


class TrackerConfigError(MccError, ValueError):
    """A tracker parameter is unknown, of the wrong type or out of range (the message names it)."""


@dataclass(frozen=True)
class TrackerConfig:
    """Every parameter of `MultiTargetTracker`, declared once with its type, default and unit.

    The defaults are what a user gets with no configuration (``mcc track replay`` without
    ``--config``, the ``tracker`` app): an IMM whose turn rates cover 0-20 deg/s, an EKF on
    polar detections, track deletion that follows each radar's scan period. Round-trips
    through `to_dict`/`from_dict` and `to_yaml`/`from_yaml`; a bad value raises
    `TrackerConfigError` naming the field.
    """

    ndim: int = 3
    """Position dimensions: 2 (state ``[x y vx vy]``) or 3 (``[x y z vx vy vz]``)."""
    model: Literal["cv", "imm"] = "imm"
    """Motion model: ``cv`` (constant velocity) or ``imm`` (CV + coordinated turns at
    ``imm_turn_rates_dps``)."""
    sigma_a_mps2: float = 5.0
    """Process noise: standard deviation of the white acceleration, m/s² (each IMM model's;
    the turns are the models' business, so this stays small)."""
    sigma_a_straight_mps2: float = 0.3
    """IMM: process noise of the straight-flight (0 deg/s) model, m/s²: small, as a
    well-tuned constant-velocity filter's on straight flight (the turn models take the
    manoeuvres). ``model: cv`` uses ``sigma_a_mps2``."""
    noise_model: Literal["discrete", "continuous"] = "discrete"
    """``discrete``: Q = σ² G Gᵀ, G = [dt²/2, dt] (piecewise-constant acceleration per step);
    ``continuous``: σ² is the power spectral density (`kalman.cv_process_noise`)."""
    imm_turn_rates_dps: tuple[float, ...] = (0.0, 6.0, -6.0, 12.0, -12.0, 18.0, -18.0)
    """IMM: the turn rate of each model, degrees/s (0 = constant velocity, + = left turn).
    The default covers 0-20 deg/s, i.e. 3-6 g at 200-300 m/s, within 3 deg/s of a model."""
    imm_sojourn_s: float = 120.0
    """IMM: mean time spent flying straight (in the 0 deg/s model), seconds. The probability of
    staying in a model over a step of dt seconds is exp(-dt / sojourn), so slow radars switch
    more per scan; a straight model left goes evenly to the turns."""
    imm_turn_sojourn_s: float = 5.0
    """IMM: mean time spent in one turn model, seconds; a turn left goes half to the straight
    model, half evenly to the other turns."""
    imm_mix_floor: float = 0.02
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
    jpda_max_cluster: int = 8
    """JPDA: clusters of more tracks than this use the approximate marginals (Fitzgerald's
    cheap JPDA) instead of enumerating every joint event, tracks."""
    gate_probability: float = 0.999
    """Chi-square gate: a true detection falls inside with this probability."""
    initiation: Literal["one_point", "two_point"] = "one_point"
    """``one_point``: a tentative track per left-over detection; ``two_point``: per pair of
    left-over detections of one sensor in consecutive scans (velocity from their difference;
    both count as hits)."""
    init_velocity_std_mps: float = 300.0
    """One-point initiation: prior velocity standard deviation per axis, m/s."""
    max_speed_mps: float = 1000.0
    """Two-point initiation: fastest target; farther pairs are not started, m/s."""
    track_logic: Literal["llr", "mofn"] = "llr"
    """Confirmation of tentative tracks: ``llr`` = a log-likelihood-ratio track score (each
    hit adds ln(p_d · N(y; 0, S) / λ), each covered miss ln(1 − p_d), λ the clutter density the
    tracker measures per radar), confirmed at ``confirm_score``, dropped below ``drop_score``
    or after ``max_tentative_scans``; ``mofn`` = ``confirm_m`` hits in ``confirm_n`` scans."""
    pd: float = 0.9
    """Track score: probability that a radar covering a target detects it."""
    confirm_score: float = 6.9
    """Track score: a tentative track is confirmed at this log-likelihood ratio (ln(1/α)
    with α ≈ 1e-3 false confirmations per track started)."""
    drop_score: float = -2.3
    """Track score: a tentative track is dropped below this log-likelihood ratio (ln 0.1)."""
    max_tentative_scans: int = 8
    """Track score: a tentative track not confirmed after this many covered scans is dropped."""
    confirm_m: int = 2
    """M of M-of-N: a tentative track is confirmed after ``confirm_m`` hits in ..."""
    confirm_n: int = 3
    """... its last ``confirm_n`` scans that covered it (deleted once out of reach)."""
    max_misses: int = 3
    """A confirmed track is deleted after more consecutive misses than this (scans)."""
    coast_after_misses: int = 1
    """A confirmed track is shown coasting after this many consecutive misses (scans)."""
    max_position_std_m: float = 5000.0
    """A track is deleted when ``sqrt(trace(P_position))`` exceeds this, metres."""
    max_coast_s: float = 3.0
    """A track not updated for longer than ``max(max_coast_s, (max_misses + ½) × period)`` is
    deleted, ``period`` being the scan period of the radar that last updated it, seconds: the
    rule that ends a track that left every sensor's coverage (where it counts no misses),
    never earlier than ``max_misses`` on a slow radar."""
    identity_closing_mps: float = 300.0
    """Identity: an unknown or suspect track closing on the frame's origin (the defended
    point) faster than this is hostile, m/s (`mcc.tracking.identity`)."""
    identity_assumed_misses: int = 2
    """Identity: a friend track stays assumed friend for this many IFF no-replies in a row,
    then becomes unknown."""
    max_tracks: int = 20_000
    """No track is started while the tracker holds this many (tentative ones included): a
    flood of detections costs a bounded amount of memory and time per scan."""

    def __post_init__(self) -> None:
        if isinstance(self.imm_turn_rates_dps, list):
            object.__setattr__(self, "imm_turn_rates_dps", tuple(self.imm_turn_rates_dps))
        for f in dataclasses.fields(self):
            _check_type(f.name, getattr(self, f.name), f.type)
        _choice("ndim", self.ndim, (2, 3))
        _choice("model", self.model, ("cv", "imm"))
        _choice("noise_model", self.noise_model, ("discrete", "continuous"))
        _choice("measurement_update", self.measurement_update, ("ekf", "converted"))
        _choice("assignment_cost", self.assignment_cost, ("likelihood", "distance"))
        _choice("association", self.association, ("gnn", "jpda", "auto"))
        if not 1 <= self.jpda_max_cluster <= 12:
            _bad("jpda_max_cluster", self.jpda_max_cluster, "allowed 1..12 tracks")
        _positive("identity_closing_mps", self.identity_closing_mps)
        if self.identity_assumed_misses < 0:
            _bad("identity_assumed_misses", self.identity_assumed_misses, "allowed >= 0")
        _choice("initiation", self.initiation, ("one_point", "two_point"))
        _choice("track_logic", self.track_logic, ("llr", "mofn"))
        if not 0.0 < self.pd < 1.0:
            _bad("pd", self.pd, "allowed (0, 1)")
        if not (math.isfinite(self.confirm_score) and self.confirm_score > 0):
            _bad("confirm_score", self.confirm_score, "allowed a finite number > 0")
        if not (math.isfinite(self.drop_score) and self.drop_score < 0):
            _bad("drop_score", self.drop_score, "allowed a finite number < 0")
        if not 1 <= self.max_tentative_scans <= 64:
            _bad("max_tentative_scans", self.max_tentative_scans, "allowed 1..64 scans")
        _positive("sigma_a_mps2", self.sigma_a_mps2, strict=False)
        _positive("sigma_a_straight_mps2", self.sigma_a_straight_mps2, strict=False)
        _positive("imm_sojourn_s", self.imm_sojourn_s)
        _positive("imm_turn_sojourn_s", self.imm_turn_sojourn_s)
        if not 0.0 <= self.imm_mix_floor < 0.5:
            _bad("imm_mix_floor", self.imm_mix_floor, "allowed [0, 0.5)")
        _positive("init_velocity_std_mps", self.init_velocity_std_mps)
        _positive("max_speed_mps", self.max_speed_mps)
        _positive("max_position_std_m", self.max_position_std_m)
        _positive("max_coast_s", self.max_coast_s)
        rates = self.imm_turn_rates_dps
        if not 1 <= len(rates) <= 16 or not all(math.isfinite(r) and abs(r) <= 90 for r in rates):
            _bad("imm_turn_rates_dps", rates, "allowed 1..16 finite rates within ±90 deg/s")
        if not 0.0 < self.gate_probability < 1.0:
            _bad("gate_probability", self.gate_probability, "allowed (0, 1), e.g. 0.999")
        if not 1 <= self.confirm_n <= 32:
            _bad("confirm_n", self.confirm_n, "allowed 1..32 scans")
        if not 1 <= self.confirm_m <= self.confirm_n:
            _bad("confirm_m", self.confirm_m, f"allowed 1..confirm_n ({self.confirm_n})")
        if self.max_misses < 0:
            _bad("max_misses", self.max_misses, "allowed >= 0 scans")
        if self.coast_after_misses < 1:
            _bad("coast_after_misses", self.coast_after_misses, "allowed >= 1 scan")
        if self.max_tracks < 1:
            _bad("max_tracks", self.max_tracks, "allowed >= 1 track")

    @property
    def gate(self) -> float:
        """The squared-Mahalanobis gate on positions, ``chi2.ppf(gate_probability, ndim)``."""
        return chi2_gate_threshold(self.gate_probability, self.ndim)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["imm_turn_rates_dps"] = list(self.imm_turn_rates_dps)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "TrackerConfig") -> TrackerConfig:
        """A config from a mapping (e.g. YAML); unknown keys are errors, missing ones default."""
        if not isinstance(data, Mapping):
            raise TrackerConfigError(f"{source}: a tracker config is a mapping of field: value")
        names = [f.name for f in dataclasses.fields(cls)]
        for key in data:
            if key not in names:
                close = [n for n in names if str(key) in n] or difflib.get_close_matches(
                    str(key), names, n=1
                )
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise TrackerConfigError(
                    f"{source}: unknown field {key!r}{hint}; fields: {', '.join(names)}"
                )
        try:
            return cls(**data)
        except TrackerConfigError as exc:
            raise TrackerConfigError(f"{source}: {exc}") from None

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    @classmethod
    def from_yaml(cls, text: str, *, source: str = "<yaml>") -> TrackerConfig:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise TrackerConfigError(f"{source}: not valid YAML ({exc})") from None
        return cls.from_dict(data or {}, source=source)

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


def _bad(name: str, value: Any, allowed: str) -> None:
    raise TrackerConfigError(f"TrackerConfig.{name}={value!r} is out of range; {allowed}")


def _choice(name: str, value: Any, choices: tuple[Any, ...]) -> None:
    if value not in choices:
        _bad(name, value, "allowed " + " | ".join(repr(c) for c in choices))


def _positive(name: str, value: float, *, strict: bool = True) -> None:
    if not (math.isfinite(value) and (value > 0 if strict else value >= 0)):
        _bad(name, value, f"allowed a finite number {'>' if strict else '>='} 0")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | np.number) and not isinstance(value, bool)


def _check_type(name: str, value: Any, annotation: Any) -> None:
    text = str(annotation)
    if text == "int":
        ok = isinstance(value, int | np.integer) and not isinstance(value, bool)
        kind = "an integer"
    elif text == "float":
        ok = _is_number(value)
        kind = "a number"
    elif text.startswith("tuple"):
        ok = isinstance(value, tuple) and all(_is_number(v) for v in value)
        kind = "a list of numbers"
    else:  # Literal[...] of strings
        ok = isinstance(value, str)
        kind = "a string"
    if not ok:
        raise TrackerConfigError(
            f"TrackerConfig.{name}={value!r} has the wrong type; expected {kind}"
        )
