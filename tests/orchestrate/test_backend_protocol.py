"""The supervisor calls on a backend only what `Backend` declares, and both backends implement
all of it with the declared signatures (a backend is swappable: nothing found by getattr)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from mcc.orchestrate.backends.base import Backend
from mcc.orchestrate.backends.local import LocalBackend
from mcc.orchestrate.backends.ray import RayBackend

ORCHESTRATE = Path(__file__).resolve().parents[2] / "src" / "mcc" / "orchestrate"
#: What uses a backend: every module of the orchestrator but the backends themselves.
USERS = sorted(p for p in ORCHESTRATE.rglob("*.py") if "backends" not in p.parts)
DECLARED = {
    name
    for name in (*vars(Backend), *Backend.__annotations__)
    if not name.startswith("_") or name in ("__enter__", "__exit__")
}


def _is_backend(node: ast.expr) -> bool:
    """``backend`` or ``<anything>.backend``."""
    return (isinstance(node, ast.Name) and node.id == "backend") or (
        isinstance(node, ast.Attribute) and node.attr == "backend"
    )


def _backend_uses() -> dict[str, list[str]]:
    uses: dict[str, list[str]] = {}
    for path in USERS:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _is_backend(node.value):
                uses.setdefault(node.attr, []).append(f"{path.name}:{node.lineno}")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr", "setattr")
                and node.args
                and _is_backend(node.args[0])
            ):
                uses.setdefault(f"{node.func.id}()", []).append(f"{path.name}:{node.lineno}")
    return uses


def test_the_supervisor_uses_only_what_backend_declares() -> None:
    uses = _backend_uses()
    assert {"start", "stop", "lead", "cores", "gpus", "on_event", "claim"} <= set(uses)
    undeclared = {name: where for name, where in uses.items() if name not in DECLARED}
    assert undeclared == {}


@pytest.mark.parametrize("backend", [LocalBackend, RayBackend], ids=lambda b: b.name)
def test_each_backend_implements_backend_with_its_signatures(backend: type[Backend]) -> None:
    assert Backend in backend.__mro__  # explicitly: it inherits the defaults
    for name in sorted(DECLARED):
        declared = inspect.getattr_static(Backend, name, None)
        if not inspect.isfunction(declared):
            # attributes: a class-level value (name) or a callback slot the supervisor sets
            assert hasattr(backend, name), f"{backend.__name__} lacks {name}"
            continue
        implemented = inspect.getattr_static(backend, name)
        assert inspect.isfunction(implemented), f"{backend.__name__}.{name}"
        ours = inspect.signature(implemented).parameters
        theirs = inspect.signature(declared).parameters
        where = f"{backend.__name__}.{name}{inspect.signature(implemented)}"
        # every declared parameter, passed the same way; anything more is optional
        assert [(p.name, p.kind) for p in theirs.values()] == [
            (p.name, p.kind) for p in ours.values() if p.name in theirs
        ], where
        extra = [p for p in ours.values() if p.name not in theirs]
        assert all(p.default is not p.empty for p in extra), where


def test_a_backend_of_one_supervisor_gets_the_defaults() -> None:
    opened = []

    class Minimal(Backend):
        name = "minimal"

        def open(self) -> None:
            opened.append(True)

    backend = Minimal()
    assert backend.lead() is None and opened == [True]  # opened, and active: no replication
    assert backend.cores() == {} and backend.gpus() == {}
    assert backend.claim(3) is False and backend.confirm() is True
    assert backend.on_event is None and backend.on_promoted is None
