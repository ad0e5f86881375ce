"""QoS by profile name: the profile library in ``qos/mcc.xml``, loaded with Cyclone's QosProvider.

Code asks for a profile (``"sensor_stream"``, ``"state"`` …) and never builds QoS inline::

    lib = default_library()
    reader = DataReader(participant, topic, qos=lib.reader_qos("state"))

The library file is the repository's ``qos/mcc.xml`` unless ``MCC_QOS_FILE`` or an argument names
another one. docs/qos.md describes the profiles and the XML that Cyclone accepts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import logging
import os
import re
import sys
import tempfile
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from cyclonedds.core import DDSException
from cyclonedds.qos import (
    BasePolicy,
    DataReaderQos,
    DataWriterQos,
    Policy,
    Qos,
    TopicQos,
)
from cyclonedds.qos_provider import QosProvider

from mcc.errors import QosError
from mcc.resources import qos_file

__all__ = [
    "DEFAULT_QOS_FILE",
    "LIBRARY_NAME",
    "QOS_FILE_ENV",
    "REPRESENTATION_ENV",
    "QosLibrary",
    "default_library",
    "describe_qos",
    "policy_name",
]

_log = logging.getLogger(__name__)

LIBRARY_NAME = "mcc"
"""Name of the ``<qos_library>`` that holds MCC's profiles."""

QOS_FILE_ENV = "MCC_QOS_FILE"
"""Environment variable naming another profile library file."""

REPRESENTATION_ENV = "MCC_DATA_REPRESENTATION"
"""Environment variable, ``XCDR1`` (the default) or ``XCDR2``: what the writers of profiles that
write XCDR1 write instead, mission-wide (a mission's ``env:``). XCDR2 is for missions whose
peers read nothing else, e.g. a Cyclone DDS C 0.10 peer (docs/interop.md)."""

DEFAULT_QOS_FILE = qos_file()
"""MCC's profile library, shipped with the package (``qos/mcc.xml``, see `mcc.resources`)."""

_INFINITE_NS = 0x7FFF_FFFF_FFFF_FFFF  # DDS_INFINITY
_DEFAULT_MAX_BLOCKING_NS = 100_000_000  # Cyclone's default for reliable writers

_SECTIONS = ("topic_qos", "datareader_qos", "datawriter_qos")
_OTHER_SECTIONS = ("domainparticipant_qos", "publisher_qos", "subscriber_qos")

# Cyclone DDS 11.0.1's XML parser answers "Unsupported value" to these standard DDS-XML kinds, so
# Cyclone parses them as TRANSIENT_LOCAL and the loader puts the real kind back afterwards.
_UNPARSED_DURABILITY: dict[str, BasePolicy] = {
    "TRANSIENT_DURABILITY_QOS": Policy.Durability.Transient,
    "PERSISTENT_DURABILITY_QOS": Policy.Durability.Persistent,
}
_UNPARSED_DURABILITY_RE = re.compile(r"\b(?:TRANSIENT|PERSISTENT)_DURABILITY_QOS\b")

# OMG DDS-XML (and RTI) write the data representation policy as
# <representation><value><element>XCDR_DATA_REPRESENTATION</element>…</value></representation>;
# Cyclone 11 parses only its own <data_representation><id><element>XCDR1</element>…</id>.
_REPRESENTATION_RE = re.compile(r"<!--.*?-->|<representation>(.*?)</representation>", re.S)
_REPRESENTATION_IDS = {
    "XCDR_DATA_REPRESENTATION": "XCDR1",
    "XCDR1_DATA_REPRESENTATION": "XCDR1",
    "XCDR2_DATA_REPRESENTATION": "XCDR2",
    "XML_DATA_REPRESENTATION": "XML",
}

# DDS QosPolicyId_t values, as in requested/offered incompatible QoS statuses.
_POLICY_NAMES = {
    1: "user_data",
    2: "durability",
    3: "presentation",
    4: "deadline",
    5: "latency_budget",
    6: "ownership",
    7: "ownership_strength",
    8: "liveliness",
    9: "time_based_filter",
    10: "partition",
    11: "reliability",
    12: "destination_order",
    13: "history",
    14: "resource_limits",
    15: "entity_factory",
    16: "writer_data_lifecycle",
    17: "reader_data_lifecycle",
    18: "topic_data",
    19: "group_data",
    20: "transport_priority",
    21: "lifespan",
    22: "durability_service",
    23: "property",
    24: "type_consistency",
    25: "data_representation",
}

# Order of describe_qos keys; policies not listed follow in the Qos' own order.
_DESCRIBE_ORDER = (
    "reliability",
    "durability",
    "history",
    "deadline",
    "liveliness",
    "resource_limits",
    "durability_service",
    "lifespan",
    "latency_budget",
    "ownership",
    "ownership_strength",
    "destination_order",
    "transport_priority",
    "time_based_filter",
    "partition",
    "presentation",
    "writer_data_lifecycle",
    "reader_data_lifecycle",
)

# describe_qos always shows these when present; other policies only when not at their default.
_CORE = ("reliability", "durability", "history", "deadline", "liveliness", "resource_limits")
_DEFAULT_TEXT = {
    "durability_service": "keep-last 1",
    "lifespan": "infinite",
    "latency_budget": "0 s",
    "ownership": "shared",
    "ownership_strength": "0",
    "destination_order": "by-reception-timestamp",
    "transport_priority": "0",
    "time_based_filter": "0 s",
    "partition": "",
    "presentation": "instance",
    "writer_data_lifecycle": "autodispose",
    "reader_data_lifecycle": "autopurge no-writer infinite, disposed infinite",
}
# Plumbing rather than QoS a person chooses (MCC reads its profile tag from user data itself).
_NOT_DESCRIBED = frozenset(
    {
        "BinaryProperty",
        "DataRepresentation",
        "EntityName",
        "Groupdata",
        "IgnoreLocal",
        "Property",
        "Topicdata",
        "TypeConsistency",
        "Userdata",
    }
)

# What a reader or writer gets for a policy its profile leaves unset (Cyclone's defaults).
_COMMON_DEFAULTS = {
    "durability": "volatile",
    "history": "keep-last 1",
    "deadline": "infinite",
    "liveliness": "automatic, lease infinite",
    "resource_limits": "unlimited",
}
_READER_DEFAULTS = {"reliability": "best-effort", **_COMMON_DEFAULTS}
_WRITER_DEFAULTS = {"reliability": "reliable", **_COMMON_DEFAULTS}


@dataclass(frozen=True)
class _Profile:
    topic: TopicQos
    reader: DataReaderQos
    writer: DataWriterQos


class QosLibrary:
    """The QoS profiles of one profile library file, by name.

    Get one with :meth:`load` or :func:`default_library`; the QoS objects it hands out are
    immutable and complete (a reader's and a writer's QoS include the profile's topic QoS).
    """

    _cache: dict[tuple[Path, int, int, str], QosLibrary] = {}
    _cache_lock = threading.Lock()

    def __init__(self, path: Path, profiles: Mapping[str, _Profile]) -> None:
        self._path = path
        self._profiles = dict(profiles)

    @classmethod
    def load(cls, path: Path | None = None) -> QosLibrary:
        """Load the library at ``path``, else ``$MCC_QOS_FILE``, else the repository's.

        Loads are cached per file (and its modification time). Raises :class:`QosError` naming
        the file when it is missing, malformed, or rejected by Cyclone's parser.
        """
        resolved = _resolve_path(path)
        try:
            stat = resolved.stat()
        except OSError as exc:
            raise QosError(
                f"cannot read QoS profile library {_display(resolved)}: {exc.strerror}; "
                f"pass the path of a profile library or set {QOS_FILE_ENV}"
            ) from exc
        representation = _representation_override()
        key = (resolved, stat.st_mtime_ns, stat.st_size, representation)
        with cls._cache_lock:
            library = cls._cache.get(key)
            if library is None:
                library = cls(resolved, _load_profiles(resolved, representation))
                cls._cache[key] = library
            return library

    @property
    def path(self) -> Path:
        """The absolute path of the profile library file."""
        return self._path

    def names(self) -> tuple[str, ...]:
        """The profile names, sorted."""
        return tuple(sorted(self._profiles))

    def topic_qos(self, profile: str) -> TopicQos:
        """The QoS to create a topic with."""
        return self._profile(profile).topic

    def reader_qos(self, profile: str) -> DataReaderQos:
        """The complete QoS of a data reader."""
        return self._profile(profile).reader

    def writer_qos(self, profile: str) -> DataWriterQos:
        """The complete QoS of a data writer."""
        return self._profile(profile).writer

    def describe(self, profile: str) -> dict[str, str]:
        """The profile's policies for people, e.g. ``{"reliability": "reliable", …}``.

        Always has reliability, durability, history, deadline, liveliness and resource_limits
        (defaults filled in); where a reader and a writer differ, the value says both.
        """
        entry = self._profile(profile)
        writer = {**_WRITER_DEFAULTS, **describe_qos(entry.writer)}
        reader = {**_READER_DEFAULTS, **describe_qos(entry.reader)}
        described: dict[str, str] = {}
        for key in _ordered_keys([*writer, *reader]):
            w, r = writer.get(key), reader.get(key)
            if w is not None and r is not None and w != r:
                described[key] = f"writer {w}; reader {r}"
            else:
                described[key] = w if w is not None else (r or "")
        return described

    def _profile(self, profile: str) -> _Profile:
        name = profile.removeprefix(f"{LIBRARY_NAME}::")
        try:
            return self._profiles[name]
        except KeyError:
            raise QosError(self._unknown_profile_message(profile)) from None

    def _unknown_profile_message(self, profile: str) -> str:
        known = self.names()
        close = difflib.get_close_matches(profile, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return (
            f"unknown QoS profile {profile!r} in {_display(self._path)}{hint}; "
            f"known profiles: {', '.join(known)}"
        )

    def __repr__(self) -> str:
        return f"QosLibrary({str(self._path)!r}, profiles={self.names()!r})"


def default_library() -> QosLibrary:
    """The library at ``$MCC_QOS_FILE``, else the repository's ``qos/mcc.xml``."""
    return QosLibrary.load()


def describe_qos(qos: Qos) -> dict[str, str]:
    """The policies of ``qos`` for people, e.g. ``{"history": "keep-last 1", …}``.

    Reliability, durability, history, deadline, liveliness and resource limits are shown when
    present; other policies only when they differ from the DDS default. Plumbing (user data, data
    representation, type consistency …) is left out.
    """
    described: dict[str, str] = {}
    for policy in qos:
        if getattr(policy, "__scope__", "").partition("<")[0] in _NOT_DESCRIBED:
            continue
        key, text = _describe_policy(policy)
        if key in _CORE or _DEFAULT_TEXT.get(key) != text:
            described[key] = text
    return {key: described[key] for key in _ordered_keys(described)}


def policy_name(policy_id: int) -> str:
    """The name of a DDS QoS policy id, as in incompatible-QoS statuses (11 → "reliability")."""
    return _POLICY_NAMES.get(policy_id, f"policy {policy_id}")


# -- loading ----------------------------------------------------------------------------------


def _resolve_path(path: Path | None) -> Path:
    if path is None:
        env = os.environ.get(QOS_FILE_ENV, "")
        path = Path(env) if env else DEFAULT_QOS_FILE
    return Path(path).expanduser().resolve()


def _display(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def _representation_override() -> str:
    value = os.environ.get(REPRESENTATION_ENV, "XCDR1").strip().upper() or "XCDR1"
    if value not in ("XCDR1", "XCDR2"):
        raise QosError(
            f"{REPRESENTATION_ENV}={os.environ[REPRESENTATION_ENV]!r}: write XCDR1 (the default) "
            "or XCDR2"
        )
    return value


def _load_profiles(path: Path, representation: str = "XCDR1") -> dict[str, _Profile]:
    where = _display(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise QosError(f"cannot read QoS profile library {where}: {exc.strerror}") from exc
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise QosError(f"malformed QoS profile library {where}: {exc}") from exc

    sections, durability = _read_structure(root, where)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise QosError(f"QoS profile library {where} is not UTF-8: {exc}") from exc
    parseable = _UNPARSED_DURABILITY_RE.sub("TRANSIENT_LOCAL_DURABILITY_QOS", text)
    parseable = _REPRESENTATION_RE.sub(_cyclone_representation, parseable)
    provided = _cyclone_sections(parseable, sections, where)

    profiles: dict[str, _Profile] = {}
    for name in sections:
        parts = {
            section: Qos(durability[(name, section)], base=qos)
            if (name, section) in durability
            else qos
            for section, qos in provided[name].items()
        }
        topic = parts.get("topic_qos", Qos())
        topic_qos = topic.topic()
        if "topic_qos" not in parts:
            topic_qos = _topic_from_entities(parts)
        writer = Qos(*parts.get("datawriter_qos", Qos()), base=topic)
        if representation == "XCDR2" and _writes_xcdr1(writer):
            writer = Qos(Policy.DataRepresentation(use_xcdrv2_representation=True), base=writer)
        profiles[name] = _Profile(
            topic=topic_qos,
            reader=Qos(*parts.get("datareader_qos", Qos()), base=topic).datareader(),
            writer=writer.datawriter(),
        )
    return profiles


def _writes_xcdr1(qos: Qos) -> bool:
    """Whether a writer with ``qos`` writes XCDR1 (the first representation it offers)."""
    if Policy.DataRepresentation not in qos:  # Qos is not a Mapping: no .get
        return False
    return bool(qos[Policy.DataRepresentation].use_cdrv0_representation)


def _topic_from_entities(parts: Mapping[str, Qos]) -> TopicQos:
    """A topic QoS for a profile without ``<topic_qos>``: the writer's policies, accepting the
    representations the reader accepts (an entity made with the topic's QoS then matches every
    writer of the profile)."""
    writer = parts.get("datawriter_qos", Qos())
    reader = parts.get("datareader_qos", Qos())
    if Policy.DataRepresentation in reader:
        writer = Qos(reader[Policy.DataRepresentation], base=writer)
    return writer.topic()


def _cyclone_representation(match: re.Match[str]) -> str:
    """One OMG DDS-XML ``<representation>`` element in Cyclone's dialect (same line count)."""
    if match.group(1) is None:  # a comment
        return match.group(0)
    body = match.group(1).replace("<value>", "<id>").replace("</value>", "</id>")
    for omg, cyclone in _REPRESENTATION_IDS.items():
        body = re.sub(rf">\s*{omg}\s*<", f">{cyclone}<", body)
    return f"<data_representation>{body}</data_representation>"


def _read_structure(
    root: ET.Element, where: str
) -> tuple[dict[str, list[str]], dict[tuple[str, str], BasePolicy]]:
    """Profile → its QoS sections, and the durability kinds that Cyclone cannot parse."""
    if _local(root.tag) != "dds":
        raise QosError(
            f"QoS profile library {where} has root element <{_local(root.tag)}>; "
            f'it must be <dds> holding <qos_library name="{LIBRARY_NAME}">'
        )
    libraries = [lib for lib in root if _local(lib.tag) == "qos_library"]
    library = next((lib for lib in libraries if lib.get("name") == LIBRARY_NAME), None)
    if library is None:
        names = ", ".join(repr(lib.get("name")) for lib in libraries) or "none"
        raise QosError(
            f'QoS profile library {where} has no <qos_library name="{LIBRARY_NAME}"> '
            f"(libraries found: {names})"
        )

    sections: dict[str, list[str]] = {}
    durability: dict[tuple[str, str], BasePolicy] = {}
    for profile in library:
        if _local(profile.tag) != "qos_profile":
            continue
        name = profile.get("name", "")
        if not name:
            raise QosError(f"QoS profile library {where}: a <qos_profile> has no name attribute")
        if name in sections:
            raise QosError(f"QoS profile library {where}: profile {name!r} is defined twice")
        found: list[str] = []
        for element in profile:
            section = _local(element.tag)
            if section in _OTHER_SECTIONS:
                continue
            if section not in _SECTIONS:
                raise QosError(
                    f"QoS profile {name!r} in {where}: unknown element <{section}>; "
                    f"a profile holds {', '.join(f'<{s}>' for s in _SECTIONS)}"
                )
            if element.get("name") is not None:
                raise QosError(
                    f'QoS profile {name!r} in {where}: <{section} name="{element.get("name")}"> '
                    "is per-topic QoS, which MCC does not use; give it a profile of its own"
                )
            if section in found:
                raise QosError(f"QoS profile {name!r} in {where}: <{section}> appears twice")
            found.append(section)
            kind = _durability_kind(element)
            if kind in _UNPARSED_DURABILITY:
                durability[(name, section)] = _UNPARSED_DURABILITY[kind]
        if not found:
            raise QosError(
                f"QoS profile {name!r} in {where} defines no QoS; "
                "give it a <topic_qos> with its policies"
            )
        sections[name] = found
    if not sections:
        raise QosError(f"QoS profile library {where}: library {LIBRARY_NAME!r} has no profile")
    return sections, durability


def _durability_kind(section: ET.Element) -> str | None:
    for policy in section:
        if _local(policy.tag) == "durability":
            for field in policy:
                if _local(field.tag) == "kind":
                    return (field.text or "").strip()
    return None


def _cyclone_sections(
    text: str, sections: Mapping[str, Iterable[str]], where: str
) -> dict[str, dict[str, Qos]]:
    """Parse ``text`` with Cyclone's QosProvider and fetch every section that exists."""
    # Cyclone takes XML (rather than a path) when the string starts with '<'.
    body = text.lstrip()
    skipped_lines = text[: len(text) - len(body)].count("\n")
    getters: dict[str, Callable[[QosProvider, str], Qos]] = {
        "topic_qos": QosProvider.get_topic_qos,
        "datareader_qos": QosProvider.get_datareader_qos,
        "datawriter_qos": QosProvider.get_datawriter_qos,
    }
    with _native_stderr() as complaints:
        try:
            provider = QosProvider(body)
            result = {
                name: {
                    section: getters[section](provider, f"{LIBRARY_NAME}::{name}")
                    for section in found
                }
                for name, found in sections.items()
            }
        except DDSException as exc:
            failure: DDSException | None = exc
        else:
            failure = None
    if failure is not None:
        reason = _cyclone_reason(complaints, skipped_lines) or str(failure)
        raise QosError(
            f"Cyclone DDS rejected QoS profile library {where}: {reason}; "
            "see docs/qos.md for the elements and values it accepts"
        ) from failure
    for line in complaints:
        _log.warning("Cyclone DDS, loading %s: %s", where, line)
    return result


_LOG_PREFIX_RE = re.compile(r"^\d+\.\d+\s+\[[^\]]*\]\s+[^:]*:\s*")
_LINE_RE = re.compile(r"\bline (\d+)\b")
_NOISE_RE = re.compile(r"^Error parsing system definition XML: |error code -?\d+, ")


def _cyclone_reason(lines: Iterable[str], skipped_lines: int) -> str:
    """The parser's complaint out of Cyclone's log lines, with file line numbers."""
    # Keep the log records' first lines, less the "Failed during read sysdef: <xml …>" records
    # that only repeat the document (the lines that follow a record's first are the XML).
    messages = [
        _LOG_PREFIX_RE.sub("", line).strip() for line in lines if _LOG_PREFIX_RE.match(line)
    ]
    messages = [_NOISE_RE.sub("", m) for m in messages if m and not m.startswith("Failed")]

    def shift(match: re.Match[str]) -> str:
        return f"line {int(match.group(1)) + skipped_lines}"

    return "; ".join(_LINE_RE.sub(shift, m) for m in messages)


@contextlib.contextmanager
def _native_stderr() -> Iterator[list[str]]:
    """Collect what native code writes to file descriptor 2 meanwhile.

    Cyclone reports why it rejects an XML file only in its log, which goes to stderr. The
    redirection is process-wide, so it is held only around the (cached, rare) parse.
    """
    lines: list[str] = []
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to borrow: parse without the complaint
        yield lines
        return
    sys.stderr.flush()
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            lines.extend(sink.read().decode("utf-8", "replace").splitlines())


# -- describing -------------------------------------------------------------------------------


def _ordered_keys(keys: Iterable[str]) -> list[str]:
    unique = list(dict.fromkeys(keys))
    known = [key for key in _DESCRIBE_ORDER if key in unique]
    return known + [key for key in unique if key not in _DESCRIBE_ORDER]


def _duration(ns: int) -> str:
    if ns >= _INFINITE_NS:
        return "infinite"
    for unit, size in (("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)):
        if ns % size == 0:
            return f"{ns // size} {unit}"
    return f"{ns} ns"


def _limit(value: int) -> str:
    return "unlimited" if value < 0 else str(value)


def _history(policy: BasePolicy) -> str:
    if isinstance(policy, Policy.History.KeepLast):
        return f"keep-last {policy.depth}"
    return "keep-all"


def _limits(max_samples: int, max_instances: int, max_samples_per_instance: int) -> str:
    if max_samples < 0 and max_instances < 0 and max_samples_per_instance < 0:
        return "unlimited"
    return (
        f"max_samples={_limit(max_samples)}, max_instances={_limit(max_instances)}, "
        f"max_samples_per_instance={_limit(max_samples_per_instance)}"
    )


def _kebab(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _describe_policy(policy: BasePolicy) -> tuple[str, str]:
    scope: str = getattr(policy, "__scope__", type(policy).__name__)
    if isinstance(policy, Policy.Reliability.Reliable):
        blocking = policy.max_blocking_time
        if blocking == _DEFAULT_MAX_BLOCKING_NS:
            return "reliability", "reliable"
        return "reliability", f"reliable, max-blocking {_duration(blocking)}"
    if scope == "History":
        return "history", _history(policy)
    if isinstance(policy, Policy.Deadline):
        return "deadline", _duration(policy.deadline)
    if isinstance(policy, Policy.LatencyBudget):
        return "latency_budget", _duration(policy.budget)
    if isinstance(policy, Policy.Lifespan):
        return "lifespan", _duration(policy.lifespan)
    if isinstance(
        policy,
        Policy.Liveliness.Automatic
        | Policy.Liveliness.ManualByParticipant
        | Policy.Liveliness.ManualByTopic,
    ):
        return "liveliness", f"{_kind(policy)}, lease {_duration(policy.lease_duration)}"
    if isinstance(policy, Policy.ResourceLimits):
        return "resource_limits", _limits(
            policy.max_samples, policy.max_instances, policy.max_samples_per_instance
        )
    if isinstance(policy, Policy.DurabilityService):
        text = _history(policy.history)
        if policy.cleanup_delay:
            text += f", cleanup delay {_duration(policy.cleanup_delay)}"
        limits = _limits(policy.max_samples, policy.max_instances, policy.max_samples_per_instance)
        if limits != "unlimited":
            text += f", {limits}"
        return "durability_service", text
    if isinstance(policy, Policy.Partition):
        return "partition", ", ".join(policy.partitions)
    if isinstance(policy, Policy.OwnershipStrength):
        return "ownership_strength", str(policy.strength)
    if isinstance(policy, Policy.TransportPriority):
        return "transport_priority", str(policy.priority)
    if isinstance(policy, Policy.TimeBasedFilter):
        return "time_based_filter", _duration(policy.filter_time)
    if isinstance(policy, Policy.WriterDataLifecycle):
        return "writer_data_lifecycle", "autodispose" if policy.autodispose else "no autodispose"
    if isinstance(policy, Policy.ReaderDataLifecycle):
        nowriter = _duration(policy.autopurge_nowriter_samples_delay)
        disposed = _duration(policy.autopurge_disposed_samples_delay)
        return "reader_data_lifecycle", f"autopurge no-writer {nowriter}, disposed {disposed}"
    if scope == "PresentationAccessScope":
        flags = [f for f in ("coherent", "ordered") if getattr(policy, f"{f}_access", False)]
        return "presentation", ", ".join([_kind(policy), *flags])
    return _snake(scope), _generic(policy)


def _kind(policy: BasePolicy) -> str:
    """``Policy.Durability.TransientLocal`` → "transient-local"."""
    return _kebab(type(policy).__name__.rpartition(".")[2])


def _generic(policy: BasePolicy) -> str:
    """A policy by its kind if it has no fields, else by its fields."""
    if not dataclasses.is_dataclass(policy) or not dataclasses.fields(policy):
        return _kind(policy)
    return ", ".join(f"{f.name}={getattr(policy, f.name)}" for f in dataclasses.fields(policy))


# -- export to other vendors (mcc qos export, docs/interop.md) --------------------------------

VENDORS = ("fastdds", "rti")
"""The vendors whose XML ``export_profiles`` writes."""

_FASTDDS_NS = "http://www.eprosima.com/XMLSchemas/fastRTPS_Profiles"


def export_profiles(library: QosLibrary, vendor: str) -> str:
    """The profiles of ``library`` as XML that ``vendor``'s QoS loader reads.

    ``fastdds``: Fast DDS 2.x XML profiles, a ``data_writer`` and a ``data_reader`` profile
    named ``mcc::PROFILE`` each (Fast DDS 2.x XML has no data representation: it writes XCDR1
    anyway; durability_service and writer_data_lifecycle have no element either). ``rti``: RTI
    Connext XML (OMG DDS-XML), library ``mcc``, each profile with its writer and reader QoS.
    """
    if vendor not in VENDORS:
        raise QosError(f"unknown vendor {vendor!r} for a QoS export; choose one of {VENDORS}")
    if vendor == "fastdds":
        root = ET.Element("dds", xmlns=_FASTDDS_NS)
        profiles = ET.SubElement(root, "profiles")
        for name in library.names():
            for kind, qos in (
                ("data_writer", library.writer_qos(name)),
                ("data_reader", library.reader_qos(name)),
            ):
                _fastdds_endpoint(ET.SubElement(profiles, kind, profile_name=f"mcc::{name}"), qos)
    else:
        root = ET.Element("dds")
        lib = ET.SubElement(root, "qos_library", name=LIBRARY_NAME)
        for name in library.names():
            profile = ET.SubElement(lib, "qos_profile", name=name)
            _omg_section(ET.SubElement(profile, "datawriter_qos"), library.writer_qos(name))
            _omg_section(ET.SubElement(profile, "datareader_qos"), library.reader_qos(name))
    root.insert(
        0,
        ET.Comment(
            f" GENERATED by mcc qos export (vendor {vendor}) from {library.path.name}: "
            "do not edit, export again "
        ),
    )
    ET.indent(root, space="  ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _duration_xml(parent: ET.Element, tag: str, ns: int, *, infinite: str) -> None:
    element = ET.SubElement(parent, tag)
    if ns >= _INFINITE_NS:
        ET.SubElement(element, "sec").text = infinite
        ET.SubElement(element, "nanosec").text = (
            "DURATION_INFINITY" if infinite == "DURATION_INFINITY" else "DURATION_INFINITE_NSEC"
        )
        return
    ET.SubElement(element, "sec").text = str(ns // 1_000_000_000)
    ET.SubElement(element, "nanosec").text = str(ns % 1_000_000_000)


def _fastdds_endpoint(element: ET.Element, qos: Qos) -> None:
    topic = ET.SubElement(element, "topic")
    history = qos[Policy.History] if Policy.History in qos else Policy.History.KeepLast(1)
    h = ET.SubElement(topic, "historyQos")
    if isinstance(history, Policy.History.KeepLast):
        ET.SubElement(h, "kind").text = "KEEP_LAST"
        ET.SubElement(h, "depth").text = str(history.depth)
    else:
        ET.SubElement(h, "kind").text = "KEEP_ALL"
    if Policy.ResourceLimits in qos:
        limits = qos[Policy.ResourceLimits]
        r = ET.SubElement(topic, "resourceLimitsQos")
        # Fast DDS: 0 means unlimited
        ET.SubElement(r, "max_samples").text = str(max(limits.max_samples, 0))
        ET.SubElement(r, "max_instances").text = str(max(limits.max_instances, 0))
        per = max(limits.max_samples_per_instance, 0)
        ET.SubElement(r, "max_samples_per_instance").text = str(per)
    q = ET.SubElement(element, "qos")
    if Policy.Durability in qos:
        kind = _kind(qos[Policy.Durability]).replace("-", "_").upper()
        ET.SubElement(ET.SubElement(q, "durability"), "kind").text = kind
    if Policy.Reliability in qos:
        policy = qos[Policy.Reliability]
        rel = ET.SubElement(q, "reliability")
        if isinstance(policy, Policy.Reliability.Reliable):
            ET.SubElement(rel, "kind").text = "RELIABLE"
            _duration_xml(
                rel, "max_blocking_time", policy.max_blocking_time, infinite="DURATION_INFINITY"
            )
        else:
            ET.SubElement(rel, "kind").text = "BEST_EFFORT"
    if Policy.Deadline in qos:
        deadline = ET.SubElement(q, "deadline")
        _duration_xml(
            deadline, "period", qos[Policy.Deadline].deadline, infinite="DURATION_INFINITY"
        )
    if Policy.Liveliness in qos:
        policy = qos[Policy.Liveliness]
        live = ET.SubElement(q, "liveliness")
        ET.SubElement(live, "kind").text = _kind(policy).replace("-", "_").upper()
        _duration_xml(live, "lease_duration", policy.lease_duration, infinite="DURATION_INFINITY")
        # Fast DDS refuses a lease that is not longer than the announcement period
        announce = (
            policy.lease_duration // 3 if policy.lease_duration < _INFINITE_NS else _INFINITE_NS
        )
        _duration_xml(live, "announcement_period", announce, infinite="DURATION_INFINITY")
    ET.SubElement(element, "historyMemoryPolicy").text = "PREALLOCATED_WITH_REALLOC"


def _omg_section(element: ET.Element, qos: Qos) -> None:
    """``qos`` as OMG DDS-XML policies (the dialect RTI Connext reads)."""

    def kind(parent: ET.Element, text: str) -> None:
        ET.SubElement(parent, "kind").text = text

    def inf(value: int) -> str:
        return "LENGTH_UNLIMITED" if value < 0 else str(value)

    if Policy.Reliability in qos:
        policy = qos[Policy.Reliability]
        rel = ET.SubElement(element, "reliability")
        if isinstance(policy, Policy.Reliability.Reliable):
            kind(rel, "RELIABLE_RELIABILITY_QOS")
            _duration_xml(
                rel, "max_blocking_time", policy.max_blocking_time, infinite="DURATION_INFINITE_SEC"
            )
        else:
            kind(rel, "BEST_EFFORT_RELIABILITY_QOS")
    if Policy.Durability in qos:
        name = _kind(qos[Policy.Durability]).replace("-", "_").upper()
        kind(ET.SubElement(element, "durability"), f"{name}_DURABILITY_QOS")
    if Policy.DurabilityService in qos:
        policy = qos[Policy.DurabilityService]
        ds = ET.SubElement(element, "durability_service")
        _duration_xml(
            ds, "service_cleanup_delay", policy.cleanup_delay, infinite="DURATION_INFINITE_SEC"
        )
        if isinstance(policy.history, Policy.History.KeepLast):
            ET.SubElement(ds, "history_kind").text = "KEEP_LAST_HISTORY_QOS"
            ET.SubElement(ds, "history_depth").text = str(policy.history.depth)
        else:
            ET.SubElement(ds, "history_kind").text = "KEEP_ALL_HISTORY_QOS"
        ET.SubElement(ds, "max_samples").text = inf(policy.max_samples)
        ET.SubElement(ds, "max_instances").text = inf(policy.max_instances)
        ET.SubElement(ds, "max_samples_per_instance").text = inf(policy.max_samples_per_instance)
    if Policy.History in qos:
        policy = qos[Policy.History]
        h = ET.SubElement(element, "history")
        if isinstance(policy, Policy.History.KeepLast):
            kind(h, "KEEP_LAST_HISTORY_QOS")
            ET.SubElement(h, "depth").text = str(policy.depth)
        else:
            kind(h, "KEEP_ALL_HISTORY_QOS")
    if Policy.Deadline in qos:
        _duration_xml(
            ET.SubElement(element, "deadline"),
            "period",
            qos[Policy.Deadline].deadline,
            infinite="DURATION_INFINITE_SEC",
        )
    if Policy.Liveliness in qos:
        policy = qos[Policy.Liveliness]
        live = ET.SubElement(element, "liveliness")
        kind(live, _kind(policy).replace("-", "_").upper() + "_LIVELINESS_QOS")
        _duration_xml(
            live, "lease_duration", policy.lease_duration, infinite="DURATION_INFINITE_SEC"
        )
    if Policy.ResourceLimits in qos:
        policy = qos[Policy.ResourceLimits]
        r = ET.SubElement(element, "resource_limits")
        ET.SubElement(r, "max_samples").text = inf(policy.max_samples)
        ET.SubElement(r, "max_instances").text = inf(policy.max_instances)
        ET.SubElement(r, "max_samples_per_instance").text = inf(policy.max_samples_per_instance)
    if Policy.WriterDataLifecycle in qos:
        lifecycle = ET.SubElement(element, "writer_data_lifecycle")
        flag = "true" if qos[Policy.WriterDataLifecycle].autodispose else "false"
        ET.SubElement(lifecycle, "autodispose_unregistered_instances").text = flag
    if Policy.DataRepresentation in qos:
        policy = qos[Policy.DataRepresentation]
        value = ET.SubElement(ET.SubElement(element, "representation"), "value")
        if policy.use_cdrv0_representation:
            ET.SubElement(value, "element").text = "XCDR_DATA_REPRESENTATION"
        if policy.use_xcdrv2_representation:
            ET.SubElement(value, "element").text = "XCDR2_DATA_REPRESENTATION"
