"""A mission's identities: one per system, the supervisor and the operators, with permissions
from what each declares it publishes and subscribes.

An app declares its topics (`Topics`, in its `mcc.orchestrate.appspec.app` declaration); the
supervisor adds what it runs for every instance (``Heartbeat``) and what durable topics and
the compute service need. Nothing here knows of manifests: the caller
passes the grants per system.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mcc.bus.rpc import CHANNELS
from mcc.bus.topics import GENERATION_MARK, is_sourced, source_partition, split_source
from mcc.security.documents import Grant
from mcc.security.keystore import Identity, Keystore, granted_source

log = logging.getLogger("mcc.security")

SUPERVISOR = "supervisor"
OPERATOR = "operator"
CONSOLE = "console"


#: A principal writes requests in ``CHANNEL/PRINCIPAL`` only (`mcc.bus.rpc`).
REQUEST_CHANNELS = CHANNELS


@dataclass(frozen=True)
class Topics:
    """What an entry point publishes and subscribes (topic names or fnmatch patterns);
    ``requests``: topics it publishes only in its own partitions of the request channels
    (``cmd/NAME``, ``approval/NAME``), by which repliers know who asked."""

    publish: tuple[str, ...] = ()
    subscribe: tuple[str, ...] = ()
    requests: tuple[str, ...] = ()

    def __or__(self, other: Topics) -> Topics:
        return Topics(
            tuple(dict.fromkeys(self.publish + other.publish)),
            tuple(dict.fromkeys(self.subscribe + other.subscribe)),
            tuple(dict.fromkeys(self.requests + other.requests)),
        )

    def grants(self, principal: str, *, source: str | None = None) -> tuple[Grant, ...]:
        """The permissions of identity ``principal`` (the last part of its name). Sourced
        topics (`mcc.bus.topics.TopicSpec.sourced`) it publishes only in its own source
        partition (``source``'s, default the principal's), so their readers know who wrote
        each sample."""
        sourced = tuple(t for t in self.publish if is_sourced(t))
        plain = tuple(t for t in self.publish if not is_sourced(t))
        grants = [Grant(publish=plain, subscribe=self.subscribe)]
        if sourced:
            mine = source_partition(source or principal)
            grants.append(Grant(publish=sourced, partitions=(mine,)))
        if self.requests:
            own = tuple(f"{channel}/{principal}" for channel in REQUEST_CHANNELS)
            grants.append(Grant(publish=self.requests, partitions=own))
        return tuple(grants)


#: What every app instance does on the bus through the runtime.
RUNTIME_TOPICS = Topics(publish=("Heartbeat",))
#: The supervisor: status and its own beat out (standbys watch the active one's), heartbeats
#: and commands in.
SUPERVISOR_TOPICS = Topics(
    publish=("MissionStatus", "CommandReply", "Heartbeat"), subscribe=("Heartbeat", "Command")
)
#: ``mcc status|scale|phase|…`` and the console's commands.
OPERATOR_TOPICS = Topics(
    requests=("Command",), subscribe=("CommandReply", "MissionStatus", "Heartbeat")
)
#: The web console: the operator's commands, and the picture it shows.
CONSOLE_TOPICS = OPERATOR_TOPICS | Topics(
    subscribe=(
        "AirPicture", "Track", "Threat", "EngagementOrder", "EngagementOutcome", "WeaponStatus",
        "DetectionBatch",
        "Truth",
    )
)  # fmt: skip
#: A user of durable topics asks the persistence service for history and waits for its acks.
HISTORY_TOPICS = Topics(publish=("PersistRequest",), subscribe=("PersistReply", "PersistAck"))


def mission_identities(
    path: Path,
    *,
    mission: str,
    domain: int,
    supervisor_watches: Topics | None = None,
    protection: Mapping[str, str] | None = None,
) -> dict[str, Identity]:
    """The keystore of ``mission`` at ``path`` (created on first use, governance for
    ``domain``, data protected as ``protection`` says: topic → sign|encrypt, ``*`` for the
    rest, default encrypt) with fresh identities for the supervisor (which may also read
    ``supervisor_watches``), the operators and the console (``MISSION/NAME``); systems get
    one per instance from `instance_identity`."""
    keystore = Keystore(path) if (path / "ca").exists() else Keystore.init(path, mission=mission)
    protection = {k: v.upper() for k, v in (protection or {}).items()}
    keystore.write_governance((domain,), protect=protection.pop("*", "ENCRYPT"), topics=protection)
    supervisor = SUPERVISOR_TOPICS | (supervisor_watches or Topics())
    wanted = {SUPERVISOR: supervisor, OPERATOR: OPERATOR_TOPICS, CONSOLE: CONSOLE_TOPICS}
    return {
        name: keystore.identity(f"{mission}/{name}", topics.grants(name), domains=(domain,))
        for name, topics in wanted.items()
    }


def instance_principal(system: str, index: int | str) -> str:
    """The principal of instance ``INDEX`` of ``SYSTEM``: the last part of its identity's name,
    and its source partition's (``src/SYSTEM.INDEX``)."""
    return f"{system}.{index}"


def principal_of(system_id: str) -> str | None:
    """The principal that owns heartbeat id ``MISSION/SYSTEM/INDEX`` (a supervisor's
    ``MISSION/supervisor/PID``: `SUPERVISOR`); None for an id of another shape."""
    parts = system_id.split("/")
    if len(parts) != 3:
        return None
    return SUPERVISOR if parts[1] == SUPERVISOR else instance_principal(parts[1], parts[2])


def instance_identity(
    path: Path, *, mission: str, domain: int, system: str, index: int, topics: Topics
) -> Identity:
    """A fresh identity ``MISSION/SYSTEM.INDEX`` for one instance of a system, with the
    system's permissions: each instance authenticates as itself, so what it writes is
    attributable to it, and a leaked key is one instance's. The identity it replaces is
    revoked (participants created from now on refuse it), and the new one writes sourced
    topics as a newer generation (``SYSTEM.INDEX#GENERATION``, its issue time in
    microseconds, and always above the generation it replaces, even when the clock stepped
    back): a reader that heard the new one no longer hears a copy of the old
    (`mcc.bus.Reader.source_of`)."""
    name = instance_principal(system, index)
    keystore = Keystore(path)
    before = granted_source(keystore.path / "identities" / mission / name)
    found = split_source(before) if before else None
    generation = max(time.time_ns() // 1000, (found[1] if found else 0) + 1)
    source = f"{name}{GENERATION_MARK}{generation}"
    identity = keystore.identity(
        f"{mission}/{name}",
        topics.grants(name, source=source),
        domains=(domain,),
        revoke_replaced=True,
    )
    return dataclasses.replace(identity, source=source)
