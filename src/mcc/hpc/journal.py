"""The farm master's journal: its lease and the results it counted, kept by the persistence
service, so that a standby (or the restarted master) takes a running job over.

**Why a lease with an epoch, not DDS exclusive ownership.** Ownership decides which writer's
samples a reader keeps; it says nothing about what the dead master had counted, so a successor
needs a durable journal anyway, and the journal is where a lease costs nothing more. Ownership
strength is also fixed per writer: a master restarted under the same identity would come back
with the strength of its predecessor, and two live masters of equal strength are both obeyed
(Cyclone breaks the tie by GUID, per instance, not per job). Ownership would further need the
``state`` profile of ``WorkItem`` changed on every reader. The lease is a *fencing token*
``(epoch, master id)``:

* a master **claims** the job by storing a lease record (``write_stored``: committed by a
  replica before it hands out anything) with an epoch one above every epoch in the journal;
  the roster it adds when it hands out the first items is committed before any result counts;
* every ``WorkItem`` it writes carries its token (``WorkItem.payload``); a worker obeys the
  highest token it has seen and drops items of a lower one, so a master that lost the lease —
  stopped, partitioned, slow to learn — hands out nothing any worker takes once the successor
  spoke;
* a master that reads a higher claim than its own **steps down** (stops issuing, stands by);
* a master **may claim** at once when the journal has no lease and it is the primary (instance
  0), or when the newest lease is its own identity's (an identity runs once at a time: the
  holder was its predecessor, now dead); any other master waits until the lease has not been
  renewed for ``lease_s`` (the holder renews it every ``lease_s / 4``). Two standbys that claim
  at once are ordered by their tokens: the lower steps down, its items are ignored.

Whatever the interleaving, the answer is exact: the master counts one result per item id (a
result is a pure function of its item, so any copy is the same value), and a result is counted
only once it is in the journal, so a successor re-issues exactly the items without a journaled
result.

Records (topic ``FarmJournal``, type ``Checkpoint``, profile ``durable``, key ``(job_id,
worker_id)``). The topic is the masters' alone: in a secured mission no worker may write it, so
a stolen worker identity can neither claim the job nor forge a counted result, and the
masters do not take in the workers' checkpoints, nor the workers the journal.

- ``@lease``: ``items_done`` = epoch, ``state`` = JSON: master, epoch, the job's plan (``n``,
  ``items``, ``mode``), the roster (worker ids and pids in assignment order, once work was
  handed out), ``first_item_ns``, ``done``;
- ``@results/<epoch>/<master>/<n>``: ``items_done`` = results in it, ``state`` = packed
  ``(<u8 item, <u8 count, <i8 largest)`` rows: results counted.

A record that does not decode (hostile or corrupt: bad JSON, wrong types, a ragged result
array) is counted in ``JournalState.bad``, logged once, and ignored: the job then loses at most
the work it described, never its correctness.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mcc.bus import Bus
from mcc.bus.history import DurableWriter, HistoryReader
from mcc.errors import MccError
from mcc.types import Checkpoint

__all__ = [
    "JOURNAL_TOPIC",
    "LEASE_KEY",
    "RESULTS_PREFIX",
    "JournalState",
    "Lease",
    "MasterJournal",
    "Token",
    "decode_token",
    "encode_token",
    "read_records",
]

log = logging.getLogger("mcc.hpc.journal")

JOURNAL_TOPIC = "FarmJournal"
LEASE_KEY = "@lease"
RESULTS_PREFIX = "@results/"
#: A token: (epoch, master id). Tuples order them: a higher epoch wins, then the larger id.
Token = tuple[int, str]
_RESULT = np.dtype([("item", "<u8"), ("count", "<u8"), ("largest", "<i8")])
_MAX_BATCH = 4096  # results per record: 96 KiB, well inside a sample's bound (1 MiB)
_MAX_ID_BYTES = 256
_MAX_LEASE_BYTES = 512 * 1024


def encode_token(token: Token) -> bytes:
    """``WorkItem.payload`` of a master holding ``token``: ``<u8 epoch`` then its id (UTF-8)."""
    epoch, master = token
    return np.array([epoch], "<u8").tobytes() + master.encode()[:_MAX_ID_BYTES]


def decode_token(payload: bytes) -> Token | None:
    """The token in a ``WorkItem.payload``; ``(0, "")`` for none (a master without a journal);
    None when the payload is not a token (hostile or corrupt)."""
    if not payload:
        return (0, "")
    if len(payload) < 8 or len(payload) > 8 + _MAX_ID_BYTES:
        return None
    try:
        master = payload[8:].decode()
    except UnicodeDecodeError:
        return None
    return int(np.frombuffer(payload[:8], "<u8")[0]), master


@dataclass(frozen=True)
class Lease:
    """One lease record: who holds the job, under which epoch, and the job's plan."""

    epoch: int
    master: str
    n: int
    items: int
    mode: str
    roster: tuple[tuple[str, int], ...] = ()  # (worker id, pid) in assignment order
    first_item_ns: int = 0
    done: bool = False
    time_ns: int = 0

    @property
    def token(self) -> Token:
        return (self.epoch, self.master)

    def encode(self, job_id: str) -> Checkpoint:
        state = {
            "master": self.master,
            "epoch": self.epoch,
            "n": self.n,
            "items": self.items,
            "mode": self.mode,
            "roster": [list(r) for r in self.roster],
            "first_item_ns": self.first_item_ns,
            "done": self.done,
        }
        return Checkpoint(
            job_id=job_id,
            worker_id=LEASE_KEY,
            items_done=self.epoch,
            last_item_id=len(self.roster),
            state=json.dumps(state, separators=(",", ":")).encode(),
            time_ns=time.time_ns(),
        )

    @classmethod
    def decode(cls, cp: Checkpoint) -> Lease:
        """The lease in ``cp``; ``MccError`` saying why when it is not one."""
        raw = bytes(cp.state)
        if len(raw) > _MAX_LEASE_BYTES:
            raise MccError(f"lease record of {len(raw)} bytes (at most {_MAX_LEASE_BYTES})")
        try:
            doc = json.loads(raw)
        except (UnicodeDecodeError, ValueError) as exc:
            raise MccError(f"lease record is not JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise MccError("lease record is not a JSON object")
        ints = {k: doc.get(k) for k in ("epoch", "n", "items", "first_item_ns")}
        if not all(_count(v) for v in ints.values()):
            raise MccError(f"lease record: epoch, n, items, first_item_ns not ints >= 0 ({ints})")
        master, mode, done = doc.get("master"), doc.get("mode"), doc.get("done", False)
        if not isinstance(master, str) or not 0 < len(master) <= _MAX_ID_BYTES:
            raise MccError(f"lease record: master {master!r} is not an id")
        if not isinstance(mode, str) or not isinstance(done, bool):
            raise MccError(f"lease record: mode {mode!r} or done {done!r} of the wrong type")
        roster_doc = doc.get("roster", [])
        if not isinstance(roster_doc, list):
            raise MccError("lease record: roster is not a list")
        roster = []
        for entry in roster_doc:
            if not (
                isinstance(entry, list)
                and len(entry) == 2
                and isinstance(entry[0], str)
                and 0 < len(entry[0]) <= _MAX_ID_BYTES
                and _count(entry[1])
            ):
                raise MccError(f"lease record: roster entry {str(entry)[:80]} is not [id, pid]")
            roster.append((entry[0], entry[1]))
        if len({w for w, _ in roster}) != len(roster):
            raise MccError("lease record: a worker appears twice in the roster")
        return cls(
            epoch=ints["epoch"],  # type: ignore[arg-type]
            master=master,
            n=ints["n"],  # type: ignore[arg-type]
            items=ints["items"],  # type: ignore[arg-type]
            mode=mode,
            roster=tuple(roster),
            first_item_ns=ints["first_item_ns"],  # type: ignore[arg-type]
            done=done,
            time_ns=int(cp.time_ns),
        )


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _decode_results(cp: Checkpoint) -> list[tuple[int, int, int]]:
    raw = bytes(cp.state)
    if len(raw) % _RESULT.itemsize or len(raw) > _MAX_BATCH * _RESULT.itemsize:
        raise MccError(f"results record of {len(raw)} bytes: not whole records of 24 bytes")
    rows = np.frombuffer(raw, _RESULT)
    return [(int(r["item"]), int(r["count"]), int(r["largest"])) for r in rows]


@dataclass
class JournalState:
    """What the journal held: the newest lease, every journaled result, records per item."""

    lease: Lease | None = None
    results: dict[int, tuple[int, int]] = field(default_factory=dict)  # item → (count, largest)
    records_per_item: Counter[int] = field(default_factory=Counter)
    bad: Counter[str] = field(default_factory=Counter)
    renewed: bool = False  # a lease record came in (live) since the last poll


def read_records(
    state: JournalState,
    records: Iterable[Checkpoint],
    *,
    job_id: str,
    skip: Collection[str] = (),
) -> JournalState:
    """Add the journal records of ``job_id`` among ``records`` to ``state`` (the newest lease by
    token, every result, records per item); a record that does not decode is counted in
    ``state.bad`` and logged once per reason. Keys in ``skip`` are left out."""
    for cp in records:
        if cp.job_id != job_id or not cp.worker_id.startswith("@") or cp.worker_id in skip:
            continue  # a worker's checkpoint, another job's, or one of ours
        try:
            if cp.worker_id == LEASE_KEY:
                lease = Lease.decode(cp)
                state.renewed = True
                if state.lease is None or lease.token >= state.lease.token:
                    state.lease = lease
            elif cp.worker_id.startswith(RESULTS_PREFIX):
                rows = _decode_results(cp)
                for item, count, largest in rows:
                    state.records_per_item[item] += 1
                    state.results.setdefault(item, (count, largest))
            else:
                raise MccError(f"unknown journal key {cp.worker_id[:80]!r}")
        except MccError as exc:
            reason = str(exc).split("(")[0][:80]
            state.bad[reason] += 1
            if state.bad[reason] == 1:
                log.warning(
                    "job %s: journal record %r ignored: %s; further ones are counted",
                    job_id,
                    cp.worker_id[:80],
                    exc,
                )
    return state


class MasterJournal:
    """A master's view of its job's journal: read it, claim, renew, record results.

    Args:
        bus: the master's bus.
        job_id: the job.
        master_id: this master's identity (``mission/system/index``).
        history_timeout_s: how long to wait for the persistence service's replay at start.
        store_timeout_s: how long a claim or a result record may take to be committed.
    """

    def __init__(
        self,
        bus: Bus,
        *,
        job_id: str,
        master_id: str,
        history_timeout_s: float = 5.0,
        store_timeout_s: float = 5.0,
    ) -> None:
        self.job_id = job_id
        self.master_id = master_id
        self.store_timeout_s = store_timeout_s
        self.state = JournalState()
        self.lease: Lease | None = None  # ours, once claimed
        self._seq = 0
        self._pending: int | None = None  # source ns of a lease record published, not settled
        self._mine: set[str] = set()  # our own result records: our reader hears them too
        writer = bus.writer(JOURNAL_TOPIC)
        reader = bus.reader(JOURNAL_TOPIC, history_timeout_s=history_timeout_s)
        if not isinstance(reader, HistoryReader) or not isinstance(writer, DurableWriter):
            raise MccError(f"the {JOURNAL_TOPIC} profile is not durable: a master cannot journal")
        self._writer: DurableWriter[Checkpoint] = writer
        self._reader = reader
        self.available = reader.wait_for_history(timeout_s=history_timeout_s)
        if self.available:
            self._writer.wait_for_replicas(1, timeout_s=store_timeout_s)
        self.poll()
        self.state.renewed = False  # the history is not a renewal

    # -- reading ------------------------------------------------------------------------------

    def poll(self) -> JournalState:
        """Take what arrived (history first, then live records) into ``state``."""
        while batch := self._reader.take(1024):
            self._take(batch)
        return self.state

    def _take(self, records: Iterable[Checkpoint]) -> None:
        read_records(self.state, records, job_id=self.job_id, skip=self._mine)

    # -- the lease -----------------------------------------------------------------------------

    def may_claim_now(self, *, primary: bool) -> bool:
        """Whether this master may claim without waiting for the lease to lapse."""
        lease = self.state.lease
        if lease is None:
            return primary
        return lease.master == self.master_id

    def superseded(self) -> bool:
        """Whether a higher claim than ours is in the journal."""
        return (
            self.lease is not None
            and self.state.lease is not None
            and self.state.lease.token > self.lease.token
        )

    def claim(self, lease: Lease) -> Lease:
        """Store ``lease`` with an epoch above every one seen; ours from now on."""
        top = self.state.lease.epoch if self.state.lease is not None else 0
        mine = dataclasses.replace(lease, epoch=top + 1, master=self.master_id)
        self._store(mine)
        return mine

    def update(self, **changes: Any) -> Lease:
        """Store our lease again with ``changes`` (the roster, ``done``), same epoch."""
        assert self.lease is not None, "claim first"
        self._store(dataclasses.replace(self.lease, **changes))
        return self.lease

    def publish(self, **changes: Any) -> Lease:
        """`update` without waiting for the commit: the next `record` or `update` waits for
        it first (`settle`). The roster goes out this way, beside the first items: a master
        that dies before it is stored leaves a lease without a roster, and its successor
        starts the job over under a higher epoch, which the workers obey."""
        assert self.lease is not None, "claim first"
        self.settle()
        lease = dataclasses.replace(self.lease, **changes)
        self._pending = self._writer.publish_stored(
            lease.encode(self.job_id), timeout_s=self.store_timeout_s
        )
        self._hold(lease)
        return lease

    def settle(self) -> None:
        """Wait until the lease record `publish` sent is committed (at once when its ack came
        already). On a timeout or a refusal the lease is published again and the error raised:
        the caller retries as it retries a record."""
        if self._pending is None:
            return
        try:
            self._writer.wait_stored(self._pending, timeout_s=self.store_timeout_s)
        except MccError:
            assert self.lease is not None
            self._pending = self._writer.publish_stored(
                self.lease.encode(self.job_id), timeout_s=self.store_timeout_s
            )
            raise
        self._pending = None

    def _store(self, lease: Lease) -> None:
        self.settle()
        self._writer.write_stored(lease.encode(self.job_id), timeout_s=self.store_timeout_s)
        self._hold(lease)

    def _hold(self, lease: Lease) -> None:
        self.lease = lease
        if self.state.lease is None or lease.token >= self.state.lease.token:
            self.state.lease = lease

    def renew(self) -> None:
        """Tell standbys that the holder lives (published, not waited for)."""
        if self.lease is not None:
            self._writer.write(self.lease.encode(self.job_id))

    # -- results -------------------------------------------------------------------------------

    def record(self, results: list[tuple[int, int, int]]) -> None:
        """Commit ``(item, count, largest)`` results to the journal (before they count), after
        the lease record `publish` sent (`settle`)."""
        assert self.lease is not None, "claim first"
        self.settle()
        for start in range(0, len(results), _MAX_BATCH):
            chunk = results[start : start + _MAX_BATCH]
            self._seq += 1
            rows = np.array(chunk, dtype=_RESULT)
            key = f"{RESULTS_PREFIX}{self.lease.epoch}/{self.master_id}/{self._seq}"
            self._mine.add(key)
            self._writer.write_stored(
                Checkpoint(
                    job_id=self.job_id,
                    worker_id=key,
                    items_done=len(chunk),
                    last_item_id=chunk[-1][0],
                    state=rows.tobytes(),
                    time_ns=time.time_ns(),
                ),
                timeout_s=self.store_timeout_s,
            )
            for item, count, largest in chunk:
                self.state.records_per_item[item] += 1
                self.state.results.setdefault(item, (count, largest))
