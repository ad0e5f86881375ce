"""The node agent: the process that owns a mission's instances on this host.

A supervisor is a controller: it decides what runs and asks the node agent to start, signal
and stop processes. The agent forks every instance (it is the local backend's warm fork
server: see `mcc.orchestrate.zygote`) and keeps them running whatever happens to the
supervisor, as Kubernetes' kubelet or Ray's raylet keep pods and workers through a controller
restart. Supervisors reach it over a Unix socket in the user's private ``$MCC_HOME/agents``
(peer credentials checked), one JSON object per line.

Exactly one connected supervisor is *active*; the others stand by. The agent is where that is
decided, with a fencing epoch: it grows by one at every change of active supervisor, and the
agent executes operations only from the current active connection, so an old active that comes
back from a pause or a network partition can no longer start or kill anything (it is told
``fenced`` and its connection is closed). When the active connection drops (its process died:
the kernel closes the socket at once), the agent promotes the longest-connected standby and
hands it every running instance and the desired state the active left with it; the new
active adopts them without restarting any. A standby that no longer hears the active on the
bus (a partition) claims with the epoch it last saw (compare-and-set, `claim`).

Instances outlive the agent too: a new agent adopts the processes its predecessor recorded
in ``$MCC_HOME/agents/<key>.json`` (pid and kernel start time, so a reused pid is not
adopted) and watches them with pidfds. With no supervisor for ``orphan_s`` the agent stops
every instance and exits, and an app instance whose agent is gone for ``orphan_s`` stops
itself (`mcc.orchestrate.runtime`), so nothing outlives a mission that nobody controls.

Protocol (controller → agent): ``hello`` {pid, host, claim, token}, ``claim`` {expect_epoch},
``spawn`` (zygote request), ``signal`` {id, pid, sig}, ``state`` {state}, ``ping`` {seq},
``shutdown``. Agent → controller: ``hello``/``promoted`` {epoch, active, active_pid,
instances, state, exits}, ``claimed`` {ok, epoch}, ``spawned``, ``exit``, ``warning``,
``error``, ``pong``, ``fenced`` {epoch}, ``shutdown``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import hmac
import json
import logging
import os
import secrets
import selectors
import shutil
import signal
import socket
import stat
import struct
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcc.bus.heartbeat import freeze_startup_objects
from mcc.files import write_private, write_private_folder
from mcc.orchestrate import zygote
from mcc.settings import Settings, current, env_name

log = logging.getLogger("mcc.orchestrate.agent")

#: Seconds a mission may run with no supervisor before its agent stops it.
DEFAULT_ORPHAN_S: float = Settings.model_fields["agent_orphan_s"].default
MAX_LINE = 4 * 2**20  # a controller's state blob is a few KB; 4 MiB is not a request
MAX_PENDING_EXITS = 4096
_SO_PEERCRED = getattr(socket, "SO_PEERCRED", 17)


@dataclass(frozen=True)
class AgentPaths:
    """The files of one agent: socket, record of its instances, lock, log."""

    key: str
    socket: Path
    state: Path
    lock: Path
    log: Path

    @classmethod
    def for_mission(cls, home: Path, mission: str, domain: int) -> AgentPaths:
        folder = home / "agents"
        key = f"{mission}-d{domain}"
        sock = folder / f"{key}.sock"
        if len(os.fsencode(sock)) > 100:  # sun_path holds 108 bytes: a short private twin
            sock = _short_socket_dir(folder) / f"{key}.sock"
        return cls(key, sock, folder / f"{key}.json", folder / f"{key}.lock", folder / f"{key}.log")

    @property
    def token(self) -> Path:
        """The agent's secret (0600): a controller's hello must carry it."""
        return self.state.with_suffix(".token")

    def argv(self, *, orphan_s: float, detach: bool = True) -> list[str]:
        """The command line that starts this agent (``detach``: nobody's child)."""
        return [
            sys.executable, "-m", "mcc.orchestrate.agent", *(["--detach"] if detach else []),
            "--key", self.key, "--socket", str(self.socket), "--state", str(self.state),
            "--lock", str(self.lock), "--orphan-s", f"{orphan_s:g}",
        ]  # fmt: skip


def _short_socket_dir(folder: Path) -> Path:
    """A short folder for the agents' sockets when ``folder``'s path is too long for one: a
    fresh ``/tmp/mcc-UID-XXXXXXXX`` (0700, made by ``mkdtemp``: no other user can guess or
    pre-create it) whose name is kept in ``folder/socket-dir``, so that every process of the
    user finds the same one. A kept folder that is gone, or not a private folder of this
    user, is replaced."""
    pointer = folder / "socket-dir"
    try:
        kept = Path(pointer.read_text().strip())
        st = os.lstat(kept)
        if (
            stat.S_ISDIR(st.st_mode)
            and st.st_uid == os.geteuid()
            and stat.S_IMODE(st.st_mode) == 0o700
            and len(os.fsencode(kept)) < 60
        ):
            return kept
    except (OSError, ValueError):
        pass
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=f"mcc-{os.getuid()}-", dir="/tmp"))
    write_private(pointer, f"{fresh}\n")
    return fresh


def agent_token(path: Path, *, create: bool = False) -> str:
    """The token kept in ``path``; with ``create``, a fresh one when there is none (a new
    agent keeps its predecessor's, so that connected supervisors reconnect)."""
    try:
        token = path.read_text().strip()
        if len(token) >= 32:
            return token
    except FileNotFoundError:
        if not create:
            raise
    if not create:
        raise OSError(f"{path}: not an agent token")
    token = secrets.token_hex(32)
    write_private(path, token + "\n")
    return token


def proc_start_time(pid: int) -> int | None:
    """The kernel start time of ``pid`` (clock ticks since boot), or None if it is gone: a
    recorded (pid, start time) names one process, never a later one given the same pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        if fields[0] == b"Z":
            return None
        return int(fields[19])
    except (IndexError, ValueError):
        return None


@dataclass
class _Conn:
    sock: socket.socket
    pid: int = 0
    host: str = ""
    since: float = field(default_factory=time.monotonic)
    buf: bytes = b""
    hello: bool = False

    @property
    def name(self) -> str:
        return f"supervisor pid {self.pid}@{self.host}" if self.pid else "a connection"


@dataclass
class _Proc:
    id: str
    pid: int
    start_time: int
    node: str
    started_ns: int
    pidfd: int | None = None  # adopted (not our child): watched through a pidfd
    #: A foreign binary (no app): it dies with its agent (PR_SET_PDEATHSIG), never adopted.
    foreign: bool = False


class Agent:
    """The agent's state and loop (one per mission and domain on a host)."""

    def __init__(self, paths: AgentPaths, *, orphan_s: float = DEFAULT_ORPHAN_S) -> None:
        self.paths = paths
        self.orphan_s = orphan_s
        self.epoch = 0
        self.procs: dict[str, _Proc] = {}
        self.state: Any = None
        self.pending_exits: list[dict[str, Any]] = []
        self.conns: dict[int, _Conn] = {}
        self.active: _Conn | None = None
        self.no_active_since: float | None = time.monotonic()
        self.stopping_since: float | None = None
        self.selector = selectors.DefaultSelector()
        self._children: dict[int, str] = {}  # pid -> instance id, for processes we forked
        #: Descriptors no child may keep (the agent's lock: a child holding it would lock out
        #: the next agent).
        self.keep_fds: list[int] = []
        self.token = ""  # set by serve (`agent_token`)

    # -- records ---------------------------------------------------------------------

    def load(self) -> None:
        """Adopt what a previous agent left running (its record), drop what is gone."""
        try:
            data = json.loads(self.paths.state.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning("%s: unreadable record (%s): starting empty", self.paths.state, exc)
            return
        if not isinstance(data, dict):
            log.warning("%s: not a record: starting empty", self.paths.state)
            return
        epoch = data.get("epoch")
        self.epoch = epoch if isinstance(epoch, int) and epoch >= 0 else 0
        self.state = data.get("state")
        for item in data.get("instances") or []:
            try:
                proc = _Proc(
                    str(item["id"]),
                    int(item["pid"]),
                    int(item["start_time"]),
                    str(item["node"]),
                    int(item["started_ns"]),
                    foreign=bool(item.get("foreign", False)),
                )
            except (KeyError, TypeError, ValueError):
                continue
            alive = proc.pid > 1 and proc_start_time(proc.pid) == proc.start_time
            if alive and proc.foreign:
                # Its death signal came with ours, but a busy host may not have run it yet:
                # it is not adopted, it is finished.
                with contextlib.suppress(OSError):
                    os.kill(proc.pid, signal.SIGKILL)
                alive = False
            if alive:
                try:
                    proc.pidfd = os.pidfd_open(proc.pid)
                except OSError:
                    self._queue_exit(proc, None)
                    continue
                self.selector.register(proc.pidfd, selectors.EVENT_READ, ("pidfd", proc.id))
                self.procs[proc.id] = proc
                log.info("adopted %s (pid %d)", proc.id, proc.pid)
            else:
                self._queue_exit(proc, None)

    def save(self) -> None:
        record = {
            "agent_pid": os.getpid(),
            "epoch": self.epoch,
            "state": self.state,
            "instances": [
                {
                    "id": p.id,
                    "pid": p.pid,
                    "start_time": p.start_time,
                    "node": p.node,
                    "started_ns": p.started_ns,
                    "foreign": p.foreign,
                }
                for p in self.procs.values()
            ],
        }
        tmp = self.paths.state.with_suffix(".json.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
        os.replace(tmp, self.paths.state)

    # -- messages --------------------------------------------------------------------

    def _send(self, conn: _Conn, message: dict[str, Any]) -> None:
        try:
            conn.sock.sendall((json.dumps(message) + "\n").encode())
        except OSError:
            self._drop(conn, "not reading")

    def _to_active(self, message: dict[str, Any]) -> None:
        if self.active is not None:
            self._send(self.active, message)

    def _snapshot(self) -> dict[str, Any]:
        exits, self.pending_exits = self.pending_exits, []
        return {
            "epoch": self.epoch,
            "agent_pid": os.getpid(),
            "active": False,
            "active_pid": self.active.pid if self.active else 0,
            "instances": [
                {"id": p.id, "pid": p.pid, "node": p.node, "started_ns": p.started_ns}
                for p in self.procs.values()
            ],
            "state": self.state,
            "exits": exits,
        }

    def _make_active(self, conn: _Conn) -> dict[str, Any]:
        old = self.active
        self.epoch += 1
        self.active = conn
        self.no_active_since = None
        if old is not None and old is not conn:
            log.warning("%s fenced by %s (epoch %d)", old.name, conn.name, self.epoch)
            self._send(old, {"fenced": self.epoch})
            self._drop(old, "fenced", promote=False)
        self.save()
        snapshot = self._snapshot()
        snapshot["active"] = True
        snapshot["active_pid"] = conn.pid
        log.info("%s is active (epoch %d)", conn.name, self.epoch)
        return snapshot

    def handle(self, conn: _Conn, message: dict[str, Any]) -> None:
        op = message.get("op")
        if op == "hello":
            conn.hello = True
            conn.pid = int(message.get("pid") or 0)
            conn.host = str(message.get("host") or "")
            expect = message.get("expect_epoch")
            free = self.active is None and (expect is None or expect == self.epoch)
            if message.get("claim") and free:
                self._send(conn, {"hello": self._make_active(conn)})
            else:  # a standby: the instances and their exits are the next active one's
                self._send(conn, {"hello": self._peek()})
            return
        if op == "ping":
            self._send(conn, {"pong": message.get("seq"), "epoch": self.epoch})
            return
        if op == "claim":
            ok = conn is not self.active and message.get("expect_epoch") == self.epoch
            if ok:
                self._send(conn, {"promoted": self._make_active(conn)})
            else:
                self._send(conn, {"claimed": False, "epoch": self.epoch})
            return
        if conn is not self.active:
            self._send(conn, {"fenced": self.epoch, "op": op, "id": message.get("id")})
            return
        if op == "spawn":
            self.spawn(message)
        elif op == "signal":
            proc = self.procs.get(str(message.get("id")))
            if proc is not None and proc.pid == message.get("pid"):
                _signal_group(proc.pid, int(message.get("sig", signal.SIGTERM)))
        elif op == "state":
            self.state = message.get("state")
            self.save()
        elif op == "shutdown":
            self.shutdown()
        else:
            self._send(conn, {"error": "", "message": f"unknown op {op!r}"})

    def _peek(self) -> dict[str, Any]:
        """What a standby is told: who is active, no instances and no exits (they go to the
        active supervisor, or wait for the next one)."""
        return {
            "epoch": self.epoch,
            "agent_pid": os.getpid(),
            "active": False,
            "active_pid": self.active.pid if self.active is not None else 0,
            "instances": [],
            "state": None,
            "exits": [],
        }

    # -- processes -------------------------------------------------------------------

    def identity_folder(self, instance_id: str) -> Path:
        """Where an instance's identity lives while it runs (0700, under the agent's own
        folder, which its confinement hides but for this folder)."""
        return self.paths.state.with_suffix(".identities") / instance_id.replace("/", ".")

    def _deliver_identity(self, request: dict[str, Any]) -> str | None:
        """Write the request's identity (file name → base64) into the instance's private
        folder, name it in its environment and let its confinement read it; an error message
        when it cannot be done."""
        files = request.pop("identity", None)
        if not files:
            return None
        folder = self.identity_folder(str(request["id"]))
        try:
            if not isinstance(files, dict):
                raise ValueError("not a mapping of file names")
            decoded = {str(k): base64.b64decode(str(v), validate=True) for k, v in files.items()}
            write_private_folder(folder, decoded)
        except (ValueError, OSError) as exc:
            return f"cannot write its identity into {folder}: {exc}"
        request["env"][env_name("identity_dir")] = str(folder)
        if request.get("confine"):
            conf = json.loads(request["confine"])
            conf["readable"] = [*(conf.get("readable") or []), str(folder)]
            request["confine"] = json.dumps(conf)
        return None

    def _forget_identity(self, instance_id: str) -> None:
        shutil.rmtree(self.identity_folder(instance_id), ignore_errors=True)

    def spawn(self, request: dict[str, Any]) -> None:
        running = self.procs.get(str(request["id"]))
        if running is not None:  # one process per instance: never lose track of the first
            self._to_active(
                {"error": running.id, "message": f"already running as pid {running.pid}"}
            )
            return
        problem = self._deliver_identity(request)
        if problem is not None:
            self._to_active({"error": str(request["id"]), "message": problem})
            return
        inherited = [self._listen.fileno(), self._wake_r, self._wake_w, self._report_r]
        inherited += [self.selector.fileno(), *self.keep_fds]
        inherited += [c.sock.fileno() for c in self.conns.values()]
        inherited += [p.pidfd for p in self.procs.values() if p.pidfd is not None]
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = zygote._child(request, self._report_w, inherited)
            finally:
                os._exit(code)
        proc = _Proc(
            request["id"],
            pid,
            proc_start_time(pid) or 0,
            request.get("node", ""),
            time.time_ns(),
            foreign=not request.get("app"),
        )
        self._children[pid] = proc.id
        self.procs[proc.id] = proc
        self.save()
        self._to_active({"spawned": proc.id, "pid": pid})

    def _queue_exit(self, proc: _Proc, returncode: int | None) -> None:
        self._forget_identity(proc.id)  # its key leaves the host with it
        event = {"exit": proc.id, "pid": proc.pid, "returncode": returncode}
        if self.active is not None:
            self._send(self.active, event)
        elif len(self.pending_exits) < MAX_PENDING_EXITS:
            self.pending_exits.append(event)

    def _reap(self) -> None:
        while self._children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self._children.clear()
                return
            if pid == 0:
                return
            instance_id = self._children.pop(pid, None)
            proc = self.procs.get(instance_id or "")
            if proc is not None and proc.pid == pid:
                del self.procs[proc.id]
                self.save()
                self._queue_exit(proc, os.waitstatus_to_exitcode(status))

    def _adopted_exit(self, instance_id: str) -> None:
        proc = self.procs.pop(instance_id, None)
        if proc is None or proc.pidfd is None:
            return
        self.selector.unregister(proc.pidfd)
        os.close(proc.pidfd)
        self.save()
        self._queue_exit(proc, None)  # not our child: its exit status is not ours to read

    def shutdown(self) -> None:
        """Kill what is left of the mission, tell the standbys, exit once all are reaped."""
        log.info("shutdown asked by %s", self.active.name if self.active else "nobody")
        for proc in self.procs.values():
            _signal_group(proc.pid, signal.SIGKILL)
        for conn in list(self.conns.values()):
            if conn is not self.active:
                self._send(conn, {"shutdown": True})
        self.stopping_since = time.monotonic()

    # -- connections -----------------------------------------------------------------

    def _accept(self) -> None:
        try:
            sock, _ = self._listen.accept()
        except OSError:
            return
        creds = sock.getsockopt(socket.SOL_SOCKET, _SO_PEERCRED, struct.calcsize("3i"))
        _, uid, _ = struct.unpack("3i", creds)
        if uid != os.getuid():  # the folder is private already; this is the second lock
            log.warning("refused a connection from uid %d", uid)
            sock.close()
            return
        sock.settimeout(2.0)  # a controller that stops reading is dropped, never waited for
        conn = _Conn(sock)
        self.conns[sock.fileno()] = conn
        self.selector.register(sock, selectors.EVENT_READ, ("conn", sock.fileno()))

    def _read(self, conn: _Conn) -> None:
        try:
            chunk = conn.sock.recv(65536)
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(conn, "disconnected")
            return
        conn.buf += chunk
        if len(conn.buf) > MAX_LINE:
            self._drop(conn, "sent a line over 4 MiB")
            return
        while b"\n" in conn.buf and conn.sock.fileno() in self.conns:
            line, conn.buf = conn.buf.split(b"\n", 1)
            try:
                message = json.loads(line)
                if not isinstance(message, dict):
                    raise ValueError("not an object")
            except ValueError as exc:
                self._drop(conn, f"sent a bad message ({exc})")
                return
            if not conn.hello and not self._authentic(message):
                self._send(conn, {"error": "", "message": "no hello with the agent's token"})
                self._drop(conn, "refused: no hello with the agent's token")
                log.warning("refused a connection without the agent's token")
                return
            try:
                self.handle(conn, message)
            except (KeyError, TypeError, ValueError) as exc:
                self._send(conn, {"error": str(message.get("id", "")), "message": str(exc)})

    def _authentic(self, message: dict[str, Any]) -> bool:
        """A connection's first message is a hello with the token only the user's own
        processes outside a confined instance can read (`mcc.security.confine` hides
        ``$MCC_HOME``): an instance of the mission, same user as the agent, cannot take
        the agent over to start an unconfined process."""
        token = message.get("token")
        return (
            message.get("op") == "hello"
            and isinstance(token, str)
            and hmac.compare_digest(token.encode(), self.token.encode())
        )

    def _drop(self, conn: _Conn, why: str, *, promote: bool = True) -> None:
        fd = conn.sock.fileno()
        if fd < 0 or fd not in self.conns:
            return
        del self.conns[fd]
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(conn.sock)
        conn.sock.close()
        if conn.hello:
            log.info("%s %s", conn.name, why)
        if conn is self.active:
            self.active = None
            self.no_active_since = time.monotonic()
            if promote and self.stopping_since is None:
                self._promote()

    def _promote(self) -> None:
        standbys = sorted((c for c in self.conns.values() if c.hello), key=lambda c: c.since)
        if standbys:
            self._send(standbys[0], {"promoted": self._make_active(standbys[0])})

    # -- loop ------------------------------------------------------------------------

    def serve(self) -> int:
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        signal.set_wakeup_fd(self._wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal's Ctrl-C is for `mcc up`
        signal.signal(signal.SIGTERM, lambda *_: None)  # handled in the loop: leave, adoptable
        self._report_r, self._report_w = os.pipe()  # children's warnings and errors
        self.selector.register(self._wake_r, selectors.EVENT_READ, ("signal", 0))
        self.selector.register(self._report_r, selectors.EVENT_READ, ("report", 0))
        self.token = agent_token(self.paths.token, create=True)
        self.paths.socket.unlink(missing_ok=True)
        self._listen = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listen.bind(str(self.paths.socket))
        os.chmod(self.paths.socket, 0o600)
        self._listen.listen(16)
        self.selector.register(self._listen, selectors.EVENT_READ, ("listen", 0))
        report_buf = b""
        terminated = False
        log.info("node agent %s ready (pid %d, epoch %d)", self.paths.key, os.getpid(), self.epoch)
        from mcc.observe import notify  # systemd (Type=notify): no-ops elsewhere

        notify.ready(status=f"node agent {self.paths.key}: {len(self.procs)} instances")
        beat_s = notify.watchdog_interval_s()
        next_beat = 0.0
        while True:
            if beat_s is not None and time.monotonic() >= next_beat:
                notify.notify("WATCHDOG=1")  # from the loop itself: a wedged agent is restarted
                next_beat = time.monotonic() + beat_s
            for key, _ in self.selector.select(timeout=0.5):
                kind, ref = key.data
                if kind == "listen":
                    self._accept()
                elif kind == "conn":
                    conn = self.conns.get(ref)
                    if conn is not None:
                        self._read(conn)
                elif kind == "pidfd":
                    self._adopted_exit(ref)
                elif kind == "report":
                    report_buf += os.read(self._report_r, 65536)
                    while b"\n" in report_buf:
                        line, report_buf = report_buf.split(b"\n", 1)
                        with contextlib.suppress(ValueError):
                            self._to_active(json.loads(line))
                else:
                    signums = os.read(self._wake_r, 512)
                    terminated = terminated or signal.SIGTERM in signums
                    self._reap()
            self._reap()
            if terminated:
                log.info("SIGTERM: leaving %d instances to the next agent", len(self.procs))
                return 0
            now = time.monotonic()
            if self.stopping_since is not None:
                if now - self.stopping_since > 10.0:
                    for proc in self.procs.values():
                        _signal_group(proc.pid, signal.SIGKILL)
                    self.procs.clear()
                if not self.procs:
                    self._remove_files()  # the mission is over: nothing to adopt
                    return 0
                continue
            idle = self.no_active_since is not None and now - self.no_active_since > self.orphan_s
            if idle and self.procs:
                log.warning(
                    "no supervisor for %.0f s: stopping the mission's %d instances",
                    self.orphan_s,
                    len(self.procs),
                )
                for proc in self.procs.values():
                    _signal_group(proc.pid, signal.SIGTERM)
                self.stopping_since = now
            elif idle and not self.conns:
                self._remove_files()
                return 0

    def _remove_files(self) -> None:
        shutil.rmtree(self.paths.state.with_suffix(".identities"), ignore_errors=True)
        self.paths.state.unlink(missing_ok=True)
        self.paths.socket.unlink(missing_ok=True)  # ours: this agent holds the lock


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcc.orchestrate.agent")
    parser.add_argument("--key", required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--lock", required=True)
    parser.add_argument("--orphan-s", type=float, default=DEFAULT_ORPHAN_S)
    parser.add_argument(
        "--detach", action="store_true", help="fork; the parent returns at once (not a child)"
    )
    args = parser.parse_args(argv)
    if args.detach and os.fork() != 0:
        return 0  # the agent is nobody's child: no zombie, no parent-death signal
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a closed terminal does not stop a mission
    logging.basicConfig(
        level=current().log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    from mcc.observe.logs import clip_log_messages

    clip_log_messages()  # what it logs of a spawn request or an instance is clipped
    socket_path = Path(args.socket)
    socket_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    paths = AgentPaths(args.key, socket_path, Path(args.state), Path(args.lock), Path("-"))
    lock = os.open(paths.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"mcc agent {args.key}: another agent runs it", file=sys.stderr)
        return 0
    zygote.warm_up()  # before the socket exists: a connection means a warm agent
    zygote.preload()
    freeze_startup_objects(collect=True)  # what every fork inherits: out of the collector's way
    agent = Agent(paths, orphan_s=args.orphan_s)
    agent.keep_fds.append(lock)
    agent.load()
    return agent.serve()


if __name__ == "__main__":
    sys.exit(main())
