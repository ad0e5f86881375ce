"""MCC and RTI Connext 6.1 (through RTI Connector for Python) on one bus, both ways.

Opt-in (``make interop-rti``, marker ``rti``): ``rticonnextdds-connector`` has a proprietary
licence, so MCC never installs it; install it into the venv yourself, or name another Python
that has it with ``MCC_RTI_PYTHON``. Without ``-m rti`` these tests are deselected
(tests/interop/conftest.py). The Connector XML is MCC's own output: types by
``mcc types --rti-xml`` (from idl/mcc.idl), QoS by ``mcc qos export --vendor rti``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from mcc.bus import Bus
from mcc.bus.codec import flat_codec
from mcc.bus.qos import default_library, export_profiles
from mcc.bus.topics import TOPICS
from mcc.bus.transport import Transport
from mcc.types import foreign

pytestmark = [pytest.mark.rti, pytest.mark.slow]

MODULE = foreign.load_module()
TOPICS_TESTED = ("DetectionBatch", "Track", "AirPicture", "MissionStatus", "Command", "Heartbeat")

# The RTI side, run by the Python that has rticonnextdds_connector:
#   dump XML TOPIC TIMEOUT_S      -> one JSON line: the first sample's dictionary
#   publish XML TOPIC JSON COUNT  -> writes the sample (a dictionary) COUNT times, 0.1 s apart
_RTI = textwrap.dedent(
    """
    import json, sys, time
    import rticonnextdds_connector as rti
    role, xml, topic = sys.argv[1:4]
    with rti.open_connector(config_name="Mcc::peer", url=xml) as connector:
        if role == "dump":
            reader = connector.get_input("sub::" + topic)
            end = time.monotonic() + float(sys.argv[4])
            while time.monotonic() < end:
                try:
                    reader.wait(500)
                except rti.TimeoutError:
                    continue
                reader.take()
                for sample in reader.samples.valid_data_iter:
                    print(json.dumps(sample.get_dictionary()), flush=True)
                    sys.exit(0)
            sys.exit(3)
        writer = connector.get_output("pub::" + topic)
        writer.wait_for_subscriptions(30000)
        writer.instance.set_dictionary(json.loads(sys.argv[4]))
        for _ in range(int(sys.argv[5])):
            writer.write()
            time.sleep(0.1)
    """
)


@pytest.fixture(scope="module")
def rti_python() -> str:
    python = os.environ.get("MCC_RTI_PYTHON", sys.executable)
    probe = subprocess.run(
        [python, "-c", "import rticonnextdds_connector"], capture_output=True, timeout=60
    )
    if probe.returncode != 0:
        pytest.fail(
            f"{python} has no rticonnextdds_connector: install it yourself (RTI's licence) with "
            "`.venv/bin/pip install rticonnextdds-connector`, or set MCC_RTI_PYTHON"
        )
    return python


def connector_xml(domain: int) -> str:
    """Types, QoS and one participant with a writer and a reader per tested topic."""
    root = ET.fromstring(foreign.render_rti_xml(MODULE))
    qos = ET.fromstring(export_profiles(default_library(), "rti"))
    root.extend(qos.findall("qos_library"))
    domains = ET.SubElement(root, "domain_library", name="MccDomains")
    dom = ET.SubElement(domains, "domain", name="mcc", domain_id=str(domain))
    for topic in TOPICS_TESTED:
        type_name = f"mcc::{TOPICS[topic].type.__name__}"
        if dom.find(f"register_type[@name='{type_name}']") is None:
            ET.SubElement(dom, "register_type", name=type_name, type_ref=type_name)
        ET.SubElement(dom, "topic", name=topic, register_type_ref=type_name)
    participants = ET.SubElement(root, "domain_participant_library", name="Mcc")
    peer = ET.SubElement(
        participants, "domain_participant", name="peer", domain_ref="MccDomains::mcc"
    )
    pqos = ET.SubElement(peer, "participant_qos")
    discovery = ET.SubElement(pqos, "discovery")
    peers = ET.SubElement(discovery, "initial_peers")
    ET.SubElement(peers, "element").text = "99@builtin.udpv4://127.0.0.1"
    multicast = ET.SubElement(discovery, "multicast_receive_addresses")
    multicast.text = None
    transport = ET.SubElement(pqos, "transport_builtin")
    ET.SubElement(transport, "mask").text = "UDPv4"
    pub = ET.SubElement(peer, "publisher", name="pub")
    sub = ET.SubElement(peer, "subscriber", name="sub")
    for topic in TOPICS_TESTED:
        profile = f"mcc::{TOPICS[topic].profile}"
        w = ET.SubElement(pub, "data_writer", name=topic, topic_ref=topic)
        _pool_limit(ET.SubElement(w, "datawriter_qos", base_name=profile), "data_writer")
        r = ET.SubElement(sub, "data_reader", name=topic, topic_ref=topic)
        _pool_limit(ET.SubElement(r, "datareader_qos", base_name=profile), "data_reader")
    ET.indent(root, space="  ")
    return ET.tostring(root, encoding="unicode")


def _pool_limit(qos: ET.Element, entity: str) -> None:
    """MCC's sequences are unbounded: RTI then needs a cap on its preallocated buffers, above
    which it allocates per sample (else it tries to preallocate 2 GiB per sample)."""
    element = ET.SubElement(ET.SubElement(ET.SubElement(qos, "property"), "value"), "element")
    name = f"dds.{entity}.history.memory_manager.fast_pool.pool_buffer_max_size"
    ET.SubElement(element, "name").text = name
    ET.SubElement(element, "value").text = "4096"


def to_rti(type_name: str, data: dict[str, Any]) -> dict[str, Any]:
    """Plain JSON data (hex for octet sequences) as RTI Connector takes it (lists of ints)."""
    out: dict[str, Any] = {}
    for f in MODULE.structs[type_name].fields:
        value = data[f.name]
        if f.kind == "sequence" and f.type_name == "octet":
            value = list(bytes.fromhex(value))
        elif f.type_name in MODULE.structs:
            value = [to_rti(f.type_name, v) for v in value] if f.kind != "plain" else value
        out[f.name] = value
    return out


def from_rti(type_name: str, data: dict[str, Any]) -> dict[str, Any]:
    """RTI Connector's dictionary as plain JSON data (missing empty sequences filled in)."""
    out: dict[str, Any] = {}
    for f in MODULE.structs[type_name].fields:
        value = data.get(f.name, [] if f.kind != "plain" else None)
        if f.kind == "sequence" and f.type_name == "octet":
            value = bytes(value).hex()
        elif f.type_name in MODULE.structs and f.kind != "plain":
            value = [from_rti(f.type_name, v) for v in value]
        elif f.type_name == "boolean":
            value = bool(value)
        out[f.name] = value
    return out


@pytest.fixture
def rti_env(domain_id: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.delenv("MCC_DISCOVERY_TAG", raising=False)
    env = Transport.loopback(None).apply_to_env(
        {k: v for k, v in os.environ.items() if k != "MCC_DISCOVERY_TAG"}
    )
    xml = tmp_path / "mcc-rti.xml"
    xml.write_text(connector_xml(domain_id))
    env.update(MCC_DOMAIN=str(domain_id), MCC_RTI_XML=str(xml))
    return env


@pytest.mark.parametrize("topic", TOPICS_TESTED)
def test_mcc_to_rti(topic: str, rti_python: str, rti_env: dict[str, str]) -> None:
    spec = TOPICS[topic]
    type_name = spec.type.__name__
    expected = foreign.pattern_sample(MODULE, type_name, 3)
    dump = subprocess.Popen(
        [rti_python, "-c", _RTI, "dump", rti_env["MCC_RTI_XML"], topic, "30"],
        env=rti_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    domain = int(rti_env["MCC_DOMAIN"])
    with Bus(domain, transport=Transport.from_env(rti_env)) as bus:
        writer = bus.writer(topic, validate=False)
        sample = foreign.from_plain(spec.type, expected)
        deadline = time.monotonic() + 35
        while dump.poll() is None and time.monotonic() < deadline:
            writer.write(sample)
            time.sleep(0.1)
    try:
        out = dump.communicate(timeout=10)[0]
    except subprocess.TimeoutExpired:
        dump.kill()
        out = dump.communicate()[0]
    assert dump.returncode == 0, out[-3000:]
    line = next(x for x in out.splitlines() if x.startswith("{"))
    assert from_rti(type_name, json.loads(line)) == expected


@pytest.mark.parametrize("topic", TOPICS_TESTED)
def test_rti_to_mcc(topic: str, rti_python: str, rti_env: dict[str, str]) -> None:
    spec = TOPICS[topic]
    type_name = spec.type.__name__
    expected = foreign.pattern_sample(MODULE, type_name, 5)
    codec = flat_codec(spec.type)
    decode = codec.decode if codec is not None else spec.type.deserialize
    with Bus(int(rti_env["MCC_DOMAIN"]), transport=Transport.from_env(rti_env)) as bus:
        reader = bus.reader(topic, history=False)
        pub = subprocess.Popen(
            [rti_python, "-c", _RTI, "publish", rti_env["MCC_RTI_XML"], topic]
            + [json.dumps(to_rti(type_name, expected)), "300"],
            env=rti_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        data = None
        deadline = time.monotonic() + 40
        try:
            while data is None and time.monotonic() < deadline and pub.poll() is None:
                valid = [d for d, info in reader.take_cdr(16) if info.valid_data]
                data = valid[0] if valid else None
                time.sleep(0.05)
        finally:
            pub.kill()
            out = pub.communicate()[0]
    assert data is not None, f"nothing from the RTI writer of {topic}\n{out[-3000:]}"
    assert data[:2] == b"\x00\x01", f"{topic}: not XCDR1 little-endian: {data[:4].hex()}"
    assert foreign.plain(decode(data)) == expected
