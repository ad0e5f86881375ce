"""What an app declares about itself, in one place, and the one way to load it.

An app is a function ``module:function`` that takes an `AppContext`. It declares, with the
`app` decorator, what the platform needs to know before it runs:

>>> @app(
...     topics=Topics(publish=("AirPicture", "Track"), subscribe=("DetectionBatch",)),
...     config=TrackerAppConfig,
... )
... def tracker(ctx: AppContext) -> int: ...

- ``topics``: what it publishes and subscribes; a secured mission grants each instance these
  (and its heartbeat) and nothing else;
- ``config``: the pydantic model of its ``config:`` block (`mcc.orchestrate.appconfig`);
- ``durable``: the topics it keeps in the persistence service (the supervisor starts the
  service when an app of the mission declares some).

`load_app` imports ``module:function`` once and answers its `LoadedApp` (function and
`AppSpec`); every problem is one `AppLoadError` that says which half is wrong. A plain function
without the decorator is an app that declares nothing (no topics: secured, it may publish its
heartbeat only). `app_problems` checks the apps of a manifest (the ``app`` imports, a
``command`` is found, each ``config:`` block fits its model) as ``file:line: field: what is
wrong (got …)`` lines: what ``mcc validate`` reports.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from mcc.errors import ManifestError, MccError
from mcc.orchestrate.appconfig import config_problems_of, describe_fields
from mcc.orchestrate.manifest import parse_manifest
from mcc.security.mission import Topics
from mcc.yamlsource import nearest_line, parse_mapping

__all__ = [
    "AppLoadError",
    "AppSpec",
    "LoadedApp",
    "app",
    "app_problems",
    "config_markdown",
    "load_app",
    "spec_of",
]

F = TypeVar("F", bound=Callable[..., Any])
#: The attribute `app` sets on the function it declares.
_MARK = "mcc_app_spec"


@dataclass(frozen=True)
class AppSpec:
    """What an app declares (`app`): its topics, its ``config:`` model, its durable topics."""

    topics: Topics | None = None
    config: type[BaseModel] | None = None
    durable: tuple[str, ...] = ()


def app(
    *,
    topics: Topics | None = None,
    config: type[BaseModel] | None = None,
    durable: tuple[str, ...] = (),
) -> Callable[[F], F]:
    """Declare the function it decorates an app with this `AppSpec` (the function is
    returned unchanged: a plain function of its module, picklable, callable in tests)."""
    if config is not None and not (isinstance(config, type) and issubclass(config, BaseModel)):
        raise MccError(f"app config: expected a pydantic model (got {config!r})")
    spec = AppSpec(topics=topics, config=config, durable=tuple(durable))

    def declare(function: F) -> F:
        setattr(function, _MARK, spec)
        return function

    return declare


class AppLoadError(MccError):
    """``module:function`` cannot be loaded; the message says which half and why."""


@dataclass(frozen=True)
class LoadedApp:
    """An app ready to run: its reference, its function, what it declares."""

    ref: str
    function: Callable[..., int | None]  # takes the instance's AppContext
    spec: AppSpec


@functools.cache
def load_app(ref: str) -> LoadedApp:
    """Import ``ref`` (``package.module:function``) once; `AppLoadError` says which half is
    wrong: the form, a module that does not import (with what the import raised), a module
    without that function."""
    import importlib

    module_name, sep, name = ref.partition(":")
    if not sep or not module_name or not name:
        raise AppLoadError(f"app {ref!r}: expected 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # whatever the import raises is the user's answer
        raise AppLoadError(
            f"app {ref!r}: module {module_name!r} does not import: {type(exc).__name__}: {exc}"
        ) from None
    function = getattr(module, name, None)
    if not callable(function):
        raise AppLoadError(f"app {ref!r}: {module_name} has no function {name!r}")
    spec = getattr(function, _MARK, None)
    return LoadedApp(ref, function, spec if isinstance(spec, AppSpec) else AppSpec())


def spec_of(ref: str) -> AppSpec | None:
    """What ``ref`` declares; None when it does not load (the launch, or `app_problems`,
    says why: a supervisor planning a mission only needs to know there is nothing declared)."""
    try:
        return load_app(ref).spec
    except AppLoadError:
        return None


def app_problems(path: str | Path, *, only_given: bool = False) -> list[str]:
    """What would fail at launch in the valid manifest at ``path``, each as ``file:line:
    field: what is wrong (got …)``: an ``app`` that does not load, a ``command`` not found, a
    ``config:`` block that does not fit its app's model (or an app with a model given
    ``args:``). ``only_given``: only the ``config:`` blocks of the systems that have one (what
    ``mcc up`` checks before it starts anything)."""
    from mcc.resources import shipped

    path = shipped(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read the manifest ({exc.strerror})") from None
    mission = parse_manifest(text, source=str(path))
    _, lines = parse_mapping(text, source=str(path), error=ManifestError, expected="")
    problems: list[str] = []
    for kind, name, system in mission._each():
        given = system.config is not None or bool(system.args)
        if only_given and not given:
            continue
        field = "app" if system.app else "command"
        where = f"{path}:{nearest_line(lines, (kind, name, field))}"
        if system.app is not None:
            try:
                loaded = load_app(system.app)
            except AppLoadError as exc:
                if not only_given:
                    message = str(exc).removeprefix(f"app {system.app!r}: ")
                    problems.append(f"{where}: {kind}.{name}.app: {message} (got {system.app!r})")
                continue
            problems += config_problems_of(
                loaded.spec.config, system, kind=kind, name=name, path=path, lines=lines
            )
        elif system.command and not only_given and _executable(system.command[0]) is None:
            problems.append(
                f"{where}: {kind}.{name}.command: executable {system.command[0]!r} not found (on "
                f"PATH, or as a path from {Path.cwd()}) (got {system.command!r})"
            )
    return problems


def _executable(exe: str) -> str | None:
    if "/" not in exe:
        return shutil.which(exe)
    return exe if os.access(exe, os.X_OK) else None


def config_markdown(refs: list[str]) -> str:
    """The ``config:`` fields of each app of ``refs`` as Markdown (a heading and a table per
    app), what docs/manifest.md lists between its ``config fields`` markers."""
    out = []
    for ref in refs:
        model = load_app(ref).spec.config
        if model is None:
            raise MccError(f"{ref}: declares no config model")
        out += [f"`{ref}` (`{model.__name__}`):", "", "| field | type | default | what |"]
        out.append("|---|---|---|---|")
        for name, kind, default, text in describe_fields(model):
            cell = kind.replace("|", "\\|")
            out.append(f"| `{name}` | {cell} | `{default}` | {text.replace('|', '/')} |")
        out.append("")
    return "\n".join(out)
