"""Forking warm instances: they start in milliseconds, not in 0.7 s.

Starting Python and importing numpy and cyclonedds costs about 0.7 s of CPU per process; on a
2-core node, 32 workers would take 10 s and a replacement after a crash would be slower than
the failover target. The node agent (`mcc.orchestrate.agent`) imports the runtime once
(`warm_up`, `preload`), then forks a child per instance, which applies its limits here
(`apply_limits`) and runs its app or executes its command (`_child`). The agent creates no DDS
entity and no thread before forking, so the child starts clean.

An app instance does not die with its agent: a new agent adopts it. A ``command`` instance (a
foreign binary, with no MCC watchdog in it) dies with its agent (PR_SET_PDEATHSIG) and is
restarted by the supervisor.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import mcc.orchestrate.runtime as runtime  # the point: imported once, before forking
from mcc.orchestrate import limits
from mcc.security import confine
from mcc.settings import current

_PR_SET_PDEATHSIG = 1
_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent dies."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _emit(fd: int, event: dict[str, Any]) -> None:
    os.write(fd, (json.dumps(event) + "\n").encode())


def apply_limits(request: dict[str, Any], report: int) -> None:
    """In the child: CPU affinity, priority, memory limit, network namespace, confinement."""
    instance_id = request["id"]

    def warn(message: str) -> None:
        _emit(report, {"warning": instance_id, "message": message})
        print(f"mcc: warning: {message}", file=sys.stderr, flush=True)

    memory_mb = request.get("memory_mb")
    if memory_mb:
        cgroup = request.get("cgroup")
        if cgroup:
            try:
                Path(cgroup).mkdir(parents=True, exist_ok=True)
                (Path(cgroup) / "memory.max").write_text(f"{memory_mb * 2**20}\n")
                (Path(cgroup) / "cgroup.procs").write_text(f"{os.getpid()}\n")
                memory_mb = None
            except OSError as exc:
                warn(f"cgroup {cgroup} not usable ({exc.strerror}); limiting with RLIMIT_DATA")
    limits.apply_limits(
        request.get("cpu_set") or [], request.get("priority", "normal"), memory_mb, warn=warn
    )
    netns = request.get("netns")
    if netns:
        enter_netns(netns)
    if request.get("confine"):  # last: what came before needed /run/netns and the cgroup
        for message in confine.apply(confine.Confinement.from_json(request["confine"])):
            warn(message)


def enter_netns(name: str) -> None:
    """Move this (single-threaded) process into network namespace ``name`` (``ip netns``).

    Threads and sockets made afterwards live there; sockets made before stay where they were,
    so this runs before the app opens its bus. Needs CAP_SYS_ADMIN (root).
    """
    path = f"/run/netns/{name}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise OSError(
            exc.errno, f"network namespace {name!r} ({path}): {exc.strerror}; see `ip netns list`"
        ) from None
    try:
        if _libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}) failed: {os.strerror(err)} (needs root)")
    finally:
        os.close(fd)


def open_log(path: str) -> int:
    """An instance's log for appending, readable by its user only (0600, a log left wider by
    an earlier run included); never through a symlink."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    try:
        os.fchmod(fd, 0o600)
    except OSError:
        os.close(fd)
        raise
    return fd


def _child(request: dict[str, Any], report: int, inherited: list[int]) -> int:
    """Runs in the forked child; never returns to the zygote loop."""
    os.setsid()
    if not request.get("app"):
        die_with_parent()
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    try:
        log = open_log(request["log"])
    except OSError as exc:
        _emit(report, {"error": request["id"], "message": f"cannot open its log: {exc}"})
        return 126
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    for fd in (log, devnull, *inherited):
        os.close(fd)
    try:
        apply_limits(request, report)
    except OSError as exc:
        _emit(report, {"error": request["id"], "message": f"cannot apply limits: {exc}"})
        return 126
    finally:
        os.close(report)
    env = request["env"]
    if request.get("app"):
        os.environ.clear()
        os.environ.update(env)
        sys.argv = ["mcc.orchestrate.runtime", request["app"], *request.get("args", [])]
        code = runtime.main([request["app"], *request.get("args", [])])
        sys.stdout.flush()
        sys.stderr.flush()
        return code
    argv = request["argv"]
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        print(f"mcc: cannot run {argv[0]!r}: {exc.strerror}", file=sys.stderr, flush=True)
    return 127


def preload() -> None:
    """Import what the mission apps import, once: a restart need not pay for it."""
    for module in current().zygote_preload:
        if module:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                print(f"mcc agent: cannot preload {module}: {exc}", file=sys.stderr)


def warm_up() -> None:
    """Do once what every instance would do first: ~150 ms of CPU each, 5 s for 32 workers.

    Building a topic type's XTypes description (the first costs ~110 ms), parsing the QoS
    library and numpy's first percentile are cached in this process and inherited by forks.
    """
    import numpy as np

    from mcc.bus.qos import default_library
    from mcc.bus.topics import TOPICS

    default_library()
    for spec in TOPICS.values():
        spec.type.__idl__.get_type_info()  # type: ignore[attr-defined]
    np.percentile([0.0], [50, 99])
