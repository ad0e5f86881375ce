"""Confining an instance's process: it reads its own identity, never the keystore's CA keys.

An instance runs as the user that runs the mission, so file permissions cannot keep it from the
mission's keystore (the CA keys that mint identities), from other instances' identities or from
the node agent's token (which starts processes). Landlock (Linux 5.13+, unprivileged) can: a
process restricts itself, and its children, to the file hierarchies a rule grants, and the
kernel checks every open against the file reached, whatever path reached it (``..``, symlinks,
``/proc/PID/root``). A confined process also cannot ptrace, read the memory of or (Landlock ABI
6+) signal a process outside its domain, nor mount anything.

`Confinement` says what an instance may do: read and execute everything except the ``hidden``
folders, read the ``readable`` files (its identity, the CA certificates), and write only below
``writable`` (its run folder, temporary folders, a few devices, its own threads' ``/proc``
entries). Landlock grants, never denies, so "everything except" is written as rules on the
siblings of every folder on the way from ``/`` to a hidden one. A hidden folder below a
writable one cannot be hidden (a rule on the writable folder covers it): `apply` says so.

When the process has capabilities (a mission run as root), they are dropped too, bounding set
included: a root instance could otherwise read the keystore off the raw disk or load a module.

The Landlock system calls are called with ctypes here, by hand: the interface is three calls and
two structures, and no library for it is packaged for Debian.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# The Landlock system calls have the same numbers on every architecture (added in 5.13).
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
#: What a rule on a file (not a folder) may grant: execute, write, read, truncate, ioctl.
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | (1 << 14) | (1 << 15)
#: The file-system rights each Landlock ABI version knows (bits 0-12, REFER, TRUNCATE,
#: IOCTL_DEV).
_FS_RIGHTS = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1}
_FS_RIGHTS_LATEST = (1 << 16) - 1  # ABI 5 and later
_SCOPE_SIGNAL = 1 << 1  # ABI 6: no signal to a process outside the domain
READ_ONLY = EXECUTE | READ_FILE | READ_DIR

#: Devices an instance uses; the rest of ``/dev`` (disks, memory, ports) is hidden.
DEVICES = (
    "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty",
    "/dev/pts", "/dev/shm", "/dev/fd", "/dev/stdin", "/dev/stdout", "/dev/stderr",
)  # fmt: skip
_GPU_DEVICE_PREFIXES = ("nvidia", "dri", "kfd")

#: ``python -m CONFINE_MODULE JSON -- COMMAND...`` (`main`).
CONFINE_MODULE = "mcc.security.confine"

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


@dataclass(frozen=True)
class Confinement:
    """What a confined process may reach (absolute paths; missing ones are left out)."""

    hidden: tuple[str, ...] = ()
    readable: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()
    #: What was meant to be hidden but lies inside a writable folder (`instance_confinement`
    #: leaves it out of ``hidden``; the caller says so once).
    exposed: tuple[str, ...] = ()

    def to_json(self) -> str:
        return json.dumps(
            {"hidden": self.hidden, "readable": self.readable, "writable": self.writable}
        )

    @classmethod
    def from_json(cls, text: str) -> Confinement:
        data = json.loads(text)
        return cls(*(tuple(str(p) for p in data.get(k) or ()) for k in _KEYS))


_KEYS = ("hidden", "readable", "writable")


def landlock_abi() -> int:
    """The Landlock ABI version of the running kernel; 0 when it has none (or it is off)."""
    version = _libc.syscall(_SYS_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)
    return max(int(version), 0)


def instance_confinement(
    *,
    home: Path,
    run_dir: Path,
    identity_files: Iterable[Path] = (),
    temp_dirs: Iterable[str] = (),
) -> Confinement:
    """What an instance of a mission may reach: ``home`` (``$MCC_HOME``: keystores, agents'
    tokens, the console's users) and ``/dev`` hidden but for its ``identity_files`` (its
    certificate, key and permissions, the CA certificates, the governance) and the devices it
    uses; writing only in ``run_dir``, the ``temp_dirs``, ``/tmp`` and ``/dev/shm``."""
    devices = list(DEVICES)
    with contextlib.suppress(OSError):
        devices += [
            f"/dev/{name}" for name in os.listdir("/dev") if name.startswith(_GPU_DEVICE_PREFIXES)
        ]
    writable = tuple(dict.fromkeys([str(run_dir), "/tmp", *temp_dirs, *devices]))
    hidden = (str(home), "/dev")
    exposed = tuple(h for h in hidden if _inside_any(h, writable))
    return Confinement(
        hidden=tuple(h for h in hidden if h not in exposed),
        readable=tuple(str(p) for p in identity_files),
        writable=writable,
        exposed=exposed,
    )


def _inside_any(path: str, folders: Iterable[str]) -> str | None:
    """The first of ``folders`` that holds ``path`` (or is it), resolved; None if none."""
    real = _real(path)
    for folder in folders:
        top = _real(folder).rstrip("/")
        if real == top or real.startswith(top + "/"):
            return folder
    return None


def apply(confinement: Confinement) -> list[str]:
    """Confine this process (and what it starts) as ``confinement`` says, and drop its
    capabilities; what could not be done, as warnings (no Landlock: nothing is hidden).
    Call it in a process with one thread (Landlock restricts the calling thread and what it
    starts later)."""
    warnings = _drop_capabilities()
    abi = landlock_abi()
    if abi == 0:
        return [
            *warnings,
            "this kernel has no Landlock (Linux 5.13+ with lsm=landlock): the instance is not "
            "confined and can read the mission's keystore",
        ]
    handled = _FS_RIGHTS.get(abi, _FS_RIGHTS_LATEST)
    attr = _RulesetAttr(handled, 0, _SCOPE_SIGNAL if abi >= 6 else 0)
    size = ctypes.sizeof(attr) if abi >= 6 else 16  # older kernels refuse the scoped field
    ruleset = _libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), size, 0)
    if ruleset < 0:
        err = ctypes.get_errno()
        return [*warnings, f"Landlock refused a ruleset ({os.strerror(err)}): not confined"]
    try:
        warnings += _add_rules(int(ruleset), handled, confinement)
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if _libc.syscall(_SYS_RESTRICT_SELF, int(ruleset), 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_restrict_self: {os.strerror(err)}")
    finally:
        os.close(int(ruleset))
    return warnings


def _add_rules(ruleset: int, handled: int, conf: Confinement) -> list[str]:
    warnings = []
    hidden = {_real(p) for p in conf.hidden if os.path.lexists(p)}
    writable = {_real(p) for p in conf.writable if os.path.exists(p)}
    for h in sorted(hidden):
        holder = _inside_any(h, writable)
        if holder is not None:
            warnings.append(f"{h} is inside writable {holder}: it cannot be hidden")
    blocked = set(hidden)  # hidden folders and every folder above one
    for h in hidden:
        parent = os.path.dirname(h)
        while parent not in blocked:
            blocked.add(parent)
            if parent == "/":
                break
            parent = os.path.dirname(parent)
    for folder in sorted(blocked - hidden):
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            path = os.path.join(folder, entry.name)
            # A symlink is not granted: its target is reached (and checked) where it lives.
            if path not in blocked and not entry.is_symlink():
                _rule(ruleset, path, READ_ONLY & handled)
    if not hidden:
        _rule(ruleset, "/", READ_ONLY & handled)
    for path in conf.readable:
        if os.path.exists(path):
            _rule(ruleset, path, READ_ONLY & handled)
    for path in writable:
        _rule(ruleset, path, handled)
    # Its own threads' /proc entries: the CUDA driver names its threads there (cuInit fails
    # with CUDA_ERROR_OPERATING_SYSTEM without it, measured on an H200 host).
    _rule(ruleset, os.path.realpath("/proc/self/task"), handled)
    return warnings


def _rule(ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return  # gone since it was listed
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= _FILE_RIGHTS
        rule = _PathBeneathAttr(access, fd)
        if _libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_add_rule({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


def _real(path: str) -> str:
    return os.path.realpath(path)


def _drop_capabilities() -> list[str]:
    """No capability left, none to gain by exec (bounding set emptied): a mission run as root
    gets instances that cannot read raw disks, load modules or trace other processes."""
    if _capabilities_effective() == 0:
        return []
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    for cap in range(last + 1):
        if _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            return [f"cannot drop capability {cap} ({os.strerror(ctypes.get_errno())})"]
    _libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: all empty
    if _libc.capset(header, data) != 0:
        return [f"cannot drop capabilities ({os.strerror(ctypes.get_errno())})"]
    return []


def _capabilities_effective() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m mcc.security.confine CONFINEMENT_JSON -- COMMAND...``: confine, then run
    ``COMMAND`` in this process (for a launcher that cannot confine its child itself)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m mcc.security.confine JSON -- COMMAND...", file=sys.stderr)
        return 2
    try:
        confinement = Confinement.from_json(args[0])
    except (ValueError, AttributeError) as exc:
        print(f"mcc: error: confinement: not a confinement ({exc})", file=sys.stderr)
        return 2
    for message in apply(confinement):
        print(f"mcc: warning: {message}", file=sys.stderr, flush=True)
    command = args[2:]
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"mcc: cannot run {command[0]!r}: {exc.strerror}", file=sys.stderr, flush=True)
    return 127


if __name__ == "__main__":
    raise SystemExit(main())
