"""The persistence service: durable topics → SQLite, history to late joiners, acks to writers.

One loop thread does everything in order — discover writers, store what they wrote (one
transaction per batch, committed before the ``PersistAck``), answer history requests — so a
reply holds every sample the service had taken before the request. docs/persistence.md.

Hostile input is normal input: what one writer may keep and how fast it may write, what the
store holds in all, how far ahead of this replica's clock a sample may be stamped and how much
one reply carries are bounded (`mcc.persist.limits.PersistLimits`); every store, dispose and
history request passes the authorization hook (`mcc.persist.policy`). What goes past a bound
or is denied is refused, counted (``stats``) and logged once per writer.

>>> with open_service("persist.sqlite", domain_id=7, replica="a") as service:
...     service.wait_ready(timeout_s=10.0)
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cyclonedds.builtin import (
    BuiltinDataReader,
    BuiltinTopicDcpsPublication,
    BuiltinTopicDcpsSubscription,
)
from cyclonedds.core import (
    DDSException,
    GuardCondition,
    InstanceState,
    Policy,
    ReadCondition,
    SampleState,
    ViewState,
    WaitSet,
)
from cyclonedds.dynamic import get_types_for_typeid
from cyclonedds.util import duration

from mcc import settings
from mcc.bus import Bus, Writer
from mcc.bus.history import (
    ACK_TOPIC,
    REPLY_TOPIC,
    REQUEST_TOPIC,
    ack_partition,
    dds_type_name,
    is_durable,
)
from mcc.bus.topics import TOPICS
from mcc.errors import TopicError
from mcc.orchestrate.appspec import app
from mcc.persist.alignment import Alignment
from mcc.persist.limits import PersistLimits, retention_seconds
from mcc.persist.policy import Action, Authorize, DefaultPolicy, Principal
from mcc.persist.serving import HistoryReplies
from mcc.persist.state import (
    LogOnce,
    Refusal,
    ServiceStatistics,
    TopicReader,
    Window,
    WriterInfo,
    current_window,
    key_json_of,
    policy_of,
)
from mcc.persist.store import Dispose, Store, TopicPolicy, Write
from mcc.security.mission import Topics
from mcc.types import PersistAck, PersistReply

if TYPE_CHECKING:
    from mcc.orchestrate.runtime import AppContext

log = logging.getLogger("mcc.persist")

# The service's readers of durable topics: reliable and keep-all (no sample is dropped before
# it is stored) and transient-local, which TRANSIENT and PERSISTENT writers both satisfy.
STORE_PROFILE = "command"
# Writers in any partition, and the default one ("*" alone does not match a "*" peer).
ALL_PARTITIONS = ("*", "")
_MAX_READERS_TRACKED = 100_000  # participants whose readers are remembered
_ANY = SampleState.Any | ViewState.Any | InstanceState.Any
_DURABLE = (Policy.Durability.Transient, Policy.Durability.Persistent)
_TYPE_LOOKUP_NS = 2_000_000_000
_MAX_PEERS = 64  # other replicas tracked
_MAX_KEYS = 100_000  # instance keys remembered per topic (for disposes without data)
_RETRY_TOPIC_S = 60.0  # a topic whose writer's type could not be looked up is tried again after
_NUMBER = re.compile(r"\d[\w.+-]*")  # numbers in a refusal: one kind, whatever the values


class PersistService:
    """Keeps the durable topics of ``bus``'s domain in ``store`` and serves their history.

    Args:
        bus: a bus in every partition (``partitions=ALL_PARTITIONS``); ``open_service`` makes one.
        store: the replica's store (``Store.open``).
        replica: this replica's name, unique among the running replicas.
        on_stored: called with the number of samples each committed batch stored.
        settle_s: a replica that finds no other replica within this time after its start
            calls itself complete (its replies say so); one that finds one is complete once
            it has taken over what that one held.
        authorize: the authorization hook (`mcc.persist.policy.Authorize`), called for every
            store, dispose and history request; default `DefaultPolicy` (everything allowed
            on an unsecured bus, alignment only to replicas on a secured one).
        identify: the authenticated identity of a participant, by its GUID ("" when
            unknown); it fills ``Principal.identity``.

    The bounds are the store's (``store.limits``, `PersistLimits`).
    """

    def __init__(
        self,
        bus: Bus,
        store: Store,
        *,
        replica: str,
        batch: int = 256,
        sweep_interval_s: float = 1.0,
        settle_s: float = 2.0,
        on_stored: Callable[[int], None] | None = None,
        authorize: Authorize | None = None,
        identify: Callable[[str], str] | None = None,
        topics: Collection[str] | None = None,
    ) -> None:
        self.bus = bus
        #: The durable topics kept (a mission's declared ones); None: every durable topic.
        self.topics = None if topics is None else frozenset(topics)
        self.store = store
        self.limits: PersistLimits = store.limits
        self.authorize: Authorize = authorize or DefaultPolicy(secured=is_secured(bus))
        self._identify = identify
        self.replica = replica
        self.batch = batch
        self.sweep_interval_s = sweep_interval_s
        self.on_stored = on_stored
        self.settle_s = settle_s
        self.complete = False
        self.stats = ServiceStatistics()
        self.stats.transient_dropped = store.drop_transient()
        self._next_expiry = 0.0
        if self.stats.transient_dropped:
            log.info(
                "%s: dropped %d TRANSIENT samples of a previous run from %s",
                replica,
                self.stats.transient_dropped,
                store.path,
            )
        self._me = str(bus.participant.guid)
        self._waitset = WaitSet(bus.participant)
        self._guard = GuardCondition(bus.participant)
        self._waitset.attach(self._guard)
        self._publications = BuiltinDataReader(bus.participant, BuiltinTopicDcpsPublication)
        self._subscriptions = BuiltinDataReader(bus.participant, BuiltinTopicDcpsSubscription)
        for builtin in (self._publications, self._subscriptions):
            self._waitset.attach(ReadCondition(builtin, _ANY))
        self._requests = bus.reader(REQUEST_TOPIC, history=False)
        self._waitset.attach(self._requests.condition)
        self._replies = bus.writer(REPLY_TOPIC)
        self._acks: dict[str, Writer[PersistAck]] = {}  # topic → its acks' writer (`_ack_writer`)
        self._topics: dict[str, TopicReader] = {}
        self._writers: dict[int, WriterInfo] = {}
        self._gone: dict[str, str] = {}  # writer GUID → topic: acks to be withdrawn
        self._refusals: dict[str, Refusal] = {}
        self._peers: set[str] = set()
        # participant → topics it has readers of (for `Principal.reads`), bounded
        self._reads: dict[str, set[str]] = {}
        self._log_once = LogOnce()  # (who, what) logged once
        self._alignment = Alignment(
            bus,
            store,
            replica=replica,
            commit=lambda ops: self._commit(ops, aligned=True),
            wake=self._wake,
        )
        self._history = HistoryReplies(
            self._requests,
            store,
            replica=replica,
            authorize=self.authorize,
            requester=self._requester,
            send=self._send_reply,
            stats=self.stats,
            log_once=self._log_once,
            batch=batch,
        )
        self._windows: dict[str, Window] = {}  # writer GUID → its rate window
        self._unkept: dict[str, float] = {}  # topics whose type lookup failed → retry after
        self._stop = threading.Event()
        self._ready = threading.Event()
        # Subscribe to the catalogue's durable topics now, so that a writer's first samples
        # find a matched reader as soon as discovery allows.
        for spec in TOPICS.values():
            if is_durable(bus.qos.reader_qos(spec.profile)):
                self._subscribe(spec.name, dds_type_name(spec.type))
        self._thread: threading.Thread | None = None
        self.failure: BaseException | None = None

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> PersistService:
        """Run the loop in a daemon thread."""
        self._thread = threading.Thread(target=self.run, name="mcc-persist", daemon=True)
        self._thread.start()
        return self

    def wait_ready(self, timeout_s: float = 10.0) -> bool:
        """True once the loop runs (its readers and the history replier exist)."""
        return self._ready.wait(timeout_s)

    @property
    def alive(self) -> bool:
        """False once the loop has stopped (asked to, or on a failure: see ``failure``)."""
        return self._ready.is_set() and not self._stop.is_set()

    def stop(self, *, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def run(self) -> None:
        """The loop: discover, store, align, answer, sweep — until ``stop()``."""
        next_sweep = time.monotonic() + self.sweep_interval_s
        settled_at = time.monotonic() + self.settle_s
        self._ready.set()
        log.info("%s: serving from %s", self.replica, self.store.path)
        try:
            while not self._stop.is_set():
                self._waitset.wait(duration(seconds=self.sweep_interval_s))
                self._guard.set(False)
                self._discover()
                self._ingest()
                if self._alignment.take():
                    self.complete = True  # what the other replicas held is here
                self._history.serve(complete=self.complete)
                if not self.complete and not self._peers and time.monotonic() >= settled_at:
                    self.complete = True  # alone: nothing to take over
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + self.sweep_interval_s
                    self._sweep()
        except Exception as exc:  # a dead loop must be visible: the app exits non-zero
            self.failure = exc
            log.exception("%s: the persistence loop failed", self.replica)
        finally:
            self._stop.set()

    # -- discovery --------------------------------------------------------------------------
    def _discover(self) -> None:
        for endpoint in self._publications.take(256):
            info = endpoint.sample_info
            if not info.valid_data or info.instance_state != InstanceState.Alive:
                writer = self._writers.get(info.instance_handle)
                if writer is not None and writer.durable:
                    self._gone[writer.guid] = writer.topic  # forgotten at the sweep
                elif writer is not None:
                    del self._writers[info.instance_handle]
                continue
            self._on_publication(endpoint)
        self._take_subscriptions()

    def _take_subscriptions(self) -> None:
        for endpoint in self._subscriptions.take(256):
            info = endpoint.sample_info
            if not info.valid_data or info.instance_state != InstanceState.Alive:
                continue
            peer = str(endpoint.participant_key)
            reads = self._reads.get(peer)
            if reads is None and len(self._reads) < _MAX_READERS_TRACKED:
                reads = self._reads[peer] = set()
            if reads is not None and len(reads) < 1024:
                reads.add(endpoint.topic_name)
            if endpoint.topic_name == REQUEST_TOPIC and peer not in self._peers | {self._me}:
                if len(self._peers) >= _MAX_PEERS:
                    self._log_once(
                        "*",
                        "peers",
                        "%s: more than %d replicas; %s and later ones ignored",
                        self.replica,
                        _MAX_PEERS,
                        peer,
                    )
                    continue
                self._peers.add(peer)  # another replica: take over what it holds
                self._alignment.start()

    def _wake(self) -> None:
        """Wake the loop (from another thread: ``stop``, a finished alignment)."""
        self._guard.set(True)

    def _on_publication(self, endpoint: Any) -> None:
        """Learn of a writer from discovery (``endpoint``: its ``DCPSPublication`` sample)."""
        qos = endpoint.qos
        durable = Policy.Durability in qos and qos[Policy.Durability] in _DURABLE
        partitions = tuple(qos[Policy.Partition].partitions) if Policy.Partition in qos else ()
        handle = endpoint.sample_info.instance_handle
        if handle not in self._writers and len(self._writers) >= self.limits.max_writers:
            self._log_once(
                "*",
                "writers",
                "%s: %d writers tracked (max_writers): %s and later ones ignored",
                self.replica,
                self.limits.max_writers,
                endpoint.key,
            )
            return
        self._writers[handle] = WriterInfo(
            str(endpoint.key),
            endpoint.topic_name,
            endpoint.type_name,
            partitions,
            durable,
            str(endpoint.participant_key),
        )
        if not durable:
            return
        name, type_name = endpoint.topic_name, endpoint.type_name
        if self.topics is not None and name not in self.topics:
            self.stats.topics_refused += 1
            self._log_once(
                name[:80],
                "undeclared",
                "%s: a durable writer of topic %.80r, which the mission does not declare "
                "durable: not kept",
                self.replica,
                name,
            )
            return
        topic = self._topics.get(name)
        if topic is None and self._unkept.get(name, 0.0) > time.monotonic():
            return  # its type could not be had a moment ago: each try can block the loop 2 s
        if topic is None and len(self._topics) >= self.limits.max_topics:
            self.stats.topics_refused += 1
            self._log_once(
                name,
                "topics",
                "%s: %d durable topics kept (max_topics): topic %r not kept",
                self.replica,
                self.limits.max_topics,
                name,
            )
            return
        topic = topic or self._subscribe(name, type_name, endpoint.type_id)
        if topic is None:
            return
        if topic.type_name != type_name:
            log.warning(
                "%s: a writer of topic %r has type %s, the service reads it as %s",
                self.replica,
                name,
                type_name,
                topic.type_name,
            )
        if topic.policy is None:
            policy = self.store.ensure_topic(policy_of(name, topic.type_name, qos))
            topic.policy = policy
            log.info(
                "%s: keeping topic %r (%s, %s, history %s)",
                self.replica,
                name,
                topic.type_name,
                policy.durability,
                "keep-all" if policy.history_depth < 0 else f"keep-last {policy.history_depth}",
            )

    def _subscribe(self, name: str, type_name: str, type_id: Any = None) -> TopicReader | None:
        """A reader of ``name``: the catalogue's type, or the writer's (XTypes discovery)."""
        spec = TOPICS.get(name)
        try:
            if spec is not None and dds_type_name(spec.type) == type_name:
                data_type: Any = spec.type
            elif type_id is not None:
                data_type, _ = get_types_for_typeid(self.bus.participant, type_id, _TYPE_LOOKUP_NS)
            else:
                return None
            reader = self.bus.reader(name, type=data_type, profile=STORE_PROFILE, history=False)
        except (DDSException, TopicError) as exc:
            if len(self._unkept) >= 1024:
                self._unkept.clear()
            first = name not in self._unkept
            self._unkept[name] = time.monotonic() + _RETRY_TOPIC_S
            if first:
                log.warning(
                    "%s: cannot keep topic %r (%s): %s (tried again in %.0f s at the earliest)",
                    self.replica,
                    name,
                    type_name,
                    exc,
                    _RETRY_TOPIC_S,
                )
            return None
        topic = TopicReader(name, type_name, data_type, reader, self.store.topic(name, type_name))
        self._topics[name] = topic
        self._ack_writer(name)  # before a writer of the topic waits for its match
        self._waitset.attach(reader.condition)
        self.stats.topics += 1
        return topic

    # -- who may do what --------------------------------------------------------------------
    def _requester(self, request: Any) -> Principal | None:
        """Who wrote a history request: from discovery, never from a field of the request."""
        self._take_subscriptions()  # the requester's readers, discovered just before it asked
        info = getattr(request, "sample_info", None)
        if info is None:
            return None
        writer = self._writers.get(info.publication_handle)
        if writer is not None:
            return self._principal(writer)
        data = self._requests.matched_writer(info.publication_handle)  # not discovered yet
        if data is None:
            return None
        return self._principal(
            WriterInfo(data.guid, REQUEST_TOPIC, "", (), False, data.participant)
        )

    def _principal(self, writer: WriterInfo) -> Principal:
        identity = self._identify(writer.participant) if self._identify is not None else ""
        return Principal(
            participant=writer.participant,
            writer=writer.guid,
            identity=identity,
            replica=writer.participant in self._peers,
            reads=frozenset(self._reads.get(writer.participant, ())),
        )

    def _allowed(self, writer: WriterInfo, action: Action, topic: str) -> str | None:
        """None when the hook allows ``action`` in every partition of ``writer``; else why not."""
        principal = self._principal(writer)
        for partition in writer.partitions or ("",):
            if not self.authorize(principal, action, topic, partition):
                return (
                    f"not authorized to {action.value} topic {topic!r} in partition {partition!r}"
                )
        return None

    def _within_rate(self, writer: WriterInfo, nbytes: int) -> str | None:
        """Count a sample of ``writer`` in its receive-time window; why not, when over."""
        limits = self.limits
        window = current_window(self._windows, writer.guid, limits.window_s, limits.max_writers)
        if window.samples + 1 > limits.max_writer_samples_per_window:
            return (
                f"max_writer_samples_per_window = {limits.max_writer_samples_per_window} "
                f"reached (window_s = {limits.window_s:g})"
            )
        if window.nbytes + nbytes > limits.max_writer_bytes_per_window:
            return (
                f"max_writer_bytes_per_window = {limits.max_writer_bytes_per_window} "
                f"reached (window_s = {limits.window_s:g})"
            )
        window.samples += 1
        window.nbytes += nbytes
        return None

    # -- storing ----------------------------------------------------------------------------
    def _ingest(self) -> None:
        ops: list[Write | Dispose] = []
        refused: list[tuple[Write, str]] = []
        for topic in self._topics.values():
            while True:
                raw = topic.reader.take_cdr(self.batch)
                for data, info in raw:
                    op = self._op(topic, data, info)
                    if isinstance(op, tuple):
                        refused.append(op)
                    elif op is not None:
                        ops.append(op)
                if len(raw) < self.batch:
                    break
        if ops or refused:
            self._commit(ops, refused=refused)

    def _op(
        self, topic: TopicReader, data: bytes, info: Any
    ) -> Write | Dispose | tuple[Write, str] | None:
        """What to do with one sample: store it, dispose its instance, or refuse it (the
        write and why: counted in the writer's acks). Bounds are checked on this replica's
        receive clock before anything is decoded."""
        writer = self._writers.get(info.publication_handle)
        if writer is None:
            # Matched (its data is here) before discovery's sample was taken: take them now
            # (Cyclone announces a remote writer on DCPSPublication before it matches it).
            self._discover()
            writer = self._writers.get(info.publication_handle)
        policy = topic.policy
        if writer is None or not writer.durable or policy is None:
            self.stats.ignored += 1
            return None
        if not info.valid_data and info.instance_state != InstanceState.NotAliveDisposed:
            return None  # unregistered (its writer left): the samples stay
        limits = self.limits
        now_ns = time.time_ns()
        refusal: str | None = None
        if info.source_timestamp > now_ns + int(limits.max_future_skew_s * 1e9):
            self.stats.future_stamped += 1
            refusal = (
                f"source timestamp {(info.source_timestamp - now_ns) / 1e9:.3g} s ahead of "
                f"this replica's clock (max_future_skew_s = {limits.max_future_skew_s:g})"
            )
        elif (rate := self._within_rate(writer, len(data))) is not None:
            self.stats.rate_limited += 1
            refusal = rate
        else:
            action = Action.STORE if info.valid_data else Action.DISPOSE
            refusal = self._allowed(writer, action, policy.name)
            if refusal is not None:
                self.stats.unauthorized += 1
        if refusal is not None:
            blank = Write(
                policy.name,
                policy.type_name,
                writer.partitions,
                b"",
                "",
                writer.guid,
                info.source_timestamp,
                b"",
            )
            return blank, f"topic {policy.name!r}: {refusal}"
        if info.valid_data:
            try:
                sample = topic.reader.decode(data)  # the flat codec where the type is flat
            except Exception as exc:  # bytes that do not fit the type: keep the service up
                self._undecodable(writer, policy, "sample", exc)
                return None
            # One instance handle is one key (Cyclone's key hash): an instance written again,
            # as a worker's checkpoint is, reuses the key found the first time.
            known = topic.keys.get(info.instance_handle)
            if known is None:
                known = (sample.serialize_key(), key_json_of(sample))
                if len(topic.keys) >= _MAX_KEYS:
                    topic.keys.clear()  # only a cache: a dispose without data decodes its key
                topic.keys[info.instance_handle] = known
            key, key_json = known
            return Write(
                policy.name,
                policy.type_name,
                writer.partitions,
                key,
                key_json,
                writer.guid,
                info.source_timestamp,
                bytes(data),
            )
        else:
            known = topic.keys.pop(info.instance_handle, None)
            try:
                key = known[0] if known else topic.type.deserialize_key(data).serialize_key()
            except Exception as exc:  # a key that does not decode: nothing to dispose
                self._undecodable(writer, policy, "dispose", exc)
                return None
            return Dispose(
                policy.name,
                policy.type_name,
                writer.partitions,
                key,
                writer.guid,
                info.source_timestamp,
            )

    def _undecodable(
        self, writer: WriterInfo, policy: TopicPolicy, what: str, exc: Exception
    ) -> None:
        """Count (and log once per writer) bytes that do not fit the topic's type."""
        self._log_once(
            writer.guid,
            "undecodable",
            f"%s: undecodable {what} on %r: %s (writer %s)",
            self.replica,
            policy.name,
            str(exc)[:200],
            writer.guid,
        )
        self.stats.ignored += 1

    def _commit(
        self,
        ops: list[Write | Dispose],
        *,
        aligned: bool = False,
        refused: list[tuple[Write, str]] | None = None,
    ) -> int:
        """Store ``ops`` in one transaction, then acknowledge their writers (not for what
        alignment took over); the number of samples stored."""
        result = self.store.apply(ops)
        result.refused[:0] = refused or []
        result.writers.update(op.writer_guid for op, _ in refused or [])
        self.stats.stored += result.stored
        self.stats.duplicates += result.duplicates
        self.stats.refused += len(result.refused)
        self.stats.disposed += result.disposed
        if aligned:
            self.stats.aligned += result.stored
        for op, reason in result.refused:
            self._log_once(
                op.writer_guid,
                _NUMBER.sub("N", reason.split(" = ")[0].split(" (")[0]),
                "%s: refused a sample of writer %s: %s (further refusals of this kind from "
                "this writer are counted, not logged)",
                self.replica,
                op.writer_guid,
                reason,
            )
            known = self._refusals.get(op.writer_guid)
            if known is None or op.source_ns >= known.source_ns:  # the ack names the newest
                self._refusals[op.writer_guid] = Refusal(op.source_ns, reason)
        if self.on_stored is not None and result.stored:
            self.on_stored(result.stored)
        if aligned:
            return result.stored
        topics = {op.writer_guid: op.topic for op in ops}
        topics.update((op.writer_guid, op.topic) for op, _ in refused or [])
        for guid in sorted(result.writers):  # committed: now acknowledge
            self._ack(guid, topics[guid])
        return result.stored

    def _ack_writer(self, topic: str) -> Writer[PersistAck]:
        """The writer of ``topic``'s acks, in its partition (`ack_partition`); one per kept
        topic (at most ``max_topics``)."""
        writer = self._acks.get(topic)
        if writer is None:
            writer = self._acks[topic] = self.bus.writer(
                ACK_TOPIC, partitions=[ack_partition(topic)]
            )
        return writer

    def _ack(self, guid: str, topic: str) -> None:
        state = self.store.writer_state(guid)
        refusal = self._refusals.get(guid)
        self._write(
            self._ack_writer(topic),
            PersistAck(
                replica=self.replica,
                writer_guid=guid,
                topic=topic,
                stored_source_ns=state.last_source_ns if state else 0,
                stored=state.stored if state else 0,
                refused_source_ns=refusal.source_ns if refusal else 0,
                refused_reason=refusal.reason if refusal else "",
                time_ns=time.time_ns(),
            ),
            "PersistAck",
        )

    def _send_reply(self, reply: PersistReply) -> bool:
        return self._write(self._replies, reply, "PersistReply")

    def _write(self, writer: Any, sample: Any, topic: str) -> bool:
        """Send ``sample``; False when a reliable reader that stopped acknowledging (a process
        killed a moment ago, until its liveliness lapses) blocked the write past its QoS's
        max blocking time. The sample is dropped and counted: the requester asks again, the
        next ack covers this one. Never the end of the service."""
        try:
            writer.write(sample)
        except DDSException as exc:
            if exc.code != DDSException.DDS_RETCODE_TIMEOUT:
                raise
            self.stats.writes_timed_out += 1
            self._log_once(
                "*",
                f"timeout {topic}",
                "%s: a %s write timed out (a reader stopped acknowledging); dropped, and the "
                "next ones are counted, not logged",
                self.replica,
                topic,
            )
            return False
        return True

    def _sweep(self) -> None:
        purged = self.store.sweep()
        if purged:
            log.info("%s: removed %d disposed instances", self.replica, purged)
        now = time.monotonic()
        if now >= self._next_expiry:  # retention: a tenth of it, at most a minute, apart
            self._next_expiry = now + min(self.limits.retention_s / 10, 60.0)
            expired = self.store.expire()
            self.stats.expired += expired
            if expired:
                log.info(
                    "%s: removed %d samples older than retention_s = %g",
                    self.replica,
                    expired,
                    self.limits.retention_s,
                )
        for guid, topic in sorted(self._gone.items()):  # the writer is gone: no one waits
            if topic in self._acks:
                self._acks[topic].dispose(PersistAck(replica=self.replica, writer_guid=guid))
            self._windows.pop(guid, None)
            self._refusals.pop(guid, None)
        if self._gone:  # forget them: a churn of writers must not grow the service
            for handle in [h for h, w in self._writers.items() if w.guid in self._gone]:
                del self._writers[handle]
        self._gone.clear()


def default_replica() -> str:
    return f"{socket.gethostname()}/{os.getpid()}"


def is_secured(bus: Bus) -> bool:
    """Whether ``bus`` runs DDS Security (its transport configures authentication)."""
    return bus.transport is not None and "<Security>" in bus.transport.extra_xml


@contextlib.contextmanager
def open_service(
    store: str | Path,
    *,
    domain_id: int | None = None,
    replica: str | None = None,
    on_stored: Callable[[int], None] | None = None,
    limits: PersistLimits | None = None,
    authorize: Authorize | None = None,
    identify: Callable[[str], str] | None = None,
    topics: Collection[str] | None = None,
) -> Iterator[PersistService]:
    """Run a replica in a thread with its own participant; stopped and closed on exit.

    ``domain_id`` defaults to ``$MCC_DOMAIN`` (else 0); transport and discovery tag come from
    the environment as for every ``Bus``. ``limits``, ``authorize``, ``identify`` and
    ``topics``: see `PersistService` (defaults: `PersistLimits()`, `DefaultPolicy`, every
    durable topic).
    """
    replica = replica or default_replica()
    domain = settings.current().domain if domain_id is None else domain_id
    opened = Store.open(store, limits=limits)
    try:
        with Bus(domain, partitions=ALL_PARTITIONS, name=f"mcc persist {replica}") as bus:
            service = PersistService(
                bus,
                opened,
                replica=replica,
                on_stored=on_stored,
                authorize=authorize,
                identify=identify,
                topics=topics,
            ).start()
            try:
                yield service
            finally:
                service.stop()
    finally:
        opened.close()


def store_path_for(run_dir: Path, index: int) -> Path:
    """Instance 0 keeps ``<run dir>/persist.sqlite``, instance N ``persist-N.sqlite``."""
    return run_dir / ("persist.sqlite" if index == 0 else f"persist-{index}.sqlite")


@app(topics=Topics(publish=("PersistReply", "PersistAck", "PersistRequest"), subscribe=("*",)))
def main(ctx: AppContext) -> int:
    """The orchestrator's app (``mcc.persist.service:main``); args: ``[--store FILE]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="mcc.persist.service")
    parser.add_argument("--store", type=Path, help="store file (default: in the run dir)")
    parser.add_argument(
        "--topics", help="the durable topics to keep, comma-separated (default: every one)"
    )
    parser.add_argument(
        "--retention",
        type=retention_seconds,
        default=PersistLimits.retention_s,
        metavar="SECONDS",
        help="keep samples this long (the newest of each instance always); inf: no retention",
    )
    args = parser.parse_args(ctx.args)
    topics = None if args.topics is None else [t for t in args.topics.split(",") if t]
    store = args.store or store_path_for(ctx.run_dir, ctx.identity.index)
    replica = f"{ctx.identity.system}-{ctx.identity.index}"
    with open_service(
        store,
        domain_id=ctx.bus.domain_id,
        replica=replica,
        on_stored=ctx.heartbeat.count_in,
        topics=topics,
        limits=PersistLimits(retention_s=args.retention),
    ) as service:
        service.wait_ready()
        ctx.log.info("persistence replica %s: store %s", replica, store)
        while not ctx.wait(0.5):
            if not service.alive:
                ctx.log.error("persistence loop stopped: %s", service.failure)
                return 1
    return 0
