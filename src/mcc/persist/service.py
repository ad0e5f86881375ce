"""The persistence service: durable topics → SQLite, history to late joiners, acks to writers.

One loop thread does everything in order — discover writers, store what they wrote (one
transaction per batch, committed before the ``PersistAck``), answer history requests — so a
reply holds every sample the service had taken before the request. docs/persistence.md.

>>> with open_service("persist.sqlite", domain_id=7, replica="a") as service:
...     service.wait_ready(timeout_s=10.0)
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
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

from mcc.bus import Bus, Reader
from mcc.bus.history import (
    ACK_TOPIC,
    REPLY_TOPIC,
    REQUEST_TOPIC,
    dds_type_name,
    history_client,
    is_durable,
)
from mcc.bus.topics import TOPICS
from mcc.errors import MccError, TopicError
from mcc.persist.store import Dispose, Store, TopicPolicy, Write
from mcc.security.mission import Topics
from mcc.types import PersistAck, PersistReply

# Stores whatever durable topic it discovers: it subscribes to every topic.
BUS_TOPICS = {
    "main": Topics(publish=("PersistReply", "PersistAck"), subscribe=("*",)),
}

if TYPE_CHECKING:
    from mcc.orchestrate.runtime import AppContext

log = logging.getLogger("mcc.persist")

# The service's readers of durable topics: reliable and keep-all (no sample is dropped before
# it is stored) and transient-local, which TRANSIENT and PERSISTENT writers both satisfy.
STORE_PROFILE = "command"
# Writers in any partition, and the default one ("*" alone does not match a "*" peer).
ALL_PARTITIONS = ("*", "")
_ANY = SampleState.Any | ViewState.Any | InstanceState.Any
_DURABLE = (Policy.Durability.Transient, Policy.Durability.Persistent)
_TYPE_LOOKUP_NS = 2_000_000_000


@dataclass
class ServiceStatistics:
    """Counters since the service started."""

    stored: int = 0
    duplicates: int = 0
    refused: int = 0
    disposed: int = 0
    ignored: int = 0  # samples of writers that are not durable, or undecodable
    requests: int = 0
    aligned: int = 0  # samples taken over from other replicas
    topics: int = 0
    transient_dropped: int = 0  # TRANSIENT samples found in the file at start-up


@dataclass
class _WriterInfo:
    guid: str
    topic: str
    type_name: str
    partitions: tuple[str, ...]
    durable: bool


@dataclass
class _TopicReader:
    name: str
    type_name: str
    type: Any
    reader: Reader[Any]
    policy: TopicPolicy | None  # from the first durable writer seen (or a previous run)
    keys: dict[int, tuple[bytes, str]] = field(default_factory=dict)  # instance handle → key


@dataclass
class _Refusal:
    source_ns: int
    reason: str


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
    ) -> None:
        self.bus = bus
        self.store = store
        self.replica = replica
        self.batch = batch
        self.sweep_interval_s = sweep_interval_s
        self.on_stored = on_stored
        self.settle_s = settle_s
        self.complete = False
        self.stats = ServiceStatistics()
        self.stats.transient_dropped = store.drop_transient()
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
        self._acks = bus.writer(ACK_TOPIC)
        self._topics: dict[str, _TopicReader] = {}
        self._writers: dict[int, _WriterInfo] = {}
        self._gone: set[str] = set()  # writer GUIDs whose acks are to be withdrawn
        self._refusals: dict[str, _Refusal] = {}
        self._peers: set[str] = set()
        self._aligned: queue.Queue[list[PersistReply]] = queue.Queue()
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
        self._guard.set(True)
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
                self._take_alignment()
                self._serve()
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
                    self._gone.add(writer.guid)
                continue
            self._on_publication(endpoint)
        for endpoint in self._subscriptions.take(256):
            info = endpoint.sample_info
            if not info.valid_data or info.instance_state != InstanceState.Alive:
                continue
            peer = str(endpoint.participant_key)
            if endpoint.topic_name == REQUEST_TOPIC and peer not in self._peers | {self._me}:
                self._peers.add(peer)  # another replica: take over what it holds
                self._align()

    def _on_publication(self, endpoint: Any) -> None:
        qos = endpoint.qos
        durable = Policy.Durability in qos and qos[Policy.Durability] in _DURABLE
        partitions = tuple(qos[Policy.Partition].partitions) if Policy.Partition in qos else ()
        self._writers[endpoint.sample_info.instance_handle] = _WriterInfo(
            str(endpoint.key), endpoint.topic_name, endpoint.type_name, partitions, durable
        )
        if not durable:
            return
        name, type_name = endpoint.topic_name, endpoint.type_name
        topic = self._topics.get(name) or self._subscribe(name, type_name, endpoint.type_id)
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
            policy = self.store.ensure_topic(_policy_of(name, topic.type_name, qos))
            topic.policy = policy
            log.info(
                "%s: keeping topic %r (%s, %s, history %s)",
                self.replica,
                name,
                topic.type_name,
                policy.durability,
                "keep-all" if policy.history_depth < 0 else f"keep-last {policy.history_depth}",
            )

    def _subscribe(self, name: str, type_name: str, type_id: Any = None) -> _TopicReader | None:
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
            log.warning("%s: cannot keep topic %r (%s): %s", self.replica, name, type_name, exc)
            return None
        topic = _TopicReader(name, type_name, data_type, reader, self.store.topic(name, type_name))
        self._topics[name] = topic
        self._waitset.attach(reader.condition)
        self.stats.topics += 1
        return topic

    # -- storing ----------------------------------------------------------------------------
    def _ingest(self) -> None:
        ops: list[Write | Dispose] = []
        for topic in self._topics.values():
            while True:
                raw = topic.reader.take_cdr(self.batch)
                for data, info in raw:
                    op = self._op(topic, data, info)
                    if op is not None:
                        ops.append(op)
                if len(raw) < self.batch:
                    break
        if ops:
            self._commit(ops)

    def _op(self, topic: _TopicReader, data: bytes, info: Any) -> Write | Dispose | None:
        writer = self._writers.get(info.publication_handle)
        policy = topic.policy
        if writer is None or not writer.durable or policy is None:
            self.stats.ignored += 1
            return None
        if info.valid_data:
            try:
                sample = topic.type.deserialize(data)
            except Exception as exc:  # bytes that do not fit the type: keep the service up
                log.warning("%s: undecodable sample on %r: %s", self.replica, policy.name, exc)
                self.stats.ignored += 1
                return None
            key = sample.serialize_key()
            key_json = _key_json(sample)
            topic.keys[info.instance_handle] = (key, key_json)
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
        if info.instance_state == InstanceState.NotAliveDisposed:
            known = topic.keys.get(info.instance_handle)
            key = known[0] if known else topic.type.deserialize_key(data).serialize_key()
            return Dispose(
                policy.name,
                policy.type_name,
                writer.partitions,
                key,
                writer.guid,
                info.source_timestamp,
            )
        return None  # unregistered (its writer left): the samples stay

    def _commit(self, ops: list[Write | Dispose], *, aligned: bool = False) -> None:
        result = self.store.apply(ops)
        self.stats.stored += result.stored
        self.stats.duplicates += result.duplicates
        self.stats.refused += len(result.refused)
        self.stats.disposed += result.disposed
        if aligned:
            self.stats.aligned += result.stored
        for op, reason in result.refused:
            log.warning(
                "%s: refused a sample of writer %s: %s", self.replica, op.writer_guid, reason
            )
            self._refusals[op.writer_guid] = _Refusal(op.source_ns, reason)
        if self.on_stored is not None and result.stored:
            self.on_stored(result.stored)
        if aligned:
            return
        topics = {op.writer_guid: op.topic for op in ops}
        for guid in sorted(result.writers):  # committed: now acknowledge
            self._ack(guid, topics[guid])

    def _ack(self, guid: str, topic: str) -> None:
        state = self.store.writer_state(guid)
        refusal = self._refusals.get(guid)
        self._acks.write(
            PersistAck(
                replica=self.replica,
                writer_guid=guid,
                topic=topic,
                stored_source_ns=state.last_source_ns if state else 0,
                stored=state.stored if state else 0,
                refused_source_ns=refusal.source_ns if refusal else 0,
                refused_reason=refusal.reason if refusal else "",
                time_ns=time.time_ns(),
            )
        )

    # -- replicas ---------------------------------------------------------------------------
    def _align(self) -> None:
        """Ask the other replicas for everything they hold (in a thread: the loop answers)."""

        def fetch() -> None:
            try:
                replies = history_client(self.bus).fetch(
                    "", partitions=["*"], timeout_s=10.0, exclude=self.replica
                )
            except (MccError, DDSException) as exc:
                log.warning("%s: alignment failed: %s", self.replica, exc)
                replies = []
            self._aligned.put(replies)  # even none: the loop then knows it is on its own
            with contextlib.suppress(DDSException):  # the service may have closed meanwhile
                self._guard.set(True)

        threading.Thread(target=fetch, name="mcc-persist-align", daemon=True).start()

    def _take_alignment(self) -> None:
        while True:
            try:
                replies = self._aligned.get_nowait()
            except queue.Empty:
                return
            ops: list[Write | Dispose] = []
            for reply in replies:
                if not reply.ok:
                    continue
                types = {t.topic: t.type_name for t in reply.topics}
                for topic in reply.topics:
                    self.store.ensure_topic(TopicPolicy.from_msg(topic))
                for s in reply.samples:
                    ops.append(
                        Write(
                            s.topic,
                            types.get(s.topic, ""),
                            tuple(json.loads(s.partitions_json or "[]")),
                            bytes(s.key),
                            s.key_json,
                            s.writer_guid,
                            s.source_ns,
                            bytes(s.data),
                        )
                    )
            self.complete = True
            if ops:
                self._commit(ops, aligned=True)
                log.info(
                    "%s: aligned with %s (%d samples new here)",
                    self.replica,
                    ", ".join(sorted(r.replier_id for r in replies)),
                    self.stats.aligned,
                )

    # -- serving ----------------------------------------------------------------------------
    def _serve(self) -> None:
        for request in self._requests.take(self.batch):
            self.stats.requests += 1
            reply = PersistReply(
                request_id=request.request_id,
                client_id=request.client_id,
                replier_id=self.replica,
                complete=self.complete,
                ok=True,
            )
            try:
                partitions = json.loads(request.partitions_json or "[]")
                if not isinstance(partitions, list):
                    raise ValueError("not a JSON list")
                topics, samples = self.store.history(
                    request.topic, type_name=request.type_name, partitions=partitions
                )
                reply.topics = [t.to_msg() for t in topics]
                reply.samples = samples
            except (ValueError, MccError) as exc:
                reply.ok = False
                reply.message = (
                    f"bad history request {request.request_id!r} "
                    f"(partitions_json={request.partitions_json!r}): {exc}"
                )
            reply.reply_ns = time.time_ns()
            self._replies.write(reply)
            log.debug(
                "%s: answered %s (topic %r): %d samples",
                self.replica,
                request.request_id,
                request.topic,
                len(reply.samples),
            )

    def _sweep(self) -> None:
        purged = self.store.sweep()
        if purged:
            log.info("%s: removed %d disposed instances", self.replica, purged)
        for guid in sorted(self._gone):  # the writer is gone: nobody waits for its acks
            self._acks.dispose(PersistAck(replica=self.replica, writer_guid=guid))
        self._gone.clear()


def _policy_of(name: str, type_name: str, qos: Any) -> TopicPolicy:
    """The topic's policy from a writer's QoS (its ``durability_service``)."""
    persistent = qos[Policy.Durability] == Policy.Durability.Persistent
    if Policy.DurabilityService not in qos:
        return TopicPolicy(name, type_name, persistent, history_depth=1)
    ds = qos[Policy.DurabilityService]
    depth = int(getattr(ds.history, "depth", -1))
    return TopicPolicy(
        name,
        type_name,
        persistent,
        history_depth=depth if depth > 0 else -1,
        max_samples=ds.max_samples,
        max_instances=ds.max_instances,
        max_samples_per_instance=ds.max_samples_per_instance,
        cleanup_delay_ns=ds.cleanup_delay,
    )


def _key_json(sample: Any) -> str:
    annotations = getattr(type(sample), "__idl_field_annotations__", {})
    keys = {name: getattr(sample, name) for name, ann in annotations.items() if ann.get("key")}
    return json.dumps(keys, default=str, sort_keys=True)


def default_replica() -> str:
    return f"{socket.gethostname()}/{os.getpid()}"


@contextlib.contextmanager
def open_service(
    store: str | Path,
    *,
    domain_id: int | None = None,
    replica: str | None = None,
    on_stored: Callable[[int], None] | None = None,
) -> Iterator[PersistService]:
    """Run a replica in a thread with its own participant; stopped and closed on exit.

    ``domain_id`` defaults to ``$MCC_DOMAIN`` (else 0); transport and discovery tag come from
    the environment as for every ``Bus``.
    """
    replica = replica or default_replica()
    domain = int(os.environ.get("MCC_DOMAIN", "0")) if domain_id is None else domain_id
    opened = Store.open(store)
    try:
        with Bus(domain, partitions=ALL_PARTITIONS, name=f"mcc persist {replica}") as bus:
            service = PersistService(bus, opened, replica=replica, on_stored=on_stored).start()
            try:
                yield service
            finally:
                service.stop()
    finally:
        opened.close()


def store_path_for(run_dir: Path, index: int) -> Path:
    """Instance 0 keeps ``<run dir>/persist.sqlite``, instance N ``persist-N.sqlite``."""
    return run_dir / ("persist.sqlite" if index == 0 else f"persist-{index}.sqlite")


def main(ctx: AppContext) -> int:
    """The orchestrator's app (``mcc.persist.service:main``); args: ``[--store FILE]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="mcc.persist.service")
    parser.add_argument("--store", type=Path, help="store file (default: in the run dir)")
    args = parser.parse_args(ctx.args)
    store = args.store or store_path_for(ctx.run_dir, ctx.identity.index)
    replica = f"{ctx.identity.system}-{ctx.identity.index}"
    with open_service(
        store, domain_id=ctx.bus.domain_id, replica=replica, on_stored=ctx.heartbeat.count_in
    ) as service:
        service.wait_ready()
        ctx.log.info("persistence replica %s: store %s", replica, store)
        while not ctx.wait(0.5):
            if not service.alive:
                ctx.log.error("persistence loop stopped: %s", service.failure)
                return 1
    return 0
