"""The QoS profile library: qos/mcc.xml as Cyclone loads it, and the loader's errors."""

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from cyclonedds.core import DDSStatus, Policy, Qos, WaitSet
from cyclonedds.domain import DomainParticipant
from cyclonedds.idl import IdlStruct
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from cyclonedds.util import duration

from mcc.bus.qos import (
    DEFAULT_QOS_FILE,
    QOS_FILE_ENV,
    QosLibrary,
    default_library,
    describe_qos,
    policy_name,
)
from mcc.errors import MccError, QosError

REPO = Path(__file__).resolve().parents[2]

RELIABLE = Policy.Reliability.Reliable(max_blocking_time=duration(milliseconds=100))
UNLIMITED = -1


def _durability_service(depth: int) -> Policy.DurabilityService:
    return Policy.DurabilityService(
        cleanup_delay=0,
        history=Policy.History.KeepLast(depth),
        max_samples=UNLIMITED,
        max_instances=UNLIMITED,
        max_samples_per_instance=UNLIMITED,
    )


# Every policy of every profile, as the profile table in docs/qos.md states it.
EXPECTED: dict[str, Qos] = {
    "sensor_stream": Qos(
        Policy.Reliability.BestEffort,
        Policy.Durability.Volatile,
        Policy.History.KeepLast(8),
        Policy.Deadline(duration(seconds=2)),
    ),
    "state": Qos(RELIABLE, Policy.Durability.TransientLocal, Policy.History.KeepLast(1)),
    "command": Qos(
        RELIABLE,
        Policy.Durability.TransientLocal,
        Policy.History.KeepAll,
        _durability_service(32),
    ),
    "request": Qos(RELIABLE, Policy.Durability.Volatile, Policy.History.KeepAll),
    "health": Qos(
        Policy.Reliability.BestEffort,
        Policy.Durability.Volatile,
        Policy.History.KeepLast(1),
        Policy.Liveliness.Automatic(lease_duration=duration(seconds=3)),
        Policy.ResourceLimits(
            max_samples=UNLIMITED, max_instances=8192, max_samples_per_instance=UNLIMITED
        ),
    ),
    "bulk": Qos(
        Policy.Reliability.Reliable(max_blocking_time=duration(seconds=1)),
        Policy.Durability.Volatile,
        Policy.History.KeepAll,
        Policy.ResourceLimits(
            max_samples=256, max_instances=UNLIMITED, max_samples_per_instance=256
        ),
    ),
    "bulk_transfer": Qos(
        Policy.Reliability.Reliable(max_blocking_time=duration(seconds=1)),
        Policy.Durability.Volatile,
        Policy.History.KeepAll,
        Policy.ResourceLimits(
            max_samples=UNLIMITED, max_instances=UNLIMITED, max_samples_per_instance=UNLIMITED
        ),
    ),
    "durable": Qos(
        RELIABLE,
        Policy.Durability.Transient,
        Policy.History.KeepLast(16),
        _durability_service(16),
        Policy.WriterDataLifecycle(autodispose=False),
    ),
    "persistent": Qos(
        RELIABLE,
        Policy.Durability.Persistent,
        Policy.History.KeepLast(16),
        _durability_service(16),
        Policy.WriterDataLifecycle(autodispose=False),
    ),
    "perf_reliable": Qos(RELIABLE, Policy.Durability.Volatile, Policy.History.KeepLast(50)),
    "perf_best_effort": Qos(
        Policy.Reliability.BestEffort, Policy.Durability.Volatile, Policy.History.KeepLast(50)
    ),
}


@pytest.fixture
def library(monkeypatch: pytest.MonkeyPatch) -> QosLibrary:
    monkeypatch.delenv(QOS_FILE_ENV, raising=False)
    return default_library()


def write_library(directory: Path, profiles: str, name: str = "lib.xml") -> Path:
    path = directory / name
    path.write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<dds xmlns="http://www.omg.org/spec/DDS-XML">\n'
        f'  <qos_library name="mcc">\n{profiles}\n  </qos_library>\n'
        "</dds>\n",
        encoding="utf-8",
    )
    return path


# -- the repository's profiles ---------------------------------------------------------------


def test_default_library_is_the_repository_file(library: QosLibrary) -> None:
    assert library.path == REPO / "qos" / "mcc.xml" == DEFAULT_QOS_FILE
    assert library is default_library()  # cached


def test_names_are_the_documented_profiles(library: QosLibrary) -> None:
    assert library.names() == tuple(sorted(EXPECTED))


# Data representations: writers offer XCDR1 (the interoperable one, docs/interop.md) except on
# MCC-internal work queues; readers accept both.
XCDR1 = Policy.DataRepresentation(use_cdrv0_representation=True)
XCDR2 = Policy.DataRepresentation(use_xcdrv2_representation=True)
EITHER = Policy.DataRepresentation(use_cdrv0_representation=True, use_xcdrv2_representation=True)
# perf_*: a list in <topic_qos> (the perftest rewrites those profiles by text): writers write the
# first, XCDR1.
WRITES = {
    "bulk": XCDR2,
    "bulk_transfer": XCDR2,
    "perf_reliable": EITHER,
    "perf_best_effort": EITHER,
}


@pytest.mark.parametrize("profile", sorted(EXPECTED))
def test_profile_has_exactly_its_policies(library: QosLibrary, profile: str) -> None:
    expected = EXPECTED[profile]
    writes = WRITES.get(profile, XCDR1)
    assert library.topic_qos(profile) == Qos(EITHER, base=expected).topic()
    assert library.reader_qos(profile) == Qos(EITHER, base=expected).datareader()
    assert library.writer_qos(profile) == Qos(writes, base=expected).datawriter()


def test_reader_and_writer_sections_agree(library: QosLibrary) -> None:
    """Every policy that concerns both ends of a match is the same in both sections (the XML
    repeats them so that other vendors' tools load whole profiles)."""
    for profile in library.names():
        reader, writer = library.reader_qos(profile), library.writer_qos(profile)
        for policy in reader:
            if not isinstance(policy, Policy.DataRepresentation):
                assert writer[type(policy)] == policy, (profile, policy)


def test_no_setting_hides_in_a_topic_section() -> None:
    """Other vendors' tools give a reader or writer only its own section (issue 18)."""
    text = re.sub(r"<!--.*?-->", "", DEFAULT_QOS_FILE.read_text(), flags=re.S)
    # the perftest's profiles excepted: mcc.bench.perftest derives its variants from their text
    text = re.sub(r'<qos_profile name="perf_.*?</qos_profile>', "", text, flags=re.S)
    assert "<topic_qos>" not in text
    assert text.count("<datawriter_qos>") == text.count("<datareader_qos>") == len(EXPECTED) - 2
    assert "<datawriter_qos/>" not in text and "<datareader_qos/>" not in text


def test_omg_representation_element_is_translated(tmp_path: Path) -> None:
    path = write_library(
        tmp_path,
        '    <qos_profile name="p">\n'
        "      <!-- a comment that names <representation> is left alone -->\n"
        "      <datawriter_qos>\n"
        "        <representation><value><element>XCDR2_DATA_REPRESENTATION</element>"
        "</value></representation>\n"
        "      </datawriter_qos>\n"
        "      <datareader_qos>\n"
        "        <representation><value>\n"
        "          <element>XCDR_DATA_REPRESENTATION</element>\n"
        "          <element>XCDR2_DATA_REPRESENTATION</element>\n"
        "        </value></representation>\n"
        "      </datareader_qos>\n"
        "    </qos_profile>",
    )
    library = QosLibrary.load(path)
    assert library.writer_qos("p")[Policy.DataRepresentation] == XCDR2
    assert library.reader_qos("p")[Policy.DataRepresentation] == EITHER
    assert library.topic_qos("p")[Policy.DataRepresentation] == EITHER


@pytest.mark.parametrize(
    ("profile", "reliability", "durability", "history"),
    [
        ("sensor_stream", Policy.Reliability.BestEffort, Policy.Durability.Volatile, 8),
        ("state", RELIABLE, Policy.Durability.TransientLocal, 1),
        ("command", RELIABLE, Policy.Durability.TransientLocal, None),
        ("request", RELIABLE, Policy.Durability.Volatile, None),
        ("health", Policy.Reliability.BestEffort, Policy.Durability.Volatile, 1),
        (
            "bulk",
            Policy.Reliability.Reliable(duration(seconds=1)),
            Policy.Durability.Volatile,
            None,
        ),
        ("durable", RELIABLE, Policy.Durability.Transient, 16),
        ("persistent", RELIABLE, Policy.Durability.Persistent, 16),
        ("perf_reliable", RELIABLE, Policy.Durability.Volatile, 50),
        ("perf_best_effort", Policy.Reliability.BestEffort, Policy.Durability.Volatile, 50),
    ],
)
def test_reader_and_writer_carry_the_core_policies(
    library: QosLibrary, profile: str, reliability: object, durability: object, history: int | None
) -> None:
    keep = Policy.History.KeepAll if history is None else Policy.History.KeepLast(history)
    for qos in (library.reader_qos(profile), library.writer_qos(profile)):
        assert qos[Policy.Reliability] == reliability
        assert qos[Policy.Durability] == durability
        assert qos[Policy.History] == keep


def test_specific_policies(library: QosLibrary) -> None:
    for qos in (library.reader_qos("sensor_stream"), library.writer_qos("sensor_stream")):
        assert qos[Policy.Deadline] == Policy.Deadline(2_000_000_000)
    for qos in (library.reader_qos("health"), library.writer_qos("health")):
        assert qos[Policy.Liveliness] == Policy.Liveliness.Automatic(3_000_000_000)
    limits = Policy.ResourceLimits(256, UNLIMITED, 256)
    assert library.reader_qos("bulk")[Policy.ResourceLimits] == limits
    assert library.writer_qos("bulk")[Policy.ResourceLimits] == limits
    # durability_service is a writer (and topic) policy: how much a writer keeps for late joiners
    assert library.writer_qos("command")[Policy.DurabilityService].history == (
        Policy.History.KeepLast(32)
    )
    assert Policy.DurabilityService not in library.reader_qos("command")


def test_fully_qualified_name_is_accepted(library: QosLibrary) -> None:
    assert library.reader_qos("mcc::state") == library.reader_qos("state")


def test_describe(library: QosLibrary) -> None:
    assert library.describe("state") == {
        "reliability": "reliable",
        "durability": "transient-local",
        "history": "keep-last 1",
        "deadline": "infinite",
        "liveliness": "automatic, lease infinite",
        "resource_limits": "unlimited",
    }
    assert library.describe("sensor_stream")["deadline"] == "2 s"
    assert library.describe("sensor_stream")["reliability"] == "best-effort"
    assert library.describe("health")["liveliness"] == "automatic, lease 3 s"
    assert library.describe("bulk")["reliability"] == "reliable, max-blocking 1 s"
    assert library.describe("bulk")["history"] == "keep-all"
    assert library.describe("bulk")["resource_limits"] == (
        "max_samples=256, max_instances=unlimited, max_samples_per_instance=256"
    )
    assert library.describe("command")["durability_service"] == "keep-last 32"
    assert library.describe("persistent")["durability"] == "persistent"
    assert library.describe("durable")["durability"] == "transient"


def test_describe_qos_lists_only_present_policies_in_order() -> None:
    qos = Qos(
        Policy.History.KeepLast(3),
        Policy.Reliability.Reliable(duration(milliseconds=250)),
        Policy.Lifespan(duration(microseconds=5)),
        Policy.Ownership.Exclusive,
    )
    assert describe_qos(qos) == {
        "reliability": "reliable, max-blocking 250 ms",
        "history": "keep-last 3",
        "lifespan": "5 us",
        "ownership": "exclusive",
    }
    assert describe_qos(Qos()) == {}


def test_describe_qos_leaves_out_defaults_and_plumbing() -> None:
    qos = Qos(
        Policy.Durability.Volatile,
        Policy.Ownership.Shared,
        Policy.LatencyBudget(0),
        Policy.Userdata(b"mcc-profile:state"),
        Policy.TransportPriority(3),
    )
    assert describe_qos(qos) == {"durability": "volatile", "transport_priority": "3"}


def test_policy_name() -> None:
    assert policy_name(11) == "reliability"
    assert policy_name(2) == "durability"
    assert policy_name(999) == "policy 999"


# -- the profiles on real entities -----------------------------------------------------------


@dataclass
class Probe(IdlStruct, typename="mcc_test.Probe"):
    value: int


def _wait_for(participant: DomainParticipant, reader: DataReader, mask: int) -> bool:
    """Wait (at most 5 s) until ``reader`` has a status in ``mask``."""
    reader.set_status_mask(mask)
    waitset = WaitSet(participant)
    waitset.attach(reader)
    try:
        return waitset.wait(duration(seconds=5)) > 0
    finally:
        waitset.detach(reader)


@pytest.mark.parametrize("profile", sorted(EXPECTED))
def test_reader_matches_writer_of_same_profile(
    library: QosLibrary, profile: str, domain_id: int
) -> None:
    participant = DomainParticipant(domain_id)
    topic = Topic(
        participant, f"mcc_qos_{os.getpid()}_{profile}", Probe, qos=library.topic_qos(profile)
    )
    writer = DataWriter(participant, topic, qos=library.writer_qos(profile))
    reader = DataReader(participant, topic, qos=library.reader_qos(profile))
    assert _wait_for(participant, reader, DDSStatus.SubscriptionMatched)
    assert reader.get_subscription_matched_status().current_count == 1
    assert reader.get_requested_incompatible_qos_status().total_count == 0
    assert writer.get_offered_incompatible_qos_status().total_count == 0


def test_state_reader_refuses_sensor_stream_writer(library: QosLibrary, domain_id: int) -> None:
    participant = DomainParticipant(domain_id)
    topic = Topic(participant, f"mcc_qos_{os.getpid()}_mismatch", Probe)
    writer = DataWriter(participant, topic, qos=library.writer_qos("sensor_stream"))
    reader = DataReader(participant, topic, qos=library.reader_qos("state"))
    assert _wait_for(participant, reader, DDSStatus.RequestedIncompatibleQos)
    status = reader.get_requested_incompatible_qos_status()
    assert status.total_count == 1
    assert policy_name(status.last_policy_id) in {"reliability", "durability"}
    assert reader.get_subscription_matched_status().current_count == 0
    assert writer.get_offered_incompatible_qos_status().total_count == 1


# -- errors ----------------------------------------------------------------------------------


def test_unknown_profile_names_file_and_known_profiles(library: QosLibrary) -> None:
    with pytest.raises(QosError) as info:
        library.reader_qos("sensor_strem")
    message = str(info.value)
    assert "'sensor_strem'" in message
    assert "mcc.xml" in message
    assert "did you mean 'sensor_stream'?" in message
    assert "known profiles: " + ", ".join(sorted(EXPECTED)) in message
    assert isinstance(info.value, MccError)


@pytest.mark.parametrize("method", ["topic_qos", "reader_qos", "writer_qos", "describe"])
def test_every_accessor_rejects_unknown_profiles(library: QosLibrary, method: str) -> None:
    with pytest.raises(QosError, match=r"unknown QoS profile 'nope'.*known profiles: bulk"):
        getattr(library, method)("nope")


def test_malformed_file_names_file_and_parser_complaint(tmp_path: Path) -> None:
    path = tmp_path / "broken.xml"
    path.write_text('<dds><qos_library name="mcc"><qos_profile name="a">\n</dds>\n')
    with pytest.raises(QosError, match=r"malformed .*broken\.xml: mismatched tag: line 2"):
        QosLibrary.load(path)


def test_element_cyclone_rejects_is_named(tmp_path: Path) -> None:
    path = write_library(
        tmp_path,
        '    <qos_profile name="typo">\n'
        "      <topic_qos>\n"
        "        <reliabilty><kind>RELIABLE_RELIABILITY_QOS</kind></reliabilty>\n"
        "      </topic_qos>\n"
        "    </qos_profile>",
        name="typo.xml",
    )
    with pytest.raises(QosError) as info:
        QosLibrary.load(path)
    message = str(info.value)
    assert "typo.xml" in message
    assert "Unknown element 'reliabilty'" in message
    assert "line 6" in message


def test_value_cyclone_rejects_is_named(tmp_path: Path) -> None:
    path = write_library(
        tmp_path,
        '    <qos_profile name="bad">\n'
        "      <topic_qos><reliability><kind>RELIABLE</kind></reliability></topic_qos>\n"
        "    </qos_profile>",
    )
    with pytest.raises(QosError, match=r"lib\.xml: .*Invalid value 'RELIABLE'"):
        QosLibrary.load(path)


def test_missing_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "absent.xml"
    with pytest.raises(QosError, match=rf"{re.escape(str(path))}.*{QOS_FILE_ENV}"):
        QosLibrary.load(path)


def test_library_must_be_named_mcc(tmp_path: Path) -> None:
    path = tmp_path / "other.xml"
    path.write_text(
        '<dds><qos_library name="other"><qos_profile name="a"><topic_qos/>'
        "</qos_profile></qos_library></dds>"
    )
    with pytest.raises(QosError, match=r"no <qos_library name=\"mcc\"> \(libraries found: 'oth"):
        QosLibrary.load(path)


# -- loading rules ---------------------------------------------------------------------------


def test_environment_variable_selects_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_library(
        tmp_path,
        '    <qos_profile name="only">\n'
        "      <topic_qos><history><kind>KEEP_ALL_HISTORY_QOS</kind></history></topic_qos>\n"
        "    </qos_profile>",
    )
    monkeypatch.setenv(QOS_FILE_ENV, str(path))
    library = default_library()
    assert library.path == path.resolve()
    assert library.names() == ("only",)


def test_entity_sections_override_the_topic_section(tmp_path: Path) -> None:
    path = write_library(
        tmp_path,
        '    <qos_profile name="mixed">\n'
        "      <topic_qos>\n"
        "        <reliability><kind>RELIABLE_RELIABILITY_QOS</kind></reliability>\n"
        "        <history><kind>KEEP_LAST_HISTORY_QOS</kind><depth>4</depth></history>\n"
        "        <durability><kind>TRANSIENT_DURABILITY_QOS</kind></durability>\n"
        "        <lifespan><duration><sec>5</sec><nanosec>0</nanosec></duration></lifespan>\n"
        "      </topic_qos>\n"
        "      <datareader_qos>\n"
        "        <reliability><kind>BEST_EFFORT_RELIABILITY_QOS</kind></reliability>\n"
        "      </datareader_qos>\n"
        "    </qos_profile>",
    )
    library = QosLibrary.load(path)
    reader, writer = library.reader_qos("mixed"), library.writer_qos("mixed")
    assert reader[Policy.Reliability] == Policy.Reliability.BestEffort
    assert writer[Policy.Reliability] == RELIABLE
    assert reader[Policy.History] == writer[Policy.History] == Policy.History.KeepLast(4)
    assert reader[Policy.Durability] == writer[Policy.Durability] == Policy.Durability.Transient
    assert Policy.Lifespan not in reader  # a writer-only policy stays with the writer
    assert writer[Policy.Lifespan] == Policy.Lifespan(duration(seconds=5))
    assert library.describe("mixed")["reliability"] == "writer reliable; reader best-effort"


def test_a_changed_file_is_reloaded(tmp_path: Path) -> None:
    profile = (
        '    <qos_profile name="p">\n'
        "      <topic_qos><history><kind>KEEP_LAST_HISTORY_QOS</kind><depth>{}</depth></history>"
        "</topic_qos>\n"
        "    </qos_profile>"
    )
    path = write_library(tmp_path, profile.format(2))
    assert QosLibrary.load(path).reader_qos("p")[Policy.History] == Policy.History.KeepLast(2)
    write_library(tmp_path, profile.format(30))
    assert QosLibrary.load(path).reader_qos("p")[Policy.History] == Policy.History.KeepLast(30)


# -- export to other vendors (mcc qos export) ------------------------------------------------


def test_rti_export_loads_back_to_the_same_profiles(library: QosLibrary, tmp_path: Path) -> None:
    """The RTI export is OMG DDS-XML with every setting in the entity sections: loaded by MCC's
    own loader it gives every reader and writer the QoS of qos/mcc.xml."""
    from mcc.bus.qos_export import export_profiles

    path = tmp_path / "rti.xml"
    path.write_text(export_profiles(library, "rti"))
    exported = QosLibrary.load(path)
    assert exported.names() == library.names()
    for profile in library.names():
        assert exported.writer_qos(profile) == library.writer_qos(profile), profile
        assert exported.reader_qos(profile) == library.reader_qos(profile), profile


def test_fastdds_export_has_a_writer_and_a_reader_per_profile(library: QosLibrary) -> None:
    import xml.etree.ElementTree as ET

    from mcc.bus.qos_export import export_profiles

    root = ET.fromstring(export_profiles(library, "fastdds"))
    ns = {"f": "http://www.eprosima.com/XMLSchemas/fastRTPS_Profiles"}
    for kind in ("data_writer", "data_reader"):
        names = [e.get("profile_name") for e in root.findall(f"f:profiles/f:{kind}", ns)]
        assert names == [f"mcc::{p}" for p in library.names()]
    state = root.find("f:profiles/f:data_writer[@profile_name='mcc::state']", ns)
    assert state is not None
    assert state.findtext("f:qos/f:reliability/f:kind", namespaces=ns) == "RELIABLE"
    assert state.findtext("f:qos/f:durability/f:kind", namespaces=ns) == "TRANSIENT_LOCAL"
    assert state.findtext("f:topic/f:historyQos/f:depth", namespaces=ns) == "1"
    health = root.find("f:profiles/f:data_reader[@profile_name='mcc::health']", ns)
    assert health is not None
    live = "f:qos/f:liveliness/"
    assert health.findtext(live + "f:lease_duration/f:sec", namespaces=ns) == "3"
    assert health.findtext(live + "f:announcement_period/f:sec", namespaces=ns) == "1"
    # The Fast DDS peer loads this file in every test of tests/interop/test_fastdds.py.


def test_export_refuses_an_unknown_vendor(library: QosLibrary) -> None:
    from mcc.bus.qos_export import export_profiles

    with pytest.raises(QosError, match=r"unknown vendor 'opendds'.*fastdds"):
        export_profiles(library, "opendds")


def test_a_mission_may_have_its_writers_write_xcdr2(
    monkeypatch: pytest.MonkeyPatch, library: QosLibrary
) -> None:
    from mcc.bus.qos import REPRESENTATION_ENV
    from mcc.settings import SettingsError

    monkeypatch.setenv(REPRESENTATION_ENV, "xcdr2")
    xcdr2 = default_library()
    assert xcdr2 is not library
    for profile in library.names():
        assert xcdr2.writer_qos(profile)[Policy.DataRepresentation] == XCDR2, profile
        assert xcdr2.reader_qos(profile) == library.reader_qos(profile)
    monkeypatch.setenv(REPRESENTATION_ENV, "CDR")
    with pytest.raises(SettingsError, match="MCC_DATA_REPRESENTATION: Input should be 'XCDR1'"):
        default_library()


@pytest.mark.parametrize("vendor", ["fastdds", "rti"])
def test_cli_exports_the_profiles(vendor: str, tmp_path: Path, library: QosLibrary) -> None:
    import subprocess
    import sys

    from mcc.bus.qos_export import export_profiles

    out = tmp_path / f"{vendor}.xml"
    cmd = [sys.executable, "-m", "mcc.cli", "qos", "export", "--vendor", vendor, "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == export_profiles(library, vendor)
