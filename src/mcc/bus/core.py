"""The bus: a DDS participant with typed writers and readers, QoS by profile name.

>>> with Bus(domain_id=7) as bus:
...     tracks = bus.writer("Track")          # type and profile from the topic catalogue
...     picture = bus.reader("AirPicture")

Samples cross into Cyclone through ``mcc.bus._native`` (the GIL is released in every write and
take); no Python code runs on a Cyclone thread: ``on_data`` handlers and QoS status events are
served by the bus's own dispatcher thread (``mcc.bus.dispatch``). A sample that does not decode
or fails the topic's checks is dropped, counted in ``bus.stats`` and logged once per writer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from cyclonedds.builtin import (
    BuiltinDataReader,
    BuiltinTopicDcpsParticipant,
    BuiltinTopicDcpsPublication,
    BuiltinTopicDcpsSubscription,
)
from cyclonedds.core import (
    DDSException,
    Entity,
    Policy,
    Qos,
)
from cyclonedds.domain import Domain, DomainParticipant
from cyclonedds.pub import Publisher
from cyclonedds.sub import Subscriber
from cyclonedds.topic import Topic

from mcc import settings
from mcc.bus import _native, shm
from mcc.bus.dispatch import Dispatcher
from mcc.bus.endpoints import Reader, Writer
from mcc.bus.qos import QosLibrary, default_library
from mcc.bus.statistics import QosEvent, StatsBook
from mcc.bus.topics import is_sourced, source_partition, topic_spec
from mcc.bus.transport import Transport, port_clash_hint
from mcc.errors import MccError, TopicError, TransportError
from mcc.lifecycle import Closeable

T = TypeVar("T")
#: Set by the supervisor for an instance of a secured mission: ``file:line: systems.NAME``,
#: where the permissions of the instance's system come from (named when one is refused).
GRANTS_ENV = settings.env_name("grants_at")
log = logging.getLogger("mcc.bus")

PROFILE_TAG = b"mcc.profile="


@dataclass(frozen=True)
class _DurableEndpoints:
    writer: Callable[..., Writer[Any]]
    reader: Callable[..., Reader[Any]]
    timeout_s: float


_durable: list[_DurableEndpoints] = []


def register_durable(
    writer: Callable[..., Writer[Any]], reader: Callable[..., Reader[Any]], timeout_s: float
) -> None:
    """The endpoints of TRANSIENT/PERSISTENT profiles: `mcc.bus.history` (imported with
    `mcc.bus`, before any bus exists) registers its own, so the core never imports it."""
    _durable[:] = [_DurableEndpoints(writer, reader, timeout_s)]


def check_one_cyclone() -> None:
    """Raise unless cyclonedds-python loaded the Cyclone library the bus core links."""
    import cyclonedds.internal

    handle = getattr(cyclonedds.internal.DDS, "_dll_handle", None)
    loaded = os.path.realpath(getattr(handle, "_name", "") or "")
    linked = os.path.realpath(_native.LIBRARY)
    if loaded != linked:
        home = os.path.dirname(os.path.dirname(linked))
        raise MccError(
            f"two Cyclone DDS libraries in one process: cyclonedds-python loaded {loaded!r}, "
            f"the bus core links {linked!r}; set CYCLONEDDS_HOME={home} or run `make`, "
            "which builds cyclonedds-python against the bus's Cyclone (PyPI's cyclonedds "
            "carries a Cyclone of its own: `pip uninstall -y cyclonedds`, then install the "
            "cyclonedds-11.0.1+mcc wheel of `make wheels`)"
        )


check_one_cyclone()
os.register_at_fork(after_in_child=_native.after_fork)


class Bus(Closeable):
    """A participant on one DDS domain, with optional partitions and transport.

    Args:
        domain_id: DDS domain (one per mission).
        partitions: DDS partitions for every writer and reader (one per virtual cluster).
        transport: Cyclone transport configuration; default: env ``MCC_TRANSPORT`` (set by
            ``Transport.apply_to_env``), else ``CYCLONEDDS_URI`` or Cyclone's defaults.
        discovery_tag: isolates this bus from others on the same domain (tests, parallel runs);
            shorthand for ``Transport(discovery_tag=...)`` merged into ``transport``; default:
            the transport's own tag, else env ``MCC_DISCOVERY_TAG``.
        qos: the profile library; default ``qos/mcc.xml``.
        name: participant name shown by ``mcc topic list``.
        source: the principal this participant speaks for (an instance's ``SYSTEM.INDEX``,
            ``supervisor``): its writers of sourced topics (`TopicSpec.sourced`) write in
            ``src/SOURCE`` only, the one partition its permissions grant them.
    """

    def __init__(
        self,
        domain_id: int = 0,
        *,
        partitions: Sequence[str] = (),
        transport: Transport | None = None,
        discovery_tag: str | None = None,
        qos: QosLibrary | None = None,
        name: str = "mcc",
        monitor_qos: bool = True,
        source: str | None = None,
    ) -> None:
        if not 0 <= domain_id <= 232:
            raise MccError(f"domain_id = {domain_id}: DDS domain ids run from 0 to 232")
        if transport is None and settings.current().transport:
            transport = Transport.from_env()
        if discovery_tag is None and (transport is None or transport.discovery_tag is None):
            discovery_tag = settings.current().discovery_tag or None
        if discovery_tag:
            transport = _with_tag(transport, discovery_tag)
        self.domain_id = domain_id
        self.partitions = tuple(partitions)
        self.transport = transport
        self.qos = qos or default_library()
        self.name = name
        self.source = source
        #: DDS Security is configured: what discovery reports of a remote writer (its
        #: participant, its partitions) is authenticated and checked against its permissions.
        self.secured = transport is not None and "<Security>" in transport.extra_xml
        #: Its counters: ``stats`` is ``book.stats``.
        self.book = StatsBook()
        self.stats = self.book.stats
        self._lock = threading.Lock()
        self._domain = _configure_domain(domain_id, transport)
        try:
            self.participant = DomainParticipant(
                domain_id,
                qos=Qos(
                    Policy.Userdata(data=_participant_userdata(name, self.secured)),
                    Policy.EntityName(name),
                ),
            )
        except DDSException as exc:
            _release_domain(domain_id, self._domain)
            raise MccError(_join_failure(domain_id, exc)) from exc
        group_qos = (
            Qos(Policy.Partition(partitions=list(self.partitions))) if self.partitions else None
        )
        self._publisher = Publisher(self.participant, qos=group_qos)
        self._subscriber = Subscriber(self.participant, qos=group_qos)
        self._groups: dict[tuple[bool, tuple[str, ...]], Publisher | Subscriber] = {}
        self._topics: dict[str, Topic[Any]] = {}
        #: Discovery's readers of remote (publications, subscriptions), with ``monitor_qos``.
        self.endpoint_readers: tuple[BuiltinDataReader, BuiltinDataReader] | None = None
        self._participants: BuiltinDataReader | None = None  # peers_security, made on first use
        if monitor_qos:
            self.endpoint_readers = (
                BuiltinDataReader(self.participant, BuiltinTopicDcpsPublication),
                BuiltinDataReader(self.participant, BuiltinTopicDcpsSubscription),
            )
        self._closed = False
        #: `mcc.bus.history`'s client, made by the first durable reader.
        self.history_client: Any = None
        #: Serves on_data handlers and QoS statuses (`mcc.bus.dispatch`).
        self.dispatcher = Dispatcher(
            self.participant, self.name, self.book, remote_profiles=self.remote_profiles
        )

    @property
    def closed(self) -> bool:
        """Whether `close` has run."""
        return self._closed

    # -- entities -------------------------------------------------------------------------
    def group(self, partitions: Sequence[str] | None, *, writer: bool) -> Publisher | Subscriber:
        """The bus's publisher (subscriber), or one in ``partitions`` instead of the bus's (for
        the endpoints made on this bus)."""
        if partitions is None:
            return self._publisher if writer else self._subscriber
        key = (writer, tuple(partitions))
        with self._lock:
            group = self._groups.get(key)
            if group is None:
                qos = Qos(Policy.Partition(partitions=list(partitions)))
                group = (
                    Publisher(self.participant, qos=qos)
                    if writer
                    else Subscriber(self.participant, qos=qos)
                )
                self._groups[key] = group
            return group

    def topic(
        self, name: str, type_: type | None = None, *, profile: str | None = None
    ) -> Topic[Any]:
        """The DDS topic ``name`` (catalogue type unless ``type_`` is given)."""
        data_type = type_ or topic_spec(name).type
        with self._lock:
            existing = self._topics.get(name)
            if existing is not None:
                if existing.data_type is not data_type:
                    raise TopicError(
                        f"topic {name!r} is already bound to {existing.data_type.__name__}, "
                        f"not {data_type.__name__}; use another topic name"
                    )
                return existing
            topic: Topic[Any] = Topic(
                self.participant,
                name,
                data_type,
                qos=self.qos.topic_qos(profile or self._default_profile(name)),
            )
            self._topics[name] = topic
            return topic

    def writer(
        self,
        topic: str,
        *,
        profile: str | None = None,
        type: type | None = None,
        validate: bool = True,
        partitions: Sequence[str] | None = None,
    ) -> Writer[Any]:
        """A writer on ``topic`` with QoS ``profile`` (default: the catalogue's), in the bus's
        partitions unless ``partitions`` are given.

        For a TRANSIENT or PERSISTENT profile it is a ``DurableWriter``, whose
        ``write_stored`` waits until the persistence service committed the sample.
        """
        profile = profile or self._default_profile(topic)
        if partitions is None and self.source is not None and is_sourced(topic):
            partitions = [source_partition(self.source)]
        with self._permitted(topic, "publish"):
            dds_topic = self.topic(topic, type, profile=profile)
            if self._is_durable(profile):
                return _durable[0].writer(self, dds_topic, profile, validate=validate)
            return Writer(self, dds_topic, profile, validate=validate, partitions=partitions)

    def reader(
        self,
        topic: str,
        *,
        profile: str | None = None,
        type: type | None = None,
        on_data: Callable[[Reader[Any]], None] | None = None,
        history: bool = True,
        history_timeout_s: float | None = None,
        partitions: Sequence[str] | None = None,
        inline: bool = False,
    ) -> Reader[Any]:
        """A reader on ``topic`` with QoS ``profile`` (default: the catalogue's), in the bus's
        partitions unless ``partitions`` are given.

        ``on_data(reader)`` is called on the bus's dispatcher thread as unread data arrives
        (never on a Cyclone thread), for short handlers that ``take`` and maybe write; the bus
        keeps the reader until it or the bus is closed. Use a ``ReaderLoop`` for anything longer.
        With ``inline`` the handler runs on the thread that delivered the data instead
        (Cyclone's receive thread; no thread wake-up: the lowest latency): it must be short and
        must never wait for other samples (no RPC call, no ``wait``), since this participant
        receives nothing while it runs, and it must not close its reader or the bus. A writer
        in the same process delivers to it inside its ``write`` call, on the writing thread
        (so never write while holding a lock the handler takes). Not for TRANSIENT or
        PERSISTENT profiles.

        For a TRANSIENT or PERSISTENT profile it is a ``HistoryReader``: the samples that the
        persistence service retained come first (docs/persistence.md), unless ``history`` is
        False; ``history_timeout_s`` bounds the wait for a service (default 3 s).
        """
        profile = profile or self._default_profile(topic)
        if partitions is None and is_sourced(topic):
            # every source's partition, and the bus's for writers that speak for no one
            partitions = [*(self.partitions or ("",)), source_partition("*")]
        with self._permitted(topic, "subscribe to"):
            if partitions is not None:
                dds_topic = self.topic(topic, type, profile=profile)
                return Reader(
                    self, dds_topic, profile, on_data=on_data, partitions=partitions, inline=inline
                )
            if inline:
                dds_topic = self.topic(topic, type, profile=profile)
                if self._is_durable(profile):
                    raise MccError(
                        f"topic {topic!r}: inline=True is not for the durable profile {profile!r}"
                    )
                return Reader(self, dds_topic, profile, on_data=on_data, inline=True)
            return self._reader(topic, type, profile, on_data, history, history_timeout_s)

    def _reader(
        self,
        topic: str,
        type: type | None,
        profile: str,
        on_data: Callable[[Reader[Any]], None] | None,
        history: bool,
        history_timeout_s: float | None,
    ) -> Reader[Any]:
        dds_topic = self.topic(topic, type, profile=profile)
        if history and self._is_durable(profile):
            durable = _durable[0]
            timeout_s = durable.timeout_s if history_timeout_s is None else history_timeout_s
            return durable.reader(
                self, dds_topic, profile, on_data=on_data, history_timeout_s=timeout_s
            )
        return Reader(self, dds_topic, profile, on_data=on_data)

    @contextlib.contextmanager
    def _permitted(self, topic: str, what: str) -> Iterator[None]:
        """Turn a DDS Security refusal into an error that names the topic and the fix."""
        try:
            yield
        except DDSException as exc:
            if exc.code != DDSException.DDS_RETCODE_NOT_ALLOWED_BY_SECURITY:
                raise
            self.book.count("security_denials")
            declared = settings.current().grants_at  # an instance: where its system is declared
            fix = (
                f"declare it in the manifest ({declared}: publish/subscribe) or in its app's "
                "topics (@app(topics=...))"
                if declared
                else "grant it in the mission's keystore (mcc security identity ... "
                "--publish/--subscribe)"
            )
            raise MccError(
                f"DDS Security refused to {what} topic {topic!r} for participant {self.name!r}: "
                f"its permissions document does not allow it; {fix}, or use another topic"
            ) from exc

    def _is_durable(self, profile: str) -> bool:
        qos = self.qos.reader_qos(profile)
        return Policy.Durability in qos and qos[Policy.Durability] in (
            Policy.Durability.Transient,
            Policy.Durability.Persistent,
        )

    def _default_profile(self, topic: str) -> str:
        return topic_spec(topic).profile

    def endpoint_qos(self, profile: str, *, writer: bool) -> Qos:
        """The QoS of a writer (reader) of ``profile`` on this bus, tagged with the profile's
        name (what an incompatible-QoS event names of the other side)."""
        base = self.qos.writer_qos(profile) if writer else self.qos.reader_qos(profile)
        return base + Qos(Policy.Userdata(data=PROFILE_TAG + profile.encode()))

    def peers_security(self) -> tuple[int, int]:
        """How many other MCC participants discovery shows on this domain: (secured, plain),
        from their user data (`_participant_userdata`)."""
        if self._participants is None:
            self._participants = BuiltinDataReader(self.participant, BuiltinTopicDcpsParticipant)
        own = self.participant.guid
        secured = plain = 0
        for sample in self._participants.read(N=4096):
            data = _userdata(sample)
            if not data.startswith(b"mcc ") or sample.key == own:
                continue
            if b" secured=1" in data:
                secured += 1
            else:
                plain += 1
        return secured, plain

    def remote_profiles(self, topic: str, profile: str, *, readers: bool) -> tuple[str, ...]:
        """Profiles of remote endpoints on ``topic`` that are not ours (from their user data)."""
        if self.endpoint_readers is None:
            return ()
        builtin = self.endpoint_readers[1] if readers else self.endpoint_readers[0]
        found = set()
        for ep in builtin.read(1000):
            if getattr(ep, "topic_name", None) != topic:
                continue
            data = ep.qos[Policy.Userdata].data if Policy.Userdata in ep.qos else b""
            if data.startswith(PROFILE_TAG):
                name = data[len(PROFILE_TAG) :].decode(errors="replace")
                if name != profile:
                    found.add(name)
        return tuple(sorted(found))

    def qos_events(self, kind: str | None = None) -> list[QosEvent]:
        """QoS events recorded so far, optionally of one kind."""
        return self.book.events(kind)

    # -- lifecycle ------------------------------------------------------------------------
    def close(self) -> None:
        """Delete the participant and everything it owns."""
        if self._closed:
            return
        self.dispatcher.refuse_inside("closing a bus")
        self._closed = True
        if self.history_client is not None:
            self.history_client.close()
        self.dispatcher.close()
        # Delete the participant, and with it every reader and writer, now rather than when
        # the garbage collector gets to it (the domain may be configured again at once).
        Entity.__del__(self.participant)
        self._topics.clear()
        self.endpoint_readers = None
        self._participants = None
        _release_domain(self.domain_id, self._domain)


def open_bus(domain_id: int = 0, **options: Any) -> Bus:
    """Open a bus (a context manager); options as for ``Bus``."""
    return Bus(domain_id, **options)


def _userdata(sample: Any) -> bytes:
    """A discovered participant's user data (b"" when it has none)."""
    try:
        return bytes(sample.qos[Policy.Userdata].data or b"")
    except (KeyError, TypeError, AttributeError):
        return b""


def _participant_userdata(name: str, secured: bool = False) -> bytes:
    """What discovery shows anyone of this participant: its name, host and pid, and whether it
    is secured (so that a client without credentials can say why nobody answers it)."""
    text = f"mcc name={name} host={socket.gethostname()} pid={os.getpid()}"
    return (text + (" secured=1" if secured else "")).encode()


def _with_tag(transport: Transport | None, tag: str) -> Transport:
    return dataclasses.replace(transport or Transport(), discovery_tag=tag)


_domains: dict[int, list[Any]] = {}  # id -> [transport xml, Domain, open buses using it]
_domains_lock = threading.Lock()


def _release_domain(domain_id: int, domain: Domain | None) -> None:
    """Drop one use of the configuration `_configure_domain` returned for ``domain_id``."""
    if domain is None:
        return
    with _domains_lock:
        entry = _domains.get(domain_id)
        if entry is not None and entry[1] is domain:
            entry[2] -= 1


def _join_failure(domain_id: int, exc: DDSException) -> str:
    """Why joining ``domain_id`` failed, with the likely fix."""
    return (
        f"cannot join DDS domain {domain_id}: {exc} (Cyclone's log line above says why)"
        + port_clash_hint(domain_id)
    )


def _configure_domain(domain_id: int, transport: Transport | None) -> Domain | None:
    """Create the process's Cyclone domain with ``transport``'s configuration (once per id
    while a bus uses it; a domain no open bus uses may be configured again)."""
    if transport is None:
        return None
    xml = transport.to_xml()
    with _domains_lock:
        existing = _domains.get(domain_id)
        if existing is not None:
            if existing[2] > 0:
                if existing[0] == xml:
                    existing[2] += 1
                    return existing[1]
                raise MccError(
                    f"domain {domain_id} is already configured in this process with another "
                    "transport; use one transport per domain and process"
                )
            # Unused: configure it afresh, even with the same text. A secured configuration
            # names files (identity, permissions) that may have been reissued since, and
            # Cyclone keeps what it loaded for as long as the domain lives.
            Entity.__del__(existing[1])
            del _domains[domain_id]
        if transport.kind == "shm" and not shm.running():
            # iceoryx would wait 60 s for the daemon and then abort the whole process
            raise TransportError(
                "the shm transport needs this host's iceoryx daemon (RouDi) and none runs: "
                "start one with `mcc shm` (a supervisor of a mission on shm starts its own)"
            )
        domain = transport.configure_domain(domain_id)
        _domains[domain_id] = [xml, domain, 1]
        return domain
