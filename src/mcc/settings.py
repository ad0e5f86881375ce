"""The ``MCC_*`` environment as one typed, frozen record, read once and checked once.

Every ``MCC_*`` variable that MCC reads is a field of `Settings` (type, default, unit and meaning
declared here and nowhere else; docs/operations.md has the table, checked against this model by
tests/test_settings.py). Code asks `current()` for the settings of its process, never
``os.environ``; a bad value is an `SettingsError` naming the variable
(``MCC_DOMAIN: Input should be less than or equal to 232 (got '300')``), exit status 2 at the
command line. A parent builds a child process's environment with `child_env`, from field names,
never from literal keys:

>>> env = child_env(environ(), mission="demo", system="radar", index=0)
>>> env["MCC_SYSTEM"]
'radar'

The variables of other programs that MCC reads (``COLUMNS``, ``XDG_STATE_HOME``, systemd's,
``CUDA_VISIBLE_DEVICES``, ``CYCLONEDDS_URI`` …) are the fields of `External`, read by
`external()`; `environ()` is a copy of the whole environment, to hand on to a child or show in
a report. This module is the only one that reads ``os.environ`` (tests/test_environ.py).

`pydantic-settings` reads the process environment; `Settings.from_env` reads any other mapping
(an instance's environment handed to ``runtime.run``) through the same validators.
"""

from __future__ import annotations

import contextvars
import functools
import os
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from mcc.errors import MccError

__all__ = [
    "PREFIX",
    "External",
    "Settings",
    "SettingsError",
    "child_env",
    "current",
    "env_name",
    "environ",
    "external",
    "markdown_table",
]

PREFIX = "MCC_"

#: A comma-separated list in the environment (``a,b,c``), a tuple here.
CommaList = Annotated[tuple[str, ...], NoDecode]

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]


class SettingsError(MccError, ValueError):
    """An ``MCC_*`` environment variable holds a value of the wrong kind."""


#: The environment `Settings()` reads instead of ``os.environ`` (`Settings.from_env(mapping)`).
_SOURCE: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "mcc_settings_source", default=None
)


class _MappingSource(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping instead of ``os.environ``."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._mapping = env
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {
            (k if self.case_sensitive else k.lower()): v
            for k, v in self._mapping.items()
            if v != "" or not self.env_ignore_empty
        }


class _FromEnv(BaseSettings):
    """A model read from the process environment, or from a given mapping (`from_env`)."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        mapping = _SOURCE.get()
        if mapping is None:
            return (init_settings, env_settings)  # no .env file, no secrets folder
        return (init_settings, _MappingSource(settings_cls, mapping))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **fields: Any) -> Self:
        """The settings of ``env`` (default: this process's environment), ``fields`` over it;
        `SettingsError` naming each bad variable."""
        token = _SOURCE.set(env)
        try:
            return cls(**fields)
        except ValidationError as exc:
            raise _error(cls, exc) from None
        finally:
            _SOURCE.reset(token)


class Settings(_FromEnv):
    """The ``MCC_*`` variables of one process. Unset ones have the default shown."""

    model_config = SettingsConfigDict(
        env_prefix=PREFIX,
        env_ignore_empty=True,  # MCC_X= is unset, as a shell user means it
        frozen=True,
        extra="ignore",
        validate_default=True,
    )

    # -- where: the bus ---------------------------------------------------------------------------
    domain: int = Field(
        default=0, ge=0, le=232, description="DDS domain id of the mission (0-232)."
    )
    discovery_tag: str | None = Field(
        default=None,
        description="Discovery tag: a participant only hears participants with the same tag "
        "(tests and the demo use one per run so that runs never hear each other).",
    )
    transport: str | None = Field(
        default=None,
        description="The bus transport as JSON (`mcc.bus.Transport`: UDP/TCP/SHM, interface, "
        "peers); unset: Cyclone's defaults. Written by `mcc up` for the mission's processes.",
    )
    qos_file: Path | None = Field(
        default=None, description="Another QoS profile library instead of the shipped qos/mcc.xml."
    )
    data_representation: Literal["XCDR1", "XCDR2"] = Field(
        default="XCDR1",
        description="What the writers of XCDR1 profiles write instead, mission-wide (XCDR2 for "
        "peers that read nothing else, docs/interop.md).",
    )
    grants_at: str | None = Field(
        default=None,
        description="Set by the supervisor for an instance of a secured mission: `file:line: "
        "systems.NAME`, where its permissions come from (named when one is refused).",
    )
    # -- where: files -----------------------------------------------------------------------------
    home: Path | None = Field(
        default=None,
        description="MCC's state folder (active missions, keystores, agents, runs); unset: "
        "`$XDG_STATE_HOME/mcc`, else `~/.local/state/mcc`.",
    )
    run_dir: Path | None = Field(
        default=None,
        description="The run folder of the mission an instance belongs to (its state).",
    )
    interop_build: Path = Field(
        default=Path("build"),
        description="Folder of the built interop peers (`make interop`) for `mcc bench latency "
        "--peer`.",
    )
    # -- logging ----------------------------------------------------------------------------------
    log_level: LogLevel = Field(
        default="INFO",
        description="Log level of instances and agents (DEBUG, INFO, WARNING, ERROR).",
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="`json`: JSON lines for a log shipper; in the environment of `mcc up` (or "
        "a mission's `env:`) every process of the mission logs so.",
    )
    log_max_bytes: int = Field(
        default=16 << 20,
        ge=0,
        description="An instance's log (`logs/SYSTEM-INDEX.log` of the run folder) past this "
        "size is rotated by its supervisor: copied to `….log.1` (the previous one replaced) and "
        "emptied, so a mission that runs for weeks keeps at most twice this per instance; 0: "
        "never rotated.",
    )
    # -- one instance: set by the supervisor ------------------------------------------------------
    mission: str | None = Field(
        default=None, description="Name of the mission this instance belongs to."
    )
    system: str | None = Field(default=None, description="System (manifest name) of this instance.")
    index: int = Field(default=0, ge=0, description="Index of this instance within its system.")
    instance_id: str | None = Field(
        default=None,
        description="`mission/system/index` (finds the processes of a run: `mcc chaos`).",
    )
    phase: str = Field(default="", description="The mission's phase at the instance's start.")
    config: str | None = Field(
        default=None,
        description="The instance's `config:` block as JSON (an app with a config model: "
        "`ctx.config`, docs/manifest.md).",
    )
    partitions: CommaList = Field(
        default=(), description="DDS partitions of the instance's bus (comma-separated)."
    )
    device: str = Field(
        default="cpu",
        pattern=r"^(cpu|cuda:\d+|remote:[\w.-]+)$",
        description="Compute device of the instance: `cpu`, `cuda:N`, or `remote:SERVICE` (a "
        "compute service).",
    )
    heartbeat_period_s: float = Field(
        default=1.0, gt=0, description="Heartbeat period of the instance, seconds."
    )
    epoch_ns: int | None = Field(
        default=None,
        ge=0,
        description="Mission start, Unix ns: scenario time 0 for every instance.",
    )
    cluster: str | None = Field(
        default=None,
        description="The virtual cluster (system) an instance of a `cluster:` belongs to.",
    )
    cluster_size: int = Field(default=1, ge=1, description="A virtual cluster's target size.")
    ray_max_restarts: int = Field(
        default=-1,
        ge=-1,
        description="Ray backend: actor restarts after a node loss; -1 = forever, 0 = never.",
    )
    source: str | None = Field(
        default=None,
        description="The source this instance writes sourced topics as (SYSTEM.INDEX#GENERATION "
        "in a secured mission, set by the supervisor; default SYSTEM.INDEX).",
    )
    identity_dir: Path | None = Field(
        default=None,
        description="The private folder (0700, files 0600) where the instance's backend wrote its "
        "own identity on its host, removed when it exits (set by the backend; secured missions).",
    )
    confine: bool = Field(
        default=True,
        description="Confine each instance with Landlock: it reads its own identity, never "
        "$MCC_HOME's keystores or agent tokens, and writes only in its run folder and /tmp "
        "(`mcc.security.confine`). Off only to debug an app.",
    )
    # -- node agents ------------------------------------------------------------------------------
    agent_socket: Path | None = Field(
        default=None, description="The socket of the node agent that owns this instance."
    )
    agent_orphan_s: float = Field(
        default=60.0,
        gt=0,
        description="Seconds an agent (and its instances) outlives a mission nobody controls.",
    )
    zygote_preload: CommaList = Field(
        default=("mcc.compute", "mcc.compute.remote", "mcc.apps.metrics"),
        description="Modules the agent's fork server imports once, for every app it forks, "
        "besides the apps of the mission it serves (comma-separated).",
    )
    # -- operators --------------------------------------------------------------------------------
    operator: str = Field(
        default="operator", min_length=1, description="Name that `mcc` commands are attributed to."
    )

    @field_validator("partitions", "zygote_preload", mode="before")
    @classmethod
    def _split_commas(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("log_level", "data_representation", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    def env(self, **fields: Any) -> dict[str, str]:
        """The variables of ``fields`` (validated) as environment entries; a field set to
        ``None`` has no entry (`child_env` removes it)."""
        return _render(type(self), fields)


class External(_FromEnv):
    """The variables of other programs that MCC reads. They are not MCC's to refuse: one that
    does not parse is as if it were unset."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore")

    columns: int | None = Field(
        default=None, description="Width of the terminal: the tables of `mcc status`; unset: 140."
    )
    xdg_state_home: Path | None = Field(
        default=None,
        description="Where `MCC_HOME` defaults to (`$XDG_STATE_HOME/mcc`); a relative path is "
        "ignored, as the XDG spec says.",
    )
    notify_socket: str | None = Field(
        default=None,
        description="systemd's notify socket (`Type=notify` units): `mcc.observe.notify` sends "
        "readiness and watchdog pings there.",
    )
    watchdog_usec: str | None = Field(
        default=None, description="systemd's `WatchdogSec=` in microseconds (`sd_notify(3)`)."
    )
    watchdog_pid: str | None = Field(
        default=None, description="The process systemd's watchdog is meant for (`sd_notify(3)`)."
    )
    cuda_visible_devices: str | None = Field(
        default=None,
        description="The GPUs of this host that the local backend places on (empty: none); "
        "unset: those `nvidia-smi -L` lists.",
    )
    cyclonedds_uri: str | None = Field(
        default=None,
        description="Cyclone DDS's configuration: a bus without a transport of its own is "
        "secured when it names an identity certificate.",
    )
    pip_cert: Path | None = Field(
        default=None,
        description="A CA bundle for the package downloads of `mcc lab` image builds (the first "
        "of these three that is a file).",
    )
    ssl_cert_file: Path | None = Field(default=None, description="As `PIP_CERT`.")
    requests_ca_bundle: Path | None = Field(default=None, description="As `PIP_CERT`.")

    @field_validator("columns", mode="before")
    @classmethod
    def _integer_or_unset(cls, value: Any) -> Any:
        try:
            return int(value)
        except (TypeError, ValueError):
            return None

    @field_validator(
        "xdg_state_home", "pip_cert", "ssl_cert_file", "requests_ca_bundle", mode="before"
    )
    @classmethod
    def _path_or_unset(cls, value: Any) -> Any:
        if value is None or not str(value):
            return None
        return value

    @field_validator("xdg_state_home", mode="after")
    @classmethod
    def _absolute_or_unset(cls, value: Path | None) -> Path | None:
        return value if value is not None and value.is_absolute() else None


def env_name(field: str) -> str:
    """``"discovery_tag"`` → ``"MCC_DISCOVERY_TAG"``."""
    if field not in Settings.model_fields:
        raise SettingsError(f"{field!r} is not a setting (see mcc.settings.Settings)")
    return PREFIX + field.upper()


def child_env(base: Mapping[str, str] | None = None, /, **fields: Any) -> dict[str, str]:
    """A child process's environment: ``base`` (default: this process's) with ``fields`` set
    (validated like the environment: a bad one raises `SettingsError`); ``None`` unsets one."""
    env = environ() if base is None else dict(base)
    rendered = _render(Settings, fields)
    for name in fields:
        key = env_name(name)
        if key in rendered:
            env[key] = rendered[key]
        else:
            env.pop(key, None)
    return env


def current() -> Settings:
    """This process's settings, read once per distinct ``MCC_*`` environment (a test that sets
    a variable sees it; a process that sets none pays for one read)."""
    return _cached(tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(PREFIX))))


@functools.lru_cache(maxsize=8)
def _cached(items: tuple[tuple[str, str], ...]) -> Settings:
    return Settings.from_env()  # ``items`` is the key: the same variables as os.environ now


def external() -> External:
    """This process's `External` variables, read once per distinct value of them."""
    names = {name.upper() for name in External.model_fields}
    return _external(tuple(sorted((k, v) for k, v in os.environ.items() if k.upper() in names)))


@functools.lru_cache(maxsize=8)
def _external(items: tuple[tuple[str, str], ...]) -> External:
    return External.from_env()  # ``items`` is the key, as in `_cached`


def environ() -> dict[str, str]:
    """A copy of this process's environment: the base of a child process's (`child_env` sets
    ``MCC_*`` variables over it), or what a report shows of what a process was given."""
    return dict(os.environ)


def markdown_table(model: type[Settings] | type[External] = Settings) -> str:
    """The variables of ``model`` as a table of docs/operations.md (``python -m mcc.settings
    [external]``)."""
    prefix = model.model_config.get("env_prefix", "")
    rows = ["| Variable | Type | Default | Meaning |", "|---|---|---|---|"]
    for name, info in model.model_fields.items():
        kind = _type_name(info.annotation)
        default = info.default
        shown = (
            "unset"
            if default is None
            else "empty"
            if default in ("", ())
            else ",".join(default)
            if isinstance(default, tuple)
            else str(default)
        )
        rows.append(f"| `{prefix}{name.upper()}` | {kind} | {shown} | {info.description} |")
    return "\n".join(rows) + "\n"


def _type_name(annotation: Any) -> str:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return "one of " + ", ".join(map(str, args))
    if origin is tuple:
        return "comma list"
    if origin is not None and len(args) == 1:  # X | None
        return _type_name(args[0])
    names = {Path: "path", str: "text", int: "integer", float: "number", bool: "yes or no (1, 0)"}
    return names.get(annotation, "?")


def _render(cls: type[Settings], fields: Mapping[str, Any]) -> dict[str, str]:
    for name in fields:
        env_name(name)
    checked = cls.from_env({}, **{k: v for k, v in fields.items() if v is not None})
    out: dict[str, str] = {}
    for name in fields:
        value = getattr(checked, name)
        if fields[name] is None:
            continue
        if isinstance(value, tuple):
            text = ",".join(value)
        elif isinstance(value, float):
            text = f"{value:g}"
        else:
            text = str(value)
        out[env_name(name)] = text
    return out


def _error(model: type[_FromEnv], exc: ValidationError) -> SettingsError:
    """``MCC_X: what is wrong (got …)``, one line per bad variable."""
    prefix = model.model_config.get("env_prefix", "")
    lines = []
    for problem in exc.errors(include_url=False):
        field = str(problem["loc"][0]) if problem["loc"] else "?"
        name = prefix + field.upper()
        lines.append(f"{name}: {problem['msg']} (got {problem.get('input')!r})")
    return SettingsError("; ".join(lines))


if __name__ == "__main__":
    import sys

    print(markdown_table(External if sys.argv[1:] == ["external"] else Settings), end="")
