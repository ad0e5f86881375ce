"""The Ray backend's actor: one instance on a Ray worker, its process, its exit code and the
tail of its output (`mcc.orchestrate.backends.ray` places and watches the actors).

The child gets ``PR_SET_PDEATHSIG = SIGKILL`` from the thread that spawned it and its own
session, so when the actor's worker dies (node loss, ``ray.kill``, the cluster stops), the
child dies with it. This module imports without Ray: the backend wraps `InstanceActor` with
``ray.remote``.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import ctypes.util
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mcc.errors import OrchestratorError
from mcc.files import MAX_STATE_BYTES
from mcc.orchestrate.limits import NICE_HIGH, RT_PRIORITY, apply_limits

log = logging.getLogger("mcc.orchestrate.ray")

TAIL_LINES = 200
_PR_SET_PDEATHSIG = 1
#: How often the actor looks whether its instance's state file changed (a stat).
STATE_POLL_S = 0.02


def import_ray() -> Any:
    """The Ray package (an absolute import: not the sibling module `backends/ray.py`, which
    imports this one; a reader of imports as text may draw a circle here that is not one)."""
    try:
        import ray
    except ImportError:
        raise OrchestratorError(
            "the ray backend needs Ray: pip install 'mcc[ray]' (or choose --backend local)"
        ) from None
    return ray


def _child_setup(
    libc: Any, parent: int, cores: Sequence[int], priority: str, memory_mb: int | None
) -> None:
    """In the child, between fork and exec: die with the parent, pin, prioritise, limit."""
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(137)
    # A Ray worker thread may block or ignore signals; exec keeps both, so reset them.
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.SIG_DFL)
    # Failures here are not fatal; the parent checks the outcome and warns (see _verify).
    with contextlib.suppress(OSError, ValueError):
        apply_limits(cores, priority, memory_mb, warn=lambda _message: None)


class InstanceActor:
    """One instance on a Ray worker: its process, its exit code and the tail of its output.

    Wrapped with ``ray.remote`` by the backend (this module imports without Ray). The
    constructor starts the process, so a restarted actor restarts the instance.
    """

    def __init__(
        self,
        instance_id: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        log_path: str,
        cpu_set: Sequence[int],
        priority: str,
        memory_mb: int | None,
        gpu_exclusive: bool,
        identity: Mapping[str, bytes] | None = None,
        meta: Mapping[str, Any] | None = None,
        epoch: int = 0,
    ) -> None:
        """``identity``: the instance's own (file name → content), written 0600 into a private
        folder of this node (`identity_folder`) for as long as the instance runs, named in its
        ``MCC_IDENTITY_DIR`` and readable through its confinement (nothing else of the node's
        ``MCC_HOME`` is). ``meta``: what a supervisor that adopts the actor needs to know of its
        start (its demand, its virtual cluster), returned by ``info``. ``epoch``: the fencing
        epoch of the supervisor that started it (see ``fence``)."""
        ray = import_ray()
        context = ray.get_runtime_context()
        self._id = instance_id
        self._node_id: str = context.get_node_id()
        self._node_ip: str = ray.util.get_node_ip_address()
        self._host = socket.gethostname()
        self._restarted = bool(context.was_current_actor_reconstructed)
        self._started_ns = time.time_ns()
        self._incarnation = f"{self._node_id}:{os.getpid()}:{self._started_ns}"
        self._raylet_pid = os.getppid()  # Ray workers are the raylet's children
        self._warnings: list[str] = []
        self._error = ""
        self._tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._exited = threading.Event()
        self._returncode = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._released = threading.Event()
        self._meta = dict(meta or {})
        self._fence = epoch  # signals of a supervisor of an older epoch are refused
        env = dict(env)
        if gpu_exclusive:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in ray.get_gpu_ids())
        self._identity_dir: Path | None = None
        if identity:
            argv = self._deliver(identity, argv, env)
        self._state = _CarriedState.of(instance_id, env)
        if self._state is not None:
            self._state.restore(self._warnings)
        cores = self._cores(cpu_set)
        spawned = threading.Event()
        keeper = threading.Thread(
            target=self._keep,
            args=(list(argv), env, log_path, cores, priority, memory_mb, spawned),
            name=f"mcc-instance-{instance_id}",
            daemon=True,
        )
        keeper.start()
        spawned.wait()

    def _deliver(
        self, identity: Mapping[str, bytes], argv: Sequence[str], env: dict[str, str]
    ) -> list[str]:
        """Write ``identity`` on this node, name it in ``env``; ``argv`` with its confinement
        (``python -m mcc.security.confine JSON -- ...``) reading that folder and hiding this
        node's ``MCC_HOME``."""
        from mcc.files import write_private_folder
        from mcc.orchestrate.registry import home
        from mcc.security.confine import CONFINE_MODULE
        from mcc.settings import env_name

        node_home = home()
        folder = node_home / "identities" / f"{self._id.replace('/', '.')}.{os.getpid()}"
        self._identity_dir = write_private_folder(folder, identity)
        env[env_name("identity_dir")] = str(folder)
        out = list(argv)
        if out[1:3] == ["-m", CONFINE_MODULE]:
            conf = json.loads(out[3])
            conf["readable"] = [*(conf.get("readable") or []), str(folder)]
            conf["hidden"] = list(dict.fromkeys([*(conf.get("hidden") or []), str(node_home)]))
            out[3] = json.dumps(conf)
        return out

    def _cores(self, cpu_set: Sequence[int]) -> list[int]:
        if not cpu_set:
            return []
        here = sorted(os.sched_getaffinity(0))
        cores = [c for c in cpu_set if c in here]
        missing = [c for c in cpu_set if c not in here]
        if missing:
            what = f"pinned to {cores}" if cores else "running unpinned"
            self._warnings.append(
                f"cores {missing} are not on Ray node {self._node_ip} (it has {here}); {what}"
            )
        return cores

    def _keep(
        self,
        argv: list[str],
        env: dict[str, str],
        log_path: str,
        cores: list[int],
        priority: str,
        memory_mb: int | None,
        spawned: threading.Event,
    ) -> None:
        # This thread spawns the child and lives until it exits: PR_SET_PDEATHSIG fires when
        # the *thread* that forked the child ends, so it must not be a pool thread of Ray's.
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        sink = self._open_log(log_path)
        parent = os.getpid()
        try:
            proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=lambda: _child_setup(libc, parent, cores, priority, memory_mb),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            self._error = f"cannot run {argv[0]!r}: {exc}"
            self._returncode = 127
            self._forget_identity()
            self._exited.set()
            spawned.set()
            if sink is not None:
                sink.close()
            return
        self._proc = proc
        self._verify(proc.pid, cores, priority)
        spawned.set()
        if self._state is not None:
            threading.Thread(
                target=self._state.carry, args=(self._exited,), name="mcc-state", daemon=True
            ).start()
        reader = threading.Thread(
            target=self._copy_output, args=(proc, sink), name="mcc-output", daemon=True
        )
        reader.start()
        code = proc.wait()
        # what the instance left in its process group goes with it
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if os.getppid() != self._raylet_pid:
            # The raylet died (node loss) and this worker, on its way out, killed its children
            # (Ray's kill_child_processes_on_worker_exit). Reporting that exit would read as the
            # instance's own; instead wait() stays blocked and is retried on the actor Ray
            # restarts elsewhere.
            return
        self._returncode = code
        self._forget_identity()
        self._exited.set()

    def _forget_identity(self) -> None:
        """The instance's identity leaves the node with it."""
        if self._identity_dir is not None:
            shutil.rmtree(self._identity_dir, ignore_errors=True)

    def _open_log(self, log_path: str) -> Any:
        try:
            os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
            return open(log_path, "ab", buffering=0)  # noqa: SIM115 (closed by the reader)
        except OSError as exc:
            self._warnings.append(
                f"cannot write the log {log_path} on {self._host} ({exc.strerror}); "
                "only the last lines are kept (RayBackend.tail)"
            )
            return None

    def _copy_output(self, proc: subprocess.Popen[bytes], sink: Any) -> None:
        assert proc.stdout is not None
        with proc.stdout:
            for line in proc.stdout:
                self._tail.append(line.decode(errors="replace").rstrip("\n"))
                if sink is not None:
                    try:
                        sink.write(line)
                    except OSError:
                        sink.close()
                        sink = None
        if sink is not None:
            sink.close()

    def _verify(self, pid: int, cores: list[int], priority: str) -> None:
        """Warn about what the child could not apply (it cannot report it itself)."""
        try:
            if cores and sorted(os.sched_getaffinity(pid)) != sorted(cores):
                self._warnings.append(f"cannot pin to cores {cores}; running unpinned")
            if priority == "realtime" and os.sched_getscheduler(pid) != os.SCHED_FIFO:
                self._warnings.append(
                    f"realtime priority (SCHED_FIFO {RT_PRIORITY}) not permitted on "
                    f"{self._host}; running at nice {NICE_HIGH} instead: grant CAP_SYS_NICE "
                    "or an rtprio limit (ulimit -r) to the user running the Ray worker"
                )
                priority = "high"
            if priority == "high" and os.getpriority(os.PRIO_PROCESS, pid) != NICE_HIGH:
                self._warnings.append(
                    f"high priority (nice {NICE_HIGH}) not permitted on {self._host}; "
                    "running at nice 0"
                )
        except ProcessLookupError:
            pass  # already gone: wait() tells

    # -- remote methods --------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        proc = self._proc
        return {
            "pid": proc.pid if proc is not None else 0,
            "host": self._host,
            "node_id": self._node_id,
            "node_ip": self._node_ip,
            "started_ns": self._started_ns,
            "incarnation": self._incarnation,
            "restarted": self._restarted,
            "warnings": list(self._warnings),
            "error": self._error,
            "meta": self._meta,
            "exited": self._exited.is_set(),
        }

    def fence(self, epoch: int) -> int:
        """From now on refuse the signals of supervisors older than ``epoch`` (an adopting
        supervisor calls it first); the fence now in force."""
        self._fence = max(self._fence, epoch)
        return self._fence

    def watch(self, incarnation: str) -> dict[str, Any]:
        """``info()`` once this actor is not ``incarnation``: returns after a restart.

        A call waiting here when the actor dies is retried on the restarted actor, where it
        returns at once with the new place.
        """
        if incarnation == self._incarnation:
            self._released.wait()
        return self.info()

    def release(self) -> None:
        """Let a waiting ``watch`` return, before the backend kills this actor on purpose."""
        self._released.set()

    def wait(self) -> int:
        """Block until the process exits; its return code (negative: killed by a signal)."""
        self._exited.wait()
        return self._returncode

    def terminate(self, grace_s: float, epoch: int = 0, incarnation: str | None = None) -> bool:
        """SIGTERM to the process group, SIGKILL after ``grace_s``; refused (False) when
        ``epoch`` is older than the fence (a supervisor that another one replaced) or the
        signal was meant for another ``incarnation`` (`_refused`)."""
        if self._refused(epoch, incarnation):
            return False
        if self._signal(signal.SIGTERM) and not self._exited.wait(grace_s):
            self._signal(signal.SIGKILL)
        return True

    def kill(self, epoch: int = 0, incarnation: str | None = None) -> bool:
        """SIGKILL to the process group; refused as `terminate` is."""
        if self._refused(epoch, incarnation):
            return False
        self._signal(signal.SIGKILL)
        return True

    def _refused(self, epoch: int, incarnation: str | None) -> bool:
        """A signal of an older supervisor, or one sent to the incarnation before this one:
        Ray retries an actor's calls on its restart, so a kill sent to an instance silent
        because its host was lost reached the instance Ray had just started elsewhere, and
        killed it (found on the container lab, the SAM TOC losing a worker host)."""
        return epoch < self._fence or (incarnation is not None and incarnation != self._incarnation)

    def tail(self, lines: int) -> list[str]:
        return list(self._tail)[-lines:]

    def _signal(self, sig: int) -> bool:
        proc = self._proc
        if proc is None or self._exited.is_set():
            return False
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return False
        except PermissionError:
            proc.send_signal(sig)
        return True


class _CarriedState:
    """An instance's state file (`mcc.files.instance_state_file`) kept in Ray's GCS (internal
    KV: in Redis with GCS fault tolerance) and written back on the host where Ray restarts the
    instance after a node loss, before it starts: a launcher moved by Ray still knows the
    orders it answered and the engagement it flies, TEWA the orders it holds. Without it the
    file stayed on the lost host and the instance started clean.

    The actor looks at the file every `STATE_POLL_S` and puts each new content: a save the
    instance made in the last few tens of milliseconds before its host was lost may not have
    travelled (the instance starts from the one before; a launcher then refuses an order
    replayed to it only by its age, ``max_order_age_s``)."""

    def __init__(self, path: Path, key: bytes) -> None:
        self.path = path
        self.key = key
        self.carried = 0  # contents put

    @classmethod
    def of(cls, instance_id: str, env: Mapping[str, str]) -> _CarriedState | None:
        from mcc.files import instance_state_file
        from mcc.settings import env_name

        run_dir = env.get(env_name("run_dir"))
        parts = instance_id.split("/")
        if not run_dir or len(parts) != 3:
            return None
        path = instance_state_file(run_dir, parts[1], parts[2])
        return cls(path, f"mcc-state:{run_dir}:{instance_id}".encode())

    def restore(self, warnings: list[str]) -> None:
        """The carried content into the file, unless this host's file is newer than it (the
        same host, a save not carried yet). The GCS holds the content behind the time it was
        read (8 bytes, ns: the hosts' clocks agree to far less than a save's period)."""
        from ray.experimental import internal_kv

        try:
            raw = internal_kv._internal_kv_get(self.key)
            if not raw or len(raw) < 8:
                return
            carried_ns = int.from_bytes(raw[:8], "little")
            with contextlib.suppress(FileNotFoundError):
                if self.path.stat().st_mtime_ns >= carried_ns:
                    return
            from mcc.files import write_private

            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_private(self.path, bytes(raw[8:]).decode())
        except Exception as exc:  # no GCS, no disk: the instance starts clean, and says so
            warnings.append(f"its state not restored from Ray's GCS: {exc}")

    def carry(self, exited: threading.Event) -> None:
        """Until the instance exits (and once more after), put each new content."""
        from ray.experimental import internal_kv

        seen: tuple[int, int] | None = None
        failed = False
        while True:
            done = exited.wait(STATE_POLL_S)
            try:
                st = self.path.stat()
                stamp = (st.st_mtime_ns, st.st_size)
                if stamp != seen and st.st_size <= MAX_STATE_BYTES:
                    read_ns = time.time_ns()
                    value = read_ns.to_bytes(8, "little") + self.path.read_bytes()
                    internal_kv._internal_kv_put(self.key, value, overwrite=True)
                    seen = stamp
                    self.carried += 1
            except FileNotFoundError:
                pass
            except Exception as exc:  # the GCS restarting: the next look tries again
                if not failed:
                    log.warning("%s: state not carried to Ray's GCS: %s", self.path, exc)
                failed = True
            if done:
                return


class MissionLeader:
    """Which supervisor of a mission commands on the Ray backend: one detached actor per mission
    (named ``LEADER`` in its namespace), outliving every supervisor.

    A supervisor says ``hello`` and is active if no other one holds the lease, else it stands
    by and asks again (``standby``) every ``POLL_S``; the active one renews the lease every
    ``POLL_S``. A lease not renewed for ``lease_s`` (the supervisor or its host is gone) passes to
    the next standby that asks, with the fencing epoch + 1; ``claim`` takes it at once (a
    standby that hears the mission but not the active one). Every answer names the epoch, and a
    supervisor whose epoch is not the current one is fenced: it learns it at its next renewal,
    and the instance actors refuse its signals (`InstanceActor.fence`). The desired state the
    active one leaves (``save``) and the epoch are kept in Ray's GCS (internal KV, in Redis with
    GCS fault tolerance), so a restarted leader (its node lost) goes on from them. With no
    supervisor for ``orphan_s`` the leader stops the mission: it kills the instances' actors.
    """

    def __init__(self, namespace: str, lease_s: float, orphan_s: float) -> None:
        self._key = f"mcc-leader:{namespace}".encode()
        self._namespace = namespace
        self._lease_s = lease_s
        self._orphan_s = orphan_s
        self._lock = threading.Lock()
        self._active = ""  # the active supervisor's token (pid@host/nonce)
        self._active_pid = 0
        self._renewed = 0.0
        self._epoch = 0
        self._state: Any = None
        self._shutdown = False
        self._renewed = time.monotonic()  # an orphan from now, unless a supervisor renews
        saved = self._load()
        if saved:
            self._epoch = int(saved.get("epoch", 0))
            self._state = saved.get("state")
            self._active = str(saved.get("active", ""))
            self._active_pid = int(saved.get("active_pid", 0))
        threading.Thread(target=self._reap, name="mcc-leader", daemon=True).start()

    def _kv(self) -> Any:
        from ray.experimental import internal_kv

        return internal_kv

    def _load(self) -> dict[str, Any] | None:
        try:
            raw = self._kv()._internal_kv_get(self._key)
        except Exception as exc:  # no GCS yet: start afresh
            log.warning("mission leader: cannot read its saved state: %s", exc)
            return None
        return json.loads(raw) if raw else None

    def _persist(self) -> None:
        record = {
            "epoch": self._epoch,
            "state": self._state,
            "active": self._active,
            "active_pid": self._active_pid,
        }
        try:
            self._kv()._internal_kv_put(self._key, json.dumps(record).encode(), overwrite=True)
        except Exception as exc:
            log.warning("mission leader: cannot save its state: %s", exc)

    def _answer(self, token: str) -> dict[str, Any]:
        return {
            "active": token == self._active,
            "epoch": self._epoch,
            "active_pid": self._active_pid,
            "state": self._state if token == self._active else None,
            "shutdown": self._shutdown,
        }

    def _take(self, token: str, pid: int) -> None:
        self._epoch += 1
        self._active, self._active_pid = token, pid
        self._renewed = time.monotonic()
        self._persist()

    def hello(self, token: str, pid: int) -> dict[str, Any]:
        """A supervisor arrives: active when nobody holds the lease, else standby."""
        with self._lock:
            if token != self._active and (
                not self._active or time.monotonic() - self._renewed > self._lease_s
            ):
                self._take(token, pid)
            return self._answer(token)

    standby = hello  # a standby asks again: promoted once the lease expired

    def renew(self, token: str, epoch: int) -> dict[str, Any]:
        """The active supervisor's lease, renewed while it is still the one of ``epoch``."""
        with self._lock:
            if token == self._active and epoch == self._epoch:
                self._renewed = time.monotonic()
            return self._answer(token)

    def claim(self, token: str, pid: int, expect_epoch: int) -> dict[str, Any]:
        """Take over at once if nothing changed since ``expect_epoch`` (compare-and-set)."""
        with self._lock:
            if expect_epoch == self._epoch and token != self._active:
                self._take(token, pid)
            return self._answer(token)

    def save(self, token: str, epoch: int, state: Any) -> bool:
        """The active supervisor's desired state, for the next one."""
        with self._lock:
            if token != self._active or epoch != self._epoch:
                return False
            self._state = state
            self._persist()
            return True

    def _reap(self) -> None:
        """No supervisor for ``orphan_s``: stop the mission (its instances' actors, this one)."""
        while True:
            time.sleep(1.0)
            with self._lock:
                if time.monotonic() - self._renewed <= self._orphan_s:
                    continue
            import ray

            log.warning(
                "mission %s: no supervisor for %g s: stopping it", self._namespace, self._orphan_s
            )
            for entry in ray.util.list_named_actors(all_namespaces=True):
                if entry["namespace"] == self._namespace and entry["name"] != LEADER:
                    with contextlib.suppress(Exception):
                        ray.kill(
                            ray.get_actor(entry["name"], namespace=self._namespace), no_restart=True
                        )
            for group in ray.util.placement_group_table().values():
                if str(group.get("name", "")).startswith(f"{self._namespace}/"):
                    with contextlib.suppress(Exception):
                        ray.util.remove_placement_group(ray.util.get_placement_group(group["name"]))
            with contextlib.suppress(Exception):
                self._kv()._internal_kv_del(self._key)
            ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
            return


#: The name of a mission's `MissionLeader` in its namespace (no instance id has no '/').
LEADER = "supervisor-leader"
