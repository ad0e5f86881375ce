"""The orchestrator: mission manifests, planning, supervision, backends (local, ray).

>>> from mcc.orchestrate import load_manifest, Supervisor, LocalBackend
>>> mission = load_manifest("missions/sam-toc.yaml")
>>> with Supervisor(mission, backend=LocalBackend(mission.nodes), run_dir=run_dir) as sup:
...     sup.scale("mc", 8)

Names are imported on first use, so ``python -m mcc.orchestrate.runtime`` (every app
instance) loads only what it needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcc.orchestrate.backends.local import LocalBackend
    from mcc.orchestrate.manifest import (
        Cluster,
        Mission,
        Node,
        System,
        load_manifest,
        parse_manifest,
    )
    from mcc.orchestrate.planner import Placement, Planner
    from mcc.orchestrate.runtime import AppContext, Identity
    from mcc.orchestrate.supervisor import Supervisor

_WHERE = {
    "AppContext": "runtime",
    "Identity": "runtime",
    "Cluster": "manifest",
    "Mission": "manifest",
    "Node": "manifest",
    "System": "manifest",
    "load_manifest": "manifest",
    "parse_manifest": "manifest",
    "LocalBackend": "backends.local",
    "Placement": "planner",
    "Planner": "planner",
    "Supervisor": "supervisor",
}
__all__ = [
    "AppContext",
    "Cluster",
    "Identity",
    "LocalBackend",
    "Mission",
    "Node",
    "Placement",
    "Planner",
    "Supervisor",
    "System",
    "load_manifest",
    "parse_manifest",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'mcc.orchestrate' has no attribute {name!r}")
    return getattr(importlib.import_module(f"mcc.orchestrate.{module}"), name)
