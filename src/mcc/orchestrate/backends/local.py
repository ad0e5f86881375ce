"""The local backend: each instance is its own OS process, forked from a warm zygote.

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
Every process has its own session, so stop/kill reach the whole process group, and dies
with the zygote, which dies with the supervisor: no orphans, even after a ``kill -9`` of
``mcc up``.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from mcc.bus.transport import Transport
from mcc.errors import OrchestratorError
from mcc.netlab import LAB_IFACE, NetLab, NetLabError, cleanup_stale, pick_subnet
from mcc.orchestrate.backends.base import ExitEvent, LaunchSpec, Running, Warning_
from mcc.orchestrate.manifest import Node
from mcc.orchestrate.registry import home, private_dir, write_private

log = logging.getLogger("mcc.orchestrate.local")
RUNTIME_MODULE = "mcc.orchestrate.runtime"
#: The fork server's module: it runs as ``python -m FORK_SERVER`` (how `mcc chaos` knows it).
FORK_SERVER = "mcc.orchestrate.zygote"


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
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
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


class LocalBackend:
    """Processes on this host, started by a fork server (``mcc.orchestrate.zygote``)."""

    name = "local"

    def __init__(self, nodes: Sequence[Node] = (), *, mission: str = "mcc") -> None:
        self.nodes = list(nodes) or [Node(name="local")]
        self.mission = mission
        self._zygote: subprocess.Popen[bytes] | None = None
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
        self.on_event: Any = None  # set by the supervisor: called (no args) on every exit
        self.lab: NetLab | None = None
        self._lab_file: Path | None = None
        self._host_transport: Transport | None = None
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
        os.environ.update(dataclasses.replace(lab_transport, interface=lab.bridge).apply_to_env({}))
        self._host_transport = dataclasses.replace(lab_transport, interface=LAB_IFACE)
        self._lab_file = private_dir(home() / "netlab") / f"{self.mission}.json"
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

    # -- lifecycle -------------------------------------------------------------------

    def open(self) -> None:
        """Start the zygote and wait until it has imported the runtime."""
        for node in self.nodes:
            node_cores(node)  # fail early on cores this host lacks
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self._zygote = subprocess.Popen(
            [sys.executable, "-m", FORK_SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        assert self._zygote.stdout is not None
        first = self._zygote.stdout.readline()
        if not first.startswith(b'{"ready"'):
            self._zygote.kill()
            self._zygote.wait()
            raise OrchestratorError(
                f"the local backend's fork server did not start (said {first!r}); "
                "run `python -m mcc.orchestrate.zygote` to see why"
            )
        self._reader = threading.Thread(target=self._read_events, name="mcc-zygote", daemon=True)
        self._reader.start()

    def close(self, *, grace_s: float = 5.0) -> None:
        """Stop every instance (SIGTERM, SIGKILL after ``grace_s``) and the zygote."""
        with self._lock:
            ids = list(self._running)
        for instance_id in ids:
            self.stop(instance_id, grace_s=grace_s)
        deadline = time.monotonic() + grace_s + 2.0
        while self._running and time.monotonic() < deadline:
            time.sleep(0.02)
        for timer in list(self._kill_timers.values()):
            timer.cancel()
        if self._zygote is not None:
            assert self._zygote.stdin is not None
            self._zygote.stdin.close()  # the zygote kills what is left, reaps, exits
            try:
                self._zygote.wait(5.0)
            except subprocess.TimeoutExpired:
                self._zygote.kill()
                self._zygote.wait()
            if self._reader is not None:
                self._reader.join(2.0)
            assert self._zygote.stdout is not None
            self._zygote.stdout.close()
            self._zygote = None
        self._close_lab()

    # -- Backend protocol -------------------------------------------------------------

    def capacity(self) -> Mapping[str, float]:
        return {node.name: node_capacity(node) for node in self.nodes}

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
        if self._zygote is None or self._zygote.poll() is not None:
            raise OrchestratorError("the local backend is not open (or its fork server died)")
        node = self._reachable(spec.node)
        if node != spec.node:
            log.warning(
                "%s: node %s is cut off; starting it on %s", spec.instance_id, spec.node, node
            )
            spec = dataclasses.replace(spec, node=node)
        env = dict(spec.env)
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
        assert self._zygote.stdin is not None
        with self._write_lock:
            self._zygote.stdin.write((json.dumps(request) + "\n").encode())
            self._zygote.stdin.flush()
        return future.result(timeout=10.0)

    def stop(self, instance_id: str, *, grace_s: float) -> None:
        running = self._running.get(instance_id)
        if running is None:
            return
        _signal_group(running.pid, signal.SIGTERM)
        timer = threading.Timer(grace_s, self._kill_if_alive, args=(instance_id, running.pid))
        timer.daemon = True
        self._kill_timers[instance_id] = timer
        timer.start()

    def kill(self, instance_id: str) -> None:
        running = self._running.get(instance_id)
        if running is not None:
            _signal_group(running.pid, signal.SIGKILL)

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
            _signal_group(pid, signal.SIGKILL)

    def _read_events(self) -> None:
        assert self._zygote is not None and self._zygote.stdout is not None
        for line in self._zygote.stdout:
            event = json.loads(line)
            with self._lock:
                if "spawned" in event:
                    future, spec = self._spawns.pop(event["spawned"])
                    running = Running(
                        spec.instance_id, event["pid"], self._host, spec.node, time.time_ns()
                    )
                    self._running[spec.instance_id] = running  # before any exit event of it
                    future.set_result(running)
                elif "exit" in event:
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
                    self._warnings.append(Warning_(event["error"], event["message"]))
            if "exit" in event and self.on_event is not None:
                self.on_event()
        with self._lock:  # the zygote is gone: every instance with it
            for future, _ in self._spawns.values():
                future.set_exception(OrchestratorError("the fork server exited"))
            self._spawns.clear()


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        os.kill(pid, sig)
