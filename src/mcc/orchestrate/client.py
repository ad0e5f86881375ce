"""A control-plane client: the bus side of `mcc status|scale|phase|stop|start|logs|down`.

>>> with open_client(mission="sam-toc") as client:
...     client.scale("mc", 8)
...     print(client.status()["phase"])
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcc.bus import Bus, Requester, Transport
from mcc.bus.rpc import COMMAND_CHANNEL, principal_partition
from mcc.errors import OrchestratorError
from mcc.observe.audit import ON_BEHALF_OF
from mcc.orchestrate import registry
from mcc.security.keystore import SecurityError
from mcc.security.mission import OPERATOR, SUPERVISOR
from mcc.settings import current
from mcc.types import Command, CommandReply, MissionStatus

if TYPE_CHECKING:
    from mcc.security.bundle import Imported


class ControlClient:
    """Send operator commands to a mission's supervisor over the bus."""

    def __init__(
        self,
        bus: Bus,
        mission: str | None,
        *,
        timeout_s: float = 5.0,
        principal: str = "operator",
        channel: str = COMMAND_CHANNEL,
    ) -> None:
        """``principal``: the identity the bus runs as (``operator`` for `mcc` commands,
        ``console`` for the web console): commands go out in its partition of ``channel``
        (``cmd`` for the supervisor, ``approval`` for TEWA), the only one its permissions let
        it write, and are attributed to it."""
        self.bus = bus
        self.mission = mission
        self.timeout_s = timeout_s
        # On a secured bus a command's answer counts only from a supervisor identity (TEWA
        # may write CommandReply too, for approvals).
        from_supervisor = bus.secured and channel == COMMAND_CHANNEL
        self._requester = Requester[Command, CommandReply](
            bus,
            partition=principal_partition(channel, principal),
            replier_source=SUPERVISOR if from_supervisor else None,
        )
        self._status_reader = bus.reader("MissionStatus")

    def call(self, verb: str, target: str = "", *, on_behalf_of: str = "", **args: Any) -> Any:
        """One command; its result, or ``OrchestratorError`` with the supervisor's message.
        ``on_behalf_of``: the person this client acts for (the console's web user), recorded
        beside the identity in the mission's audit (`mcc.observe.audit`)."""
        if on_behalf_of:
            args = {**args, ON_BEHALF_OF: on_behalf_of}
        reply = self._requester.request(
            Command(
                mission=self.mission or "",
                verb=verb,
                target=target,
                args_json=json.dumps(args),
            ),
            timeout_s=self.timeout_s,
        )
        if not reply.ok:
            raise OrchestratorError(reply.message)
        return json.loads(reply.result_json) if reply.result_json else None

    def status(self) -> dict[str, Any]:
        return dict(self.call("status"))

    def scale(self, cluster: str, size: int) -> None:
        self.call("scale", cluster, size=size)

    def phase(self, phase: str) -> None:
        self.call("phase", phase)

    def stop(self, system: str) -> None:
        self.call("stop", system)

    def start(self, system: str) -> None:
        self.call("start", system)

    def restart(self, target: str) -> list[str]:
        return list(self.call("restart", target))

    def logs(self, target: str, *, lines: int = 50) -> dict[str, Any]:
        return dict(self.call("logs", target, lines=lines))

    def down(self, *, wait_s: float | None = None) -> bool:
        """Ask the mission to stop; with ``wait_s``, wait for its final ``STOPPED`` status."""
        self.call("down")
        if wait_s is None:
            return True
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            for status in self._status_reader.take_wait(16, timeout_s=0.2):
                if self._mine(status) and status.state.name == "SYSTEM_STOPPED":
                    return True
        return False

    def mission_status(self, *, timeout_s: float = 2.0) -> MissionStatus | None:
        """The latest ``MissionStatus`` sample (transient-local: a late joiner gets it at once)."""
        latest = None
        for status in self._status_reader.take_wait(64, timeout_s=timeout_s):
            if self._mine(status):
                latest = status
        return latest

    def _mine(self, status: MissionStatus) -> bool:
        return self.mission is None or status.mission == self.mission

    def close(self) -> None:
        self._requester.close()


def operator_transport(
    keystore: str, mission: str, operator: str = OPERATOR, *, base: Transport | None = None
) -> Transport:
    """``base`` (default: the environment's transport) with the identity ``MISSION/OPERATOR`` of
    a secured ``mission``."""
    from mcc.security import Keystore

    base = base if base is not None else Transport.from_env()
    xml = Keystore(keystore).existing(f"{mission}/{operator}").security_xml()
    return dataclasses.replace(base, extra_xml=base.extra_xml + xml)


def mission_transport(record: registry.ActiveMission) -> tuple[Transport | None, str | None]:
    """The transport and discovery tag that reach ``record``'s mission: this process's own
    (``MCC_TRANSPORT``, ``MCC_DISCOVERY_TAG``) where set, else the record's validated ones.
    ``None`` leaves the choice to `mcc.bus.Bus` (the environment, then Cyclone's defaults)."""
    settings = current()
    transport = None if settings.transport else record.transport
    tag = settings.discovery_tag or record.discovery_tag
    return transport, tag


@contextmanager
def open_client(
    *,
    mission: str | None = None,
    domain: int | None = None,
    timeout_s: float = 5.0,
    operator: str = OPERATOR,
    identity: str | None = None,
) -> Iterator[ControlClient]:
    """A client for ``mission``: its domain, transport and discovery tag come from the registry
    of missions running here (`mission_transport`), unless ``domain`` is given; a secured
    mission's keystore gives it the identity of ``operator``, to whom its commands are
    attributed. Nothing of the record goes into ``os.environ``.

    With ``domain`` (another host's mission) the identity is ``identity`` (a file made by
    ``mcc security export``) or one imported here (``mcc security import``,
    `mcc.security.bundle.imported_for`); without one, a secured mission on that domain is an
    error at once, with the fix, rather than a timeout."""
    transport: Transport | None = None
    tag: str | None = None
    with contextlib.ExitStack() as stack:
        if domain is None:
            record = registry.find(mission)
            mission, domain = record.mission, record.domain
            transport, tag = mission_transport(record)
            if record.keystore:  # a secured mission: as its operator
                transport = operator_transport(
                    record.keystore, record.mission, operator, base=transport
                )
        else:
            found = _workstation_identity(domain, mission, operator, identity, stack)
            if found is not None:
                mission = mission or found.mission
                operator = found.principal
                base = Transport.from_env()
                transport = dataclasses.replace(
                    base, extra_xml=base.extra_xml + found.identity.security_xml()
                )
        bus = stack.enter_context(
            Bus(domain, transport=transport, discovery_tag=tag, name="mcc client")
        )
        if transport is None and not bus.secured:  # --domain, and no identity on this host
            _refuse_if_secured(bus, domain)
        client = ControlClient(bus, mission, timeout_s=timeout_s, principal=operator)
        try:
            yield client
        finally:
            client.close()


def _workstation_identity(
    domain: int,
    mission: str | None,
    operator: str,
    identity: str | None,
    stack: contextlib.ExitStack,
) -> Imported | None:
    """The identity a client on another host uses for ``domain``: the file ``identity``
    (installed in a private folder for this command only), else the one imported here for
    that domain (and ``mission``; ``operator`` chooses among several); None when this host
    has none."""
    from mcc.security.bundle import import_identity, imported, imported_for, read_bundle

    if identity is not None:
        folder = Path(tempfile.mkdtemp(prefix="mcc-identity-"))  # 0700
        stack.callback(shutil.rmtree, folder, True)
        return import_identity(read_bundle(Path(identity)), folder)
    home = registry.home()
    if not any(domain in i.domains for i in imported(home)):
        return None
    try:
        return imported_for(home, domain, mission, None)
    except SecurityError:
        return imported_for(home, domain, mission, operator)


def _refuse_if_secured(bus: Bus, domain: int, wait_s: float = 1.5) -> None:
    """An identity-less client of a secured mission would wait for a reply that can never come:
    secured participants announce themselves (``secured=1`` in their user data, which
    discovery shows anyone); say so at once, with the fix."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        secured, plain = bus.peers_security()
        if plain and not secured:
            return  # an open mission: its supervisor answers
        if secured:
            raise OrchestratorError(
                f"the mission on domain {domain} is secured (DDS Security) and this host has "
                "no identity for it: on the mission's host run `mcc security export KEYSTORE "
                "MISSION/NAME --out FILE` (an operator: `mcc security identity KEYSTORE "
                "MISSION/NAME --domain N --operator` first), then here `mcc security import "
                "FILE`, or pass --identity FILE"
            )
        time.sleep(0.1)
