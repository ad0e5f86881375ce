"""Reading a QoS profile library file: the XML that Cyclone's QosProvider accepts (with the
standard DDS-XML it rejects put right), and its parser's errors turned into messages that name
the file and line."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
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

from mcc import settings
from mcc.errors import QosError
from mcc.resources import qos_file

_log = logging.getLogger(__name__)


LIBRARY_NAME = "mcc"
"""Name of the ``<qos_library>`` that holds MCC's profiles."""


QOS_FILE_ENV = settings.env_name("qos_file")
"""Environment variable naming another profile library file."""


REPRESENTATION_ENV = settings.env_name("data_representation")
"""Environment variable, ``XCDR1`` (the default) or ``XCDR2``: what the writers of profiles that
write XCDR1 write instead, mission-wide (a mission's ``env:``). XCDR2 is for missions whose
peers read nothing else, e.g. a Cyclone DDS C 0.10 peer (docs/interop.md)."""


DEFAULT_QOS_FILE = qos_file()
"""MCC's profile library, shipped with the package (``qos/mcc.xml``, see `mcc.resources`)."""


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


@dataclass(frozen=True)
class Profile:
    topic: TopicQos
    reader: DataReaderQos
    writer: DataWriterQos


def resolve_path(path: Path | None) -> Path:
    if path is None:
        path = settings.current().qos_file or DEFAULT_QOS_FILE
    return Path(path).expanduser().resolve()


def display_path(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def representation_override() -> str:
    """``MCC_DATA_REPRESENTATION``: XCDR1 (the default) or XCDR2, checked by `mcc.settings`."""
    return settings.current().data_representation


def load_profiles(path: Path, representation: str = "XCDR1") -> dict[str, Profile]:
    where = display_path(path)
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

    profiles: dict[str, Profile] = {}
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
        profiles[name] = Profile(
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
