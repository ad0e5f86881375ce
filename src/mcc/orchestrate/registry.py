"""Running missions on this host, so `mcc status` finds its domain without being told.

`mcc up` writes ``.mcc/active/<mission>.json`` (domain, discovery tag, transport, run folder,
supervisor pid) and removes it on the way down; clients read it. ``MCC_HOME`` moves ``.mcc``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcc.errors import OrchestratorError

if TYPE_CHECKING:
    from mcc.orchestrate.supervisor import Supervisor

ENV_HOME = "MCC_HOME"
_CARRIED = ("MCC_DISCOVERY_TAG", "MCC_TRANSPORT")


def home() -> Path:
    return Path(os.environ.get(ENV_HOME, ".mcc"))


@dataclass(frozen=True)
class ActiveMission:
    mission: str
    domain: int
    pid: int
    run_dir: str
    backend: str
    env: dict[str, str]
    keystore: str | None = None  # a secured mission: clients use its operator identity


def register(supervisor: Supervisor) -> Path:
    folder = home() / "active"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{supervisor.mission.mission}.json"
    record = {
        "mission": supervisor.mission.mission,
        "domain": supervisor.mission.domain,
        "pid": os.getpid(),
        "run_dir": str(supervisor.run_dir.resolve()),
        "backend": supervisor.backend.name,
        "env": {
            **{k: os.environ[k] for k in _CARRIED if k in os.environ},
            **{k: v for k, v in supervisor.client_env.items() if k in _CARRIED},
        },
        "keystore": str(supervisor.keystore) if supervisor.keystore else None,
    }
    path.write_text(json.dumps(record, indent=2))
    return path


def unregister(supervisor: Supervisor) -> None:
    path = home() / "active" / f"{supervisor.mission.mission}.json"
    try:
        record = json.loads(path.read_text())
        if record.get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


def active() -> list[ActiveMission]:
    """Missions whose supervisor is alive (stale records are removed)."""
    found = []
    for path in sorted((home() / "active").glob("*.json")):
        try:
            record: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not _alive(int(record.get("pid", 0))):
            path.unlink(missing_ok=True)
            continue
        found.append(ActiveMission(**record))
    return found


def find(mission: str | None) -> ActiveMission:
    """The running mission named ``mission``, or the only one running."""
    running = active()
    if mission is not None:
        for record in running:
            if record.mission == mission:
                return record
        names = ", ".join(r.mission for r in running) or "none"
        raise OrchestratorError(
            f"mission {mission!r} is not running here (running: {names}); "
            "start it with `mcc up FILE`, or pass --domain to reach another host's mission"
        )
    if len(running) == 1:
        return running[0]
    if not running:
        raise OrchestratorError(
            f"no mission is running here ({home() / 'active'} is empty); start one with "
            "`mcc up missions/sam-toc.yaml`, or pass --domain to reach another host's mission"
        )
    names = ", ".join(r.mission for r in running)
    raise OrchestratorError(f"several missions are running ({names}): pick one with --mission")


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
