"""MCC, the mission-critical cloud."""

import importlib.util
import os
from pathlib import Path

__version__ = "0.1.0"


def _one_cyclone() -> None:
    """Point cyclonedds-python at the Cyclone DDS library that the bus core links.

    cyclonedds-python looks for libddsc in ``CYCLONEDDS_HOME`` before the system's library path
    (where a distribution's older Cyclone may be); a process must hold exactly one Cyclone, the
    full-featured one that ``native/build-cyclone.sh`` built. ``mcc.bus`` checks the result.
    """
    found = sorted(Path(__file__).parent.joinpath("bus").glob("_native.*.so"))
    if not found:
        return  # mcc.bus says what is missing when it is imported
    spec = importlib.util.spec_from_file_location("mcc.bus._native", found[0])
    if spec is None or spec.loader is None:
        return
    native = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(native)
    except ImportError as exc:
        raise ImportError(
            f"mcc's native bus core ({found[0].name}) cannot load the Cyclone DDS library it "
            f"was built against ({exc}): install MCC with that Cyclone at the same path, or "
            "build the wheel against this host's (docs/deploy.md, 'Installing')"
        ) from exc
    import sys

    sys.modules["mcc.bus._native"] = native
    os.environ.setdefault("CYCLONEDDS_HOME", str(Path(native.LIBRARY).parent.parent))


_one_cyclone()
