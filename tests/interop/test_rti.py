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
from mcc.bus.qos import default_library
from mcc.bus.qos_export import export_profiles
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


def connector_xml(domain: int, topics: tuple[str, ...] = TOPICS_TESTED) -> str:
    """Types, QoS and one participant with a writer and a reader per topic, and a writer of
    ``Command`` in partition ``cmd/rti-console`` (publisher ``cmd``: mcc.bus.rpc)."""
    root = ET.fromstring(foreign.render_rti_xml(MODULE))
    qos = ET.fromstring(export_profiles(default_library(), "rti"))
    root.extend(qos.findall("qos_library"))
    domains = ET.SubElement(root, "domain_library", name="MccDomains")
    dom = ET.SubElement(domains, "domain", name="mcc", domain_id=str(domain))
    for topic in topics:
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
    # The default partition and every source's (src/*: MCC's instances write their sourced
    # topics, such as CommandReply and Heartbeat, in src/SYSTEM.INDEX; mcc.bus.topics).
    names = ET.SubElement(ET.SubElement(ET.SubElement(sub, "subscriber_qos"), "partition"), "name")
    for name in ("", "src/*"):
        ET.SubElement(names, "element").text = name
    cmd = ET.SubElement(peer, "publisher", name="cmd")
    partition = ET.SubElement(ET.SubElement(cmd, "publisher_qos"), "partition")
    ET.SubElement(ET.SubElement(partition, "name"), "element").text = "cmd/rti-console"
    if "Command" in topics:
        w = ET.SubElement(cmd, "data_writer", name="Command", topic_ref="Command")
        _pool_limit(ET.SubElement(w, "datawriter_qos", base_name="mcc::request"), "data_writer")
    for topic in topics:
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


# -- the apps: an RTI radar fused by the MCC tracker, an RTI console answered by the supervisor

APP_TOPICS = ("Truth", "DetectionBatch", "Track", "AirPicture", "MissionStatus", "Command")
APP_TOPICS += ("CommandReply",)

# radar XML SENSOR X,Y,Z PERIOD_S SIGMA_R,SIGMA_AZ,SIGMA_EL PD RMAX DURATION_S: DetectionBatch
#   from the newest Truth (pure Python: the Connector's Python has nothing but the Connector)
# console XML MISSION TIMEOUT_S: reads Track, AirPicture, MissionStatus, sends `Command status`
#   until answered; prints one JSON summary line
_RTI_APPS = textwrap.dedent(
    """
    import json, math, random, struct, sys, time
    import rticonnextdds_connector as rti
    role, xml = sys.argv[1:3]
    def unpack(seq):
        return list(struct.unpack("<%dd" % (len(seq) // 8), bytes(seq)))
    def pack(values):
        return list(struct.pack("<%dd" % len(values), *values))
    with rti.open_connector(config_name="Mcc::peer", url=xml) as connector:
        if role == "radar":
            sensor, pos, period, sig, pd, rmax, duration = sys.argv[3:10]
            pos = [float(v) for v in pos.split(",")]
            sig = [float(v) for v in sig.split(",")]
            period, pd, rmax = float(period), float(pd), float(rmax)
            truth_in = connector.get_input("sub::Truth")
            out = connector.get_output("pub::DetectionBatch")
            rng, newest, scan = random.Random(11), None, 0
            end = time.time() + float(duration)
            tick = math.ceil(time.time() / period) * period
            while time.time() < end:
                time.sleep(max(0.0, tick - time.time()))
                truth_in.take()
                for s in truth_in.samples.valid_data_iter:
                    newest = s.get_dictionary()
                dets = []
                if newest is not None and tick - newest["time_ns"] * 1e-9 < 2.0:
                    dt = tick - newest["time_ns"] * 1e-9
                    cols = {k: unpack(newest.get(k, [])) for k in
                            ("x_m", "y_m", "z_m", "vx_mps", "vy_mps", "vz_mps")}
                    for i in range(newest["count"]):
                        p = [cols[a + "_m"][i] + cols["v" + a + "_mps"][i] * dt for a in "xyz"]
                        d = [p[k] - pos[k] for k in range(3)]
                        ground = math.hypot(d[0], d[1])
                        r = math.hypot(ground, d[2])
                        if r > rmax or rng.random() >= pd:
                            continue
                        az = math.atan2(d[0], d[1]) % (2 * math.pi)
                        el = math.atan2(d[2], ground)
                        dets.append((r + rng.gauss(0, sig[0]), az + rng.gauss(0, sig[1]),
                                     el + rng.gauss(0, sig[2])))
                n = len(dets)
                rr = [d[0] for d in dets]; aa = [d[1] for d in dets]; ee = [d[2] for d in dets]
                xs = [pos[0] + r * math.cos(e) * math.sin(a) for r, a, e in dets]
                ys = [pos[1] + r * math.cos(e) * math.cos(a) for r, a, e in dets]
                zs = [pos[2] + r * math.sin(e) for r, a, e in dets]
                out.instance.set_dictionary({
                    "sensor_id": sensor, "scan_id": scan, "origin_ns": int(tick * 1e9),
                    "publish_ns": time.time_ns(), "sensor_x_m": pos[0], "sensor_y_m": pos[1],
                    "sensor_z_m": pos[2], "count": n, "range_m": pack(rr),
                    "azimuth_rad": pack(aa), "elevation_rad": pack(ee),
                    "radial_velocity_mps": pack([0.0] * n), "snr_db": pack([20.0] * n),
                    "x_m": pack(xs), "y_m": pack(ys), "z_m": pack(zs)})
                out.write()
                scan += 1
                tick += period
            sys.exit(0)
        mission, timeout_s = sys.argv[3], float(sys.argv[4])
        ins = {t: connector.get_input("sub::" + t)
               for t in ("Track", "AirPicture", "MissionStatus", "CommandReply")}
        command = connector.get_output("cmd::Command")
        seen = {"confirmed": 0, "pictures": 0, "statuses": 0, "reply": None}
        end, sent_at = time.time() + timeout_s, 0.0
        while time.time() < end:
            for topic, reader in ins.items():
                reader.take()
                for s in reader.samples.valid_data_iter:
                    d = s.get_dictionary()
                    if topic == "Track" and d["status"] == 1:
                        seen["confirmed"] += 1
                        seen["track"] = d["tracker_id"]
                    elif topic == "AirPicture" and d["count"] > 0:
                        seen["pictures"] += 1
                    elif topic == "MissionStatus":
                        seen["statuses"] += 1
                        seen["mission"] = d["mission"]
                    elif topic == "CommandReply" and d["command_id"] == "rti-console/1":
                        seen["reply"] = d
            ready = command.matched_subscriptions and time.time() > sent_at + 3
            if seen["reply"] is None and ready:
                command.instance.set_dictionary({
                    "command_id": "rti-console/1", "client_id": "rti-console",
                    "mission": mission, "verb": "status", "args_json": "{}",
                    "issue_ns": time.time_ns()})
                command.write()
                sent_at = time.time()
            if seen["reply"] and seen["confirmed"] and seen["pictures"] and seen["statuses"]:
                break
            time.sleep(0.1)
        print(json.dumps(seen), flush=True)
    """
)

_MISSION = """\
mission: {name}
domain: {domain}
security: none   # foreign peers join unsecured (docs/interop.md)
systems:
  truth:
    app: mcc.apps.radar:truth
    config: {{scenario: scenarios/small.yaml}}
  tracker:
    app: mcc.apps.tracker:tracker
    config: {{scenario: scenarios/small.yaml}}
"""


def test_rti_radar_fused_and_rti_console_answered(
    rti_python: str, domain_id: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcc.apps.scenario import load_scenario
    from tests.conftest import mcc_up

    monkeypatch.delenv("MCC_DISCOVERY_TAG", raising=False)
    env = Transport.loopback(None).apply_to_env(
        {k: v for k, v in os.environ.items() if k != "MCC_DISCOVERY_TAG"}
    )
    env.update(MCC_DOMAIN=str(domain_id), MCC_HOME=str(tmp_path / "home"))
    xml = tmp_path / "apps.xml"
    xml.write_text(connector_xml(domain_id, APP_TOPICS))
    name = f"rti-{domain_id}"
    manifest = tmp_path / f"{name}.yaml"
    manifest.write_text(_MISSION.format(name=name, domain=domain_id))
    radar = next(r for r in load_scenario("scenarios/small.yaml").spec.radars)
    with mcc_up(manifest, env=env, log=tmp_path / "up.log"):
        args = [
            *("radar", str(xml), radar.id, ",".join(map(str, radar.position_m))),
            str(radar.scan_period_s),
            f"{radar.sigma_range_m},{radar.sigma_azimuth_rad},{radar.sigma_elevation_rad}",
            str(radar.pd),
            str(radar.coverage.max_range_m),
            "150",
        ]
        radar_proc = subprocess.Popen(
            [rti_python, "-c", _RTI_APPS, *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            console = subprocess.run(
                [rti_python, "-c", _RTI_APPS, "console", str(xml), name, "120"],
                env=env,
                capture_output=True,
                text=True,
                timeout=150,
            )
        finally:
            radar_proc.kill()
            radar_said = radar_proc.communicate()[0]
    said = console.stdout[-3000:] + console.stderr[-3000:] + radar_said[-2000:]
    said += (tmp_path / "up.log").read_text()[-2000:]
    seen = json.loads(console.stdout.strip().splitlines()[-1])
    assert seen["confirmed"] >= 1 and seen["track"].startswith(f"{name}/tracker/"), said
    assert seen["pictures"] >= 1 and seen["statuses"] >= 1 and seen["mission"] == name, said
    reply = seen["reply"]
    assert reply and reply["ok"] and reply["client_id"] == "rti-console", said
    assert json.loads(reply["result_json"])["mission"] == name
