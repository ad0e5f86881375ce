"""Durable topics for apps: history from the persistence service, writes it has stored.

Cyclone DDS 11 keeps no history for TRANSIENT or PERSISTENT writers (a late reader of a live
transient writer gets nothing), so ``mcc.persist`` keeps it and this module fetches it:

>>> reader = bus.reader("Checkpoint")        # durable profile: a HistoryReader
>>> reader.wait_for_history(timeout_s=5.0)   # True once a replica of the service answered
>>> reader.take()                            # the retained samples, then live ones
>>> bus.writer("Checkpoint").write_stored(cp)  # returns once a replica committed ``cp``

The history is asked for with ``PersistRequest``/``PersistReply`` (every replica answers);
replies are merged, de-duplicated by (writer GUID, source timestamp), trimmed to the history
depth per instance and sorted by source timestamp; live samples already in the history are
dropped. docs/persistence.md tells the whole story.

Replies are bounded like requests: a fetch takes one reply per replica it asked (the writer's
participant, matched both ways when the request went, not the ``replier_id`` a reply names),
at most ``max_samples`` samples and ``max_bytes`` bytes from all of them together; what goes
past is dropped, counted and logged once, and the reader's `HistoryStatus` says ``truncated``
(as it does when a replica cut its own reply short). Acknowledgements count only from the
replicas that read the writer.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from cyclonedds.core import (
    DDSException,
    GuardCondition,
    InstanceState,
    Policy,
    Qos,
    SampleState,
    ViewState,
)

from mcc.bus import _native
from mcc.bus.core import register_durable
from mcc.bus.endpoints import ANY_STATE, Reader, Writer, native_count, poll_until
from mcc.bus.rpc.common import PeerCache, matched_participants
from mcc.bus.rpc.gather import Gathering, ScatterGather
from mcc.errors import MccError, RequestTimeoutError, StoreError
from mcc.types import PersistAck, PersistReply, PersistRequest, PersistSample

if TYPE_CHECKING:
    from cyclonedds.topic import Topic

    from mcc.bus.core import Bus

T = TypeVar("T")
log = logging.getLogger("mcc.bus.history")

REQUEST_TOPIC = "PersistRequest"
REPLY_TOPIC = "PersistReply"
ACK_TOPIC = "PersistAck"
ACK_PARTITION_PREFIX = "ack/"
DEFAULT_HISTORY_TIMEOUT_S = 3.0
# Once a complete replica answered, how long to wait for the others: a replica killed a moment
# ago stays matched until its lease expires, and must not hold every late joiner that long.
REPLY_GRACE_S = 1.0
RESEND_S = 0.5  # a request not answered by every replica asked is sent again after this

#: What one fetch takes from all replies together, at most.
MAX_HISTORY_SAMPLES = 100_000
MAX_HISTORY_BYTES = 64 << 20
#: A reply that a replica cut short (its bounds per reply) says so: its ``message`` holds this.
TRUNCATED = "truncated:"

_DURABLE_KINDS = (Policy.Durability.Transient, Policy.Durability.Persistent)


@dataclass(frozen=True)
class HistoryStatus:
    """Where a HistoryReader's fetch of retained samples stands."""

    done: bool = False
    replicas: tuple[str, ...] = ()  # the replicas that answered
    samples: int = 0  # retained samples delivered ahead of live data
    error: str = ""
    truncated: bool = False  # a bound (a replica's, or this fetch's) left samples out


def is_durable(qos: Qos) -> bool:
    """True when ``qos`` asks for TRANSIENT or PERSISTENT durability."""
    return Policy.Durability in qos and qos[Policy.Durability] in _DURABLE_KINDS


def dds_type_name(type_: type) -> str:
    """The DDS name of an IDL type: ``mcc.Checkpoint`` → ``mcc::Checkpoint``."""
    return str(getattr(type_, "__idl_typename__", type_.__name__)).replace(".", "::")


def history_depth(qos: Qos) -> int:
    """A reader's keep-last depth; -1 for keep-all."""
    history = qos[Policy.History] if Policy.History in qos else Policy.History.KeepLast(1)
    return int(getattr(history, "depth", -1))


def merge_history(
    replies: Iterable[PersistReply], topic: str, *, reader_depth: int = -1
) -> list[PersistSample]:
    """The samples of ``topic`` in ``replies``, each once, at most the depth per instance.

    A sample is identified by (writer GUID, source timestamp). The depth is the smaller of the
    topic's (as the replicas keep it) and ``reader_depth`` (-1: no limit); samples are ordered by
    source timestamp, oldest first.
    """
    unique: dict[tuple[str, int], PersistSample] = {}
    depths: list[int] = [reader_depth] if reader_depth > 0 else []
    for reply in replies:
        depths.extend(
            t.history_depth for t in reply.topics if t.topic == topic and t.history_depth > 0
        )
        for sample in reply.samples:
            if sample.topic == topic:
                unique.setdefault((sample.writer_guid, sample.source_ns), sample)
    ordered = sorted(unique.values(), key=_order)
    if not depths:
        return ordered
    depth = min(depths)
    per_instance: dict[bytes, int] = {}
    kept: list[PersistSample] = []
    for sample in reversed(ordered):  # newest first: keep the last `depth` of each instance
        seen = per_instance.get(sample.key, 0)
        if seen < depth:
            per_instance[sample.key] = seen + 1
            kept.append(sample)
    kept.reverse()
    return kept


def _order(sample: PersistSample) -> tuple[int, str]:
    return sample.source_ns, sample.writer_guid


class HistoryClient(ScatterGather):
    """Asks every replica of the persistence service for retained samples (one per bus).

    ``max_samples``/``max_bytes`` bound what one fetch takes from all replies together.
    """

    def __init__(
        self,
        bus: Bus,
        *,
        max_samples: int = MAX_HISTORY_SAMPLES,
        max_bytes: int = MAX_HISTORY_BYTES,
    ) -> None:
        self.max_samples = max_samples
        self.max_bytes = max_bytes
        super().__init__(
            bus,
            bus.writer(REQUEST_TOPIC),
            bus.reader(REPLY_TOPIC, history=False),
            name="mcc-history",
            grace_s=REPLY_GRACE_S,
            resend_s=RESEND_S,
        )

    def refuse(self, gathering: Gathering, reply: PersistReply) -> str:
        if gathering.samples + len(reply.samples) > self.max_samples:
            return f"more than max_samples = {self.max_samples} samples in this fetch"
        if gathering.nbytes + _reply_bytes(reply) > self.max_bytes:
            return f"more than max_bytes = {self.max_bytes} bytes in this fetch"
        return ""

    def taken(self, gathering: Gathering, reply: PersistReply) -> None:
        gathering.samples += len(reply.samples)
        gathering.nbytes += _reply_bytes(reply)

    def complete(self, reply: PersistReply) -> bool:
        return bool(reply.complete and reply.ok)

    def matched_replicas(self) -> set[str]:
        """Participants of the replicas a request reaches now and whose replies come back."""
        return self.repliers()[0]

    def fetch(self, topic: str, **options: Any) -> list[PersistReply]:
        """`fetch_all` (same options) without the truncation flag."""
        return self.fetch_all(topic, **options)[0]

    def fetch_all(
        self,
        topic: str,
        *,
        type_name: str = "",
        partitions: Sequence[str] = (),
        timeout_s: float = DEFAULT_HISTORY_TIMEOUT_S,
        exclude: str = "",
    ) -> tuple[list[PersistReply], bool]:
        """Replies of the replicas (all that are matched, but ``exclude``) within ``timeout_s``.

        Waits for every matched replica, but no longer than ``REPLY_GRACE_S`` after a complete
        one answered. An empty list when no replica showed up in time. ``topic=""`` asks for
        every topic. Replies past the client's bounds are left out, and then the flag
        returned beside the replies is True.
        """
        request = PersistRequest(
            topic=topic, type_name=type_name, partitions_json=json.dumps(list(partitions))
        )
        gathering = self.gather(request, timeout_s)
        replies = list(gathering.replies.values())
        if len(replies) < len(gathering.asked):
            (log.info if replies else log.warning)(
                "history of %r: %d of %d replicas answered within %.1f s",
                topic or "every topic",
                len(replies),
                len(gathering.asked),
                timeout_s,
            )
        return [r for r in replies if r.replier_id != exclude], gathering.dropped > 0


def _reply_bytes(reply: PersistReply) -> int:
    return sum(len(s.data) + len(s.key) for s in reply.samples)


_clients_lock = threading.Lock()


def history_client(bus: Bus) -> HistoryClient:
    """The bus's history client, created on first use."""
    with _clients_lock:
        client: HistoryClient | None = bus.history_client
        if client is None:
            client = HistoryClient(bus)
            bus.history_client = client
        return client


class HistoryReader(Reader[T]):
    """A reader of a durable topic: the retained samples first, then live ones, each once.

    Until the history has arrived (or ``history_timeout_s`` passed without a service),
    ``take()`` returns nothing and live samples wait in the reader's cache, so the order
    holds. History samples carry a ``sample_info`` whose ``publication_handle`` is 0.
    """

    def __init__(
        self,
        bus: Bus,
        topic: Topic[Any],
        profile: str,
        *,
        on_data: Callable[[Reader[T]], None] | None = None,
        history_timeout_s: float = DEFAULT_HISTORY_TIMEOUT_S,
    ) -> None:
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._pending: deque[T] = deque()
        self._history_ids: set[tuple[str, int]] = set()
        self._guids: dict[int, str] = {}
        self._status = HistoryStatus()
        self._guard = GuardCondition(bus.participant)
        self._extra_conditions = (self._guard,)  # history pending: wakes loops and on_data
        super().__init__(bus, topic, profile, on_data=on_data)
        self.history_timeout_s = history_timeout_s
        self._thread = threading.Thread(
            target=self._fetch, name=f"mcc-history-{topic.name}", daemon=True
        )
        self._thread.start()

    # -- the history ------------------------------------------------------------------------
    @property
    def history(self) -> HistoryStatus:
        """Where the fetch of retained samples stands."""
        return self._status

    def wait_for_history(self, timeout_s: float = DEFAULT_HISTORY_TIMEOUT_S) -> bool:
        """Wait for the history; True when at least one replica of the service answered."""
        self._ready.wait(timeout_s)
        return bool(self._status.replicas)

    def _fetch(self) -> None:
        decoded: list[T] = []
        ids: set[tuple[str, int]] = set()
        status = HistoryStatus(done=True)
        try:
            replies, dropped = history_client(self.bus).fetch_all(
                self.topic_name,
                type_name=dds_type_name(self.type),
                partitions=self.bus.partitions,
                timeout_s=self.history_timeout_s,
            )
            truncated = dropped or any(TRUNCATED in r.message for r in replies if r.ok)
            errors = [f"{r.replier_id}: {r.message[:300]}" for r in replies if not r.ok]
            depth = history_depth(self._dds.get_qos())
            for sample in merge_history(
                (r for r in replies if r.ok), self.topic_name, reader_depth=depth
            ):
                try:
                    value = self.decode(sample.data)
                except Exception as exc:  # a replica holding bytes of another type
                    if len(errors) < 10:
                        errors.append(f"sample of writer {sample.writer_guid}: {exc}"[:300])
                    continue
                value.sample_info = _history_info(sample)
                decoded.append(value)
                ids.add((sample.writer_guid, sample.source_ns))
            status = HistoryStatus(
                True,
                tuple(r.replier_id for r in replies),
                len(decoded),
                "; ".join(errors),
                truncated,
            )
            if truncated:
                log.warning(
                    "history of %r cut short by the bounds of a reply or of this fetch: "
                    "the newest samples of each instance came first",
                    self.topic_name,
                )
            if not replies:
                log.warning(
                    "no persistence service answered for topic %r within %.1f s: "
                    "live data only (is `mcc persist serve` running on this domain?)",
                    self.topic_name,
                    self.history_timeout_s,
                )
            elif errors:
                log.warning("history of %r: %s", self.topic_name, status.error)
        except Exception as exc:  # the reader goes on with live data, whatever happened
            status = HistoryStatus(done=True, error=f"{type(exc).__name__}: {exc}")
            expected = isinstance(exc, MccError | DDSException)
            (log.warning if expected else log.exception)(
                "history of %r failed: %s", self.topic_name, exc
            )
        finally:
            with self._lock:
                self._pending.extend(decoded)
                self._history_ids = ids
                self._status = status
                self._ready.set()
        try:
            self._guard.set(True)  # wakes ReaderLoops, waits and the on_data dispatcher
        except DDSException:  # the bus was closed meanwhile
            log.debug("history of %r arrived after its bus closed", self.topic_name)

    # -- reading ----------------------------------------------------------------------------
    def take(self, max_samples: int = 256) -> list[T]:
        if not self._ready.is_set():
            return []
        out: list[T] = []
        with self._lock:
            while self._pending and len(out) < max_samples:
                out.append(self._pending.popleft())
            if not self._pending:
                self._guard.set(False)
        if len(out) < max_samples:
            raw = _native.take(self._ref, ANY_STATE, native_count(max_samples - len(out)))
            out.extend(self._fresh(raw, consume=True))
        return out

    def read(self, max_samples: int = 256) -> list[T]:
        if not self._ready.is_set():
            return []
        with self._lock:
            out = list(itertools.islice(self._pending, max_samples))
        if len(out) < max_samples:
            raw = _native.read(self._ref, ANY_STATE, native_count(max_samples - len(out)))
            out.extend(self._fresh(raw, consume=False))
        return out

    def _fresh(self, raw: Any, *, consume: bool) -> list[T]:
        """Valid live samples that the history did not already hold."""
        samples = self._valid(raw)
        if not self._history_ids:
            return samples
        out = []
        for sample in samples:
            info = sample.sample_info  # type: ignore[attr-defined]
            ident = (self._guid(info.publication_handle), info.source_timestamp)
            if ident in self._history_ids:
                if consume:
                    self._history_ids.discard(ident)  # a sample arrives live only once
                continue
            out.append(sample)
        return out

    # -- writer identities ------------------------------------------------------------------
    def _guid(self, handle: int) -> str:
        """The GUID of the writer behind ``publication_handle`` (its discovery instance)."""
        guid = self._guids.get(handle)
        if guid is not None:
            return guid
        matched = self.matched_writer(handle)
        if matched is not None:
            guid = matched.guid
        else:  # gone already: discovery still has it (same instance handle)
            builtin = (
                self.bus.endpoint_readers[0] if self.bus.endpoint_readers is not None else None
            )
            found = builtin.read(100_000) if builtin is not None else []
            endpoint = next((e for e in found if e.sample_info.instance_handle == handle), None)
            if endpoint is None:
                return f"handle:{handle:x}"
            guid = str(endpoint.key)
        if len(self._guids) >= 4096:  # writers come and go: forget the old ones
            self._guids.clear()
        self._guids[handle] = guid
        return guid


def _history_info(sample: PersistSample) -> Any:
    """A ``SampleInfo`` for a sample from the history (no local writer handle)."""
    return _native.SampleInfo(
        (
            SampleState.NotRead,  # sample_state
            ViewState.New,  # view_state
            InstanceState.Alive,  # instance_state
            True,  # valid_data
            sample.source_ns,  # source_timestamp
            0,  # instance_handle
            0,  # publication_handle
            0,  # disposed_generation_count
            0,  # no_writers_generation_count
            0,  # sample_rank
            0,  # generation_rank
            0,  # absolute_generation_rank
            time.time_ns(),  # taken_ns
        )
    )


@dataclass
class _Ack:
    stored_source_ns: int = 0
    refused_source_ns: int = 0
    refused_reason: str = ""
    replica: str = ""  # the name the replica gives itself


def ack_partition(topic: str) -> str:
    """The partition in which the persistence service acknowledges the writers of ``topic``
    (``ack/TOPIC``): a process that waits for the commits of its writes takes in the acks of
    its topic, not those of every durable writer on the domain (at 10^9 on 2 workers, the farm
    masters took in the workers' checkpoint acks, 26 a second, each decrypted on a secured bus)."""
    return f"{ACK_PARTITION_PREFIX}{topic}"


class DurableWriter(Writer[T]):
    """A writer of a durable topic; ``write_stored`` returns once the service committed."""

    def __init__(self, bus: Bus, topic: Topic[Any], profile: str, *, validate: bool) -> None:
        super().__init__(bus, topic, profile, validate=validate)
        self.guid = str(self._dds.guid)
        self._acks: dict[str, _Ack] = {}
        self._ack_reader: Reader[PersistAck] | None = None
        self._ack_peers: PeerCache | None = None
        self._last_ns = 0
        self._stored_lock = threading.Lock()  # one write_stored at a time waits for acks

    def write_stored(self, sample: T, *, timeout_s: float = 5.0, replicas: int = 1) -> int:
        """Publish ``sample`` and wait until ``replicas`` replicas committed it to disk.

        Returns the sample's source timestamp (ns). ``RequestTimeoutError`` when fewer
        replicas stored it within ``timeout_s``; ``StoreError`` when a replica refused it.
        """
        if replicas < 1:
            raise MccError(f"replicas = {replicas}: ask for at least one replica")
        deadline = time.monotonic() + timeout_s
        with self._stored_lock:
            source_ns = self._publish_stored(sample, timeout_s, replicas)
            self._wait_stored(source_ns, deadline, replicas, timeout_s)
        return source_ns

    def publish_stored(self, sample: T, *, timeout_s: float = 5.0, replicas: int = 1) -> int:
        """The first half of `write_stored`: publish ``sample`` (once ``replicas`` replicas
        read this writer) and return its source timestamp without waiting for the commit;
        `wait_stored` with that timestamp waits for it. What the caller does meanwhile
        overlaps the replicas' commit."""
        if replicas < 1:
            raise MccError(f"replicas = {replicas}: ask for at least one replica")
        with self._stored_lock:
            return self._publish_stored(sample, timeout_s, replicas)

    def wait_stored(self, source_ns: int, *, timeout_s: float = 5.0, replicas: int = 1) -> None:
        """The second half of `write_stored`: wait until ``replicas`` replicas committed the
        sample `publish_stored` stamped ``source_ns`` (or one written after it). Raises as
        `write_stored` does."""
        deadline = time.monotonic() + timeout_s
        with self._stored_lock:
            self._wait_stored(source_ns, deadline, replicas, timeout_s)

    def _publish_stored(self, sample: T, timeout_s: float, replicas: int) -> int:
        self._acks_reader()
        # A replica subscribes when it discovers this writer: until its reader has matched,
        # a sample would not reach it.
        if not self.wait_for_replicas(replicas, timeout_s=timeout_s):
            raise RequestTimeoutError(
                f"{len(self._matched_replicas())} of {replicas} persistence replicas "
                f"subscribed to topic {self.topic_name!r} within {timeout_s:g} s; is `mcc "
                "persist serve` running on this domain (and enough replicas of it)?"
            )
        source_ns = max(time.time_ns(), self._last_ns + 1)
        self._last_ns = source_ns
        self._write_at(sample, source_ns)
        return source_ns

    def _wait_stored(
        self, source_ns: int, deadline: float, replicas: int, timeout_s: float
    ) -> None:
        acks = self._acks_reader()
        while True:
            self._take_acks(acks)
            refusal, stored = self._refusal(source_ns), self._stored(source_ns)
            remaining = deadline - time.monotonic()
            if refusal is not None or stored >= replicas or remaining <= 0:
                break
            acks.wait(remaining)
        if refusal is not None:
            raise StoreError(
                f"persistence replica {refusal[0]!r} refused a sample of topic "
                f"{self.topic_name!r}: {refusal[1]}; raise the limit in the profile's "
                "durability_service or write less"
            )
        if stored < replicas:
            raise RequestTimeoutError(
                f"{stored} of {replicas} persistence replicas stored the sample of topic "
                f"{self.topic_name!r} within {timeout_s:g} s; is `mcc persist serve` running "
                "on this domain (and enough replicas of it)?"
            )

    def wait_for_replicas(self, count: int = 1, *, timeout_s: float = 5.0) -> bool:
        """Wait until ``count`` replicas of the persistence service read this writer.

        Samples written before a replica subscribed never reach it (Cyclone keeps no history
        for TRANSIENT writers); call this before the first ``write`` when that matters.
        """
        self._acks_reader()
        return poll_until(lambda: len(self._matched_replicas()) >= count, timeout_s)

    def _write_at(self, sample: T, source_ns: int) -> None:
        self.write_cdr(self._checked(sample), timestamp_ns=source_ns)

    def _matched_replicas(self) -> set[str]:
        """Participants of the replicas that publish acks and read this writer."""
        assert self._ack_reader is not None
        return matched_participants(self._ack_reader) & matched_participants(self)

    def _stored(self, source_ns: int) -> int:
        return sum(1 for ack in self._acks.values() if ack.stored_source_ns >= source_ns)

    def _refusal(self, source_ns: int) -> tuple[str, str] | None:
        for ack in self._acks.values():
            if ack.refused_source_ns == source_ns:
                return ack.replica, ack.refused_reason
        return None

    def _acks_reader(self) -> Reader[PersistAck]:
        if self._ack_reader is None:
            self._ack_reader = self.bus.reader(
                ACK_TOPIC, history=False, partitions=[ack_partition(self.topic_name)]
            )
            self._ack_peers = PeerCache(self._ack_reader)
        return self._ack_reader

    def _take_acks(self, reader: Reader[PersistAck]) -> None:
        replicas: set[str] | None = None
        for ack in reader.take():
            if ack.writer_guid != self.guid:
                continue
            # Only a replica that reads this writer can have stored its samples: an ack from
            # any other participant is not counted (nor kept: one per replica, bounded).
            if replicas is None:
                replicas = self._matched_replicas()
            peer = self._ack_peer(ack)
            if peer not in replicas:
                continue
            self._acks[peer] = _Ack(
                ack.stored_source_ns, ack.refused_source_ns, ack.refused_reason[:500], ack.replica
            )
        if replicas is not None and len(self._acks) > len(replicas):
            for gone in set(self._acks) - replicas:
                del self._acks[gone]

    def _ack_peer(self, ack: PersistAck) -> str:
        if self._ack_peers is None:
            return ""
        return self._ack_peers.of(ack) or ""


register_durable(DurableWriter, HistoryReader, DEFAULT_HISTORY_TIMEOUT_S)
