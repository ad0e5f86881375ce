"""Typed endpoints of a `mcc.bus.Bus`: `Writer` and `Reader` over the native core (samples
checked on the way out, undecodable ones counted and dropped on the way in)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar, cast

from cyclonedds.core import (
    DDSException,
    Entity,
    InstanceState,
    ReadCondition,
    SampleState,
    ViewState,
    WaitSet,
)
from cyclonedds.pub import DataWriter, Publisher
from cyclonedds.qos import Policy
from cyclonedds.sub import DataReader, Subscriber
from cyclonedds.topic import Topic
from cyclonedds.util import duration

from mcc.bus import _native
from mcc.bus.codec import flat_codec
from mcc.bus.topics import partition_source, split_source
from mcc.bus.validate import received_check, validate_sample
from mcc.errors import MccError, WriteTimeoutError
from mcc.lifecycle import Closeable

if TYPE_CHECKING:  # the one circle of the bus, types only: a Bus makes its endpoints,
    # and an endpoint names the bus it was made on (``Writer.bus``, ``Reader.bus``)
    from mcc.bus.core import Bus

T = TypeVar("T")
K = TypeVar("K")
log = logging.getLogger("mcc.bus")

ANY_STATE = SampleState.Any | ViewState.Any | InstanceState.Any
_NOT_READ = SampleState.NotRead | ViewState.Any | InstanceState.Any
_TAKE_BATCH = 4096  # the most samples one take of take_until asks for
#: The most samples one native take or read returns; asking for more returns at most this.
NATIVE_MAX_SAMPLES = 65536


def native_count(max_samples: int) -> int:
    """``max_samples`` for the native core: a count over its maximum asks for the maximum
    (the rest stays in the reader for the next call); a count under 1 is the caller's bug."""
    return min(max_samples, NATIVE_MAX_SAMPLES)


class MatchedEndpoint(NamedTuple):
    """A remote (or local) endpoint matched with one of ours, as discovery reports it."""

    handle: int  #: this participant's instance handle of it (`SampleInfo.publication_handle`)
    guid: str  #: its GUID
    participant: str  #: the GUID of its participant (in a secured domain, authenticated)
    #: Its partitions; None when its QoS sets none (it is in the default partition "").
    partitions: tuple[str, ...] | None
    topic_name: str
    type_name: str
    durability: int  #: 0 volatile, 1 transient-local, 2 transient, 3 persistent

    @property
    def durable(self) -> bool:
        """Transient or persistent: what a persistence service keeps."""
        return self.durability >= 2


def _endpoint(raw: tuple[Any, ...]) -> MatchedEndpoint:
    handle, key, participant, partitions, topic_name, type_name, durability = raw
    return MatchedEndpoint(
        handle,
        str(uuid.UUID(bytes=key)),
        str(uuid.UUID(bytes=participant)),
        partitions,
        topic_name,
        type_name,
        durability,
    )


def _matched(ref: int, *, of_writer: bool) -> list[MatchedEndpoint]:
    """One consistent snapshot of what ``ref`` matches (the native core retries while discovery
    changes under it); [] once the entity is deleted."""
    raw = _native.matched(ref, of_writer)
    if isinstance(raw, int):
        return []  # deleted meanwhile (closing): it matches nothing
    return [_endpoint(r) for r in raw]


def _matched_one(ref: int, handle: int, *, of_writer: bool) -> MatchedEndpoint | None:
    raw = _native.matched_one(ref, of_writer, handle)
    return None if raw is None else _endpoint(raw)


class _Endpoint(Closeable):
    """What a `Writer` and a `Reader` share: their bus, topic, QoS profile and sample type."""

    def __init__(self, bus: Bus, topic: Topic[Any], profile: str, *, validate: bool) -> None:
        self.bus = bus
        self.topic_name: str = topic.name
        self.profile = profile
        self.type = topic.data_type
        self._validate = validate
        self._closed = False


class Writer(_Endpoint, Generic[T]):
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
        super().__init__(bus, topic, profile, validate=validate)
        publisher = cast(Publisher, bus.group(partitions, writer=True))
        qos = bus.endpoint_qos(profile, writer=True)
        self._dds = DataWriter(publisher, topic, qos=qos)
        # autodispose_unregistered_instances (DDS's default: on): unregistering disposes too
        lifecycle = Policy.WriterDataLifecycle
        self._autodispose = lifecycle not in qos or bool(qos[lifecycle].autodispose)
        self._ref = int(self._dds._ref)
        codec = flat_codec(self.type)  # type: ignore[arg-type]
        version_2 = self._dds._use_version_2
        if codec is None:
            self._encode: Callable[[Any], bytes] = lambda s: s.serialize(use_version_2=version_2)
        else:
            self._encode = codec.encoder(version_2)
        # Flat types are encoded in the native write (the Python encoder where it declines).
        self._layout = codec.layout if codec is not None else None
        self._version_2 = codec.writes_xcdr2(version_2) if codec is not None else False
        bus.dispatcher.watch(self._dds, topic.name, profile, writer=True)

    def write(self, sample: T) -> None:
        """Validate ``sample`` (``SampleError`` if bad) and publish it."""
        if self._layout is None:
            self.write_cdr(self._checked(sample))
            return
        self._check(sample)
        ret = _native.write_flat(self._ref, self._layout, sample, self._version_2)
        if ret is None:  # a value the native encoder will not take: the Python one says why
            self.write_cdr(self._encode(sample))
        elif ret < 0:
            raise DDSException(ret, f"writing to topic {self.topic_name!r}")

    def write_many(self, samples: Sequence[T]) -> None:
        """Validate and publish ``samples`` in one crossing into Cyclone."""
        datas = [self._checked(s) for s in samples]
        written, ret = _native.write_many(self._ref, datas)
        if ret < 0:
            raise DDSException(
                ret, f"writing to topic {self.topic_name!r} ({written} of {len(datas)} written)"
            )

    def _check(self, sample: T) -> None:
        if type(sample) is not self.type:
            raise TypeError(f"{sample!r} is not a {self.type.__name__}")
        if self._validate:
            try:
                validate_sample(sample)
            except MccError:
                self.bus.book.count("invalid_samples_refused")
                raise

    def _checked(self, sample: T) -> bytes:
        self._check(sample)
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

    def unregister(self, sample: T) -> None:
        """Unregister the instance ``sample`` belongs to (its key fields are what counts): this
        writer keeps nothing of it, and a reader frees it once it holds no sample of it and no
        writer has it registered. A keyed topic whose keys keep coming (tracks, threats, orders)
        must unregister the instances it is done with, or each one ever written stays in every
        writer's and reader's cache for the life of the process: about 1.1 KB an instance,
        measured (a mission that runs for hours grew by that)."""
        self._dds.unregister_instance(sample)

    def retire(self, sample: T) -> None:
        """Dispose the instance ``sample`` belongs to and unregister it (`unregister`). Where
        the writer autodisposes (DDS's default, and every profile of ours but the durable
        ones) that is one message, the unregister, which Cyclone sends flagged as a dispose
        too: readers see the instance disposed all the same, for half the cost (the task
        farm's master retires an item per result)."""
        if not self._autodispose:
            self._dds.dispose(sample)
        self._dds.unregister_instance(sample)

    def matched(self) -> int:
        """Number of readers currently matched."""
        return int(self._dds.get_publication_matched_status().current_count)

    def wait_for_readers(self, count: int = 1, *, timeout_s: float = 5.0) -> bool:
        """Wait until ``count`` readers match; False on timeout."""
        return poll_until(lambda: self.matched() >= count, timeout_s)

    def matched_readers(self) -> list[MatchedEndpoint]:
        """The readers matched now: a set that was matched at one instant, safe while peers
        come and go."""
        return _matched(self._ref, of_writer=True)

    def close(self) -> None:
        """Delete the DDS writer (idempotent; later writes raise)."""
        if self._closed:
            return
        self._closed = True
        self.bus.dispatcher.forget(self._dds)
        Entity.__del__(self._dds)

    @property
    def dds(self) -> DataWriter[T]:
        """The underlying cyclonedds DataWriter (QoS, statuses, acknowledgements)."""
        return self._dds


class Linger(Generic[K, T]):
    """Unregisters a writer's instances ``after_s`` after their last write: for keyed topics
    whose keys keep coming (orders, their outcomes), where no single event says "done" for
    every reader. Each instance costs every matched reader about 1.1 KB while it is
    registered, so a count-bounded unregister (the oldest past N) still grew a 2-hour mission
    by 1.5-2 MB an hour in each reader; this one holds a writer to the instances written in
    the last ``after_s``.

    ``wrote(key)`` after each write (re-arms it); ``expire()`` on the writer's loop unregisters
    the due ones, except those ``keep(key)`` still wants (they are re-armed). ``key_sample``
    makes the sample whose key fields name the instance."""

    def __init__(
        self,
        writer: Writer[T],
        after_s: float,
        key_sample: Callable[[K], T],
        *,
        keep: Callable[[K], bool] | None = None,
    ) -> None:
        self.writer = writer
        self.after_ns = int(after_s * 1e9)
        self.key_sample = key_sample
        self.keep = keep
        self.unregistered = 0
        # key -> due (monotonic ns); the after is one for all, so insertion order is due order
        self._due: dict[K, int] = {}

    def __len__(self) -> int:
        return len(self._due)

    def wrote(self, key: K, now_ns: int | None = None) -> None:
        """The instance ``key`` was just written: unregister it ``after_s`` from now."""
        self._due.pop(key, None)
        self._due[key] = (time.monotonic_ns() if now_ns is None else now_ns) + self.after_ns

    def expire(self, now_ns: int | None = None) -> int:
        """Unregister the instances due by ``now_ns`` (monotonic); how many went."""
        now = time.monotonic_ns() if now_ns is None else now_ns
        gone = 0
        while self._due:
            key, due = next(iter(self._due.items()))
            if due > now:
                break
            del self._due[key]
            if self.keep is not None and self.keep(key):
                self._due[key] = now + self.after_ns
                continue
            try:
                self.writer.unregister(self.key_sample(key))
            except DDSException as exc:  # not registered (never written, or gone): nothing held
                log.debug("topic %r: unregister of %r: %s", self.writer.topic_name, key, exc)
            gone += 1
        self.unregistered += gone
        return gone

    def forget(self, key: K) -> None:
        """Stop timing ``key`` (its instance was retired or unregistered otherwise)."""
        self._due.pop(key, None)


class Reader(_Endpoint, Generic[T]):
    """A typed reader bound to a topic and a QoS profile.

    ``on_data(reader)`` runs on the bus's dispatcher thread when unread samples arrive, or
    with ``inline`` on the thread that delivered them (Cyclone's receive thread: no thread
    wake-up, for short handlers that never wait for other samples); the bus keeps such a
    reader alive (and calling) until ``close()`` or the bus closes.
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
        inline: bool = False,
    ) -> None:
        if inline and (on_data is None or self._extra_conditions):
            raise MccError(
                f"topic {topic.name!r}: inline=True needs an on_data handler on a plain reader "
                "(not a durable profile's history reader)"
            )
        super().__init__(bus, topic, profile, validate=validate)
        self._on_data = on_data
        subscriber = cast(Subscriber, bus.group(partitions, writer=False))
        self._dds = DataReader(subscriber, topic, qos=bus.endpoint_qos(profile, writer=False))
        self._ref = int(self._dds._ref)
        self.consumed = 0  # calls of take/read: the dispatcher sees whether a handler read
        self._sources: dict[int, tuple[str, int] | None] = {}  # handle → source (source_of)
        self._generations: dict[str, int] = {}  # principal → newest generation heard
        self.stale_sources = 0
        self.condition = ReadCondition(self._dds, ANY_STATE)
        # What a waitset (``wait``, ``ReaderLoop``) attaches: a subclass may add conditions.
        self.conditions: tuple[Any, ...] = (self.condition, *self._extra_conditions)
        codec = flat_codec(self.type)  # type: ignore[arg-type]
        #: One serialized sample of this reader's type to a sample, as `take` decodes it (the
        #: flat codec where the type is flat, else ``deserialize``); raises on bytes that do
        #: not fit the type.
        self.decode: Callable[[bytes], Any] = (
            codec.decode if codec is not None else cast(Any, self.type).deserialize
        )
        # Samples decoded in the native take (flat types); the rest come as (bytes, info).
        self._layout = codec.layout if codec is not None else None
        self._waitset: WaitSet | None = None
        bus.dispatcher.watch(self._dds, topic.name, profile, writer=False)
        if on_data is not None and inline:
            bus.dispatcher.serve_inline(self)
        elif on_data is not None:
            # Unread samples only: a handler that reads (or takes) clears it.
            fresh = ReadCondition(self._dds, _NOT_READ)
            bus.dispatcher.serve(self, (fresh, *self._extra_conditions))

    def take(self, max_samples: int = 256) -> list[T]:
        """Take up to ``max_samples`` valid samples (dispose/unregister notices are dropped)."""
        n = native_count(max_samples)
        return self._valid(_native.take(self._ref, ANY_STATE, n, self._layout))

    def read(self, max_samples: int = 256) -> list[T]:
        """Read (leave in the cache) up to ``max_samples`` valid samples."""
        n = native_count(max_samples)
        return self._valid(_native.read(self._ref, ANY_STATE, n, self._layout))

    def take_cdr(self, max_samples: int = 256) -> list[tuple[bytes, Any]]:
        """Take up to ``max_samples`` serialized samples with their ``SampleInfo``, dispose and
        unregister notices included (their bytes hold the key); nothing is decoded."""
        raw = _native.take(self._ref, ANY_STATE, native_count(max_samples))
        self.consumed += 1
        if isinstance(raw, int):
            raise DDSException(raw, f"taking from topic {self.topic_name!r}")
        return cast(list[tuple[bytes, Any]], raw)

    def _valid(self, raw: Any) -> list[T]:
        """Decode and check each sample with data; drop (and count) what fails.

        ``raw`` holds (bytes, info) tuples and, from a take with the reader's layout, samples
        the native code decoded already (with data only)."""
        self.consumed += 1
        if isinstance(raw, int):
            if self._closed:
                raise MccError(f"reader of topic {self.topic_name!r} is closed")
            raise DDSException(raw, f"taking from topic {self.topic_name!r}")
        decode = self.decode
        check = received_check(self.type) if self._validate else None  # type: ignore[arg-type]
        if check is None and not any(type(item) is tuple for item in raw):
            return cast(list[T], raw)  # all decoded natively, nothing left to check
        out = []
        for item in raw:
            try:
                if type(item) is tuple:
                    data, info = item
                    if not info.valid_data:
                        continue
                    sample = decode(data)
                    sample.sample_info = info
                else:
                    sample, info = item, item.sample_info
                if check is not None:
                    check(sample)
            except Exception as exc:  # hostile input is normal input: drop, count, go on
                self.bus.book.dropped(
                    self.topic_name, info.publication_handle, exc, self.writer_name
                )
                continue
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
        return poll_until(lambda: self.matched() >= count, timeout_s)

    def matched_writers(self) -> list[MatchedEndpoint]:
        """The writers matched now: a set that was matched at one instant, safe while peers
        come and go."""
        return _matched(self._ref, of_writer=False)

    def matched_writer(self, publication_handle: int) -> MatchedEndpoint | None:
        """The matched writer behind ``publication_handle`` (a sample's
        ``SampleInfo.publication_handle``); None when it is no longer matched."""
        return _matched_one(self._ref, publication_handle, of_writer=False)

    def writer_partitions(self, publication_handle: int) -> tuple[str, ...]:
        """The partitions of the matched writer behind ``publication_handle``; () when it is
        no longer matched. In a secured mission they are authenticated: access control checks
        a remote writer's partitions against its signed permissions, so `mcc.bus.rpc`
        attributes requests by them."""
        endpoint = self.matched_writer(publication_handle)
        if endpoint is None:
            return ()
        return ("",) if endpoint.partitions is None else endpoint.partitions

    def source_of(self, sample: Any) -> str | None:
        """The principal that wrote ``sample`` of a sourced topic (`TopicSpec.sourced`): the
        one source partition its writer is in, or None (a writer that speaks for no one, or
        one gone). On a secured bus it is authenticated: access control checked the writer's
        partitions against its signed permissions, which grant each identity its own.

        An instance's identity is issued afresh at each start, with a larger generation
        (`mcc.bus.topics.split_source`): once this reader has heard a principal's newer
        generation, an older one's samples get None (counted in ``stale_sources``), so a copy
        of a replaced identity is not heard beside the instance that replaced it."""
        found = self._source(sample)
        if found is None:
            return None
        principal, generation = found
        newest = self._generations.get(principal, -1)
        if generation >= newest:
            if generation > newest and len(self._generations) < 4096:
                self._generations[principal] = generation
            return principal
        self.stale_sources += 1
        if self.stale_sources == 1:
            log.warning(
                "%s: a replaced identity of %.80s (generation %d, newest %d) still writes; "
                "its samples are dropped and counted (stale_sources)",
                self.topic_name, principal, generation, newest,
            )  # fmt: skip
        return None

    def source_generation(self, sample: Any) -> int:
        """The generation of the identity that wrote ``sample`` (0: none, or unknown)."""
        found = self._source(sample)
        return 0 if found is None else found[1]

    def _source(self, sample: Any) -> tuple[str, int] | None:
        info = getattr(sample, "sample_info", None)
        if info is None:
            return None
        handle = info.publication_handle
        cache = self._sources
        if handle not in cache:
            if len(cache) >= 4096:  # writers come and go: forget the old ones
                cache.clear()
            endpoint = self.matched_writer(handle)
            if endpoint is None:
                return None  # not cached: a writer may be matched a moment later
            source = partition_source(endpoint.partitions or ("",))
            cache[handle] = None if source is None else split_source(source)
        return cache[handle]

    def writer_name(self, publication_handle: int) -> str:
        """The GUID of the matched writer behind ``publication_handle`` (for logs)."""
        endpoint = self.matched_writer(publication_handle)
        return endpoint.guid if endpoint is not None else f"handle:{publication_handle:x}"

    def close(self) -> None:
        """Stop ``on_data`` and delete the DDS reader (idempotent; later takes raise)."""
        if self._closed:
            return
        self._closed = True
        self.bus.dispatcher.forget(self._dds, reader=self)
        if self._waitset is not None:
            Entity.__del__(self._waitset)
        Entity.__del__(self._dds)

    @property
    def dds(self) -> DataReader[T]:
        """The underlying cyclonedds DataReader."""
        return self._dds

    @property
    def closed(self) -> bool:
        """Whether `close` has run."""
        return self._closed

    def deliver(self) -> None:
        """Call its ``on_data`` handler with it (the bus's dispatcher does, or Cyclone's
        receive thread for an inline reader); nothing without a handler."""
        if self._on_data is not None:
            self._on_data(self)


def poll_until(condition: Any, timeout_s: float, interval_s: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)
    return True
