"""The runtime of one system instance: identity, bus, heartbeats and a stop signal for an app.

The supervisor (any backend) starts an ``app: module:function`` system as
``python -m mcc.orchestrate.runtime module:function ARGS...`` with its identity in the
environment. The runtime opens the bus, beats ``Heartbeat``s for the instance, turns
SIGTERM/SIGINT into ``ctx.stop``, and calls ``function(ctx)``; the app only does its job:

>>> def main(ctx: AppContext) -> int:
...     writer = ctx.bus.writer("DetectionBatch")
...     while not ctx.wait(0.1):       # True once a stop is asked for
...         writer.write(scan())
...         ctx.heartbeat.count_out()
...     return 0
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcc.bus import Bus, HeartbeatPublisher
from mcc.bus.heartbeat import freeze_startup_objects
from mcc.errors import MccError
from mcc.orchestrate.appconfig import parse_config
from mcc.orchestrate.appspec import load_app
from mcc.security.mission import instance_principal
from mcc.settings import Settings, current, env_name
from mcc.types import SystemState

#: For the apps that read the mission start themselves (radar, tracker) until they take
#: ``ctx.settings.epoch_ns``: the one environment name the package still exports.
ENV_EPOCH = env_name("epoch_ns")

RUNTIME_ARGV = (sys.executable, "-m", "mcc.orchestrate.runtime")

log = logging.getLogger("mcc.runtime")


@dataclass(frozen=True)
class Identity:
    """``mission/system/index``: stable across restarts, so a replacement finds its state."""

    mission: str
    system: str
    index: int

    @property
    def id(self) -> str:
        return f"{self.mission}/{self.system}/{self.index}"

    def __str__(self) -> str:
        return self.id

    @classmethod
    def parse(cls, text: str) -> Identity:
        parts = text.split("/")
        if len(parts) != 3 or not parts[2].isdigit():
            raise MccError(f"instance id {text!r}: expected mission/system/index")
        return cls(parts[0], parts[1], int(parts[2]))

    @classmethod
    def from_settings(cls, settings: Settings) -> Identity:
        if settings.mission is None or settings.system is None:
            raise MccError(
                f"{env_name('mission')} and {env_name('system')} are not set: an app runs under "
                "`mcc up` (or set both by hand to run one instance)"
            )
        return cls(settings.mission, settings.system, settings.index)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Identity:
        return cls.from_settings(current() if env is None else Settings.from_env(env))


@dataclass
class AppContext:
    """What an app gets: who it is, its arguments, an open bus, its heartbeat, a stop event."""

    identity: Identity
    args: list[str]
    bus: Bus
    heartbeat: HeartbeatPublisher
    run_dir: Path
    device: str = "cpu"
    phase: str = ""
    stop: threading.Event = field(default_factory=threading.Event)
    #: The instance's ``MCC_*`` settings (epoch, partitions, cluster, …).
    settings: Settings = field(default_factory=current)
    #: The system's ``config:`` block as the app's config model (None: the app has none).
    config: Any = None

    @property
    def log(self) -> logging.Logger:
        return logging.getLogger(f"mcc.app.{self.identity.system}")

    def wait(self, timeout_s: float) -> bool:
        """Sleep up to ``timeout_s``; True when the instance has been asked to stop."""
        return self.stop.wait(timeout_s)

    @property
    def stopping(self) -> bool:
        return self.stop.is_set()


AppFunction = Callable[[AppContext], "int | None"]


def run(spec: str, args: list[str], env: Mapping[str, str] | None = None) -> int:
    """Run one instance of app ``spec`` until it returns or is stopped; the exit code.
    ``env``: the instance's environment (default: this process's)."""
    settings = current() if env is None else Settings.from_env(env)
    identity = Identity.from_settings(settings)
    func = load_app(spec).function
    config = _config_of(spec, settings)
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if settings.agent_socket is not None:
        threading.Thread(
            target=_watch_agent,
            args=(str(settings.agent_socket), settings.agent_orphan_s, stop),
            name="mcc-agent-watch",
            daemon=True,
        ).start()
    partitions = list(settings.partitions)
    source = settings.source or instance_principal(identity.system, identity.index)
    with Bus(settings.domain, partitions=partitions, name=identity.id, source=source) as bus:
        period_s = settings.heartbeat_period_s
        heartbeat = HeartbeatPublisher(
            bus, identity.id, period_s=period_s, device=settings.device
        ).start(wait_for_reader_s=period_s)
        log.info("%s started: %s %s (pid %d)", identity.id, spec, " ".join(args), os.getpid())
        ctx = AppContext(
            identity=identity,
            args=args,
            bus=bus,
            heartbeat=heartbeat,
            run_dir=settings.run_dir or Path("."),
            device=settings.device,
            phase=settings.phase,
            stop=stop,
            settings=settings,
            config=config,
        )
        freeze_startup_objects()  # no collection: it would delay the first beat of a restart
        try:
            code = func(ctx)
        except Exception as exc:
            heartbeat.message = f"{type(exc).__name__}: {exc}"[:200]
            heartbeat.stop(final_state=SystemState.SYSTEM_FAILED)
            traceback.print_exc()
            return 1
        heartbeat.stop(final_state=SystemState.SYSTEM_STOPPED)
        return int(code or 0)


def _config_of(ref: str, settings: Settings) -> Any:
    """The instance's ``config:`` block as the config model of its app ``ref``; `MccError`
    naming ``systems.NAME.config.FIELD`` when it does not fit (``mcc validate`` says it
    earlier)."""
    model = load_app(ref).spec.config
    kind = "clusters" if settings.cluster else "systems"
    where = f"{kind}.{settings.system}.config"
    if model is None:
        if settings.config:
            raise MccError(f"{where}: {ref} declares no config model (got {settings.config!r})")
        return None
    return parse_config(model, settings.config, where=where)


def _watch_agent(path: str, orphan_s: float, stop: threading.Event) -> None:
    """Stop this instance when its node agent is gone for ``orphan_s`` and none replaced it
    (a new agent adopts the instance and answers on the same socket): nothing outlives a
    mission that nobody controls."""
    parent = os.getppid()
    gone_since: float | None = None
    while not stop.wait(1.0):
        if os.getppid() == parent:
            continue
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.settimeout(1.0)
                probe.connect(path)
            gone_since = None
        except OSError:
            now = time.monotonic()
            gone_since = gone_since or now
            if now - gone_since > orphan_s:
                log.warning("no node agent for %.0f s: this instance stops", orphan_s)
                stop.set()
                return


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: python -m mcc.orchestrate.runtime module:function [ARGS...]", file=sys.stderr)
        return 2
    try:
        settings = current()
    except MccError as exc:
        print(f"mcc: error: {exc}", file=sys.stderr)
        return 2
    if settings.log_format == "json":  # `mcc up` asked for JSON lines
        from mcc.observe.logs import configure_logging

        logging.getLogger().handlers.clear()  # a forked instance inherits its agent's (text)
        configure_logging("json", level=logging.getLevelName(settings.log_level))
    else:
        logging.basicConfig(
            level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        from mcc.observe.logs import clip_log_messages

        clip_log_messages()
    try:
        return run(argv[0], argv[1:])
    except MccError as exc:
        print(f"mcc: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
