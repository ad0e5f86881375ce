"""Mission manifests: the YAML a user writes, its pydantic model, and errors a user can act on.

>>> mission = load_manifest("missions/sam-toc.yaml")
>>> mission.systems["tracker"].resources.cpus
1.0

Every error names the file, the line, the YAML path of the field, the bad value and what is
allowed (``ManifestError``); ``mcc validate FILE`` prints them and exits 2. The reference is
docs/manifest.md.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from mcc.errors import ManifestError
from mcc.yamlsource import lookup, nearest_line, parse_mapping, yaml_path

NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,47}$"
_NAME_HELP = "lower-case letters, digits, '-' and '_', starting with a letter, at most 48"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Resources(_Model):
    """What one instance needs: CPUs (fractions allowed), memory and GPU mode."""

    cpus: Annotated[float, Field(gt=0, le=1024)] = 1.0
    memory_mb: Annotated[int, Field(gt=0)] | None = None
    gpu: Literal["none", "shared", "exclusive"] = "none"


class Restart(_Model):
    """When to restart an instance that exits, and how fast.

    The first restart is immediate (``backoff_s`` = 0 would be every restart); the delay then
    doubles up to ``backoff_max_s`` and resets once an instance has run for ``stable_s``.
    """

    policy: Literal["always", "on-failure", "never"] = "on-failure"
    backoff_s: Annotated[float, Field(ge=0, le=3600)] = 0.5
    backoff_max_s: Annotated[float, Field(ge=0, le=3600)] = 10.0
    max_restarts: Annotated[int, Field(ge=0)] = 10
    stable_s: Annotated[float, Field(gt=0)] = 30.0


class Health(_Model):
    """How the supervisor tells a live instance from a silent or stuck one."""

    heartbeat: bool | None = None  # default: True for apps, False for commands
    timeout_s: Annotated[float, Field(gt=0, le=3600)] = 3.0
    startup_s: Annotated[float, Field(gt=0, le=3600)] = 15.0


class System(_Model):
    """A system: an app or a command, how many replicas, its resources and policies."""

    app: str | None = None
    command: list[str] | None = None
    args: list[str] = []
    #: An app's settings, checked against the config model its app declares
    #: (`mcc.orchestrate.appspec.app`, `mcc.orchestrate.appconfig`, docs/manifest.md).
    config: dict[str, Any] | None = None
    replicas: Annotated[int, Field(ge=0, le=4096)] = 1
    resources: Resources = Resources()
    priority: Literal["normal", "high", "realtime"] = "normal"
    pin: bool = False
    restart: Restart = Restart()
    phases: list[str] | None = None
    after: list[str] = []
    env: dict[str, str] = {}
    node: str | None = None
    health: Health = Health()
    description: str = ""
    #: Topics (names or fnmatch patterns) the system may publish and subscribe in a secured
    #: mission; None: what its app declares (its ``topics``). Given, they replace the app's.
    publish: list[str] | None = None
    subscribe: list[str] | None = None

    @field_validator("app")
    @classmethod
    def _app_entry_point(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", value):
            raise ValueError("expected a Python entry point 'package.module:function'")
        return value

    @field_validator("command", mode="before")
    @classmethod
    def _command_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return value.split()
        return value

    @field_validator("restart", mode="before")
    @classmethod
    def _restart_shorthand(cls, value: Any) -> Any:
        return {"policy": value} if isinstance(value, str) else value

    @field_validator("env", mode="before")
    @classmethod
    def _env_strings(cls, value: Any) -> Any:
        return _env_values(value)

    @model_validator(mode="after")
    def _app_xor_command(self) -> System:
        if (self.app is None) == (self.command is None):
            raise ValueError("give exactly one of 'app' (module:function) or 'command' (argv)")
        if self.command is not None and not self.command:
            raise ValueError("'command' is empty: give the executable and its arguments")
        if self.command is not None and self.config is not None:
            raise ValueError("'config' is for an app (its config model); a command takes 'args'")
        return self

    @property
    def uses_heartbeat(self) -> bool:
        return self.health.heartbeat if self.health.heartbeat is not None else self.app is not None


class Cluster(System):
    """A virtual cluster: a system template run as ``size`` workers, scalable in [min, max]."""

    size: Annotated[int, Field(ge=0, le=4096)] = 1
    min: Annotated[int, Field(ge=0, le=4096)] = 0
    max: Annotated[int, Field(ge=1, le=4096)] = 64
    placement: Literal["pack", "spread"] = "pack"

    @model_validator(mode="after")
    def _bounds(self) -> Cluster:
        if not self.min <= self.size <= self.max:
            raise ValueError(f"size {self.size} must lie in [min, max] = [{self.min}, {self.max}]")
        if "replicas" in self.model_fields_set:
            raise ValueError("a cluster has 'size' (and min/max), not 'replicas'")
        return self


class Node(_Model):
    """A place to run instances: this host (a core set) or a network namespace; Ray labels.

    ``kind: netns`` makes the local backend create an emulated host for the node (a network
    namespace on a lab bridge, ``mcc.netlab``) and remove it when the mission ends; ``netns:
    NAME`` runs the node's instances in an existing namespace that MCC neither makes nor removes.
    """

    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    kind: Literal["local", "netns"] = "local"
    cpus: list[int] | Annotated[float, Field(gt=0)] | None = None
    gpus: list[int] | None = None
    netns: str | None = None
    labels: dict[str, float] = {}

    @field_validator("netns")
    @classmethod
    def _netns_name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", value):
            raise ValueError(
                "a namespace name (`ip netns list`) is 1-64 letters, digits, '_', '.', '-'"
            )
        return value

    @model_validator(mode="after")
    def _netns_kind(self) -> Node:
        if self.kind == "netns" and self.netns is not None:
            raise ValueError(
                f"kind 'netns' creates the namespace itself; remove 'netns: {self.netns}' (or "
                "drop 'kind: netns' to run in that existing namespace)"
            )
        return self


Switch = Literal["auto", "on", "off"]


class _Service(_Model):
    @field_validator("enabled", mode="before", check_fields=False)
    @classmethod
    def _yaml_boolean(cls, value: Any) -> Any:  # YAML reads on/off/yes/no as booleans
        return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value


class PersistService(_Service):
    """The persistence service (``mcc.persist``) the supervisor runs for durable topics."""

    enabled: Switch = "auto"  # auto: when an app declares durable topics
    replicas: Annotated[int, Field(ge=1, le=3)] = 1


class ComputeService(_Service):
    """The remote compute service (``mcc.compute.remote``) behind ``gpu: shared`` systems."""

    enabled: Switch = "auto"  # auto: when a system asks for gpu: shared
    gpu: Literal["auto", "exclusive", "none"] = "auto"  # auto: exclusive when a GPU is found


class Services(_Model):
    """Services the supervisor adds to a mission by itself (see mcc.orchestrate.services)."""

    persist: PersistService = PersistService()
    compute: ComputeService = ComputeService()

    @field_validator("persist", "compute", mode="before")
    @classmethod
    def _switch_shorthand(cls, value: Any) -> Any:
        return {"enabled": value} if isinstance(value, bool | str) else value  # persist: on


class MissionTransport(_Model):
    """How the mission's processes reach each other (docs/transport.md): ``udp`` (default; the
    environment's configuration, e.g. peers and tag, is kept) or ``shm`` (UDP plus iceoryx
    shared memory between the processes of a host; the supervisor starts the host's RouDi).

    ``tcp`` is refused for missions: Cyclone DDS 11.0.1's TCP is a proof of concept whose
    receive thread crashes when a peer disconnects (reproduced here: a TCP demo's supervisor
    died of SIGSEGV in ``do_packet`` when an instance restarted; upstream issue 2010). It
    stays available point to point (``Transport(kind="tcp")``, the benches' ``--transport``).
    """

    kind: Literal["udp", "shm"] = "udp"

    @field_validator("kind", mode="before")
    @classmethod
    def _no_tcp(cls, value: Any) -> Any:
        if value == "tcp":
            raise ValueError(
                "tcp is not offered for missions: Cyclone DDS 11.0.1's TCP crashes the "
                "listening process when a peer disconnects (docs/transport.md); use udp or shm"
            )
        return value


class Mission(_Model):
    """A mission manifest (``missions/*.yaml``)."""

    _where: dict[str, str] = PrivateAttr(default_factory=dict)  # system → "file:line"

    mission: Annotated[str, Field(pattern=NAME_PATTERN)]
    domain: Annotated[int, Field(ge=0, le=232)] = 0
    description: str = ""
    phases: list[str] = ["default"]
    nodes: list[Node] = []
    systems: dict[str, System] = {}
    clusters: dict[str, Cluster] = {}
    env: dict[str, str] = {}
    stop_grace_s: Annotated[float, Field(gt=0, le=600)] = 5.0
    services: Services = Services()
    transport: MissionTransport = MissionTransport()
    security: Literal["none", "on"] = "on"
    #: Secured missions: how each topic's samples travel, ``sign`` or ``encrypt`` (default);
    #: ``"*"`` sets it for topics not named. Commands, orders and weapon status are always
    #: encrypted.
    protection: dict[str, Literal["sign", "encrypt"]] = {}

    @field_validator("security", mode="before")
    @classmethod
    def _security_boolean(cls, value: Any) -> Any:  # YAML reads on/off as booleans
        return {True: "on", False: "none"}.get(value, value) if isinstance(value, bool) else value

    @field_validator("transport", mode="before")
    @classmethod
    def _transport_shorthand(cls, value: Any) -> Any:
        return {"kind": value} if isinstance(value, str) else value  # transport: shm

    @field_validator("env", mode="before")
    @classmethod
    def _env_strings(cls, value: Any) -> Any:
        return _env_values(value)

    @model_validator(mode="after")
    def _references(self) -> Mission:
        if not self.systems and not self.clusters:
            raise _FieldError(
                ("systems",), {}, "a mission needs at least one system (or cluster) to run"
            )
        from mcc.security.documents import ALWAYS_ENCRYPTED

        for topic, protect in self.protection.items():
            if topic in ALWAYS_ENCRYPTED and protect != "encrypt":
                raise _FieldError(
                    ("protection", topic),
                    protect,
                    f"{topic} is always encrypted (who may command, fire and answer must not "
                    "be readable or forgeable on the wire)",
                )
        if self.security == "on" and self.domain > 230:  # Cyclone's governance parser
            raise _FieldError(
                ("domain",), self.domain, "a secured mission needs a domain id from 0 to 230"
            )
        for where, names in (("systems", self.systems), ("clusters", self.clusters)):
            for name in names:
                if not re.fullmatch(NAME_PATTERN, name):
                    raise _FieldError((where, name), name, f"a name is {_NAME_HELP}")
        both = set(self.systems) & set(self.clusters)
        if both:
            name = sorted(both)[0]
            raise _FieldError(("clusters", name), name, "a name is used by a system already")
        if not self.phases:
            raise _FieldError(("phases",), [], "list at least one phase")
        if len(set(self.phases)) != len(self.phases):
            raise _FieldError(("phases",), self.phases, "phase names must be unique")
        nodes = [n.name for n in self.nodes]
        if len(set(nodes)) != len(nodes):
            raise _FieldError(("nodes",), nodes, "node names must be unique")
        everything = self.all_systems()
        for kind, name, system in self._each():
            for i, phase in enumerate(system.phases or []):
                if phase not in self.phases:
                    raise _FieldError(
                        (kind, name, "phases", i), phase, _one_of("a phase", phase, self.phases)
                    )
            for i, dep in enumerate(system.after):
                if dep not in everything:
                    raise _FieldError(
                        (kind, name, "after", i), dep, _one_of("a system", dep, list(everything))
                    )
                if dep == name:
                    raise _FieldError(
                        (kind, name, "after", i), dep, "a system cannot wait on itself"
                    )
            if system.node is not None and system.node not in nodes:
                raise _FieldError(
                    (kind, name, "node"), system.node, _one_of("a node", system.node, nodes)
                )
        cycle = _find_cycle({n: s.after for n, s in everything.items()})
        if cycle:
            name = cycle[0]
            kind = "systems" if name in self.systems else "clusters"
            raise _FieldError(
                (kind, name, "after"),
                everything[name].after,
                f"start order loops: {' -> '.join(cycle)}",
            )
        return self

    def _each(self) -> Iterator[tuple[str, str, System]]:
        for name, system in self.systems.items():
            yield "systems", name, system
        for name, cluster in self.clusters.items():
            yield "clusters", name, cluster

    def where(self, name: str) -> str:
        """``file:line: systems.NAME`` of system (or cluster) ``name``, for messages."""
        kind = "clusters" if name in self.clusters else "systems"
        return f"{self._where.get(name, '<manifest>')}: {kind}.{name}"

    def all_systems(self) -> dict[str, System]:
        """Systems and clusters by name (names are unique across both)."""
        return {**self.systems, **self.clusters}

    def start_order(self) -> list[str]:
        """System and cluster names, dependencies (``after``) first, then manifest order."""
        everything = self.all_systems()
        done: list[str] = []

        def visit(name: str) -> None:
            if name in done:
                return
            for dep in everything[name].after:
                visit(dep)
            done.append(name)

        for name in everything:
            visit(name)
        return done

    def runs_in(self, name: str, phase: str) -> bool:
        phases = self.all_systems()[name].phases
        return phases is None or phase in phases


def _env_values(value: Any) -> Any:
    """Environment values as strings: a string, a number or a boolean is written out; a
    mapping, a list or a null is refused (it would reach the process as its Python repr)."""
    if not isinstance(value, Mapping):
        return value
    out = {}
    for key, item in value.items():
        if isinstance(item, bool):
            item = "true" if item else "false"
        elif not isinstance(item, str | int | float):
            raise _FieldError((key,), item, "an environment value is a string or a number")
        out[str(key)] = str(item)
    return out


class _FieldError(ValueError):
    """A cross-field error that knows the YAML path it belongs to."""

    def __init__(self, path: tuple[str | int, ...], value: Any, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.value = value
        self.message = message


def _one_of(what: str, value: Any, allowed: list[str]) -> str:
    close = difflib.get_close_matches(str(value), allowed, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"not {what} of this mission; known: {', '.join(allowed) or 'none'}{hint}"


def _find_cycle(graph: dict[str, list[str]]) -> list[str]:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return []

    for node in graph:
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


# -- loading and error messages ----------------------------------------------------------


def load_manifest(path: str | Path) -> Mission:
    """Read and validate a manifest (a path from the working folder, else a shipped mission:
    ``missions/sam-toc.yaml`` works from any folder); ``ManifestError`` lists every problem."""
    from mcc.resources import shipped

    path = shipped(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read the manifest ({exc.strerror})") from None
    return parse_manifest(text, source=str(path))


def parse_manifest(text: str, *, source: str = "<manifest>") -> Mission:
    """Validate manifest text; ``source`` names it in messages."""
    data, lines = parse_mapping(
        text,
        source=source,
        error=ManifestError,
        expected="a manifest is a YAML mapping with at least 'mission:' and 'systems:'",
    )
    try:
        mission = Mission.model_validate(data)
    except ValidationError as exc:
        problems = [_describe(err, data, lines, source) for err in exc.errors()]
        raise ManifestError("\n".join(problems), problems=problems) from None
    for kind, name, _ in mission._each():
        mission._where[name] = f"{source}:{nearest_line(lines, (kind, name))}"
    return mission


def _describe(err: Any, data: Any, lines: dict[tuple[Any, ...], int], source: str) -> str:
    cause = err.get("ctx", {}).get("error")
    if isinstance(cause, _FieldError):
        # A model validator's path is absolute (its loc is empty); a field validator's is
        # relative to the field it checks.
        prefix = tuple(p for p in err["loc"] if not _is_union_tag(p))
        loc: tuple[Any, ...] = prefix + cause.path
        value, message = cause.value, cause.message
    else:
        loc = tuple(p for p in err["loc"] if not _is_union_tag(p))
        value, message = err.get("input"), _message(err, loc)
    if err["type"] == "extra_forbidden":
        parent = lookup(data, loc[:-1])
        allowed = _allowed_fields(loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        message = f"unknown field; allowed here: {', '.join(allowed)}{hint}"
        value = parent.get(loc[-1]) if isinstance(parent, dict) else value
    path = yaml_path(loc) or "(top level)"
    line = nearest_line(lines, loc)
    where = f"{source}:{line}" if line else source
    shown = "" if err["type"] == "missing" else f" (got {_short(value)})"
    return f"{where}: {path}: {message}{shown}"


def _is_union_tag(part: Any) -> bool:
    return isinstance(part, str) and (
        part.startswith(("list[", "dict[", "function-", "constrained-"))
        or part in {"float", "int", "str", "bool", "none"}
    )


def _message(err: Any, loc: tuple[Any, ...]) -> str:
    kind = err["type"]
    ctx = err.get("ctx", {})
    if kind == "missing":
        return "required field is missing"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', '')}"
    if kind == "string_pattern_mismatch":
        return f"a name is {_NAME_HELP}"
    if kind in {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}:
        ops = {
            "greater_than": ">",
            "greater_than_equal": ">=",
            "less_than": "<",
            "less_than_equal": "<=",
        }
        bound = next(iter(ctx.values()))
        return (
            f"must be {ops[kind]} {bound:g}"
            if isinstance(bound, float)
            else (f"must be {ops[kind]} {bound}")
        )
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    msg = str(err["msg"])
    return msg[0].lower() + msg[1:]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _allowed_fields(loc: tuple[Any, ...]) -> list[str]:
    model: type[BaseModel] = Mission
    annotations: dict[str, type[BaseModel]] = {
        "systems": System,
        "clusters": Cluster,
        "nodes": Node,
    }
    fields: dict[str, type[BaseModel]] = {
        "resources": Resources,
        "restart": Restart,
        "health": Health,
        "services": Services,
        "persist": PersistService,
        "compute": ComputeService,
    }
    depth = 0
    while depth < len(loc):
        part = loc[depth]
        if depth == 0 and part in annotations:
            model = annotations[part]
            depth += 2  # skip the name or index
            continue
        if part in fields:
            model = fields[part]
        depth += 1
    return list(model.model_fields)
