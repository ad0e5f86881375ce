"""App ``config:`` blocks: a system's settings as a typed, checked object instead of ``args:``.

An app declares its model with `mcc.orchestrate.appspec.app` (``config=AssessorConfig``, an
`AppConfig`: frozen, unknown fields refused); a manifest system of that app gives ``config:``
(a mapping). ``mcc validate`` (and ``mcc up``, for the systems that have one) checks the block
against the model, each problem as ``file:line: systems.NAME.config.FIELD: what is wrong (got
…)``, exit status 2. The supervisor hands the block to each instance (``MCC_CONFIG``, JSON) and
the runtime validates it once more into ``ctx.config``, the typed object:

>>> class AssessorConfig(AppConfig):
...     cutoff_m: float = Field(1000.0, gt=0, description="GOSPA c, m")
>>> @app(config=AssessorConfig)
... def assessor(ctx: AppContext) -> int:
...     cutoff_m = ctx.config.cutoff_m

A field that names a file is checked by loading it (`loaded_by`), so a bad scenario fails
``mcc validate`` with the scenario's own ``file:line``. An app with a model takes no
``args:``. docs/manifest.md has the whole story.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from mcc.errors import MccError

__all__ = [
    "AppConfig",
    "NonNegative",
    "Positive",
    "app_config",
    "config_problems_of",
    "describe_fields",
    "loaded_by",
    "parse_config",
]

M = TypeVar("M", bound=BaseModel)

#: A finite number > 0 (a period, a rate, a distance).
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
#: A finite number >= 0 (a wait whose 0 means "none", a bound).
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class AppConfig(BaseModel):
    """The base of an app's ``config`` model: frozen, unknown fields refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def loaded_by(loader: Callable[[Any], Any]) -> AfterValidator:
    """A field naming a file that ``loader`` reads: the file is read when the block is checked,
    and what ``loader`` raises (its own ``file:line``) is the field's problem. The field keeps
    the path: ``scenario: Annotated[Path, loaded_by(load_scenario)]``."""

    def check(value: Any) -> Any:
        try:
            loader(value)
        except Exception as exc:  # what the loader says is the user's answer
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ValueError(first) from None
        return value

    return AfterValidator(check)


def app_config(ctx: Any, model: type[M]) -> M:
    """The app's settings as ``model``: ``ctx.config`` when it is one, else the instance's
    ``config:`` block (``ctx.settings.config``) checked against ``model`` (`MccError` of
    ``systems.NAME.config.FIELD: …`` lines), defaults when there is none."""
    if isinstance(ctx.config, model):
        return ctx.config
    settings = ctx.settings
    kind = "clusters" if settings.cluster else "systems"
    return parse_config(model, settings.config, where=f"{kind}.{settings.system}.config")


def describe_fields(model: type[BaseModel]) -> list[tuple[str, str, str, str]]:
    """``(field, type, default, description)`` of each field of ``model``, as docs/manifest.md
    lists them: ``float > 0``, ``file or none``, ``one of 'bus', 'scenario'``."""
    rows = []
    for name, info in model.model_fields.items():
        kind = _type_text(info.annotation, list(info.metadata))
        default = "required" if info.is_required() else repr(_plain(info.default))
        rows.append((name, kind, default, info.description or ""))
    return rows


_BOUNDS = (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))


def _type_text(annotation: Any, metadata: list[Any]) -> str:
    """``annotation`` in words, with the bounds of ``metadata`` (and of an ``Annotated``)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _type_text(args[0], [*metadata, *args[1:]])
    if origin in (Union, UnionType):
        named = [_type_text(a, metadata) for a in args if a is not type(None)]
        return " or ".join(named) + (" or none" if type(None) in args else "")
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    text = "path" if annotation is Path else getattr(annotation, "__name__", str(annotation))
    if any(isinstance(m, AfterValidator) for m in metadata):
        text = "file"  # `loaded_by`: a file loaded when the block is checked
    bounds = [
        f"{sym} {getattr(extra, attr):g}"
        for item in metadata
        for extra in getattr(item, "metadata", [item])  # a FieldInfo carries its own
        for attr, sym in _BOUNDS
        if getattr(extra, attr, None) is not None
    ]
    return " ".join([text, ", ".join(bounds)]) if bounds else text


def _plain(value: Any) -> Any:
    return str(value) if isinstance(value, Path) else value


def parse_config(model: type[M], text: str | None, *, where: str) -> M:
    """The instance's side: ``text`` (the block as JSON, None: no block) as ``model``; an
    `MccError` of ``where.FIELD: what is wrong (got …)`` lines."""
    try:
        data = json.loads(text) if text else {}
    except ValueError as exc:
        raise MccError(f"{where}: not JSON ({exc}) (got {(text or '')[:200]!r})") from None
    problems = _problems(model, data, field=where)
    if problems:
        raise MccError("\n".join(problems))
    return model.model_validate(data)


def config_problems_of(
    model: type[BaseModel] | None,
    system: Any,
    *,
    kind: str,
    name: str,
    path: Path,
    lines: dict[tuple[Any, ...], int],
) -> list[str]:
    """The problems of ``system``'s ``config:`` block (system ``name`` of ``kind``, in the
    manifest at ``path`` whose YAML positions are ``lines``) against its app's ``model``, as
    ``file:line: systems.NAME.config.FIELD: what is wrong (got …)``."""
    from mcc.yamlsource import nearest_line

    base = (kind, name, "config")
    where = f"{kind}.{name}.config"

    def at(loc: tuple[Any, ...]) -> str:
        line = nearest_line(lines, (*base, *loc)) or nearest_line(lines, base[:2])
        return f"{path}:{line}"

    if model is None:
        if system.config is not None:
            return [
                f"{at(())}: {where}: {system.app} declares no config model: give its options "
                f"in 'args:' (got {dict(system.config)!r})"
            ]
        return []
    problems = []
    if system.args:
        line = nearest_line(lines, (kind, name, "args")) or nearest_line(lines, (kind, name))
        problems.append(
            f"{path}:{line}: {kind}.{name}.args: {system.app} takes a config: block, not "
            f"args (fields: {', '.join(model.model_fields)}) (got {list(system.args)!r})"
        )
    return problems + _problems(model, system.config or {}, field=where, at=at)


def _problems(
    model: type[BaseModel],
    data: Any,
    *,
    field: str,
    at: Callable[[tuple[Any, ...]], str] | None = None,
) -> list[str]:
    """``[at(loc): ]field.LOC: what is wrong (got …)`` for each problem of ``data``."""
    try:
        model.model_validate(data)
    except ValidationError as exc:
        out = []
        for err in exc.errors(include_url=False):
            loc = tuple(err["loc"])
            name = ".".join([field, *map(str, loc)])
            shown = "" if err["type"] == "missing" else f" (got {err.get('input')!r})"
            where = f"{at(loc)}: " if at is not None else ""
            message = err["msg"].removeprefix("Value error, ")  # a validator's own words
            out.append(f"{where}{name}: {message}{shown}")
        return out
    return []
