"""The orchestrator: mission manifests, planning, supervision, backends (local, ray).

>>> from mcc.orchestrate import load_manifest, Supervisor, LocalBackend
>>> mission = load_manifest("missions/sam-toc.yaml")
>>> with Supervisor(mission, backend=LocalBackend(mission.nodes), run_dir=run_dir) as sup:
...     sup.scale("mc", 8)
"""

from mcc.orchestrate.backends.local import LocalBackend
from mcc.orchestrate.manifest import Cluster, Mission, Node, System, load_manifest, parse_manifest
from mcc.orchestrate.planner import Placement, Planner
from mcc.orchestrate.runtime import AppContext, Identity
from mcc.orchestrate.supervisor import Supervisor

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
