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
from mcc.orchestrate.limits import NICE_HIGH, RT_PRIORITY, apply_limits

log = logging.getLogger("mcc.orchestrate.ray")

TAIL_LINES = 200
_PR_SET_PDEATHSIG = 1


def import_ray() -> Any:
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
    ) -> None:
        """``identity``: the instance's own (file name → content), written 0600 into a private
        folder of this node (`identity_folder`) for as long as the instance runs, named in its
        ``MCC_IDENTITY_DIR`` and readable through its confinement (nothing else of the node's
        ``MCC_HOME`` is)."""
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
        env = dict(env)
        if gpu_exclusive:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in ray.get_gpu_ids())
        self._identity_dir: Path | None = None
        if identity:
            argv = self._deliver(identity, argv, env)
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
        }

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

    def terminate(self, grace_s: float) -> None:
        """SIGTERM to the process group, SIGKILL after ``grace_s``."""
        if self._signal(signal.SIGTERM) and not self._exited.wait(grace_s):
            self._signal(signal.SIGKILL)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

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
