"""MCC, the mission-critical cloud."""

import importlib.util
import os
import sys
from pathlib import Path
from types import TracebackType
from typing import NoReturn

__version__ = "0.1.0"

#: Where the cyclonedds wheel of ``make wheels`` holds its Cyclone DDS (an install prefix:
#: ``lib/``, ``bin/``), relative to the ``cyclonedds`` package (native/build-wheels.py).
BUNDLED_CYCLONE = Path("_cyclone")


class CycloneMismatch(ImportError):
    """The installed cyclonedds-python is not the one MCC's native core was built with; the
    message says which package to remove and which to install."""


def _bundled_cyclone() -> Path | None:
    """The Cyclone prefix inside the installed cyclonedds package, when it is MCC's build."""
    spec = importlib.util.find_spec("cyclonedds")
    if spec is None or spec.origin is None:
        return None
    prefix = Path(spec.origin).parent / BUNDLED_CYCLONE
    return prefix if (prefix / "lib" / "libddsc.so.11").is_file() else None


def _wrong_cyclonedds(exc: ImportError, native: Path) -> str | None:
    """Why the native core of a wheel install cannot load, when it is the cyclonedds package."""
    if "libddsc" not in str(exc) or "site-packages" not in native.parts:
        return None
    import importlib.metadata

    try:
        version = importlib.metadata.version("cyclonedds")
        where = f"cyclonedds {version} is installed"
    except importlib.metadata.PackageNotFoundError:
        where = "cyclonedds is not installed"
    else:
        if _bundled_cyclone() is not None:
            return None
    return (
        f"mcc needs the cyclonedds wheel that `make wheels` builds with MCC (cyclonedds "
        f"11.0.1+mcc: Cyclone DDS with Security, TCP and iceoryx inside it), and {where} "
        "(PyPI's carries a Cyclone without Security): run `pip uninstall -y cyclonedds`, then "
        "`pip install dist/cyclonedds-11.0.1+mcc-*.whl` (docs/deploy.md, 'Installing')"
    )


def _fail_cleanly(error: CycloneMismatch) -> NoReturn:
    """Raise ``error``; uncaught (a console script, ``python -c``), it prints one line."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        if isinstance(value, CycloneMismatch):
            print(f"mcc: error: {value}", file=sys.stderr)
        else:
            previous(kind, value, tb)

    sys.excepthook = hook
    raise error


def _one_cyclone() -> None:
    """Load the bus's native core, so that cyclonedds-python loads the same Cyclone DDS.

    A process must hold exactly one Cyclone, the full-featured one of native/build-cyclone.sh
    (``mcc.bus`` checks). Installed from the wheels of ``make wheels``, both packages link the
    one libddsc inside the cyclonedds wheel (``cyclonedds/_cyclone/lib``, through ``$ORIGIN``
    RUNPATHs) and cyclonedds-python loads it before looking at the environment. In a checkout,
    cyclonedds-python is compiled against ``.venv/cyclone`` and looks for libddsc in
    ``CYCLONEDDS_HOME`` before the system's library path (where a distribution's older Cyclone
    may be): the venv's ``mcc-cyclone.pth`` sets it when Python starts, before anything is
    imported, the only moment that works for a process that imports cyclonedds first. Importing
    MCC sets nothing: a Python that skips the ``.pth`` (``-S``) gets ``mcc.bus``'s error, which
    names the variable to set.
    """
    found = sorted(Path(__file__).parent.joinpath("bus").glob("_native.*.so"))
    if not found:
        return  # mcc.bus says what is missing when it is imported
    spec = importlib.util.spec_from_file_location("mcc.bus._native", found[0])
    if spec is None or spec.loader is None:
        return
    try:
        native = importlib.util.module_from_spec(spec)  # an extension module loads here
        spec.loader.exec_module(native)
    except ImportError as exc:
        reason = _wrong_cyclonedds(exc, found[0])
        if reason is not None:
            _fail_cleanly(CycloneMismatch(reason))
        raise ImportError(
            f"mcc's native bus core ({found[0].name}) cannot load the Cyclone DDS library it "
            f"was built against ({exc}): install MCC with that Cyclone at the same path, or "
            "install the wheels of `make wheels` (docs/deploy.md, 'Installing')"
        ) from exc
    sys.modules["mcc.bus._native"] = native


def cyclone_tool(name: str) -> Path:
    """A program of the Cyclone DDS the bus runs on (``iox-roudi``, ``ddsperf``, ``idlc``): in
    its prefix's ``bin/``, beside the ``lib/`` that holds libddsc."""
    native = sys.modules.get("mcc.bus._native")  # loaded by _one_cyclone
    if native is None:
        raise ImportError("mcc's native bus core is not built: run `make`")
    return Path(native.LIBRARY).resolve().parent.parent / "bin" / name


def iox_roudi() -> NoReturn:
    """The ``iox-roudi`` console script: iceoryx's RouDi daemon of the bundled Cyclone (shared
    memory between the processes of a host, docs/transport.md)."""
    path = cyclone_tool("iox-roudi")
    if not path.is_file():
        print(f"iox-roudi: error: {path} is missing (build Cyclone with `make`)", file=sys.stderr)
        raise SystemExit(2)
    os.execv(path, [str(path), *sys.argv[1:]])


_one_cyclone()
