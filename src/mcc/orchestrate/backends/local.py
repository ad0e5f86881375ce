"""The local backend: each instance is its own OS process, forked by this host's node agent.

The node agent (`mcc.orchestrate.agent`, one per mission and domain on a host) forks every
instance from a warm interpreter and owns it; the backend is the supervisor's connection to
it. A supervisor that dies leaves its instances running: the agent promotes a standby
supervisor (a second ``mcc up`` of the mission) or waits for the next one, which adopts
them (`lead`, `Leadership`). Every signal goes through the agent, which executes only the
active supervisor's (fencing).

Nodes are core sets of this host (or network namespaces, ``netns:``); the planner assigns
cores and the child pins itself, sets its priority and memory limit before the app runs.

Nodes of ``kind: netns`` are emulated hosts: the backend builds a `mcc.netlab.NetLab` for them
when it is made (before the supervisor opens its bus), one namespace per node on a bridge that
also carries this process (the bridge's ``.1`` address), and points this process's transport
(``MCC_TRANSPORT``, ``CYCLONEDDS_URI``) at the bridge and each instance's at its ``eth0``, with
multicast discovery. ``close()`` removes the lab; a crashed supervisor's lab is removed by the
next one (`cleanup_stale`). The lab's description is in ``<MCC_HOME>/netlab/<mission>.json``
for ``mcc chaos``. A start on a node cut off the bridge (``mcc chaos partition``) goes to the
reachable netns node with the fewest instances instead, as a cluster scheduler moves work off a
lost node; the instance reports its new node.
Instance logs are their user's only (the folder 0700, each log 0600).
Every process has its own session, so stop/kill reach the whole process group. Nothing
outlives a mission nobody controls: with no supervisor for ``MCC_AGENT_ORPHAN_S`` (60 s) the
agent stops the mission, and an app whose agent is gone that long stops itself.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import dataclasses
import fcntl
import itertools
import json
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

from mcc.bus.transport import Transport
from mcc.errors import OrchestratorError
from mcc.netlab import LAB_IFACE, NetLab, NetLabError, cleanup_stale, pick_subnet
from mcc.orchestrate import agent
from mcc.orchestrate.backends.base import (
    Backend,
    ExitEvent,
    LaunchSpec,
    Leadership,
    Running,
    Warning_,
)
from mcc.orchestrate.manifest import Node
from mcc.orchestrate.registry import home as registry_home
from mcc.orchestrate.registry import private_dir, write_private
from mcc.orchestrate.zygote import open_log
from mcc.settings import child_env, current, external

log = logging.getLogger("mcc.orchestrate.local")
RUNTIME_MODULE = "mcc.orchestrate.runtime"
#: The node agent's module: it runs as ``python -m FORK_SERVER`` (how `mcc chaos` knows it).
FORK_SERVER = "mcc.orchestrate.agent"


def host_cores() -> list[int]:
    """The cores this process may run on."""
    return sorted(os.sched_getaffinity(0))


def node_cores(node: Node) -> list[int]:
    """The cores of a manifest node on this host (all of them when the node gives none)."""
    cores = host_cores()
    if isinstance(node.cpus, list):
        missing = [c for c in node.cpus if c not in cores]
        if missing:
            raise OrchestratorError(
                f"node {node.name!r}: cores {missing} are not available here (this host has "
                f"{cores}); list cores from that set or give a count"
            )
        return list(node.cpus)
    return cores


def node_capacity(node: Node) -> float:
    if isinstance(node.cpus, float | int) and not isinstance(node.cpus, bool):
        return float(node.cpus)
    return float(len(node_cores(node)))


def detect_gpus() -> list[int]:
    """GPU indices visible here (``nvidia-smi -L``), honouring CUDA_VISIBLE_DEVICES."""
    visible = external().cuda_visible_devices
    if visible is not None:
        return [int(v) for v in visible.split(",") if v.strip().isdigit()]
    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [i for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def _cgroup_root() -> Path | None:
    """A writable cgroup v2 hierarchy with the memory controller, or None."""
    root = Path("/sys/fs/cgroup")
    try:
        controllers = (root / "cgroup.controllers").read_text().split()
    except OSError:
        return None
    if "memory" not in controllers or not os.access(root, os.W_OK):
        return None
    return root


class LocalBackend(Backend):
    """Processes on this host, started by a fork server (``mcc.orchestrate.zygote``)."""

    name = "local"

    def __init__(
        self,
        nodes: Sequence[Node] = (),
        *,
        mission: str = "mcc",
        domain: int = 0,
        orphan_s: float | None = None,
        home: Path | None = None,
    ) -> None:
        """``home``: the MCC home of the agent's files and the network lab's record (default
        `mcc.orchestrate.registry.home`), the supervisor's."""
        self.nodes = list(nodes) or [Node(name="local")]
        self._preload: tuple[str, ...] = current().zygote_preload
        self.mission = mission
        self.home = registry_home(home)
        self.paths = agent.AgentPaths.for_mission(self.home, mission, domain)
        self.orphan_s = orphan_s if orphan_s is not None else current().agent_orphan_s
        self.epoch = 0
        self._sock: socket.socket | None = None
        self._sock_reader: Any = None
        self._connected = threading.Event()
        self._active = False
        self._fenced = False
        self._closing = False
        self._agent_pid = 0
        self._asks: dict[tuple[str, Any], Future[dict[str, Any]]] = {}
        self._seq = itertools.count(1)
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._spawns: dict[str, tuple[Future[Running], LaunchSpec]] = {}
        self._running: dict[str, Running] = {}
        self._exits: list[ExitEvent] = []
        self._warnings: list[Warning_] = []
        self._kill_timers: dict[str, threading.Timer] = {}
        self._reader: threading.Thread | None = None
        self._cgroup = _cgroup_root()
        self._host = socket.gethostname()
        self.lab: NetLab | None = None
        self._lab_file: Path | None = None
        self._host_transport: Transport | None = None
        self._root_transport: Transport | None = None
        if any(node.kind == "netns" for node in self.nodes):
            self._open_lab()

    # -- emulated hosts (kind: netns) ------------------------------------------------------

    def _open_lab(self) -> None:
        """Build the namespaces of the netns nodes; put this process on the lab bridge."""
        removed = cleanup_stale()
        if removed:
            log.warning("removed the network lab of a dead supervisor: %s", ", ".join(removed))
        names = [node.name for node in self.nodes if node.kind == "netns"]
        label = "".join(c for c in self.mission if c.isalnum() or c in "-_")[:16] or "mcc"
        try:
            lab = NetLab(names, name=label, subnet=pick_subnet(), root_address=True).up()
        except NetLabError as exc:
            raise OrchestratorError(
                f"mission {self.mission!r}: cannot create its netns nodes "
                f"({', '.join(names)}): {exc}"
            ) from exc
        self.lab = lab
        atexit.register(lab.down)  # normal exit without close(); a crash: cleanup_stale
        base = Transport.from_env()
        lab_transport = dataclasses.replace(
            base, kind="udp", multicast=True, peers=(), tcp_port=None, max_participant_index=None
        )
        assert lab.root_address is not None
        # This host's processes (the supervisor, the instances of its own node) are on the
        # bridge: the supervisor takes it from `transport()`, nothing goes into os.environ.
        self._root_transport = dataclasses.replace(lab_transport, interface=lab.bridge)
        self._host_transport = dataclasses.replace(lab_transport, interface=LAB_IFACE)
        self._lab_file = private_dir(self.home / "netlab") / f"{self.mission}.json"
        write_private(self._lab_file, json.dumps(lab.to_dict(), indent=2))
        log.info(
            "netns nodes %s on bridge %s (%s), this process at %s",
            ", ".join(f"{h.name}={h.address}" for h in lab.hosts),
            lab.bridge,
            lab.subnet,
            lab.root_address,
        )

    def _close_lab(self) -> None:
        # the bridge stays until this process exits: the supervisor publishes its last status
        # after closing the backend, and a send on a deleted interface logs errors
        if self.lab is not None:
            self.lab.remove_hosts()
        if self._lab_file is not None:
            self._lab_file.unlink(missing_ok=True)
            self._lab_file = None

    def _reachable(self, node: str) -> str:
        """``node``, or the reachable netns node with the fewest instances when it is cut off."""
        lab = self.lab
        if lab is None or not self._is_lab_node(node) or not lab.is_partitioned(node):
            return node
        load = {n.name: 0 for n in self.nodes if n.kind == "netns"}
        for running in self._running.values():
            if running.node in load:
                load[running.node] += 1
        reachable = [n for n in load if not lab.is_partitioned(n)]
        if not reachable:
            return node  # nowhere better: start it where it was asked for
        return min(reachable, key=lambda n: load[n])

    def _is_lab_node(self, node: str) -> bool:
        return any(n.name == node and n.kind == "netns" for n in self.nodes)

    def _netns_of(self, node: str) -> str | None:
        """The namespace instances of ``node`` run in; None for this host's own."""
        for manifest_node in self.nodes:
            if manifest_node.name == node:
                if manifest_node.kind == "netns":
                    assert self.lab is not None
                    return self.lab.host(node).netns
                return manifest_node.netns
        return None

    # -- lifecycle: the node agent ------------------------------------------------------

    def open(self) -> None:
        """Connect to this host's node agent for the mission (started if none runs)."""
        self.lead()

    def lead(self) -> Leadership:
        """Connect as a supervisor: `Leadership.active` if no other supervisor is active."""
        for node in self.nodes:
            node_cores(node)  # fail early on cores this host lacks
        if self._sock is not None:
            raise OrchestratorError("the local backend is open already")
        leadership = self._connect(claim=True, expect_epoch=None)
        if not leadership.active and self.lab is not None:
            self.detach()
            raise OrchestratorError(
                f"mission {self.mission!r} already has an active supervisor (pid "
                f"{leadership.active_pid}); a standby of a mission with netns nodes is not "
                "supported yet: its network lab belongs to the active supervisor"
            )
        return leadership

    def _connect(self, *, claim: bool, expect_epoch: int | None) -> Leadership:
        paths = self.paths
        private_dir(paths.state.parent)
        private_dir(paths.socket.parent)
        sock = self._agent_socket(paths)
        hello = {
            "op": "hello",
            "pid": os.getpid(),
            "host": self._host,
            "claim": claim,
            "token": agent.agent_token(paths.token),
        }
        if expect_epoch is not None:
            hello["expect_epoch"] = expect_epoch
        sock.settimeout(10.0)
        sock.sendall((json.dumps(hello) + "\n").encode())
        reader = sock.makefile("rb")
        line = reader.readline(agent.MAX_LINE)
        reply = json.loads(line).get("hello") if line else None
        if not isinstance(reply, dict):
            reader.close()
            sock.close()
            raise OrchestratorError(f"the node agent {paths.key} answered {line[:200]!r}")
        sock.settimeout(None)
        leadership = self._leadership(reply)
        self._agent_pid = int(reply.get("agent_pid") or 0)
        with self._lock:
            self._sock, self._sock_reader = sock, reader
            self._active = leadership.active
            self.epoch = leadership.epoch
            if leadership.active:
                self._adopt(leadership)
        self._connected.set()
        self._reader = threading.Thread(target=self._read_events, name="mcc-agent", daemon=True)
        self._reader.start()
        return leadership

    def preload(self, modules: Sequence[str]) -> None:
        """The agent's fork server imports ``modules`` beside the ``zygote_preload`` setting's,
        when this backend starts it (an agent already running keeps what it imported). A
        replacement worker of the task farm no longer spent 47 ms importing its app, and said
        hello 19 ms sooner (medians of 4 runs)."""
        self._preload = tuple(dict.fromkeys((*current().zygote_preload, *modules)))

    def _agent_socket(self, paths: agent.AgentPaths) -> socket.socket:
        """A connection to the agent; start it first when none answers."""
        try:
            return _connect_unix(paths.socket)
        except OSError:
            pass
        spawn_lock = os.open(paths.lock.with_suffix(".spawn"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(spawn_lock, fcntl.LOCK_EX)  # one supervisor starts it, the other waits
            try:
                return _connect_unix(paths.socket)
            except OSError:
                pass
            log_fd = open_log(str(paths.log))
            # The socket in its environment marks the agent and every instance it forks as this
            # mission's (`mcc chaos`, test clean-up).
            env = {
                **child_env(agent_socket=paths.socket, zygote_preload=self._preload),
                "PYTHONUNBUFFERED": "1",
            }
            for key in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
                env.pop(key, None)  # systemd's notifications are the supervisor's unit's
            argv = paths.argv(orphan_s=self.orphan_s)
            try:
                subprocess.run(
                    argv, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd, env=env,
                    timeout=30, check=True,
                )  # fmt: skip
            except (OSError, subprocess.SubprocessError) as exc:
                raise OrchestratorError(
                    f"the node agent did not start ({exc}); see {paths.log}"
                ) from exc
            finally:
                os.close(log_fd)
            deadline = time.monotonic() + 30.0
            while True:
                try:
                    return _connect_unix(paths.socket)
                except OSError as exc:
                    if time.monotonic() > deadline:
                        raise OrchestratorError(
                            f"the node agent did not answer on {paths.socket} within 30 s "
                            f"({exc.strerror}); see {paths.log}"
                        ) from exc
                    time.sleep(0.02)
        finally:
            os.close(spawn_lock)

    def _leadership(self, reply: dict[str, Any]) -> Leadership:
        now = time.time_ns()
        instances = tuple(
            Running(str(i["id"]), int(i["pid"]), self._host, str(i["node"]), int(i["started_ns"]))
            for i in reply.get("instances") or []
        )
        exits = tuple(
            ExitEvent(str(e["exit"]), int(e["pid"]), e.get("returncode"), now)
            for e in reply.get("exits") or []
        )
        return Leadership(
            active=bool(reply.get("active")),
            epoch=int(reply.get("epoch") or 0),
            active_pid=int(reply.get("active_pid") or 0),
            instances=instances,
            state=reply.get("state"),
            exits=exits,
        )

    def _adopt(self, leadership: Leadership) -> None:
        """Under the lock: what runs now is what the agent says."""
        self._running = {r.instance_id: r for r in leadership.instances}
        self._exits.extend(leadership.exits)

    def claim(self, expect_epoch: int) -> bool:
        reply = self._ask({"op": "claim", "expect_epoch": expect_epoch}, "claimed", 2.0)
        return bool(reply is not None and reply.get("promoted"))

    def confirm(self, *, timeout_s: float = 1.0) -> bool:
        seq = next(self._seq)
        reply = self._ask({"op": "ping", "seq": seq}, "pong", timeout_s, key=seq)
        return reply is not None and self._active and reply.get("epoch") == self.epoch

    def save_state(self, state: Any) -> None:
        self._send({"op": "state", "state": state})

    @property
    def active(self) -> bool:
        return self._active

    def _ask(
        self, message: dict[str, Any], kind: str, timeout_s: float, *, key: Any = None
    ) -> dict[str, Any] | None:
        future: Future[dict[str, Any]] = Future()
        with self._lock:
            self._asks[(kind, key)] = future
        try:
            self._send(message)
            return future.result(timeout=timeout_s)
        except (OrchestratorError, TimeoutError, FutureTimeout):
            return None
        finally:
            with self._lock:
                self._asks.pop((kind, key), None)

    def _send(self, message: dict[str, Any]) -> None:
        sock = self._sock
        if sock is None:
            raise OrchestratorError("not connected to the node agent")
        with self._write_lock:
            try:
                sock.sendall((json.dumps(message) + "\n").encode())
            except OSError as exc:
                raise OrchestratorError(f"the node agent connection failed: {exc}") from exc

    def close(self, *, grace_s: float = 5.0) -> None:
        """Active: stop every instance (SIGTERM, SIGKILL after ``grace_s``), then tell the
        agent the mission is over (it exits). Standby: leave."""
        if not self._active:
            self.detach()
            self._close_lab()
            return
        with self._lock:
            ids = list(self._running)
        for instance_id in ids:
            self.stop(instance_id, grace_s=grace_s)
        deadline = time.monotonic() + grace_s + 2.0
        while self._running and time.monotonic() < deadline:
            time.sleep(0.02)
        for timer in list(self._kill_timers.values()):
            timer.cancel()
        self._closing = True
        with contextlib.suppress(OrchestratorError):
            self._send({"op": "shutdown"})
        if self._reader is not None:
            self._reader.join(12.0)  # the agent closes the connection when all are reaped
        self.detach()
        deadline = time.monotonic() + 5.0
        while self._agent_pid and _alive(self._agent_pid) and time.monotonic() < deadline:
            time.sleep(0.01)  # gone, not finalising: nothing of the mission outlives close()
        self._close_lab()

    def detach(self) -> None:
        """Leave the agent without stopping anything (a standby, a fenced supervisor)."""
        self._closing = True
        self._active = False
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(2.0)
        if self._sock_reader is not None:
            with contextlib.suppress(OSError):
                self._sock_reader.close()
            self._sock_reader = None

    # -- Backend protocol -------------------------------------------------------------

    def capacity(self) -> Mapping[str, float]:
        return {node.name: node_capacity(node) for node in self.nodes}

    def transport(self) -> Transport | None:
        return self._root_transport

    def cores(self) -> dict[str, list[int]]:
        return {node.name: node_cores(node) for node in self.nodes}

    def gpus(self) -> dict[str, list[int]]:
        detected = detect_gpus()
        return {node.name: node.gpus if node.gpus is not None else detected for node in self.nodes}

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise OrchestratorError(f"no node {name!r} in this backend")

    def start(self, spec: LaunchSpec) -> Running:
        if not self._connected.wait(15.0) or not self._active:
            raise OrchestratorError(
                "this supervisor is not the active one (or its node agent is gone)"
            )
        node = self._reachable(spec.node)
        if node != spec.node:
            log.warning(
                "%s: node %s is cut off; starting it on %s", spec.instance_id, spec.node, node
            )
            spec = dataclasses.replace(spec, node=node)
        env = child_env(spec.env, agent_socket=self.paths.socket, agent_orphan_s=self.orphan_s)
        if self._host_transport is not None and self._is_lab_node(node):
            # The node's network, with whatever else the instance's transport carries (its
            # DDS Security identity in a secured mission).
            own = Transport.from_env(env)
            host = dataclasses.replace(self._host_transport, extra_xml=own.extra_xml)
            env.update(host.apply_to_env({}))
        request: dict[str, Any] = {
            "op": "spawn",
            "id": spec.instance_id,
            "env": env,
            "log": spec.log_path,
            "cpu_set": list(spec.cpu_set),
            "priority": spec.priority,
            "memory_mb": spec.memory_mb,
            "netns": self._netns_of(node),
            "node": node,
        }
        if spec.confinement is not None:
            request["confine"] = spec.confinement.to_json()
        if spec.identity:  # the agent writes it into a private folder (`Agent.spawn`)
            request["identity"] = {
                name: base64.b64encode(content).decode("ascii")
                for name, content in spec.identity.items()
            }
        if spec.argv[1:3] == ("-m", RUNTIME_MODULE):
            request["app"], request["args"] = spec.argv[3], list(spec.argv[4:])
        else:
            request["argv"] = list(spec.argv)
        if spec.memory_mb and self._cgroup is not None:
            request["cgroup"] = str(
                self._cgroup / f"mcc.{self.mission}" / spec.instance_id.replace("/", ".")
            )
        private_dir(Path(spec.log_path).parent)  # logs are the user's only (the zygote: 0600)
        future: Future[Running] = Future()
        with self._lock:
            self._spawns[spec.instance_id] = (future, spec)
        try:
            self._send(request)
            return future.result(timeout=10.0)
        finally:
            with self._lock:
                self._spawns.pop(spec.instance_id, None)

    def stop(self, instance_id: str, *, grace_s: float) -> None:
        running = self._running.get(instance_id)
        if running is None:
            return
        self._signal(running, signal.SIGTERM)
        timer = threading.Timer(grace_s, self._kill_if_alive, args=(instance_id, running.pid))
        timer.daemon = True
        self._kill_timers[instance_id] = timer
        timer.start()

    def kill(self, instance_id: str) -> None:
        running = self._running.get(instance_id)
        if running is not None:
            self._signal(running, signal.SIGKILL)

    def _signal(self, running: Running, sig: int) -> None:
        """Through the agent: only the active supervisor's signals reach a process."""
        message = {"op": "signal", "id": running.instance_id, "pid": running.pid, "sig": sig}
        try:
            self._send(message)
        except OrchestratorError as exc:
            log.warning("%s: cannot signal it: %s", running.instance_id, exc)

    def poll(self) -> list[ExitEvent]:
        with self._lock:
            exits, self._exits = self._exits, []
        return exits

    def where(self, instance_id: str) -> Running | None:
        return self._running.get(instance_id)

    def warnings(self) -> list[Warning_]:
        with self._lock:
            warnings, self._warnings = self._warnings, []
        return warnings

    # -- internals --------------------------------------------------------------------

    def _kill_if_alive(self, instance_id: str, pid: int) -> None:
        running = self._running.get(instance_id)
        if running is not None and running.pid == pid:
            log.warning("%s did not stop within its grace period: SIGKILL", instance_id)
            self._signal(running, signal.SIGKILL)

    def _read_events(self) -> None:
        reader = self._sock_reader
        assert reader is not None
        while True:
            try:
                line = reader.readline(agent.MAX_LINE)
            except (OSError, ValueError):
                line = b""
            if not line:
                break
            try:
                event = json.loads(line)
            except ValueError:
                log.warning("the node agent sent %r", line[:200])
                continue
            self._on_agent_event(event)
        with self._lock:
            for future, _ in self._spawns.values():
                future.set_exception(OrchestratorError("the node agent connection closed"))
            self._spawns.clear()
        if self._closing or self._fenced:
            return
        self._reconnect()

    def _on_agent_event(self, event: dict[str, Any]) -> None:
        exited = False
        with self._lock:
            if "spawned" in event:
                pending = self._spawns.pop(event["spawned"], None)
                if pending is not None:
                    future, spec = pending
                    running = Running(
                        spec.instance_id, event["pid"], self._host, spec.node, time.time_ns()
                    )
                    self._running[spec.instance_id] = running  # before any exit event of it
                    future.set_result(running)
            elif "exit" in event:
                exited = True
                known = self._running.get(event["exit"])
                if known is not None and known.pid == event["pid"]:
                    del self._running[event["exit"]]
                timer = self._kill_timers.pop(event["exit"], None)
                if timer is not None:
                    timer.cancel()
                self._exits.append(
                    ExitEvent(event["exit"], event["pid"], event["returncode"], time.time_ns())
                )
            elif "warning" in event:
                self._warnings.append(Warning_(event["warning"], event["message"]))
            elif "error" in event:
                self._warnings.append(Warning_(str(event["error"]), event["message"]))
                pending = self._spawns.pop(str(event["error"]), None)
                if pending is not None:
                    pending[0].set_exception(OrchestratorError(event["message"]))
            elif "pong" in event:
                self._answer(("pong", event["pong"]), event)
            elif "claimed" in event:
                self._answer(("claimed", None), event)
        if exited and self.on_event is not None:
            self.on_event()
        if "promoted" in event:
            leadership = self._leadership(event["promoted"])
            with self._lock:
                self._active, self.epoch = True, leadership.epoch
                self._adopt(leadership)
            self._answer(("claimed", None), event)
            if self.on_promoted is not None:
                self.on_promoted(leadership)
        elif "fenced" in event and "op" not in event:
            self._fenced = True
            self._active = False
            if self.on_fenced is not None:
                self.on_fenced(int(event["fenced"]))
        elif "fenced" in event:
            log.warning("the node agent refused %s: this supervisor is fenced", event["op"])
        elif "shutdown" in event:
            self._closing = True
            if self.on_shutdown is not None:
                self.on_shutdown()

    def _answer(self, key: tuple[str, Any], event: dict[str, Any]) -> None:
        future = self._asks.get(key)
        if future is not None and not future.done():
            future.set_result(event)

    def _reconnect(self) -> None:
        """The node agent died: start another (it adopts the instances) and connect again."""
        self._connected.clear()
        was_active, epoch = self._active, self.epoch
        log.warning("the node agent %s is gone; starting another", self.paths.key)
        with self._lock:
            sock, reader = self._sock, self._sock_reader
            self._sock, self._sock_reader = None, None
        for closing in (reader, sock):  # the dead agent's connection, closed, not dropped
            if closing is not None:
                with contextlib.suppress(OSError):
                    closing.close()
        deadline = time.monotonic() + 30.0
        while not self._closing:
            try:
                leadership = self._connect(claim=was_active, expect_epoch=epoch)
            except (OrchestratorError, OSError) as exc:
                if time.monotonic() > deadline:
                    log.error("cannot reach a node agent: %s", exc)
                    self._connected.set()  # start() fails fast from now on
                    return
                time.sleep(0.1)
                continue
            if was_active and not leadership.active:
                self._fenced = True
                if self.on_fenced is not None:
                    self.on_fenced(leadership.epoch)
            elif leadership.active and self.on_event is not None:
                self.on_event()
            return


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _connect_unix(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        raise
    return sock
