"""The bus side of the console: readers feeding the `LiveState`, commands through the
orchestrator's ``Command`` topic (`mcc.orchestrate.client.ControlClient`).

One `ReaderLoop` thread takes every topic in batches and hands them to the store (a short
lock, no I/O), so the bus is never held up by a browser. Commands are blocking calls made
from the web server's worker threads: phase, start, stop, restart and scale go to the
supervisor on the ``cmd`` channel; approve and reject go to TEWA on the same topic on the
``approval`` channel (`mcc.bus.rpc`), which the supervisor never hears. Both go out as principal
``console`` (partitions ``cmd/console`` and ``approval/console``), the only partitions the
console's identity may write commands in, so supervisor and TEWA know the console sent them.

`BusBridge.secured` says whether the bus joined with DDS Security: its transport carries a
``<Security>`` configuration (the mission's ``console`` identity: the supervisor's
``console_env``, or `mcc.console.commands.resolve_domain` from the mission's keystore). A
mission with ``security: none`` gives the console none, and the banner and ``/metrics`` say so.
"""

from __future__ import annotations

import logging
import threading
import xml.etree.ElementTree as ET
from typing import Any

from mcc.bus import Bus, ReaderLoop
from mcc.bus.rpc import APPROVAL_CHANNEL
from mcc.bus.transport import Transport
from mcc.console.state import LiveState
from mcc.orchestrate.client import ControlClient
from mcc.settings import external

log = logging.getLogger("mcc.console")

# Approve and reject go to TEWA on the approval channel, as principal `console`.
APPROVAL_VERBS = ("approve", "reject")
PRINCIPAL = "console"


class BusBridge:
    """Bus readers → ``state``; operator commands → the mission (see the module docstring).

    Args:
        state: the store the readers feed.
        domain: the mission's DDS domain.
        mission: the mission name (None: whichever supervisor answers on the domain).
        truth: also bridge the simulation's ``Truth`` (a debugging overlay).
        command_timeout_s: how long a command waits for its answer.
        transport: the bus transport (the mission's, with the console's identity when
            secured); None: this process's environment (`mcc.bus.Bus`).
    """

    def __init__(
        self,
        state: LiveState,
        *,
        domain: int,
        mission: str | None = None,
        truth: bool = False,
        command_timeout_s: float = 5.0,
        transport: Transport | None = None,
    ) -> None:
        self.state = state
        self.transport = transport
        self.domain = domain
        self.mission = mission
        self.truth = truth
        self.command_timeout_s = command_timeout_s
        self._bus: Bus | None = None
        self._loop: ReaderLoop | None = None
        self._control: ControlClient | None = None
        self._approval: ControlClient | None = None
        self._lock = threading.Lock()
        #: Whether the bus joined with DDS Security (None until `start`).
        self.secured: bool | None = None

    def start(self) -> BusBridge:
        # The transport's discovery tag, not the environment's (`Bus` prefers that one).
        tag = self.transport.discovery_tag if self.transport is not None else None
        bus = self._bus = Bus(
            self.domain, transport=self.transport, discovery_tag=tag, name="mcc console"
        )
        self.secured = transport_secured(bus.transport)
        if not self.secured:
            log.warning(
                "console: the bus is NOT secured (no DDS Security identity: a mission with "
                "security: none); anyone on the network can feed this console"
            )
        s = self.state
        loop = ReaderLoop(bus, batch=512)
        handlers: list[tuple[str, Any]] = [
            ("MissionStatus", s.on_mission),
            ("Heartbeat", s.on_heartbeats),
            ("AirPicture", s.on_air_pictures),
            ("Track", s.on_tracks),
            ("Threat", s.on_threats),
            ("EngagementOrder", s.on_orders),
            ("EngagementOutcome", s.on_orders),
            ("WeaponStatus", s.on_weapons),
            ("DetectionBatch", s.on_detections),
        ]
        if self.truth:
            handlers.append(("Truth", s.on_truth))
        for topic, handler in handlers:
            loop.add(bus.reader(topic), _guarded(topic, handler))
        self._loop = loop.start("mcc-console-bus")
        self._control = ControlClient(
            bus, self.mission, timeout_s=self.command_timeout_s, principal=PRINCIPAL
        )
        return self

    def command(
        self, verb: str, target: str, args: dict[str, Any] | None = None, *, user: str = ""
    ) -> Any:
        """Send one command for web ``user`` and return its result; ``OrchestratorError`` with
        the answerer's message when refused, ``RequestTimeoutError`` when nobody answers in
        time."""
        client = self._approval_client() if verb in APPROVAL_VERBS else self._control
        if client is None:
            raise RuntimeError("the bridge is not started")
        return client.call(verb, target, on_behalf_of=user, **(args or {}))

    def _approval_client(self) -> ControlClient:
        with self._lock:  # made on first use
            if self._approval is None:
                assert self._bus is not None, "the bridge is not started"
                self._approval = ControlClient(
                    self._bus,
                    self.mission,
                    timeout_s=self.command_timeout_s,
                    principal=PRINCIPAL,
                    channel=APPROVAL_CHANNEL,
                )
            return self._approval

    def close(self) -> None:
        if self._loop is not None:
            self._loop.stop()
        for client in (self._control, self._approval):
            if client is not None:
                client.close()
        if self._bus is not None:
            self._bus.close()


def transport_secured(transport: Transport | None) -> bool:
    """Whether a bus with ``transport`` joins with DDS Security: an identity certificate in
    its ``<Security>`` configuration (without a transport: in env ``CYCLONEDDS_URI``)."""
    if transport is None:
        return "<IdentityCertificate>" in (external().cyclonedds_uri or "")
    try:
        domain = ET.fromstring(f"<Domain>{transport.extra_xml}</Domain>")
    except ET.ParseError:
        return False
    return bool(domain.findtext("Security/Authentication/IdentityCertificate", "").strip())


def _guarded(topic: str, handler: Any) -> Any:
    """A handler that logs a bad sample instead of killing the reader loop."""

    def run(samples: list[Any]) -> None:
        try:
            handler(samples)
        except Exception:
            log.exception("console: cannot take %d %s sample(s)", len(samples), topic)

    return run
