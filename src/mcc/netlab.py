"""Network lab: emulated hosts as Linux network namespaces on one bridge, with link faults.

>>> with NetLab(["h1", "h2"], name="demo") as lab:
...     proc = lab.popen("h1", ["mcc", "up", "missions/sam-toc.yaml"])
...     lab.netem("h2", loss_pct=10)     # h2's outgoing packets: 10 % lost
...     lab.partition("h2")              # h2 cut off the bridge, both directions
...     lab.heal("h2")                   # back on the bridge, no loss, no delay

Each host gets a namespace with ``lo`` and ``eth0`` (one end of a veth pair whose other end is a
port of the lab bridge), its own address and a multicast route, so Cyclone DDS discovery works
by multicast as on a real LAN. The bridge has no address in the root namespace: traffic stays
inside the lab. Needs root and ``ip`` (iproute2); delay needs the kernel's ``sch_netem`` (``tc``),
loss uses netem when the kernel has it and an nftables egress rule (``nft``) otherwise.

Names carry the owner's pid, so parallel labs never collide and :func:`cleanup_stale` can remove
what a crashed owner left behind: namespaces ``<prefix><lab>-<host>-<pid36>.<seq>`` and links
``<prefix><pid36>.<seq>b`` (bridge) / ``<prefix><pid36>.<seq>v<i>`` (host-side veth).
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mcc.errors import MccError
from mcc.lifecycle import Service

__all__ = [
    "Host",
    "NetLab",
    "NetLabError",
    "cleanup_stale",
    "netem_supported",
    "netns_available",
    "pick_subnet",
]

#: Interface name of every host's lab link inside its namespace.
LAB_IFACE = "eth0"
_IFNAMSIZ = 15
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,23}")
_CMD_TIMEOUT_S = 30.0
_NFT_TABLE = "mcclab"
_seq_lock = threading.Lock()
_seq = 0


class NetLabError(MccError):
    """A network lab cannot be built or changed (not root, no ``ip``, a command refused)."""


@dataclass(frozen=True)
class Host:
    """One emulated host: a network namespace on the lab bridge.

    Attributes:
        name: the host's name in the lab, e.g. ``"h1"``.
        netns: the namespace name (``ip netns list``).
        address: its IPv4 address on the lab subnet, e.g. ``"10.77.0.11"``.
        veth: the host-side interface (a port of the lab bridge), at most 15 characters.
    """

    name: str
    netns: str
    address: str
    veth: str


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        number, rem = divmod(number, 36)
        out = digits[rem] + out
        if number == 0:
            return out


def _run(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a network command; a refusal raises NetLabError naming the command and its stderr."""
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=_CMD_TIMEOUT_S, check=False
        )
    except FileNotFoundError as exc:
        raise NetLabError(
            f"{argv[0]!r} is not installed; install iproute2 (ip, tc) and nftables (nft)"
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise NetLabError(f"{' '.join(argv)} did not finish in {_CMD_TIMEOUT_S:g} s") from exc
    if check and proc.returncode != 0:
        raise NetLabError(
            f"{' '.join(argv)} failed (exit {proc.returncode}): {proc.stderr.strip()}"
        )
    return proc


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@functools.cache
def netns_available() -> str | None:
    """None when network namespaces can be made here, else the reason why not."""
    if os.geteuid() != 0:
        return "network namespaces need root (run as root, e.g. in CI or a container)"
    if shutil.which("ip") is None:
        return "the 'ip' tool is missing (apt-get install iproute2)"
    probe = f"mcc-probe-{os.getpid()}"
    made = _run(["ip", "netns", "add", probe], check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    _run(["ip", "netns", "del", probe], check=False)
    return None


@functools.cache
def netem_supported() -> bool:
    """Whether this kernel has the netem qdisc (``tc qdisc ... netem``); probed once, as root."""
    if netns_available() is not None or shutil.which("tc") is None:
        return False
    probe = f"mcc-probe-netem-{os.getpid()}"
    if _run(["ip", "netns", "add", probe], check=False).returncode != 0:
        return False
    try:
        made = _run(
            ["ip", "-n", probe, "link", "add", "a", "type", "veth", "peer", "name", "b"],
            check=False,
        )
        if made.returncode != 0:
            return False
        added = _run(
            ["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "a", "root", "netem"],
            check=False,
        )
        return added.returncode == 0
    finally:
        _run(["ip", "netns", "del", probe], check=False)


class NetLab(Service):
    """Emulated hosts (network namespaces) joined by one bridge: up on enter, down on exit.

    Args:
        hosts: host names (letters, digits, ``_``, ``-``), at most 99.
        name: the lab's name, part of every namespace name.
        subnet: IPv4 subnet of the lab; host ``i`` gets address ``.11 + i``.
        root_address: also give the bridge the subnet's first address (``.1``), so processes
            of the root namespace (a supervisor, ``mcc status``) join the lab network; the
            subnet must then be unused on this machine (`pick_subnet`).
    """

    def __init__(
        self,
        hosts: Sequence[str],
        *,
        name: str = "lab",
        subnet: str = "10.77.0.0/24",
        root_address: bool = False,
    ) -> None:
        global _seq
        if isinstance(hosts, str) or not hosts:
            raise NetLabError(f"NetLab hosts: {hosts!r} is invalid; give a list of host names")
        for host in [name, *hosts]:
            if not isinstance(host, str) or not _NAME.fullmatch(host):
                raise NetLabError(
                    f"NetLab name {host!r} is invalid; use 1-24 letters, digits, '_' or '-', "
                    "starting with a letter or digit"
                )
        if len(set(hosts)) != len(hosts):
            raise NetLabError(f"NetLab hosts: {list(hosts)} has duplicates; name each host once")
        if len(hosts) > 99:
            raise NetLabError(f"NetLab hosts: {len(hosts)} hosts; a lab holds at most 99")
        try:
            network = ipaddress.IPv4Network(subnet)
        except ValueError as exc:
            raise NetLabError(
                f"NetLab subnet: {subnet!r} is invalid ({exc}); e.g. 10.77.0.0/24"
            ) from exc
        if network.num_addresses < len(hosts) + 12:
            raise NetLabError(
                f"NetLab subnet: {subnet} is too small for {len(hosts)} hosts; use a /24"
            )
        with _seq_lock:
            seq = _seq
            _seq = (_seq + 1) % (36 * 36)
        self.name = name
        self._owner = f"{_base36(os.getpid())}.{_base36(seq)}"
        self.bridge = f"mcc-{self._owner}b"
        self._prefix_len = network.prefixlen
        self.subnet = str(network)
        self.root_address = str(network.network_address + 1) if root_address else None
        self._hosts = tuple(
            Host(
                name=host,
                netns=f"mcc-{name}-{host}-{self._owner}",
                address=str(network.network_address + 11 + i),
                veth=f"mcc-{self._owner}v{i}",
            )
            for i, host in enumerate(hosts)
        )
        self._by_name = {h.name: h for h in self._hosts}
        self._partitioned: set[str] = set()
        self._is_up = self._bridge_up = False

    # -- life cycle -----------------------------------------------------------------------------

    def start(self) -> NetLab:
        """`up` (``with NetLab(...) as lab``: up on entry, down on exit)."""
        return self.up()

    def stop(self) -> None:
        """`down`."""
        self.down()

    def up(self) -> NetLab:
        """Create the bridge and, per host, a namespace with a veth pair, address and routes."""
        reason = netns_available()
        if reason is not None:
            raise NetLabError(f"NetLab {self.name!r}: {reason}")
        self._is_up = self._bridge_up = True  # from here on down() removes whatever exists
        try:
            _run(["ip", "link", "add", self.bridge, "type", "bridge", "mcast_snooping", "0"])
            if self.root_address is not None:
                address = f"{self.root_address}/{self._prefix_len}"
                _run(["ip", "addr", "add", address, "dev", self.bridge])
            _run(["ip", "link", "set", self.bridge, "up"])
            for host in self._hosts:
                self._add_host(host)
        except BaseException:
            self.down()
            raise
        return self

    def _add_host(self, host: Host) -> None:
        ns = host.netns
        _run(["ip", "netns", "add", ns])
        _run(
            ["ip", "link", "add", host.veth, "type", "veth", "peer", "name", LAB_IFACE, "netns", ns]
        )
        _run(["ip", "link", "set", host.veth, "master", self.bridge, "up"])
        _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        _run(
            ["ip", "-n", ns, "addr", "add", f"{host.address}/{self._prefix_len}", "dev", LAB_IFACE]
        )
        _run(["ip", "-n", ns, "link", "set", LAB_IFACE, "up", "multicast", "on"])
        # without a route a multicast send fails (ENETUNREACH): the namespace has no default route
        _run(["ip", "-n", ns, "route", "add", "224.0.0.0/4", "dev", LAB_IFACE])

    def down(self) -> None:
        """Remove every namespace, veth and the bridge of this lab; idempotent."""
        self.remove_hosts()
        if self._bridge_up:
            _delete_link(self.bridge)
            self._bridge_up = False

    def remove_hosts(self) -> None:
        """Remove the hosts but keep the bridge (and its root address) until :meth:`down`:
        a root-namespace process may still send on it before it closes its sockets."""
        if not self._is_up:
            return
        for host in self._hosts:
            _delete_link(host.veth)
            _delete_netns(host.netns)
        self._partitioned.clear()
        self._is_up = False

    # -- hosts ----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """What another process needs to :meth:`attach` to this lab (``mcc chaos``)."""
        return {
            "name": self.name,
            "owner_pid": os.getpid(),
            "bridge": self.bridge,
            "subnet": self.subnet,
            "root_address": self.root_address,
            "hosts": [vars(h) for h in self._hosts],
        }

    @classmethod
    def attach(cls, data: dict[str, Any]) -> NetLab:
        """A handle on a lab that another process made: faults work, ``down()`` does nothing."""
        try:
            hosts = [Host(**h) for h in data["hosts"]]
            lab = cls([h.name for h in hosts], name=data["name"], subnet=data["subnet"])
            lab.bridge = data["bridge"]
            lab.root_address = data.get("root_address")
        except (KeyError, TypeError) as exc:
            raise NetLabError(f"not a NetLab description ({exc}): {data!r}") from exc
        lab._hosts = tuple(hosts)
        lab._by_name = {h.name: h for h in hosts}
        return lab

    def is_partitioned(self, name: str) -> bool:
        """Whether host ``name`` is cut off the bridge (by this or any other process)."""
        veth = self.host(name).veth
        return not os.path.exists(f"/sys/class/net/{veth}/master")

    @property
    def hosts(self) -> tuple[Host, ...]:
        """The lab's hosts, in the order given."""
        return self._hosts

    def host(self, name: str) -> Host:
        """The host called ``name``; NetLabError naming the known hosts otherwise."""
        try:
            return self._by_name[name]
        except KeyError:
            known = ", ".join(self._by_name)
            raise NetLabError(
                f"NetLab {self.name!r}: no host {name!r}; hosts are {known}"
            ) from None

    def exec_argv(self, name: str, argv: Sequence[str]) -> list[str]:
        """``argv`` prefixed to run inside host ``name``: ``["ip", "netns", "exec", ns, *argv]``."""
        return ["ip", "netns", "exec", self.host(name).netns, *argv]

    def popen(self, name: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside host ``name`` (``subprocess.Popen`` keyword arguments apply)."""
        return subprocess.Popen(self.exec_argv(name, argv), **kwargs)

    # -- faults ---------------------------------------------------------------------------------

    def netem(
        self, name: str, *, delay_ms: float = 0, jitter_ms: float = 0, loss_pct: float = 0
    ) -> None:
        """Set delay (± jitter) and random loss on host ``name``'s outgoing lab traffic.

        Replaces the previous setting; all zero removes it. Uses ``tc netem`` where the kernel
        has it; otherwise loss is an nftables egress rule and a delay raises NetLabError.
        """
        host = self.host(name)
        for field, value, top in (
            ("delay_ms", delay_ms, 60_000.0),
            ("jitter_ms", jitter_ms, 60_000.0),
            ("loss_pct", loss_pct, 100.0),
        ):
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not 0 <= value <= top
            ):
                raise NetLabError(f"NetLab.netem {field}: {value!r} is invalid; use 0..{top:g}")
        if jitter_ms and not delay_ms:
            raise NetLabError("NetLab.netem jitter_ms: a jitter needs a delay_ms above 0")
        self._clear_netem(host)
        if not (delay_ms or loss_pct):
            return
        if netem_supported():
            argv = ["tc", "qdisc", "replace", "dev", LAB_IFACE, "root", "netem"]
            if delay_ms:
                argv += ["delay", f"{delay_ms:g}ms"] + ([f"{jitter_ms:g}ms"] if jitter_ms else [])
            if loss_pct:
                argv += ["loss", f"{loss_pct:g}%"]
            _run(self.exec_argv(name, argv))
            return
        if delay_ms:
            raise NetLabError(
                f"NetLab.netem delay_ms={delay_ms:g}: this kernel has no netem qdisc (sch_netem), "
                "so delay cannot be emulated here; use a kernel with CONFIG_NET_SCH_NETEM, or "
                "emulate loss only (loss_pct works through nftables)"
            )
        if shutil.which("nft") is None:
            raise NetLabError(
                "NetLab.netem loss_pct: this kernel has no netem qdisc and 'nft' is missing; "
                "apt-get install nftables"
            )
        # the egress hook sits after the local multicast loopback: traffic inside the host is
        # untouched, as with netem on eth0
        script = (
            f"table netdev {_NFT_TABLE} {{\n"
            f"  chain egress {{ type filter hook egress device {LAB_IFACE} priority 0;\n"
            f"    numgen random mod 10000 < {round(loss_pct * 100)} drop\n"
            "  }\n}\n"
        )
        self._nft(name, script)

    def partition(self, name: str) -> None:
        """Cut host ``name`` off the bridge (both directions); its own traffic keeps flowing."""
        host = self.host(name)
        _run(["ip", "link", "set", host.veth, "nomaster"])
        self._partitioned.add(name)

    def heal(self, name: str) -> None:
        """Undo :meth:`partition` and :meth:`netem` for host ``name``."""
        host = self.host(name)
        _run(["ip", "link", "set", host.veth, "master", self.bridge])
        self._partitioned.discard(name)
        self._clear_netem(host)

    def _clear_netem(self, host: Host) -> None:
        _run(
            self.exec_argv(host.name, ["tc", "qdisc", "del", "dev", LAB_IFACE, "root"]), check=False
        )
        if shutil.which("nft") is not None:
            _run(
                self.exec_argv(host.name, ["nft", "delete", "table", "netdev", _NFT_TABLE]),
                check=False,
            )

    def _nft(self, name: str, script: str) -> None:
        argv = self.exec_argv(name, ["nft", "-f", "-"])
        proc = subprocess.run(
            argv, input=script, capture_output=True, text=True, timeout=_CMD_TIMEOUT_S, check=False
        )
        if proc.returncode != 0:
            raise NetLabError(f"{' '.join(argv)} refused {script!r}: {proc.stderr.strip()}")


def pick_subnet(base: str = "10.78.0.0/16", prefix_len: int = 24) -> str:
    """The first ``/prefix_len`` of ``base`` that no interface of this namespace uses."""
    used = []
    for line in _run(["ip", "-o", "-4", "addr", "show"], check=False).stdout.splitlines():
        match = re.search(r"inet (\S+)", line)
        if match:
            used.append(ipaddress.IPv4Interface(match.group(1)).network)
    for candidate in ipaddress.IPv4Network(base).subnets(new_prefix=prefix_len):
        if not any(candidate.overlaps(net) for net in used):
            return str(candidate)
    raise NetLabError(f"no free /{prefix_len} left in {base}; remove stale labs (cleanup_stale)")


def _delete_link(name: str) -> bool:
    """Delete interface ``name`` in the root namespace; False when it did not exist."""
    return _run(["ip", "link", "del", name], check=False).returncode == 0


def _delete_netns(name: str) -> bool:
    return _run(["ip", "netns", "del", name], check=False).returncode == 0


def cleanup_stale(prefix: str = "mcc-") -> list[str]:
    """Remove the namespaces and links of labs whose owner process is dead; return their names.

    Labs of live processes (parallel tests, a running supervisor) are left alone.
    """
    if netns_available() is not None:
        return []
    owner = r"(?P<pid>[0-9a-z]+)\.(?P<seq>[0-9a-z]+)"
    link_re = re.compile(rf"{re.escape(prefix)}{owner}[bv]\d*")
    netns_re = re.compile(rf"{re.escape(prefix)}.+-{owner}")
    removed: list[str] = []
    links = _run(["ip", "-o", "link", "show"], check=False).stdout
    names = [m.group(1) for m in re.finditer(r"^\d+:\s+([^:@\s]+)", links, re.MULTILINE)]
    # veths first (their namespace ends lose their peer), bridges last
    for name in sorted(names, key=lambda n: n.endswith("b")):
        match = link_re.fullmatch(name)
        if match and not pid_alive(int(match["pid"], 36)) and _delete_link(name):
            removed.append(name)
    listing = _run(["ip", "netns", "list"], check=False).stdout
    for line in listing.splitlines():
        name = line.split(" ", 1)[0].strip()
        match = netns_re.fullmatch(name)
        if match and not pid_alive(int(match["pid"], 36)) and _delete_netns(name):
            removed.append(name)
    return removed
