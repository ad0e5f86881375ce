"""Running missions on this host, and the per-user folder where MCC keeps its files.

`mcc up` writes ``$MCC_HOME/active/<mission>.json`` (domain, discovery tag, transport, run
folder, supervisor pid) and removes it on the way down; clients read it. ``MCC_HOME`` defaults
to ``$XDG_STATE_HOME/mcc`` (``~/.local/state/mcc``). A record decides which domain, transport
and keystore a client trusts, so the home is the user's own (created 0700; refused when it
belongs to someone else or others may write it), every file written here is 0600 and replaced
atomically, and a record is read only when it is the user's and nobody else may write it, field
by field: a discovery tag, the fields of a `Transport` without raw XML, never an environment.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import psutil

from mcc.bus.transport import ENV_VAR as TRANSPORT_ENV
from mcc.bus.transport import Transport
from mcc.errors import MccError, OrchestratorError
from mcc.files import write_private
from mcc.orchestrate.manifest import NAME_PATTERN
from mcc.settings import current, env_name, external

if TYPE_CHECKING:
    from mcc.orchestrate.manifest import Mission

log = logging.getLogger("mcc.orchestrate.registry")

ENV_HOME = env_name("home")
ENV_TAG = env_name("discovery_tag")
#: A registry record or lab description is a few hundred bytes; anything far larger is not one.
MAX_RECORD_BYTES = 64 * 1024
_DOMAIN_MAX = 232
_FIELDS = {"mission", "domain", "pid", "run_dir", "backend", "keystore", "discovery_tag"}
#: What a record may say of the transport: the fields `Transport` defines and validates, less
#: ``extra_xml`` (raw Cyclone XML: a trace file anywhere, any setting).
_TRANSPORT_FIELDS = frozenset(
    f.name for f in dataclasses.fields(Transport) if f.name not in ("extra_xml",)
)


def home(path: Path | None = None) -> Path:
    """``path`` when given (a home of its own: a supervisor's `home`), else ``$MCC_HOME``,
    else ``$XDG_STATE_HOME/mcc``, else ``~/.local/state/mcc`` (absolute); created 0700 on
    first use, refused when another user owns it or others may write it."""
    path = Path(path).absolute() if path is not None else _home_path()
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    except OSError as exc:
        raise OrchestratorError(
            f"cannot create the MCC home {path} ({exc.strerror}); set {ENV_HOME} to a folder "
            "of yours that can be created"
        ) from exc
    else:
        os.chmod(path, 0o700)  # mkdir's mode went through the umask
    try:
        st = os.stat(path)
    except OSError as exc:
        raise OrchestratorError(f"the MCC home {path}: {exc.strerror}") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise OrchestratorError(
            f"the MCC home {path} is not a folder; set {ENV_HOME} to a folder of yours"
        )
    _check_owner(
        path, st, what="the MCC home", fix=f"`chmod 700 {path}` or set {ENV_HOME} elsewhere"
    )
    return path


def _home_path() -> Path:
    explicit = current().home
    if explicit is not None:
        return explicit.absolute()
    state = external().xdg_state_home  # absolute: the XDG spec ignores a relative one
    if state is not None:
        return state / "mcc"
    try:
        user_home = Path.home()
    except RuntimeError as exc:
        raise OrchestratorError(
            f"no home folder to keep MCC's files in ({exc}); set {ENV_HOME} to a private folder"
        ) from exc
    return user_home / ".local" / "state" / "mcc"


def _check_owner(path: Path, st: os.stat_result, *, what: str, fix: str) -> None:
    """Refuse ``path`` unless this user owns it and neither group nor others may write it."""
    me = os.geteuid()
    if st.st_uid != me:
        raise OrchestratorError(
            f"{what} {path} belongs to uid {st.st_uid}, not to you (uid {me}): not trusted; {fix}"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = " and ".join(
            name
            for name, bit in (("its group", stat.S_IWGRP), ("others", stat.S_IWOTH))
            if st.st_mode & bit
        )
        raise OrchestratorError(
            f"{what} {path} is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o}): "
            f"anyone there could plant or change what mcc reads; {fix}"
        )


def private_dir(path: Path) -> Path:
    """Folder ``path``, created if missing, mode 0700; refused when another user owns it."""
    path = Path(path)
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.stat(path)
    except OSError as exc:
        raise OrchestratorError(f"cannot create the folder {path} ({exc.strerror})") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise OrchestratorError(f"{path} is not a folder; remove it or choose another path")
    if st.st_uid != os.geteuid():
        raise OrchestratorError(
            f"the folder {path} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()}); "
            "choose a folder of your own"
        )
    if st.st_mode & stat.S_ISVTX:  # a shared folder such as /tmp: never narrow it
        raise OrchestratorError(
            f"{path} is a shared (sticky) folder; give the run a folder of its own inside it"
        )
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


def read_private(path: Path, *, what: str = "the file") -> str:
    """The text of ``path``, when it is a regular file of this user's that neither group nor
    others may write, at most `MAX_RECORD_BYTES`; ``OrchestratorError`` naming it otherwise."""
    fix = f"remove it (rm {path}) unless you wrote it"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise OrchestratorError(f"{what} {path}: {exc.strerror}; {fix}") from exc
    with os.fdopen(fd, "rb") as file:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OrchestratorError(f"{what} {path} is not a regular file; {fix}")
        _check_owner(path, st, what=what, fix=fix)
        data = file.read(MAX_RECORD_BYTES + 1)
    if len(data) > MAX_RECORD_BYTES:
        raise OrchestratorError(f"{what} {path} is over {MAX_RECORD_BYTES} bytes; {fix}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OrchestratorError(f"{what} {path} is not UTF-8 text; {fix}") from exc


@dataclass(frozen=True)
class ActiveMission:
    """A registry record, validated field by field."""

    mission: str
    domain: int
    pid: int
    run_dir: str
    backend: str
    transport: Transport | None = None  # without extra_xml
    discovery_tag: str | None = None
    keystore: str | None = None  # a secured mission: clients use its operator identity

    @property
    def env(self) -> dict[str, str]:
        """``MCC_DISCOVERY_TAG`` and ``MCC_TRANSPORT`` for another process's environment, made
        from the validated fields (prefer `transport` and `discovery_tag` in this process)."""
        env = {}
        if self.discovery_tag is not None:
            env[ENV_TAG] = self.discovery_tag
        if self.transport is not None:
            env[TRANSPORT_ENV] = self.transport.apply_to_env({})[TRANSPORT_ENV]
        return env


class Recorded(Protocol):
    """What the record of a running mission is made of (a `Supervisor` is one)."""

    @property
    def mission(self) -> Mission: ...
    @property
    def run_dir(self) -> Path: ...
    @property
    def client_env(self) -> dict[str, str]: ...
    @property
    def keystore(self) -> Any: ...
    @property
    def home(self) -> Path | None: ...
    @property
    def backend(self) -> Any: ...


def register(supervisor: Recorded) -> Path:
    """Record ``supervisor``'s mission in its home (0600, atomically); its run folder is made
    private."""
    private_dir(supervisor.run_dir)  # what the record points clients at: the user's only
    private_dir(supervisor.run_dir / "logs")
    folder = private_dir(home(supervisor.home) / "active")
    path = folder / f"{supervisor.mission.mission}.json"
    transport = _carried_transport(supervisor.client_env)
    tag = current().discovery_tag
    if tag is not None:
        Transport(discovery_tag=tag)  # TransportError naming it when it is not a tag
    record = {
        "mission": supervisor.mission.mission,
        "domain": supervisor.mission.domain,
        "pid": os.getpid(),
        "run_dir": str(supervisor.run_dir.resolve()),
        "backend": supervisor.backend.name,
        "discovery_tag": tag,
        "transport": _transport_fields(transport) if transport is not None else None,
        "keystore": str(Path(supervisor.keystore).absolute()) if supervisor.keystore else None,
    }
    write_private(path, json.dumps(record, indent=2))
    return path


def _carried_transport(client_env: dict[str, str]) -> Transport | None:
    """The transport the mission's clients need: the supervisor's for every other process of
    the mission, else this process's own; None when neither is set."""
    if TRANSPORT_ENV in client_env:
        return Transport.from_env(client_env)
    if current().transport:
        return Transport.from_env()
    return None


def _transport_fields(transport: Transport) -> dict[str, Any]:
    data = dataclasses.asdict(transport)
    return {k: v for k, v in data.items() if k in _TRANSPORT_FIELDS}


def unregister(supervisor: Recorded) -> None:
    path = home(supervisor.home) / "active" / f"{supervisor.mission.mission}.json"
    try:
        record = json.loads(read_private(path))
        if record.get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError, AttributeError, MccError):
        pass


def load(path: Path) -> ActiveMission:
    """The record in ``path``, validated; ``OrchestratorError`` naming the file and the field
    otherwise."""
    path = Path(path)
    text = read_private(path, what="the registry record")
    fix = f"remove it (rm {path}) unless you wrote it, and `mcc up` the mission again"

    def bad(field: str, value: Any, expected: str) -> OrchestratorError:
        shown = repr(value)
        shown = shown if len(shown) <= 120 else shown[:117] + "..."
        return OrchestratorError(
            f"the registry record {path}: {field} = {shown} is refused ({expected}); {fix}"
        )

    try:
        data = json.loads(text)
    except ValueError as exc:
        raise OrchestratorError(f"the registry record {path} is not JSON ({exc}); {fix}") from exc
    if not isinstance(data, dict):
        raise bad("the record", data, "a JSON object")
    legacy = data.pop("env", None)  # the form earlier versions wrote: the same two settings
    transport_data = data.pop("transport", None)
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        raise bad("the fields", unknown, f"a record has only {', '.join(sorted(_FIELDS))}")
    mission = data.get("mission")
    if not isinstance(mission, str) or not re.fullmatch(NAME_PATTERN, mission):
        raise bad("mission", mission, "a mission name")
    if mission != path.stem:
        raise bad("mission", mission, f"the record of {path.stem!r} names its own mission")
    domain = data.get("domain")
    if isinstance(domain, bool) or not isinstance(domain, int) or not 0 <= domain <= _DOMAIN_MAX:
        raise bad("domain", domain, f"a DDS domain id from 0 to {_DOMAIN_MAX}")
    pid = data.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        raise bad("pid", pid, "a process id")
    run_dir = data.get("run_dir")
    if not _is_path(run_dir):
        raise bad("run_dir", run_dir, "an absolute path")
    backend = data.get("backend")
    if not isinstance(backend, str) or not re.fullmatch(NAME_PATTERN, backend):
        raise bad("backend", backend, "a backend's name, e.g. local or ray")
    keystore = data.get("keystore")
    if keystore is not None:
        if not _is_path(keystore):
            raise bad("keystore", keystore, "an absolute path")
        with contextlib.suppress(FileNotFoundError):  # a missing one: Keystore says so
            _check_owner(Path(keystore), os.stat(keystore), what=f"the keystore of {path}", fix=fix)
    tag = data.get("discovery_tag")
    if legacy is not None:
        tag, transport_data = _legacy_env(legacy, bad)
    if tag is not None:
        try:
            Transport(discovery_tag=tag)
        except MccError as exc:
            raise bad("discovery_tag", tag, str(exc)) from None
    transport = None
    if transport_data is not None:
        transport = _transport(transport_data, bad)
    return ActiveMission(
        mission=mission,
        domain=domain,
        pid=pid,
        run_dir=str(run_dir),
        backend=str(backend),
        transport=transport,
        discovery_tag=tag,
        keystore=keystore,
    )


def _is_path(value: Any) -> bool:
    return (
        isinstance(value, str) and os.path.isabs(value) and "\0" not in value and len(value) <= 4096
    )


def _transport(data: Any, bad: Any) -> Transport:
    if not isinstance(data, dict):
        raise bad("transport", data, "an object of Transport fields")
    if data.get("extra_xml"):
        raise bad(
            "transport.extra_xml",
            data["extra_xml"],
            "raw Cyclone XML is never taken from a record; set it in your own MCC_TRANSPORT",
        )
    data = {k: v for k, v in data.items() if k != "extra_xml"}
    unknown = sorted(set(data) - _TRANSPORT_FIELDS)
    if unknown:
        raise bad("transport", unknown, f"Transport fields: {', '.join(sorted(_TRANSPORT_FIELDS))}")
    if isinstance(data.get("peers"), list):
        data["peers"] = tuple(data["peers"])
    try:
        return Transport(**data)
    except (MccError, TypeError) as exc:
        raise bad("transport", data, str(exc)) from None


def _legacy_env(env: Any, bad: Any) -> tuple[Any, Any]:
    """The discovery tag and transport fields of an ``env`` record: only those two keys."""
    if not isinstance(env, dict):
        raise bad("env", env, "an object")
    unknown = sorted(set(env) - {ENV_TAG, TRANSPORT_ENV})
    if unknown:
        raise bad("env", unknown, f"a record carries only {ENV_TAG} and {TRANSPORT_ENV}")
    transport = env.get(TRANSPORT_ENV)
    if transport is not None:
        if not isinstance(transport, str):
            raise bad(f"env.{TRANSPORT_ENV}", transport, "a Transport as JSON")
        try:
            transport = json.loads(transport)
        except ValueError:
            raise bad(f"env.{TRANSPORT_ENV}", transport, "a Transport as JSON") from None
    return env.get(ENV_TAG), transport


def _scan() -> tuple[list[ActiveMission], dict[str, str]]:
    """Live records, and why each refused one was refused (by file stem); stale ones go."""
    folder = home() / "active"
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return [], {}
    if not stat.S_ISDIR(st.st_mode):
        raise OrchestratorError(f"{folder} is not a folder; remove it, `mcc up` makes it again")
    _check_owner(folder, st, what="the registry folder", fix=f"`chmod 700 {folder}`")
    found, refused = [], {}
    for path in sorted(folder.glob("*.json")):
        try:
            record = load(path)
        except OrchestratorError as exc:
            refused[path.stem] = str(exc)
            continue
        if not _alive(record.pid):
            path.unlink(missing_ok=True)
            continue
        found.append(record)
    return found, refused


def active() -> list[ActiveMission]:
    """Missions whose supervisor is alive (stale records are removed, refused ones logged)."""
    found, refused = _scan()
    for reason in refused.values():
        log.warning("%s", reason)
    return found


def find(mission: str | None) -> ActiveMission:
    """The running mission named ``mission``, or the only one running."""
    running, refused = _scan()
    if mission is not None:
        for record in running:
            if record.mission == mission:
                return record
        if mission in refused:
            raise OrchestratorError(refused[mission])
        names = ", ".join(r.mission for r in running) or "none"
        raise OrchestratorError(
            f"mission {mission!r} is not running here (running: {names}); "
            "start it with `mcc up FILE`, or pass --domain to reach another host's mission"
        )
    for reason in refused.values():
        log.warning("%s", reason)
    if len(running) == 1:
        return running[0]
    if not running:
        why = "; refused: " + " | ".join(refused.values()) if refused else ""
        raise OrchestratorError(
            f"no mission is running here ({home() / 'active'} has no live record{why}); start "
            "one with `mcc up missions/sam-toc.yaml`, or pass --domain to reach another host's "
            "mission"
        )
    names = ", ".join(r.mission for r in running)
    raise OrchestratorError(f"several missions are running ({names}): pick one with --mission")


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs, as this user: a record's supervisor is the user's own process."""
    try:
        proc = psutil.Process(pid)
        return proc.uids().real == os.getuid() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
