"""A lab of container hosts: N containers of the MCC image on one podman bridge network.

>>> with ContainerLab(3, name="demo") as lab:
...     lab.exec("h1", ["mcc", "up", "/lab/mission.yaml"], detach=True)
...     lab.exec("h2", ["mcc", "status", "--domain", "7", "--identity", "/lab/op.mcc-identity"])
...     lab.netem("h2", delay_ms=20, loss_pct=1)  # h2's outgoing packets

Each host is a container of ``localhost/mcc-core`` (``make images``: MCC installed from the
wheels, not the checkout) with its own filesystem, hostname (``h1`` …), address on the lab's
bridge (``podman network create``: multicast reaches every host, so Cyclone DDS discovers across
them as on a LAN) and ``$MCC_HOME`` (``/var/lib/mcc``, the image's non-root user). Containers get
``NET_ADMIN`` so that ``tc netem`` can delay or drop their outgoing packets; `partition` cuts
a host off (nftables, set from this machine: it needs no netem).

Every container and network carries the label ``mcc.lab`` (the lab's name) and ``mcc.lab.owner``
(the owning process, ``PID@HOST``): a lab is removed when its owner leaves the ``with`` block, and
:func:`cleanup_stale` removes the labs whose owner died (a crashed test run). A lab made by
``python -m mcc.lab up`` has the owner ``cli`` and stays until ``python -m mcc.lab down NAME``.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mcc.lab.podman import PodmanError, podman

__all__ = ["CORE_IMAGE", "ContainerLab", "LabHost", "cleanup_stale", "labs"]

CORE_IMAGE = "localhost/mcc-core:latest"
LABEL = "mcc.lab"
OWNER = "mcc.lab.owner"
_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,23}")
MAX_HOSTS = 32
_CUT_TABLE = "mcc_lab_cut"  # `ContainerLab.partition`'s nftables table


@dataclass(frozen=True)
class LabHost:
    """One container host: its lab name (``h1``), container name and bridge address."""

    name: str
    container: str
    address: str


def _owner() -> str:
    return f"{os.getpid()}@{socket.gethostname()}"


def _owner_alive(owner: str) -> bool:
    if owner == "cli":
        return True
    pid, _, host = owner.partition("@")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine's: not ours to judge
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def labs() -> dict[str, str]:
    """The labs on this machine: name → owner."""
    found: dict[str, str] = {}
    proc = podman(["network", "ls", "--format", "json", "--filter", f"label={LABEL}"])
    for net in json.loads(proc.stdout or "[]"):
        labels = net.get("labels") or {}
        found[labels.get(LABEL, net["name"])] = labels.get(OWNER, "")
    proc = podman(["ps", "-a", "--format", "json", "--filter", f"label={LABEL}"])
    for ctr in json.loads(proc.stdout or "[]"):
        labels = ctr.get("Labels") or {}
        found.setdefault(labels.get(LABEL, ""), labels.get(OWNER, ""))
    return found


def remove(name: str) -> None:
    """Remove lab ``name``: its containers (killed at once), then its network."""
    podman(
        ["rm", "--force", "--time", "0", "--filter", f"label={LABEL}={name}"],
        check=False,
        timeout_s=120,
    )
    proc = podman(["ps", "-a", "-q", "--filter", f"label={LABEL}={name}"], check=False)
    for ctr in proc.stdout.split():
        podman(["rm", "--force", "--time", "0", ctr], check=False, timeout_s=60)
    podman(["network", "rm", "--force", f"mcclab-{name}"], check=False, timeout_s=60)


def cleanup_stale() -> list[str]:
    """Remove the labs whose owning process is gone; returns their names."""
    stale = [name for name, owner in labs().items() if not _owner_alive(owner)]
    for name in stale:
        remove(name)
    return stale


class ContainerLab:
    """``hosts`` containers of ``image`` on a new bridge: up on enter, removed on exit.

    Args:
        hosts: how many hosts (``h1`` … ``hN``), 1 to 32.
        name: the lab's name (lowercase letters, digits, ``-``); the network is ``mcclab-NAME``
            and the containers ``mcclab-NAME-hI``.
        image: the image of every host.
        owner: who removes it: this process (default), or ``"cli"`` for a lab that outlives
            the command that made it.
    """

    def __init__(
        self, hosts: int, *, name: str = "lab", image: str = CORE_IMAGE, owner: str | None = None
    ) -> None:
        if isinstance(hosts, bool) or not isinstance(hosts, int) or not 1 <= hosts <= MAX_HOSTS:
            raise PodmanError(f"ContainerLab hosts: {hosts!r} is invalid; give 1 to {MAX_HOSTS}")
        if not _NAME.fullmatch(name):
            raise PodmanError(
                f"ContainerLab name: {name!r} is invalid; use 1-24 lowercase letters, digits "
                "or '-', starting with a letter or digit"
            )
        self.name = name
        self.image = image
        self.network = f"mcclab-{name}"
        self.owner = owner or _owner()
        self.hosts: dict[str, LabHost] = {}
        self._count = hosts

    def _labels(self) -> list[str]:
        return ["--label", f"{LABEL}={self.name}", "--label", f"{OWNER}={self.owner}"]

    def up(self) -> ContainerLab:
        cleanup_stale()
        if podman(["image", "exists", self.image], check=False).returncode != 0:
            raise PodmanError(f"image {self.image} is not built: run `make images`")
        if self.name in labs():
            raise PodmanError(
                f"a lab named {self.name!r} exists: `python -m mcc.lab down {self.name}`, or "
                "choose another name"
            )
        try:
            podman(["network", "create", *self._labels(), self.network])
            for i in range(1, self._count + 1):
                host = f"h{i}"
                container = f"{self.network}-{host}"
                podman(
                    [
                        "run",
                        "--detach",
                        "--name",
                        container,
                        "--hostname",
                        host,
                        "--network",
                        self.network,
                        "--cap-add",
                        "NET_ADMIN",
                        *self._labels(),
                        "--entrypoint",
                        "sleep",
                        self.image,
                        "infinity",
                    ],
                    timeout_s=120,
                )
                self.hosts[host] = LabHost(host, container, self._address(container))
        except BaseException:
            self.down()
            raise
        return self

    def _address(self, container: str) -> str:
        proc = podman(["inspect", "--format", "{{json .NetworkSettings.Networks}}", container])
        address = json.loads(proc.stdout)[self.network]["IPAddress"]
        if not address:
            raise PodmanError(f"{container} has no address on {self.network}")
        return str(address)

    def down(self) -> None:
        remove(self.name)
        self.hosts.clear()

    def __enter__(self) -> ContainerLab:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    def host(self, name: str) -> LabHost:
        try:
            return self.hosts[name]
        except KeyError:
            raise PodmanError(
                f"lab {self.name}: no host {name!r} (hosts: {sorted(self.hosts)})"
            ) from None

    def exec(
        self,
        host: str,
        argv: Sequence[str],
        *,
        user: str | None = None,
        detach: bool = False,
        check: bool = True,
        timeout_s: float = 120.0,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on ``host`` (as the image's user, or ``user``)."""
        args = ["exec"]
        if detach:
            args.append("--detach")
        if user is not None:
            args += ["--user", user]
        for key, value in (env or {}).items():
            args += ["--env", f"{key}={value}"]
        return podman([*args, self.host(host).container, *argv], check=check, timeout_s=timeout_s)

    def copy_in(self, host: str, source: Path, dest: str, *, owner: str = "10001") -> None:
        """Copy a file of this machine to ``dest`` on ``host``, owned by ``owner``."""
        podman(["cp", str(source), f"{self.host(host).container}:{dest}"])
        self.exec(host, ["chown", owner, dest], user="root")

    def copy_out(self, host: str, source: str, dest: Path) -> None:
        podman(["cp", f"{self.host(host).container}:{source}", str(dest)])

    def kill(self, host: str) -> None:
        """Lose ``host`` at once, as a power cut: SIGKILL to every process of its container."""
        podman(["kill", "--signal", "KILL", self.host(host).container], timeout_s=60)

    def partition(self, host: str) -> None:
        """Cut ``host`` off the lab's network, both ways, until `heal`: an nftables table that
        drops everything on its link, set from this machine inside the container's network
        namespace (``nsenter``), so neither the image nor a kernel with netem is needed."""
        script = (
            f"table netdev {_CUT_TABLE} {{\n"
            "  chain in { type filter hook ingress device eth0 priority 0; drop; }\n"
            "  chain out { type filter hook egress device eth0 priority 0; drop; }\n"
            "}\n"
        )
        proc = subprocess.run(
            self._in_netns(host, ["nft", "-f", "-"]),
            input=script,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if proc.returncode != 0:
            raise PodmanError(f"cutting {host} off: nft refused: {proc.stderr.strip()}")

    def heal(self, host: str) -> None:
        """Undo `partition`."""
        subprocess.run(
            self._in_netns(host, ["nft", "delete", "table", "netdev", _CUT_TABLE]),
            capture_output=True,
            timeout=60,
            check=False,
        )

    def _in_netns(self, host: str, argv: list[str]) -> list[str]:
        """``argv`` run on this machine inside ``host``'s network namespace."""
        container = self.host(host).container
        pid = podman(["inspect", "--format", "{{.State.Pid}}", container]).stdout.strip()
        return ["nsenter", "--target", pid, "--net", *argv]

    def netem(self, host: str, *, delay_ms: float = 0.0, loss_pct: float = 0.0) -> None:
        """Delay and drop ``host``'s outgoing packets on its lab link (both 0: none)."""
        device = ["dev", "eth0", "root"]
        if delay_ms <= 0 and loss_pct <= 0:
            self.exec(host, ["tc", "qdisc", "del", *device], user="root", check=False)
            return
        proc = self.exec(
            host,
            [
                "tc",
                "qdisc",
                "replace",
                *device,
                "netem",
                "delay",
                f"{delay_ms:g}ms",
                "loss",
                f"{loss_pct:g}%",
            ],
            user="root",
            check=False,
        )
        if "qdisc kind is unknown" in proc.stderr:
            raise PodmanError(
                "this kernel has no netem queueing discipline: `modprobe sch_netem` on the "
                "host (a kernel built with CONFIG_NET_SCH_NETEM)"
            )
        if proc.returncode != 0:
            raise PodmanError(f"tc netem on {host} failed: {proc.stderr.strip()}")
