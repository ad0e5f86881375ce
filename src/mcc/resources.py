"""The files MCC ships beside its code: the QoS profile library, the IDL, missions, scenarios and
weapon files.

In an installed wheel they are package data under ``mcc/data/`` (the build copies the checkout's
top-level ``qos/``, ``idl/``, ``missions/`` and ``scenarios/`` there) and are found with
:mod:`importlib.resources`. In a source checkout or an editable install there is no
``mcc/data/``: the checkout's own folders are read, so an edit there takes effect at once.

A path a user passes is always resolved against their working directory first; only a relative
path that names nothing there falls back to the shipped copy, so ``mcc up
missions/sam-toc.yaml`` and ``scenario: scenarios/sam-toc.yaml`` in an app's ``config:`` block
work from any folder.
"""

from __future__ import annotations

import os
from functools import cache
from importlib.resources import files
from pathlib import Path

from mcc.errors import MccError

__all__ = [
    "DATA_DIRS",
    "ResourceError",
    "checkout_root",
    "data_root",
    "idl_file",
    "mission_file",
    "qos_file",
    "shipped",
]

DATA_DIRS = ("qos", "idl", "missions", "scenarios")
"""The checkout's top-level folders that a wheel carries as ``mcc/data/<name>/``."""

_MARKER = Path("qos") / "mcc.xml"


class ResourceError(MccError):
    """A shipped file is missing: the package was built without its data."""


def _package_dir() -> Path:
    # A wheel installs as plain files (pip never imports mcc from a zip), so the Traversable
    # that importlib.resources returns is a real path that Cyclone and open() can read.
    return Path(str(files("mcc")))


@cache
def checkout_root() -> Path | None:
    """The source checkout this package is imported from (editable install or ``src/`` on the
    path), or None for an installed wheel."""
    root = _package_dir().parent.parent  # <checkout>/src/mcc
    if (root / "pyproject.toml").is_file() and (root / _MARKER).is_file():
        return root
    return None


@cache
def data_root() -> Path:
    """The folder that holds ``qos/``, ``idl/``, ``missions/`` and ``scenarios/``."""
    packaged = _package_dir() / "data"
    if (packaged / _MARKER).is_file():
        return packaged
    root = checkout_root()
    if root is not None:
        return root
    raise ResourceError(
        f"{packaged}: no shipped data (qos/mcc.xml missing): this mcc was installed from a "
        "wheel built without it; build the wheel from a checkout with `pip wheel .`"
    )


def qos_file() -> Path:
    """MCC's QoS profile library (``qos/mcc.xml``)."""
    return data_root() / _MARKER


def idl_file() -> Path:
    """The data model (``idl/mcc.idl``)."""
    return data_root() / "idl" / "mcc.idl"


def mission_file(name: str) -> Path:
    """A shipped mission by name: ``mission_file("sam-toc")`` is ``missions/sam-toc.yaml``."""
    path = data_root() / "missions" / f"{name}.yaml"
    if not path.is_file():
        shipped_names = sorted(p.stem for p in (data_root() / "missions").glob("*.yaml"))
        raise ResourceError(f"no shipped mission {name!r}: the shipped ones are {shipped_names}")
    return path


def shipped(name: str | os.PathLike[str]) -> Path:
    """``name`` resolved against the working directory; when that names nothing and ``name`` is
    relative, the shipped file of that name (``scenarios/sam-toc.yaml``) if there is one.
    Otherwise ``name`` as given, so the error that follows names what the user typed."""
    path = Path(name).expanduser()
    if path.is_absolute() or path.exists():
        return path
    try:
        candidate = data_root() / path
    except ResourceError:
        return path
    return candidate if candidate.exists() else path
