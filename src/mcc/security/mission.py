"""A mission's identities: one per system, the supervisor and the operators, with permissions
from what each declares it publishes and subscribes.

An app module declares its topics per entry point (``BUS_TOPICS = {"tracker": Topics(...)}``);
the supervisor asks `app_topics` and adds what it runs for every instance (``Heartbeat``) and
what durable topics and the compute service need. Nothing here knows of manifests: the caller
passes the grants per system.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mcc.security.documents import Grant
from mcc.security.keystore import Identity, Keystore

log = logging.getLogger("mcc.security")

SUPERVISOR = "supervisor"
OPERATOR = "operator"
CONSOLE = "console"


@dataclass(frozen=True)
class Topics:
    """What an entry point publishes and subscribes (topic names or fnmatch patterns)."""

    publish: tuple[str, ...] = ()
    subscribe: tuple[str, ...] = ()

    def __or__(self, other: Topics) -> Topics:
        return Topics(
            tuple(dict.fromkeys(self.publish + other.publish)),
            tuple(dict.fromkeys(self.subscribe + other.subscribe)),
        )

    def grant(self) -> Grant:
        return Grant(publish=self.publish, subscribe=self.subscribe)


#: What every app instance does on the bus through the runtime.
RUNTIME_TOPICS = Topics(publish=("Heartbeat",))
#: The supervisor: status out, heartbeats and commands in.
SUPERVISOR_TOPICS = Topics(
    publish=("MissionStatus", "CommandReply"), subscribe=("Heartbeat", "Command")
)
#: ``mcc status|scale|phase|…`` and the console's commands.
OPERATOR_TOPICS = Topics(
    publish=("Command",), subscribe=("CommandReply", "MissionStatus", "Heartbeat")
)
#: The web console: the operator's commands, and the picture it shows.
CONSOLE_TOPICS = OPERATOR_TOPICS | Topics(
    subscribe=(
        "AirPicture", "Track", "Threat", "EngagementOrder", "WeaponStatus", "DetectionBatch",
        "Truth",
    )
)  # fmt: skip
#: A user of durable topics asks the persistence service for history and waits for its acks.
HISTORY_TOPICS = Topics(publish=("PersistRequest",), subscribe=("PersistReply", "PersistAck"))


def app_topics(app: str) -> Topics | None:
    """The topics ``module:function`` declares in its module's ``BUS_TOPICS``; None when the
    module declares nothing for it (or does not import)."""
    module_name, _, function = app.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the launch reports it; here it only means "unknown"
        log.debug("cannot import %s to read BUS_TOPICS: %s", module_name, exc)
        return None
    declared = getattr(module, "BUS_TOPICS", None)
    if isinstance(declared, Mapping):
        declared = declared.get(function)
    return declared if isinstance(declared, Topics) else None


def mission_identities(
    path: Path, *, mission: str, domain: int, systems: Mapping[str, Topics]
) -> dict[str, Identity]:
    """The keystore of ``mission`` at ``path`` (created on first use) with fresh identities for
    the supervisor, the operators, the console and every system in ``systems``
    (``mission/NAME``)."""
    keystore = Keystore(path) if (path / "ca").exists() else Keystore.init(path, mission=mission)
    keystore.write_governance((domain,))
    wanted = {
        SUPERVISOR: SUPERVISOR_TOPICS,
        OPERATOR: OPERATOR_TOPICS,
        CONSOLE: CONSOLE_TOPICS,
        **systems,
    }
    return {
        name: keystore.identity(f"{mission}/{name}", (topics.grant(),), domains=(domain,))
        for name, topics in wanted.items()
    }
