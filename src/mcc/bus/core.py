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
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, TypeVar, cast

from cyclonedds.builtin import (
    BuiltinDataReader,
    BuiltinTopicDcpsPublication,
    BuiltinTopicDcpsSubscription,
)
from cyclonedds.core import (
    DDSException,
    Entity,
    InstanceState,
    Policy,
    Qos,
    ReadCondition,
    SampleState,
    ViewState,
    WaitSet,
)
from cyclonedds.domain import Domain, DomainParticipant
from cyclonedds.pub import DataWriter, Publisher
from cyclonedds.sub import DataReader, Subscriber
from cyclonedds.topic import Topic
from cyclonedds.util import duration

from mcc.bus import _native
from mcc.bus.codec import flat_codec
from mcc.bus.dispatch import Dispatcher
from mcc.bus.qos import QosLibrary, default_library
from mcc.bus.topics import topic_spec
from mcc.bus.transport import ENV_VAR as TRANSPORT_ENV
from mcc.bus.transport import Transport, port_clash_hint
from mcc.bus.validate import received_check, validate_sample
from mcc.errors import MccError, TopicError, WriteTimeoutError

T = TypeVar("T")
#: Set by the supervisor for an instance of a secured mission: ``file:line: systems.NAME``,
#: where the permissions of the instance's system come from (named when one is refused).
GRANTS_ENV = "MCC_GRANTS_AT"
log = logging.getLogger("mcc.bus")

PROFILE_TAG = b"mcc.profile="

_ANY_STATE = SampleState.Any | ViewState.Any | InstanceState.Any
_NOT_READ = SampleState.NotRead | ViewState.Any | InstanceState.Any
_TAKE_BATCH = 4096  # the most samples one take of take_until asks for


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
            "which builds cyclonedds-python against the bus's Cyclone"
        )


check_one_cyclone()
os.register_at_fork(after_in_child=_native.after_fork)


@dataclass(frozen=True)
class QosEvent:
    """One QoS status change seen on this bus (incompatible QoS, deadline missed …)."""

    kind: str  # requested_incompatible_qos | offered_incompatible_qos | *_deadline_missed …
    topic: str
    local_profile: str
    remote_profiles: tuple[str, ...]
    policy: str
    total_count: int
    time_ns: int

    def __str__(self) -> str:
        if self.kind.endswith("incompatible_qos"):
            side, other = (
                ("reader", "writer") if self.kind.startswith("requested") else ("writer", "reader")
            )
            remote = ", ".join(map(repr, self.remote_profiles)) or "unknown"
            return (
                f"incompatible QoS on topic {self.topic!r}: {side} with profile "
                f"{self.local_profile!r} vs {other} with profile {remote} (policy {self.policy}); "
                "use the same profile on both sides, see docs/qos.md"
            )
        what = self.kind.replace("_", " ")
        return (
            f"{what} on topic {self.topic!r} (profile {self.local_profile!r}), "
            f"total {self.total_count}"
        )


@dataclass
class BusStatistics:
    """Counters of QoS events, refused and dropped samples since the bus opened.

    ``samples_dropped`` counts received samples that did not decode or failed the topic's
    checks (``dropped_by_topic`` per topic); ``handler_errors`` counts exceptions raised by
    ``on_data`` handlers and reader-loop handlers, which the bus logs and survives.
    """

    incompatible_qos: int = 0
    deadline_missed: int = 0
    samples_lost: int = 0
    samples_rejected: int = 0
    liveliness_lost: int = 0
    invalid_samples_refused: int = 0
    samples_dropped: int = 0
    handler_errors: int = 0
    security_denials: int = 0  # writers/readers this process's permissions refused
    dropped_by_topic: dict[str, int] = field(default_factory=dict)
    events: list[QosEvent] = field(default_factory=list)


class Writer(Generic[T]):
    """A typed writer bound to a topic and a QoS profile; samples are validated before sending."""

    def __init__(
        self,
        bus: Bus,
        topic: Topic[Any],
        profile: str,
        *,
        validate: bool,
        partitions: Sequence[str] | None = None,
    ) -> None:
        self.bus = bus
        self.topic_name: str = topic.name
        self.profile = profile
        self.type = topic.data_type
        self._validate = validate
        publisher = cast(Publisher, bus._group(partitions, writer=True))
        self._dds = DataWriter(publisher, topic, qos=bus._endpoint_qos(profile, writer=True))
        self._ref = int(self._dds._ref)
        self._closed = False
        codec = flat_codec(self.type)  # type: ignore[arg-type]
        version_2 = self._dds._use_version_2
        if codec is None:
            self._encode: Callable[[Any], bytes] = lambda s: s.serialize(use_version_2=version_2)
        else:
            self._encode = codec.encoder(version_2)
        bus._dispatcher.watch(self._dds, topic.name, profile, writer=True)

    def write(self, sample: T) -> None:
        """Validate ``sample`` (``SampleError`` if bad) and publish it."""
        self.write_cdr(self._checked(sample))

    def write_many(self, samples: Sequence[T]) -> None:
        """Validate and publish ``samples`` in one crossing into Cyclone."""
        datas = [self._checked(s) for s in samples]
        written, ret = _native.write_many(self._ref, datas)
        if ret < 0:
            raise DDSException(
                ret, f"writing to topic {self.topic_name!r} ({written} of {len(datas)} written)"
            )

    def _checked(self, sample: T) -> bytes:
        if type(sample) is not self.type:
            raise TypeError(f"{sample!r} is not a {self.type.__name__}")
        if self._validate:
            try:
                validate_sample(sample)
            except MccError:
                self.bus.stats.invalid_samples_refused += 1
                raise
        return self._encode(sample)

    def write_cdr(self, data: bytes, *, timestamp_ns: int = -1, dispose: bool = False) -> None:
        """Publish an already serialized sample (encapsulation header included), stamped
        ``timestamp_ns`` (default: now), disposing its instance if ``dispose``; Cyclone checks
        it against the topic type (``DDSException`` BAD_PARAMETER if it does not fit)."""
        ret = _native.write(self._ref, data, timestamp_ns, dispose)
        if ret < 0:
            raise DDSException(ret, f"writing to topic {self.topic_name!r}")

    def flush(self) -> None:
        """Send what Cyclone's write batching holds for this writer now."""
        ret = _native.flush(self._ref)
        if ret < 0:
            raise DDSException(ret, f"flushing topic {self.topic_name!r}")

    def write_blocking(self, sample: T, *, timeout_s: float = 60.0) -> None:
        """`write`, tried again while flow control refuses ``sample`` (a reliable reader is
        behind and each try blocked the profile's max_blocking_time); `WriteTimeoutError`
        when it is still refused after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.write(sample)
                return
            except DDSException as exc:
                if exc.code != DDSException.DDS_RETCODE_TIMEOUT:
                    raise
                if time.monotonic() >= deadline:
                    raise WriteTimeoutError(
                        f"topic {self.topic_name!r}: the readers took nothing for "
                        f"{timeout_s:g} s, so flow control kept refusing the sample; is every "
                        "matched reader alive and taking?"
                    ) from exc

    def write_dispose(self, sample: T) -> None:
        """Write ``sample`` and dispose its instance in one message (keyed topics)."""
        self.write_cdr(self._checked(sample), dispose=True)

    def dispose(self, sample: T) -> None:
        """Dispose the instance ``sample`` belongs to (keyed topics)."""
        self._dds.dispose(sample)

    def matched(self) -> int:
        """Number of readers currently matched."""
        return int(self._dds.get_publication_matched_status().current_count)

    def wait_for_readers(self, count: int = 1, *, timeout_s: float = 5.0) -> bool:
        """Wait until ``count`` readers match; False on timeout."""
        return _poll(lambda: self.matched() >= count, timeout_s)

    def close(self) -> None:
        """Delete the DDS writer (idempotent; later writes raise)."""
        if self._closed:
            return
        self._closed = True
        self.bus._dispatcher.forget(self._dds)
        Entity.__del__(self._dds)

    @property
    def dds(self) -> DataWriter[T]:
        """The underlying cyclonedds DataWriter (QoS, statuses, acknowledgements)."""
        return self._dds


class Reader(Generic[T]):
    """A typed reader bound to a topic and a QoS profile.

    ``on_data(reader)`` runs on the bus's dispatcher thread when unread samples arrive; the
    bus keeps such a reader alive (and calling) until ``close()`` or the bus closes.
    Received samples are checked like written ones (``validate``); one that fails is dropped,
    counted in ``bus.stats.samples_dropped`` and logged once per writer.
    """

    #: Conditions beyond the reader's own that signal data (a subclass's guard condition).
    _extra_conditions: tuple[Any, ...] = ()

    def __init__(
        self,
        bus: Bus,
        topic: Topic[Any],
        profile: str,
        *,
        on_data: Callable[[Reader[T]], None] | None = None,
        validate: bool = True,
        partitions: Sequence[str] | None = None,
    ) -> None:
        self.bus = bus
        self.topic_name: str = topic.name
        self.profile = profile
        self.type = topic.data_type
        self._on_data = on_data
        self._validate = validate
        subscriber = cast(Subscriber, bus._group(partitions, writer=False))
        self._dds = DataReader(subscriber, topic, qos=bus._endpoint_qos(profile, writer=False))
        self._ref = int(self._dds._ref)
        self._closed = False
        self.consumed = 0  # calls of take/read: the dispatcher sees whether a handler read
        self.condition = ReadCondition(self._dds, _ANY_STATE)
        # What a waitset (``wait``, ``ReaderLoop``) attaches: a subclass may add conditions.
        self.conditions: tuple[Any, ...] = (self.condition, *self._extra_conditions)
        codec = flat_codec(self.type)  # type: ignore[arg-type]
        self._decode = codec.decode if codec is not None else cast(Any, self.type).deserialize
        self._waitset: WaitSet | None = None
        bus._dispatcher.watch(self._dds, topic.name, profile, writer=False)
        if on_data is not None:
            # Unread samples only: a handler that reads (or takes) clears it.
            fresh = ReadCondition(self._dds, _NOT_READ)
            bus._dispatcher.serve(self, (fresh, *self._extra_conditions))

    def take(self, max_samples: int = 256) -> list[T]:
        """Take up to ``max_samples`` valid samples (dispose/unregister notices are dropped)."""
        return self._valid(_native.take(self._ref, _ANY_STATE, max_samples))

    def read(self, max_samples: int = 256) -> list[T]:
        """Read (leave in the cache) up to ``max_samples`` valid samples."""
        return self._valid(_native.read(self._ref, _ANY_STATE, max_samples))

    def take_cdr(self, max_samples: int = 256) -> list[tuple[bytes, Any]]:
        """Take up to ``max_samples`` serialized samples with their ``SampleInfo``, dispose and
        unregister notices included (their bytes hold the key); nothing is decoded."""
        raw = _native.take(self._ref, _ANY_STATE, max_samples)
        self.consumed += 1
        if isinstance(raw, int):
            raise DDSException(raw, f"taking from topic {self.topic_name!r}")
        return cast(list[tuple[bytes, Any]], raw)

    def _valid(self, raw: Any) -> list[T]:
        """Decode and check each sample with data; drop (and count) what fails."""
        self.consumed += 1
        if isinstance(raw, int):
            if self._closed:
                raise MccError(f"reader of topic {self.topic_name!r} is closed")
            raise DDSException(raw, f"taking from topic {self.topic_name!r}")
        decode = self._decode
        check = received_check(self.type) if self._validate else None  # type: ignore[arg-type]
        out = []
        for data, info in raw:
            if not info.valid_data:
                continue
            try:
                sample = decode(data)
                if check is not None:
                    check(sample)
            except Exception as exc:  # hostile input is normal input: drop, count, go on
                self.bus._dropped(self, info, exc)
                continue
            sample.sample_info = info
            out.append(sample)
        return out

    def wait(self, timeout_s: float) -> bool:
        """Block until data is available; False on timeout."""
        if self._waitset is None:
            self._waitset = WaitSet(self.bus.participant)
            for condition in self.conditions:
                self._waitset.attach(condition)
        return self._waitset.wait(duration(seconds=max(timeout_s, 0.0))) > 0

    def take_wait(self, max_samples: int = 256, *, timeout_s: float = 1.0) -> list[T]:
        """Take what is there, waiting up to ``timeout_s`` for the first sample."""
        deadline = time.monotonic() + timeout_s
        while True:
            samples = self.take(max_samples)
            remaining = deadline - time.monotonic()
            if samples or remaining <= 0:
                return samples
            self.wait(remaining)

    def take_until(self, count: int, *, timeout_s: float) -> list[T]:
        """Take until ``count`` samples arrived or ``timeout_s`` passed; returns what came."""
        deadline = time.monotonic() + timeout_s
        out: list[T] = []
        while len(out) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            batch = min(max(count - len(out), 1), _TAKE_BATCH)
            out.extend(self.take_wait(batch, timeout_s=remaining))
        return out

    def matched(self) -> int:
        """Number of writers currently matched."""
        return int(self._dds.get_subscription_matched_status().current_count)

    def wait_for_writers(self, count: int = 1, *, timeout_s: float = 5.0) -> bool:
        """Wait until ``count`` writers match; False on timeout."""
        return _poll(lambda: self.matched() >= count, timeout_s)

    def writer_partitions(self, publication_handle: int) -> tuple[str, ...]:
        """The partitions of the matched writer behind ``publication_handle`` (a sample's
        ``SampleInfo.publication_handle``); () when it is no longer matched. In a secured
        mission they are authenticated: access control checks a remote writer's partitions
        against its signed permissions, so `mcc.bus.rpc` attributes requests by them."""
        try:
            endpoint = self._dds.get_matched_publication_data(publication_handle)
        except DDSException:
            return ()
        if endpoint is None or endpoint.qos is None:
            return ()
        if Policy.Partition not in endpoint.qos:
            return ("",)
        return tuple(endpoint.qos[Policy.Partition].partitions)

    def writer_name(self, publication_handle: int) -> str:
        """The GUID of the matched writer behind ``publication_handle`` (for logs)."""
        try:
            endpoint = self._dds.get_matched_publication_data(publication_handle)
        except DDSException:
            endpoint = None
        return str(endpoint.key) if endpoint is not None else f"handle:{publication_handle:x}"

    def close(self) -> None:
        """Stop ``on_data`` and delete the DDS reader (idempotent; later takes raise)."""
        if self._closed:
            return
        self._closed = True
        self.bus._dispatcher.forget(self._dds, reader=self)
        if self._waitset is not None:
            Entity.__del__(self._waitset)
        Entity.__del__(self._dds)

    @property
    def dds(self) -> DataReader[T]:
        """The underlying cyclonedds DataReader."""
        return self._dds


class Bus:
    """A participant on one DDS domain, with optional partitions and transport.

    Args:
        domain_id: DDS domain (one per mission).
        partitions: DDS partitions for every writer and reader (one per virtual cluster).
        transport: Cyclone transport configuration; default: env ``MCC_TRANSPORT`` (set by
            ``Transport.apply_to_env``), else ``CYCLONEDDS_URI`` or Cyclone's defaults.
        discovery_tag: isolates this bus from others on the same domain (tests, parallel runs);
            shorthand for ``Transport(discovery_tag=...)`` merged into ``transport``; default:
            env ``MCC_DISCOVERY_TAG``.
        qos: the profile library; default ``qos/mcc.xml``.
        name: participant name shown by ``mcc topic list``.
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
    ) -> None:
        if not 0 <= domain_id <= 232:
            raise MccError(f"domain_id = {domain_id}: DDS domain ids run from 0 to 232")
        if transport is None and os.environ.get(TRANSPORT_ENV):
            transport = Transport.from_env()
        discovery_tag = discovery_tag or os.environ.get("MCC_DISCOVERY_TAG") or None
        if discovery_tag is not None:
            transport = _with_tag(transport, discovery_tag)
        self.domain_id = domain_id
        self.partitions = tuple(partitions)
        self.transport = transport
        self.qos = qos or default_library()
        self.name = name
        self.stats = BusStatistics()
        self._lock = threading.Lock()
        self._domain = _configure_domain(domain_id, transport)
        try:
            self.participant = DomainParticipant(
                domain_id,
                qos=Qos(Policy.Userdata(data=_participant_userdata(name)), Policy.EntityName(name)),
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
        self._builtin: tuple[BuiltinDataReader, BuiltinDataReader] | None = None
        if monitor_qos:
            self._builtin = (
                BuiltinDataReader(self.participant, BuiltinTopicDcpsPublication),
                BuiltinDataReader(self.participant, BuiltinTopicDcpsSubscription),
            )
        self._closed = False
        self._drop_logged: set[tuple[str, int]] = set()
        self._history_client: Any = None  # mcc.bus.history, created on first durable reader
        self._dispatcher = Dispatcher(self)

    # -- entities -------------------------------------------------------------------------
    def _group(self, partitions: Sequence[str] | None, *, writer: bool) -> Publisher | Subscriber:
        """The bus's publisher (subscriber), or one in ``partitions`` instead of the bus's."""
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
    ) -> Reader[Any]:
        """A reader on ``topic`` with QoS ``profile`` (default: the catalogue's), in the bus's
        partitions unless ``partitions`` are given.

        ``on_data(reader)`` is called on the bus's dispatcher thread as unread data arrives
        (never on a Cyclone thread), for short handlers that ``take`` and maybe write; the bus
        keeps the reader until it or the bus is closed. Use a ``ReaderLoop`` for anything longer.

        For a TRANSIENT or PERSISTENT profile it is a ``HistoryReader``: the samples that the
        persistence service retained come first (docs/persistence.md), unless ``history`` is
        False; ``history_timeout_s`` bounds the wait for a service (default 3 s).
        """
        profile = profile or self._default_profile(topic)
        with self._permitted(topic, "subscribe to"):
            if partitions is not None:
                dds_topic = self.topic(topic, type, profile=profile)
                return Reader(self, dds_topic, profile, on_data=on_data, partitions=partitions)
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
            self.stats.security_denials += 1
            declared = os.environ.get(GRANTS_ENV)  # an instance: where its system is declared
            fix = (
                f"declare it in the manifest ({declared}: publish/subscribe) or in its app's "
                "BUS_TOPICS"
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

    def _endpoint_qos(self, profile: str, *, writer: bool) -> Qos:
        base = self.qos.writer_qos(profile) if writer else self.qos.reader_qos(profile)
        return base + Qos(Policy.Userdata(data=PROFILE_TAG + profile.encode()))

    # -- QoS status and dropped samples ------------------------------------------------------
    def _record(self, event: QosEvent, counter: str) -> None:
        with self._lock:
            setattr(self.stats, counter, getattr(self.stats, counter) + 1)
            if len(self.stats.events) < 1000:
                self.stats.events.append(event)
        # Deadline misses can fire at the deadline rate: log the first and every 100th.
        if counter != "deadline_missed" or event.total_count % 100 == 1:
            log.warning("%s", event)

    def _dropped(self, reader: Reader[Any], info: Any, exc: BaseException) -> None:
        """Count a received sample that failed to decode or check; log once per writer."""
        topic = reader.topic_name
        with self._lock:
            self.stats.samples_dropped += 1
            self.stats.dropped_by_topic[topic] = self.stats.dropped_by_topic.get(topic, 0) + 1
            first = (topic, info.publication_handle) not in self._drop_logged
            if first and len(self._drop_logged) < 10_000:
                self._drop_logged.add((topic, info.publication_handle))
        if first:
            log.warning(
                "dropped a bad sample on topic %r from writer %s: %s: %s (further bad samples "
                "from this writer are counted in bus.stats, not logged)",
                topic,
                reader.writer_name(info.publication_handle),
                type(exc).__name__,
                str(exc)[:200],
            )

    def _remote_profiles(self, topic: str, profile: str, *, readers: bool) -> tuple[str, ...]:
        """Profiles of remote endpoints on ``topic`` that are not ours (from their user data)."""
        if self._builtin is None:
            return ()
        builtin = self._builtin[1] if readers else self._builtin[0]
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
        with self._lock:
            return [e for e in self.stats.events if kind is None or e.kind == kind]

    # -- lifecycle ------------------------------------------------------------------------
    def close(self) -> None:
        """Delete the participant and everything it owns."""
        if self._closed:
            return
        self._closed = True
        if self._history_client is not None:
            self._history_client.close()
        self._dispatcher.close()
        # Delete the participant, and with it every reader and writer, now rather than when
        # the garbage collector gets to it (the domain may be configured again at once).
        Entity.__del__(self.participant)
        self._topics.clear()
        self._builtin = None
        _release_domain(self.domain_id, self._domain)

    def __enter__(self) -> Bus:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_bus(domain_id: int = 0, **options: Any) -> Bus:
    """Open a bus (a context manager); options as for ``Bus``."""
    return Bus(domain_id, **options)


def _poll(condition: Any, timeout_s: float, interval_s: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)
    return True


def _participant_userdata(name: str) -> bytes:
    return f"mcc name={name} host={socket.gethostname()} pid={os.getpid()}".encode()


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
        domain = transport.configure_domain(domain_id)
        _domains[domain_id] = [xml, domain, 1]
        return domain
