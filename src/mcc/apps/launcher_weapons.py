"""The weapon models of the ``launcher`` app, shared with ``tewa`` (``mcc.apps.launcher``):
the Pk model (`PkModel`), the intercept geometry (`intercept_time_s`) and the weapons file
(`load_weapons`, whose schema the header of ``scenarios/weapons-sam-toc.yaml`` documents).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mcc.apps.args import shipped_path
from mcc.apps.scenario import TARGET_CLASSES
from mcc.errors import ScenarioError
from mcc.orchestrate.appconfig import loaded_by
from mcc.types import (
    TargetClass,
)
from mcc.yamlsource import parse_mapping

__all__ = [
    "DEFAULT_CLASS_FACTORS",
    "DEFAULT_WEAPONS",
    "WeaponsFile",
    "PkModel",
    "WeaponSpec",
    "Weapons",
    "intercept_time_s",
    "load_weapons",
    "parse_weapons",
]

DEFAULT_WEAPONS = "scenarios/weapons-sam-toc.yaml"

#: Class factor of the Pk model, indexed by TargetClass: UNKNOWN, AIRCRAFT, CRUISE_MISSILE,
#: HELICOPTER, BALLISTIC, UAV, DECOY.
DEFAULT_CLASS_FACTORS: tuple[float, ...] = (0.8, 0.9, 0.75, 0.85, 0.5, 0.85, 1.0)

F64 = npt.NDArray[np.float64]


# -- the Pk model --------------------------------------------------------------------------


@dataclass(frozen=True)
class PkModel:
    """Single-shot kill probability: ``base_pk × range_factor(r) × class_factor(class)``.

    Attributes:
        optimal_range_fraction: full pk out to this fraction of the maximum range (0..1].
        edge_factor: range factor at the maximum range (0..1); linear in between.
        class_factors: factor per TargetClass value (0..1), `DEFAULT_CLASS_FACTORS` by default.
    """

    optimal_range_fraction: float = 0.6
    edge_factor: float = 0.5
    class_factors: tuple[float, ...] = DEFAULT_CLASS_FACTORS

    def __post_init__(self) -> None:
        if not 0 < self.optimal_range_fraction <= 1:
            raise ScenarioError(
                f"optimal_range_fraction={self.optimal_range_fraction!r} must be in (0, 1]"
            )
        if not 0 <= self.edge_factor <= 1:
            raise ScenarioError(f"edge_factor={self.edge_factor!r} must be in [0, 1]")
        if len(self.class_factors) != len(TargetClass) or not all(
            0 <= f <= 1 for f in self.class_factors
        ):
            raise ScenarioError(
                f"class_factors must be {len(TargetClass)} numbers in [0, 1] (one per "
                f"TargetClass), got {self.class_factors!r}"
            )

    def range_factor(self, range_m: Any, min_range_m: Any, max_range_m: Any) -> F64:
        """0 outside ``[min_range_m, max_range_m]``, else 1 falling to ``edge_factor``."""
        r = np.asarray(range_m, dtype=np.float64)
        lo = np.asarray(min_range_m, dtype=np.float64)
        hi = np.asarray(max_range_m, dtype=np.float64)
        knee = self.optimal_range_fraction * hi
        span = np.where(hi > knee, hi - knee, 1.0)
        slope = (1.0 - self.edge_factor) * np.clip((r - knee) / span, 0.0, 1.0)
        inside = np.isfinite(r) & (r >= lo) & (r <= hi)
        return np.where(inside, 1.0 - slope, 0.0)

    def class_factor(self, classification: Any) -> F64:
        """The factor of each TargetClass value (unknown values count as CLASS_UNKNOWN)."""
        cls = np.asarray(classification, dtype=np.int64)
        table = np.asarray(self.class_factors, dtype=np.float64)
        known = (cls >= 0) & (cls < table.size)
        return np.where(known, table[np.clip(cls, 0, table.size - 1)], table[0])

    def pk(
        self,
        base_pk: Any,
        range_m: Any,
        *,
        min_range_m: Any,
        max_range_m: Any,
        classification: Any = int(TargetClass.CLASS_UNKNOWN.value),
    ) -> F64:
        """Single-shot pk, broadcast over the arguments (e.g. weapons × targets)."""
        return np.clip(
            np.asarray(base_pk, dtype=np.float64)
            * self.range_factor(range_m, min_range_m, max_range_m)
            * self.class_factor(classification),
            0.0,
            1.0,
        )


def intercept_time_s(
    weapon_position_m: Any,
    interceptor_speed_mps: Any,
    target_position_m: Any,
    target_velocity_mps: Any,
) -> F64:
    """``(W, T)`` time of flight to intercept target t from weapon w; ``inf`` where none.

    Constant-velocity target, straight-line interceptor at constant speed: the first ``t >= 0``
    with ``|p + v t - w| = s t``. Positions ``(W, 3)``/``(T, 3)``, speeds ``(W,)`` or a scalar.
    """
    wp = np.asarray(weapon_position_m, dtype=np.float64).reshape(-1, 3)
    tp = np.asarray(target_position_m, dtype=np.float64).reshape(-1, 3)
    tv = np.asarray(target_velocity_mps, dtype=np.float64).reshape(-1, 3)
    s = np.broadcast_to(np.asarray(interceptor_speed_mps, dtype=np.float64), (wp.shape[0],))
    rel = tp[None, :, :] - wp[:, None, :]  # (W, T, 3) weapon → target
    a = (tv**2).sum(axis=1)[None, :] - s[:, None] ** 2
    b = 2.0 * (rel * tv[None, :, :]).sum(axis=2)
    c = (rel**2).sum(axis=2)
    disc = b * b - 4.0 * a * c
    sqrt_disc = np.sqrt(np.maximum(disc, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        # a < 0 (the interceptor is faster): one positive root. a > 0: the smaller root, when
        # the target closes (b < 0) and the roots are real. a = 0: the linear root.
        quad = (-b - sqrt_disc) / (2.0 * a)
        linear = np.where(b < 0, -c / b, np.inf)
    t = np.where(
        np.abs(a) < 1e-9,
        linear,
        np.where((a < 0) | ((b < 0) & (disc >= 0)), quad, np.inf),
    )
    t = np.where(c == 0.0, 0.0, t)
    return np.where(np.isfinite(t) & (t >= 0), t, np.inf)


# -- the weapons file ----------------------------------------------------------------------


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


Id = Annotated[str, Field(min_length=1, max_length=64)]


class WeaponSpec(_Spec):
    """One launcher: where it is, what it carries, how far and how fast it shoots."""

    id: Id = Field(description="weapon name, unique; the WeaponStatus and order weapon_id")
    position_m: tuple[float, float, float] = Field(description="[x, y, z] ENU, metres")
    rounds: int = Field(ge=1, le=1000, description="rounds in a full magazine")
    min_range_m: float = Field(0.0, ge=0, description="closest intercept, metres")
    max_range_m: float = Field(gt=0, description="farthest intercept, metres")
    interceptor_speed_mps: float = Field(gt=0, description="mean interceptor speed, m/s")
    base_pk: float = Field(gt=0, le=1, description="single-shot pk at optimal range")
    reload_s: float = Field(2.0, ge=0, description="after each engagement, seconds")
    magazine_reload_s: float | None = Field(
        None, ge=0, description="refill after the last round, seconds; omitted: none (offline)"
    )


class _PkModelSpec(_Spec):
    optimal_range_fraction: float = Field(0.6, gt=0, le=1)
    edge_factor: float = Field(0.5, ge=0, le=1)
    class_factors: dict[str, float] = Field(default_factory=dict)

    @field_validator("class_factors")
    @classmethod
    def _known_classes(cls, value: dict[str, float]) -> dict[str, float]:
        for name, factor in value.items():
            if name not in TARGET_CLASSES:
                raise ValueError(f"unknown class {name!r}; classes: {', '.join(TARGET_CLASSES)}")
            if not 0 <= factor <= 1:
                raise ValueError(f"class factor of {name!r} must be in [0, 1], got {factor!r}")
        return value


class _WeaponsSpec(_Spec):
    id: Id | None = None
    description: str = ""
    seed: int = Field(0, ge=0, le=2**63 - 1)
    pk_model: _PkModelSpec = Field(default_factory=lambda: _PkModelSpec.model_validate({}))
    weapons: list[WeaponSpec] = Field(min_length=1)


@dataclass(frozen=True)
class Weapons:
    """A validated weapons file: the weapons, the Pk model they share, the seed of the draws."""

    id: str
    seed: int
    pk_model: PkModel
    weapons: tuple[WeaponSpec, ...]

    def weapon(self, weapon_id: str) -> WeaponSpec:
        for spec in self.weapons:
            if spec.id == weapon_id:
                return spec
        known = ", ".join(w.id for w in self.weapons)
        raise ScenarioError(f"weapons {self.id!r} have no weapon {weapon_id!r}; weapons: {known}")

    def by_id(self) -> dict[str, WeaponSpec]:
        return {w.id: w for w in self.weapons}

    def rng(self, weapon_id: str) -> np.random.Generator:
        """The kill-draw stream of ``weapon_id``: fixed by the file's seed and the weapon id."""
        return np.random.default_rng(
            np.random.SeedSequence([self.seed, zlib.crc32(weapon_id.encode())])
        )


def _load_weapons(path: Path) -> Weapons:
    return load_weapons(path)


#: A weapons file: loaded when the block is checked, so `mcc validate` names its own file:line.
WeaponsFile = Annotated[Path, loaded_by(_load_weapons)]


def load_weapons(path: str | Path) -> Weapons:
    """Read and validate a weapons file; ``ScenarioError`` names the file, field and value."""
    path = shipped_path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read the weapons file ({exc.strerror})") from None
    return parse_weapons(text, source=str(path), default_id=path.stem)


def parse_weapons(text: str, *, source: str = "<weapons>", default_id: str = "weapons") -> Weapons:
    """Validate weapons YAML text (``source`` names it in messages)."""
    data, _ = parse_mapping(
        text,
        source=source,
        error=ScenarioError,
        expected="a weapons file is a YAML mapping with 'weapons:'",
    )
    try:
        spec = _WeaponsSpec.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "(top)"
            got = f" (got {err['input']!r})" if err["type"] != "missing" else ""
            lines.append(f"{source}: {where}: {err['msg']}{got}")
        raise ScenarioError("\n".join(lines)) from None
    problems = []
    seen: set[str] = set()
    for i, w in enumerate(spec.weapons):
        if w.id in seen:
            problems.append(f"{source}: weapons.{i}.id: duplicate id {w.id!r}")
        seen.add(w.id)
        if w.min_range_m >= w.max_range_m:
            problems.append(
                f"{source}: weapons.{i}: min_range_m {w.min_range_m:g} must be below "
                f"max_range_m {w.max_range_m:g}"
            )
    if problems:
        raise ScenarioError("\n".join(problems))
    factors = list(DEFAULT_CLASS_FACTORS)
    for name, factor in spec.pk_model.class_factors.items():
        factors[int(TARGET_CLASSES[name].value)] = factor
    model = PkModel(
        optimal_range_fraction=spec.pk_model.optimal_range_fraction,
        edge_factor=spec.pk_model.edge_factor,
        class_factors=tuple(factors),
    )
    return Weapons(spec.id or default_id, spec.seed, model, tuple(spec.weapons))
