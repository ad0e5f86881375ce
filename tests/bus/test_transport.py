"""Transport selection: generated Cyclone XML, validation, and real traffic between processes.

Each live test starts separate writer and reader processes (``sys.executable`` running the
inline ``PEER`` script, which needs only cyclonedds) configured by the generated XML, with a
discovery tag unique to this test run so parallel runs never hear each other.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from mcc.bus.transport import (
    ENV_VAR,
    ScratchDomains,
    Transport,
    domain_ports,
    ephemeral_ports,
    ports_clash_with_ephemeral,
    scratch_domains,
    tcp_supported,
)
from mcc.errors import TransportError
from tests.conftest import require_tool

DOMAIN = next(ScratchDomains())
RUN = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"

PEER = r"""
import json, os, sys, time
from dataclasses import dataclass

from cyclonedds.core import (
    InstanceState, Policy, Qos, ReadCondition, SampleState, ViewState, WaitSet,
)
from cyclonedds.domain import Domain, DomainParticipant
from cyclonedds.idl import IdlStruct
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader, InvalidSample
from cyclonedds.topic import Topic
from cyclonedds.util import duration


@dataclass
class Msg(IdlStruct, typename="mcc_test.Msg"):
    seq: int
    sender: str


role, domain_id, count, deadline_s, sender = sys.argv[1:6]
domain_id, count, deadline_s = int(domain_id), int(count), float(deadline_s)
config = os.environ.get("MCC_TEST_DOMAIN_CONFIG")
domain = Domain(domain_id, config) if config else None  # kept alive: it owns the participant
dp = DomainParticipant(domain_id)
qos = Qos(Policy.Reliability.Reliable(duration(seconds=1)), Policy.History.KeepLast(100))
topic = Topic(dp, "mcc_test_transport", Msg, qos=qos)
end = time.monotonic() + deadline_s
if role == "writer":
    writer = DataWriter(dp, topic, qos=qos)
    seq = 0
    while time.monotonic() < end:  # until the test stops it
        writer.write(Msg(seq=seq, sender=sender))
        seq += 1
        time.sleep(0.02)  # publication rate, 50 Hz
else:
    reader = DataReader(dp, topic, qos=qos)
    waitset = WaitSet(dp)
    waitset.attach(ReadCondition(reader, SampleState.Any | ViewState.Any | InstanceState.Any))
    seqs, senders = set(), set()
    while len(seqs) < count and (left := end - time.monotonic()) > 0:
        waitset.wait(duration(seconds=min(left, 0.5)))
        for sample in reader.take(N=256):
            if isinstance(sample, InvalidSample):  # a state change: the writer left
                continue
            seqs.add(sample.seq)
            senders.add(sample.sender)
    matched = len(reader.get_matched_publications())
    print(json.dumps({"received": len(seqs), "senders": sorted(senders), "matched": matched}))
"""


def _tag(name: str) -> str:
    return f"mcc-test-{name}-{RUN}"


def _spawn(
    role: str,
    transport: Transport,
    *,
    count: int = 0,
    deadline_s: float = 60.0,
    sender: str = "",
    via: str = "env",
    domain_id: int = DOMAIN,
) -> subprocess.Popen[str]:
    """Start a writer or reader configured through CYCLONEDDS_URI (``env``) or Domain()."""
    env = {k: v for k, v in os.environ.items() if k not in ("CYCLONEDDS_URI", ENV_VAR)}
    if via == "env":
        env = transport.apply_to_env(env)
    else:
        env["MCC_TEST_DOMAIN_CONFIG"] = transport.participant_config()
    args = [role, str(domain_id), str(count), str(deadline_s), sender]
    return subprocess.Popen(
        [sys.executable, "-c", PEER, *args],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _finish(proc: subprocess.Popen[str], timeout_s: float, what: str) -> str:
    """Wait for ``proc``; on timeout kill it and fail with everything it printed."""
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"{what} did not finish within {timeout_s} s; its output:\n{out}")
    if proc.returncode != 0:
        pytest.fail(f"{what} exited with {proc.returncode}; its output:\n{out}")
    return out


def _stop(proc: subprocess.Popen[str], what: str) -> None:
    """Stop a writer that is still publishing; fail if it had died early."""
    if proc.poll() is not None:
        out, _ = proc.communicate()
        pytest.fail(f"{what} exited early with {proc.returncode}; its output:\n{out}")
    proc.terminate()
    try:
        proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"{what} ignored SIGTERM; its output:\n{out}")


def _result(out: str) -> dict[str, object]:
    return dict(json.loads(out.strip().splitlines()[-1]))


def _free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pair(writer_t: Transport, reader_t: Transport, *, count: int = 20) -> dict[str, object]:
    """Writer configured by environment, reader by Domain(); the reader's summary."""
    writer = _spawn("writer", writer_t, sender="w")
    try:
        reader = _spawn("reader", reader_t, count=count, deadline_s=30, via="domain")
        summary = _result(_finish(reader, 60, "reader"))
    finally:
        _stop(writer, "writer")  # fails, with its output, if the writer died (a native abort)
    return summary


# --- the generated XML --------------------------------------------------------------------


def _find(xml: str, path: str) -> list[ET.Element]:
    root = ET.fromstring(xml)
    assert root.tag == "CycloneDDS"
    return root.findall(f"Domain[@id='any']/{path}")


def _text(xml: str, path: str) -> str | None:
    found = _find(xml, path)
    assert len(found) <= 1, f"{path} appears {len(found)} times in {xml}"
    return found[0].text if found else None


def test_default_is_udp_multicast_with_cyclone_choosing_the_interface() -> None:
    xml = Transport().to_xml()
    assert _text(xml, "General/Transport") == "udp"
    assert _text(xml, "General/AllowMulticast") == "default"
    assert _find(xml, "General/Interfaces") == []
    assert _find(xml, "Discovery") == []
    assert _find(xml, "TCP") == []


def test_unicast_xml_names_interface_peers_index_and_tag() -> None:
    t = Transport(
        multicast=False,
        peers=("10.0.0.7", "node-b:7410", "[fd00::7]:7410"),
        interface="eth0",
        discovery_tag="sam-toc",
        max_participant_index=20,
    )
    xml = t.to_xml()
    assert [e.get("name") for e in _find(xml, "General/Interfaces/NetworkInterface")] == ["eth0"]
    assert _text(xml, "General/AllowMulticast") == "false"
    assert _text(xml, "Discovery/Tag") == "sam-toc"
    assert _text(xml, "Discovery/ParticipantIndex") == "auto"
    assert _text(xml, "Discovery/MaxAutoParticipantIndex") == "20"
    peers = [e.get("address") for e in _find(xml, "Discovery/Peers/Peer")]
    assert peers == ["10.0.0.7", "node-b:7410", "[fd00::7]:7410"]


def test_interface_given_as_address_uses_the_address_attribute() -> None:
    xml = Transport(interface="10.0.0.1").to_xml()
    (nic,) = _find(xml, "General/Interfaces/NetworkInterface")
    assert nic.attrib == {"address": "10.0.0.1"}


def test_tcp_xml_has_transport_port_and_peers_but_no_participant_index() -> None:
    t = Transport(kind="tcp", multicast=False, peers=("node-b:7400",), tcp_port=7400)
    xml = t.to_xml()
    assert _text(xml, "General/Transport") == "tcp"
    assert _text(xml, "General/AllowMulticast") == "false"
    assert _text(xml, "TCP/Port") == "7400"
    assert [e.get("address") for e in _find(xml, "Discovery/Peers/Peer")] == ["node-b:7400"]
    assert _find(xml, "Discovery/ParticipantIndex") == []


def test_loopback_is_unicast_on_lo_to_localhost() -> None:
    t = Transport.loopback("t1")
    assert (t.kind, t.multicast, t.peers, t.interface) == ("udp", False, ("127.0.0.1",), "lo")
    assert t.discovery_tag == "t1"
    xml = t.to_xml()
    assert _text(xml, "Discovery/MaxAutoParticipantIndex") == "99"
    assert _text(xml, "Discovery/ParticipantIndex") == "auto"


def test_extra_xml_is_merged_and_overrides_generated_settings() -> None:
    t = Transport(
        discovery_tag="x",
        extra_xml="<General><AllowMulticast>spdp</AllowMulticast>"
        "<MaxMessageSize>65500B</MaxMessageSize></General><Tracing><Verbosity>config"
        "</Verbosity></Tracing>",
    )
    xml = t.to_xml()
    assert _text(xml, "General/AllowMulticast") == "spdp"
    assert _text(xml, "General/MaxMessageSize") == "65500B"
    assert _text(xml, "Tracing/Verbosity") == "config"
    assert _text(xml, "Discovery/Tag") == "x"


def test_tag_characters_survive_and_xml_is_ascii() -> None:
    xml = Transport.loopback("a/b:c@d+e").to_xml()
    assert xml.isascii()
    assert _text(xml, "Discovery/Tag") == "a/b:c@d+e"


# --- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field", "fix"),
    [
        ({"kind": "sctp"}, "kind", "'udp', 'tcp'"),
        ({"kind": "tcp"}, "multicast", "multicast=False"),
        ({"kind": "tcp", "multicast": False, "peers": ("node-b",)}, "peers[0]", "port"),
        ({"kind": "tcp", "multicast": False}, "peers", "tcp_port"),
        ({"multicast": False}, "peers", "peers=('127.0.0.1',)"),
        ({"peers": ("10.0.0.1:70000",)}, "peers[0]", "1..65535"),
        ({"peers": ("10.0.0.1", "node b")}, "peers[1]", "host:port"),
        ({"peers": ("host:12:34:x",)}, "peers[0]", "host:port"),
        ({"peers": ("[fd00::1",)}, "peers[0]", "host:port"),
        ({"peers": ("",)}, "peers[0]", "host:port"),
        ({"peers": "10.0.0.1"}, "peers", "tuple"),
        ({"interface": "eth 0"}, "interface", "interface name"),
        ({"discovery_tag": "has space"}, "discovery_tag", "letters, digits"),
        ({"discovery_tag": ""}, "discovery_tag", "letters, digits"),
        ({"max_participant_index": 120}, "max_participant_index", "0 to 119"),
        ({"max_participant_index": True}, "max_participant_index", "0 to 119"),
        ({"tcp_port": 7400}, "tcp_port", "kind='tcp'"),
        ({"kind": "tcp", "multicast": False, "tcp_port": -1}, "tcp_port", "0 to 65535"),
        ({"extra_xml": "<General>"}, "extra_xml", "well-formed"),
        ({"multicast": "yes"}, "multicast", "True"),
    ],
)
def test_invalid_configurations_say_field_value_and_fix(
    kwargs: dict[str, object], field: str, fix: str
) -> None:
    with pytest.raises(TransportError) as info:
        Transport(**kwargs)  # type: ignore[arg-type]
    message = str(info.value)
    assert message.startswith(f"Transport.{field}: "), message
    assert fix in message, message


def test_valid_peer_forms() -> None:
    peers = (
        "10.0.0.7",
        "10.0.0.7:7410",
        "node-b",
        "node-b.example.org:7410",
        "fd00::7",
        "[fd00::7]",
        "[fd00::7]:7410",
    )
    assert Transport(multicast=False, peers=peers).peers == peers
    assert Transport(multicast=False, peers=["127.0.0.1"]).peers == ("127.0.0.1",)  # type: ignore[arg-type]


# --- environment --------------------------------------------------------------------------


def test_apply_to_env_returns_a_copy_with_uri_and_round_trips() -> None:
    t = Transport.loopback("env-test")
    base = {"PATH": "/bin"}
    env = t.apply_to_env(base)
    assert base == {"PATH": "/bin"}
    assert env["PATH"] == "/bin"
    assert env["CYCLONEDDS_URI"] == t.to_xml()
    assert Transport.from_env(env) == t


def test_from_env_defaults_and_rejects_garbage() -> None:
    assert Transport.from_env({}) == Transport()
    bad: list[Mapping[str, str]] = [
        {ENV_VAR: "not json"},
        {ENV_VAR: '{"colour": "red"}'},
        {ENV_VAR: '{"kind": "tcp"}'},
    ]
    for env in bad:
        with pytest.raises(TransportError, match=ENV_VAR):
            Transport.from_env(env)


# --- live traffic between processes -------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda tag: Transport(discovery_tag=tag), id="udp-multicast-default"),
        pytest.param(
            lambda tag: Transport(interface="lo", discovery_tag=tag), id="udp-multicast-lo"
        ),
        pytest.param(lambda tag: Transport.loopback(tag), id="udp-unicast-loopback"),
        pytest.param(
            lambda tag: Transport(
                multicast=False,
                peers=("127.0.0.1",),
                interface="127.0.0.1",
                discovery_tag=tag,
                max_participant_index=20,
            ),
            id="udp-unicast-address",
        ),
    ],
)
def test_samples_arrive_between_processes(make: Callable[[str], Transport]) -> None:
    transport = make(_tag("pair"))
    summary = _pair(transport, transport)
    assert summary["received"] == 20, summary
    assert summary["senders"] == ["w"]


@pytest.mark.slow
def test_discovery_tags_isolate_pairs_on_one_domain() -> None:
    """Two tagged pairs share domain and topic; each reader hears only its own writer."""
    a, b, c = (Transport.loopback(_tag(n)) for n in ("A", "B", "C"))
    writers = [_spawn("writer", a, sender="A"), _spawn("writer", b, sender="B")]
    try:
        lonely = _spawn("reader", c, count=1, deadline_s=4)
        readers = [_spawn("reader", t, count=20, deadline_s=30) for t in (a, b)]
        got_a, got_b = (
            _result(_finish(r, 60, f"reader {n}")) for r, n in zip(readers, "AB", strict=True)
        )
        got_c = _result(_finish(lonely, 60, "reader C"))
    finally:
        for w, name in zip(writers, "AB", strict=True):
            if w.poll() is None:
                _stop(w, f"writer {name}")
    assert (got_a["received"], got_a["senders"]) == (20, ["A"]), got_a
    assert (got_b["received"], got_b["senders"]) == (20, ["B"]), got_b
    assert (got_c["received"], got_c["matched"]) == (0, 0), got_c


@pytest.mark.slow
def test_domain_config_is_used_by_participants_created_afterwards(tmp_path: Path) -> None:
    """Domain(id, participant_config()) configures the participant made next (traced)."""
    log = tmp_path / "cyclone.log"
    tag = _tag("traced")
    t = Transport(
        multicast=False,
        peers=("127.0.0.1",),
        interface="lo",
        discovery_tag=tag,
        extra_xml=f"<Tracing><Verbosity>config</Verbosity><OutputFile>{log}</OutputFile></Tracing>",
    )
    reader = _spawn("reader", t, count=1, deadline_s=0.5, via="domain")
    assert _result(_finish(reader, 60, "reader"))["received"] == 0
    trace = log.read_text()
    assert f"Domain/Discovery/Tag/#text: {tag}" in trace
    assert "Domain/General/AllowMulticast/#text: false" in trace


def test_configure_domain_twice_raises_transport_error() -> None:
    script = (
        "from mcc.bus.transport import Transport\n"
        "from mcc.errors import TransportError\n"
        f"t = Transport.loopback({_tag('twice')!r})\n"
        f"keep = t.configure_domain({DOMAIN})\n"
        "try:\n"
        f"    t.configure_domain({DOMAIN})\n"
        "except TransportError as exc:\n"
        "    print('refused:', exc)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    out = _finish(proc, 60, "configure_domain twice")
    assert f"refused: domain {DOMAIN} already exists" in out, out


def test_shm_is_udp_plus_the_iceoryx_exchange() -> None:
    xml = Transport(
        kind="shm", multicast=False, peers=("127.0.0.1",), interface="lo", discovery_tag="t"
    ).to_xml()
    assert _text(xml, "General/Transport") == "udp"
    (psmx,) = _find(xml, "General/Interfaces/PubSubMessageExchange")
    assert (psmx.get("type"), psmx.get("library")) == ("iox", "psmx_iox")
    assert _find(xml, "General/Interfaces/NetworkInterface")[0].get("name") == "lo"
    assert _text(xml, "Discovery/ParticipantIndex") == "auto"


def _tcp_server_and_client(name: str) -> tuple[Transport, Transport, int]:
    """A TCP server on a free loopback port and a client of it, one discovery tag; the port
    too."""
    port = _free_tcp_port()
    tag = _tag(name)
    server = Transport(
        kind="tcp", multicast=False, tcp_port=port, interface="lo", discovery_tag=tag
    )
    client = Transport(
        kind="tcp", multicast=False, peers=(f"127.0.0.1:{port}",), interface="lo", discovery_tag=tag
    )
    return server, client, port


@pytest.mark.slow
def test_tcp_in_python_works_or_is_refused_clearly() -> None:
    """The cyclonedds wheel's library may lack TCP; then the refusal must say so and why."""
    server, client, _ = _tcp_server_and_client("tcp-py")
    if tcp_supported():
        # Started together: the client's discovery retries every second until the server
        # listens (Cyclone's default SPDP interval, 30 s, would outlast the test).
        summary = _pair(server, client)
        assert summary["received"] == 20, summary
    else:
        with pytest.raises(TransportError, match="built without TCP") as info:
            client.participant_config()
        assert "multicast=False and peers" in str(info.value)


@pytest.mark.slow
def test_a_tcp_server_serves_a_dozen_clients_that_connect_at_once() -> None:
    """Each accepted connection is added to the receive thread's socket set while that thread
    waits on it, and the client's first message comes with the connection. Cyclone 11.0.1 could
    abort there, or follow entries moved when the set grew past 8 sockets (native/patches)."""
    if not tcp_supported():
        pytest.fail("MCC's Cyclone build has TCP (native/build-cyclone.sh); this one has not")
    server, client, _ = _tcp_server_and_client("tcp-many")
    writer = _spawn("writer", server, sender="w")
    readers: list[subprocess.Popen[str]] = []
    try:
        readers = [
            _spawn("reader", client, count=20, deadline_s=60, via="domain") for _ in range(12)
        ]
        got = [_result(_finish(r, 90, f"reader {i}")) for i, r in enumerate(readers)]
    finally:
        for r in readers:
            if r.poll() is None:
                r.kill()
            r.communicate()
        _stop(writer, "the TCP server (writer)")
    assert [g["received"] for g in got] == [20] * 12, got


@pytest.mark.tool
@pytest.mark.slow
def test_tcp_between_two_ddsperf_processes() -> None:
    """The generated TCP XML works for a Cyclone build with TCP (ddsperf), tags included."""
    ddsperf = require_tool("ddsperf")
    server, client, port = _tcp_server_and_client("tcp")
    stranger = Transport(
        kind="tcp",
        multicast=False,
        peers=(f"127.0.0.1:{port}",),
        interface="lo",
        discovery_tag=_tag("tcp-other"),
    )
    base = {k: v for k, v in os.environ.items() if k != "CYCLONEDDS_URI"}
    dom = ["-i", str(DOMAIN)]

    def run(t: Transport, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [ddsperf, *dom, *args],
            env=t.apply_to_env(base),
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )

    pub = run(server, "-D", "30", "pub", "100Hz")
    try:
        sub = run(client, "-D", "4", "-Q", "minmatch:1", "-Q", "samples:50", "sub")
        other = run(stranger, "-D", "4", "-Q", "minmatch:1", "sub")
        out = _finish(sub, 60, "ddsperf sub over TCP")
        try:
            other_out, _ = other.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            other.kill()
            other_out, _ = other.communicate()
            pytest.fail(f"ddsperf sub with another tag hung; its output:\n{other_out}")
    finally:
        if pub.poll() is None:
            _stop(pub, "ddsperf pub over TCP")
    assert "lost 0" in out, out
    assert other.returncode == 1 and "too few matching participants" in other_out, other_out


def test_scratch_domains_keep_every_port_out_of_the_ephemeral_range() -> None:
    pool = scratch_domains()
    ephemeral = ephemeral_ports()
    assert len(pool) >= 100, pool  # enough for a test session's fixtures in turn
    for domain in pool:
        ports = domain_ports(domain)
        assert ports.stop <= 65536
        assert ports.stop <= ephemeral.start or ports.start >= ephemeral.stop, domain
    assert domain_ports(0) == range(7400, 7400 + 11 + 2 * 119 + 1)
    picker = ScratchDomains(avoid={pool[0]})
    handed = [next(picker) for _ in range(2 * len(pool))]
    assert set(handed) == set(pool) - {pool[0]}


def test_a_domain_whose_port_is_taken_fails_with_the_fix_in_the_message() -> None:
    """What CI once hit: an ephemeral socket held a port of domain 129; joining it failed
    with a bare "Non specific error"."""
    from mcc.bus import Bus
    from mcc.errors import MccError

    clashing = [d for d in range(1, 233) if ports_clash_with_ephemeral(d)]
    for domain in clashing:
        squatter = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            squatter.bind(("0.0.0.0", domain_ports(domain).start + 1))  # multicast data, d2
        except OSError:  # held already: try the next domain
            squatter.close()
            continue
        with squatter:
            with pytest.raises(MccError) as configured:  # this process configures the domain
                Bus(domain, transport=Transport(discovery_tag=f"squat-{RUN}"))
            with pytest.raises(MccError) as joined:  # or the environment did
                Bus(domain)
        for raised in (configured, joined):
            message = str(raised.value)
            assert f"domain {domain}" in message, message
            assert "ephemeral range" in message and "1..100" in message, message
        return
    pytest.fail(f"every clashing domain's port was held: {clashing}")


def test_a_transports_own_tag_beats_the_environments(monkeypatch: pytest.MonkeyPatch) -> None:
    """A caller that hands a bus its transport (the console, the benches) gets that
    transport's tag even where ``MCC_DISCOVERY_TAG`` names another; a bare bus takes the
    environment's, and ``discovery_tag=`` beats both."""
    from mcc.bus import Bus

    monkeypatch.setenv("MCC_DISCOVERY_TAG", _tag("env"))
    with Bus(DOMAIN, transport=Transport.loopback(_tag("own"))) as bus:
        assert bus.transport is not None and bus.transport.discovery_tag == _tag("own")
    with Bus(DOMAIN, transport=Transport.loopback(None)) as bus:
        assert bus.transport is not None and bus.transport.discovery_tag == _tag("env")
    with Bus(DOMAIN, transport=Transport.loopback(_tag("own")), discovery_tag=_tag("arg")) as bus:
        assert bus.transport is not None and bus.transport.discovery_tag == _tag("arg")
