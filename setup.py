"""Builds the bus's native boundary, ``mcc.bus._native`` (C, src/mcc/bus/_native.c), against
the Cyclone DDS that native/build-cyclone.sh installed: ``CYCLONEDDS_HOME``, by default
``.venv/cyclone``. Everything else about the package is in pyproject.toml."""

import os
from pathlib import Path

from setuptools import Extension, setup

home = Path(os.environ.get("CYCLONEDDS_HOME") or Path(__file__).parent / ".venv" / "cyclone")
home = home.resolve()
if not (home / "include" / "dds" / "dds.h").exists():
    raise SystemExit(
        f"setup.py: no Cyclone DDS in {home} (CYCLONEDDS_HOME): run `make` first, which builds "
        "it with native/build-cyclone.sh"
    )
lib = home / "lib"
setup(
    ext_modules=[
        Extension(
            "mcc.bus._native",
            sources=["src/mcc/bus/_native.c"],
            include_dirs=[str(home / "include")],
            library_dirs=[str(lib)],
            libraries=["ddsc"],
            runtime_library_dirs=[str(lib)],
            define_macros=[("MCC_CYCLONE_LIB", f'"{lib / "libddsc.so.11"}"')],
            extra_compile_args=["-O2", "-Wall", "-Wno-missing-field-initializers"],
        )
    ]
)
