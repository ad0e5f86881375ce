"""QoS by profile name: the profile library in ``qos/mcc.xml``, loaded with Cyclone's QosProvider.

Code asks for a profile (``"sensor_stream"``, ``"state"`` …) and never builds QoS inline::

    lib = default_library()
    reader = DataReader(participant, topic, qos=lib.reader_qos("state"))

The library file is the repository's ``qos/mcc.xml`` unless ``MCC_QOS_FILE`` or an argument names
another one. docs/qos.md describes the profiles and the XML that Cyclone accepts.
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Mapping
from pathlib import Path

from cyclonedds.qos import (
    DataReaderQos,
    DataWriterQos,
    TopicQos,
)

from mcc.bus.qos_describe import (
    READER_DEFAULTS,
    WRITER_DEFAULTS,
    describe_qos,
    ordered_keys,
    policy_name,
)
from mcc.bus.qos_xml import (
    DEFAULT_QOS_FILE,
    LIBRARY_NAME,
    QOS_FILE_ENV,
    REPRESENTATION_ENV,
    Profile,
    display_path,
    load_profiles,
    representation_override,
    resolve_path,
)
from mcc.errors import QosError

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


class QosLibrary:
    """The QoS profiles of one profile library file, by name.

    Get one with :meth:`load` or :func:`default_library`; the QoS objects it hands out are
    immutable and complete (a reader's and a writer's QoS include the profile's topic QoS).
    """

    _cache: dict[tuple[Path, int, int, str], QosLibrary] = {}
    _cache_lock = threading.Lock()

    def __init__(self, path: Path, profiles: Mapping[str, Profile]) -> None:
        self._path = path
        self._profiles = dict(profiles)

    @classmethod
    def load(cls, path: Path | None = None) -> QosLibrary:
        """Load the library at ``path``, else ``$MCC_QOS_FILE``, else the repository's.

        Loads are cached per file (and its modification time). Raises :class:`QosError` naming
        the file when it is missing, malformed, or rejected by Cyclone's parser.
        """
        resolved = resolve_path(path)
        try:
            stat = resolved.stat()
        except OSError as exc:
            raise QosError(
                f"cannot read QoS profile library {display_path(resolved)}: {exc.strerror}; "
                f"pass the path of a profile library or set {QOS_FILE_ENV}"
            ) from exc
        representation = representation_override()
        key = (resolved, stat.st_mtime_ns, stat.st_size, representation)
        with cls._cache_lock:
            library = cls._cache.get(key)
            if library is None:
                library = cls(resolved, load_profiles(resolved, representation))
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
        writer = {**WRITER_DEFAULTS, **describe_qos(entry.writer)}
        reader = {**READER_DEFAULTS, **describe_qos(entry.reader)}
        described: dict[str, str] = {}
        for key in ordered_keys([*writer, *reader]):
            w, r = writer.get(key), reader.get(key)
            if w is not None and r is not None and w != r:
                described[key] = f"writer {w}; reader {r}"
            else:
                described[key] = w if w is not None else (r or "")
        return described

    def _profile(self, profile: str) -> Profile:
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
            f"unknown QoS profile {profile!r} in {display_path(self._path)}{hint}; "
            f"known profiles: {', '.join(known)}"
        )

    def __repr__(self) -> str:
        return f"QosLibrary({str(self._path)!r}, profiles={self.names()!r})"


def default_library() -> QosLibrary:
    """The library at ``$MCC_QOS_FILE``, else the repository's ``qos/mcc.xml``."""
    return QosLibrary.load()


# -- loading ----------------------------------------------------------------------------------


# -- describing -------------------------------------------------------------------------------


# -- export to other vendors (mcc qos export, docs/interop.md) --------------------------------
