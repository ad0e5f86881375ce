"""NetLab: emulated hosts as network namespaces, multicast between them, loss, partitions."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import pytest

from mcc.netlab import NetLab, NetLabError, cleanup_stale, netem_supported
from tests.conftest import REPO
from tests.netns.conftest import lab_leftovers

# receive multicast datagrams on 239.255.77.1:7777 until 1.5 s of silence; print the count
RECV = textwrap.dedent(
    """
    import socket, struct
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("", 7777))
    group = struct.pack("4s4s", socket.inet_aton("239.255.77.1"), socket.inet_aton("0.0.0.0"))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, group)
    s.settimeout(1.5)
    print("ready", flush=True)
    n = 0
    try:
        while True:
            s.recv(64)
            n += 1
    except socket.timeout:
        pass
    print(n, flush=True)
    """
)
SEND = (
    "import socket, time\n"
    "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "for _ in range(COUNT):\n"
    "    s.sendto(b'x', ('239.255.77.1', 7777)); time.sleep(0.0005)\n"
)


def multicast_count(lab: NetLab, sender: str, receiver: str, n: int = 1000) -> int:
    """Datagrams of ``n`` multicast from ``sender`` that ``receiver`` got."""
    recv = lab.popen(receiver, [sys.executable, "-c", RECV], stdout=subprocess.PIPE, text=True)
    try:
        assert recv.stdout is not None and recv.stdout.readline().strip() == "ready"
        subprocess.run(
            lab.exec_argv(sender, [sys.executable, "-c", SEND.replace("COUNT", str(n))]),
            check=True,
            timeout=60,
        )
        out, _ = recv.communicate(timeout=30)
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.communicate()
    return int(out.strip())


def test_hosts_have_their_own_addresses_and_multicast_reaches_them(lab: NetLab) -> None:
    a, b = lab.host("a"), lab.host("b")
    assert (a.address, b.address) == ("10.77.0.11", "10.77.0.12")
    assert a.netns != b.netns and all(len(h.veth) <= 15 for h in lab.hosts)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert a.netns in listed and b.netns in listed
    shown = subprocess.run(
        lab.exec_argv("b", ["ip", "-o", "-4", "addr", "show", "eth0"]),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"inet {b.address}/24" in shown
    assert multicast_count(lab, "a", "b", n=500) == 500


def test_loss_partition_and_heal(lab: NetLab) -> None:
    lab.netem("a", loss_pct=30)
    received = multicast_count(lab, "a", "b")
    assert 550 <= received <= 850, received  # 30 % of 1000 lost, binomial spread
    assert multicast_count(lab, "b", "a", n=300) == 300  # loss is on a's outgoing side only
    lab.partition("a")
    assert lab.is_partitioned("a") and not lab.is_partitioned("b")
    assert multicast_count(lab, "a", "b", n=200) == 0
    assert multicast_count(lab, "b", "a", n=200) == 0
    lab.heal("a")
    assert not lab.is_partitioned("a")
    assert multicast_count(lab, "a", "b", n=300) == 300


def test_delay_needs_netem(lab: NetLab) -> None:
    if netem_supported():
        lab.netem("a", delay_ms=20)
        lab.heal("a")
    else:
        with pytest.raises(NetLabError, match="no netem qdisc"):
            lab.netem("a", delay_ms=20)
    with pytest.raises(NetLabError, match="loss_pct"):
        lab.netem("a", loss_pct=120)


def test_bad_lab_definitions_are_refused() -> None:
    with pytest.raises(NetLabError, match="duplicates"):
        NetLab(["a", "a"])
    with pytest.raises(NetLabError, match="invalid"):
        NetLab(["a b"])
    with pytest.raises(NetLabError, match="subnet"):
        NetLab(["a"], subnet="10.77.0.0/33")
    with pytest.raises(NetLabError, match="no host 'c'"):
        NetLab(["a", "b"]).host("c")


def test_cleanup_stale_removes_a_dead_owners_lab_only(lab: NetLab) -> None:
    code = (
        "import json, sys, time\n"
        "from mcc.netlab import NetLab\n"
        "lab = NetLab(['x', 'y'], name='crash').up()\n"
        "print(json.dumps(lab.to_dict()), flush=True)\n"
        "time.sleep(600)\n"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout is not None
        data = json.loads(owner.stdout.readline())
    finally:
        owner.send_signal(signal.SIGKILL)  # a crash: no down(), no atexit
        owner.communicate()
    token = data["bridge"].removeprefix("mcc-").removesuffix("b")
    assert len(lab_leftovers(token)) == 5  # bridge, 2 veths, 2 namespaces
    removed = cleanup_stale()
    assert data["bridge"] in removed
    assert lab_leftovers(token) == []
    assert (
        lab.host("a").netns
        in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    )  # a live owner's lab (this test's) is left alone
