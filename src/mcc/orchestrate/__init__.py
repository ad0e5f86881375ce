"""The orchestrator: mission manifests, planning, supervision, backends (local, ray).

>>> from mcc.orchestrate import load_manifest, open_mission
>>> mission = load_manifest("missions/sam-toc.yaml")
>>> with open_mission(mission) as sup:  # its supervisor, on node agents of this host
...     sup.scale("tracker", 2)

An app declares itself with `app` (``mcc.orchestrate.appspec``): its topics, its ``config:``
model, its durable topics.

Names are imported on first use, so ``python -m mcc.orchestrate.runtime`` (every app
instance) loads only what it needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcc.orchestrate.appspec import AppSpec, app, load_app
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
    from mcc.orchestrate.supervisor import Supervisor, open_mission

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
    "open_mission": "supervisor",
    "AppSpec": "appspec",
    "app": "appspec",
    "load_app": "appspec",
}
__all__ = [
    "AppContext",
    "AppSpec",
    "Cluster",
    "Identity",
    "LocalBackend",
    "Mission",
    "Node",
    "Placement",
    "Planner",
    "Supervisor",
    "System",
    "app",
    "load_app",
    "load_manifest",
    "open_mission",
    "parse_manifest",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'mcc.orchestrate' has no attribute {name!r}")
    return getattr(importlib.import_module(f"mcc.orchestrate.{module}"), name)
