"""The build steps pyproject.toml cannot declare.

1. The bus's native boundary, ``mcc.bus._native`` (C, src/mcc/bus/_native.c), compiled against
   the Cyclone DDS that native/build-cyclone.sh installed: ``CYCLONEDDS_HOME``, by default
   ``.venv/cyclone``, whose ``lib/`` is the module's RUNPATH (the checkout's in-place build).
   ``_native.LIBRARY`` is the file the loader found at run time. A wheel for other hosts comes
   from ``make wheels`` (native/build-wheels.py): it relinks the module to the libddsc bundled
   in its cyclonedds wheel (``$ORIGIN`` RUNPATH) and tags both with auditwheel. The C topic
   types it needs (``BulkBlock``, whose samples iceoryx can loan) are generated from
   idl/mcc.idl by that Cyclone's ``idlc`` into ``build/idlc/`` first.
2. The tracker's JPDA kernel, ``mcc.tracking._jpda`` (C, src/mcc/tracking/_jpda.c, the CPython
   API alone): the association marginals of a scan's clusters in one call; and its 2-D
   range/azimuth EKF, ``mcc.tracking._ekf`` (src/mcc/tracking/_ekf.c): the gate's distances and
   the update of a scan's pairs in one call.
3. The checkout's top-level ``qos/``, ``idl/``, ``missions/`` and ``scenarios/`` are copied into
   the wheel as ``mcc/data/<name>/``, where ``mcc.resources`` finds them. An editable install
   copies nothing: it reads the checkout's folders themselves.
"""

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
DATA_DIRS = ("qos", "idl", "missions", "scenarios")  # mcc.resources.DATA_DIRS


class build_py_with_data(build_py):
    """build_py, plus the shipped data folders under ``mcc/data/``."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "mcc" / "data"
        for name in DATA_DIRS:
            source = HERE / name
            if not source.is_dir():
                raise SystemExit(f"setup.py: {source} is missing: build from a full checkout")
            for path in sorted(source.rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts:
                    dest = target / path.relative_to(HERE)
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(path, dest)


home = Path(os.environ.get("CYCLONEDDS_HOME") or HERE / ".venv" / "cyclone").resolve()
if not (home / "include" / "dds" / "dds.h").exists():
    raise SystemExit(
        f"setup.py: no Cyclone DDS in {home} (CYCLONEDDS_HOME): run `make` first, which builds "
        "it with native/build-cyclone.sh"
    )
lib = home / "lib"
IDLC_OUT = Path("build") / "idlc"  # relative: setuptools wants sources inside the project
if not (home / "bin" / "idlc").exists():
    raise SystemExit(
        f"setup.py: no idlc in {home / 'bin'}: the native core's C types are generated with "
        "Cyclone's idlc; run `make`, whose native/build-cyclone.sh builds it"
    )
(HERE / IDLC_OUT).mkdir(parents=True, exist_ok=True)
subprocess.run(
    [
        str(home / "bin" / "idlc"),
        "-l",
        "c",
        "-o",
        str(HERE / IDLC_OUT),
        str(HERE / "idl" / "mcc.idl"),
    ],
    check=True,
)
setup(
    cmdclass={"build_py": build_py_with_data},
    ext_modules=[
        Extension(
            "mcc.bus._native",
            sources=["src/mcc/bus/_native.c", str(IDLC_OUT / "mcc.c")],
            include_dirs=[str(home / "include"), str(HERE / IDLC_OUT)],
            library_dirs=[str(lib)],
            libraries=["ddsc"],
            runtime_library_dirs=[str(lib)],
            extra_compile_args=["-O2", "-Wall", "-Wno-missing-field-initializers"],
        ),
        Extension(
            "mcc.tracking._jpda",
            sources=["src/mcc/tracking/_jpda.c"],
            libraries=["m"],
            # No fused multiply-adds: the marginals are summed as NumPy sums them, to the bit.
            extra_compile_args=["-O2", "-Wall", "-ffp-contract=off"],
        ),
        Extension(
            "mcc.tracking._ekf",
            sources=["src/mcc/tracking/_ekf.c"],
            libraries=["m"],
            # No fused multiply-adds: the reference's arithmetic in its order.
            extra_compile_args=["-O2", "-Wall", "-ffp-contract=off"],
        ),
    ],
)
