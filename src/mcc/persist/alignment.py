"""Alignment between replicas: a replica that finds another asks it for everything it holds
(every topic and partition, through the bus's scatter-gather history client) and stores what
it did not have; until then its replies say it is not complete."""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
from collections.abc import Callable

from cyclonedds.core import DDSException

from mcc.bus import Bus
from mcc.bus.history import history_client
from mcc.errors import MccError
from mcc.persist.store import Dispose, Store, TopicPolicy, Write
from mcc.types import PersistReply

log = logging.getLogger("mcc.persist")


class Alignment:
    """One replica's alignment with the other replicas (one at a time).

    Args:
        bus: the replica's bus, whose history client asks the others.
        store: the replica's store (the topics taken over are declared there).
        replica: this replica's name (its own reply is left out).
        commit: stores what was taken over in one transaction; returns how many samples
            were new here.
        wake: wakes the replica's loop, which then calls ``take`` (called from the
            alignment's thread).
    """

    def __init__(
        self,
        bus: Bus,
        store: Store,
        *,
        replica: str,
        commit: Callable[[list[Write | Dispose]], int],
        wake: Callable[[], None],
    ) -> None:
        self._bus = bus
        self._store = store
        self._replica = replica
        self._commit = commit
        self._wake = wake
        self._aligning = threading.Event()  # one alignment at a time
        self._aligned: queue.Queue[list[PersistReply]] = queue.Queue()

    def start(self) -> None:
        """Ask the other replicas for everything they hold (in a thread: the loop answers)."""
        if self._aligning.is_set():
            return  # the running alignment asks every replica matched by then

        def fetch() -> None:
            try:
                replies = history_client(self._bus).fetch(
                    "", partitions=["*"], timeout_s=10.0, exclude=self._replica
                )
            except (MccError, DDSException) as exc:
                log.warning("%s: alignment failed: %s", self._replica, exc)
                replies = []
            finally:
                self._aligning.clear()
            self._aligned.put(replies)  # even none: the loop then knows it is on its own
            with contextlib.suppress(DDSException):  # the replica may have closed meanwhile
                self._wake()

        self._aligning.set()
        threading.Thread(target=fetch, name="mcc-persist-align", daemon=True).start()

    def take(self) -> bool:
        """Store what the finished alignments brought, in the loop's thread; True when one
        finished (the replica then has what the others held, or knows it is on its own)."""
        finished = False
        while True:
            try:
                replies = self._aligned.get_nowait()
            except queue.Empty:
                return finished
            finished = True
            ops: list[Write | Dispose] = []
            for reply in replies:
                if not reply.ok:
                    log.warning(
                        "%s: alignment refused by %s: %s",
                        self._replica,
                        reply.replier_id,
                        reply.message[:300],
                    )
                    continue
                if reply.message:
                    log.warning(
                        "%s: alignment with %s: %s",
                        self._replica,
                        reply.replier_id,
                        reply.message[:300],
                    )
                types = {t.topic: t.type_name for t in reply.topics}
                for topic in reply.topics:
                    self._store.ensure_topic(TopicPolicy.from_msg(topic))
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
            if ops:
                new = self._commit(ops)
                log.info(
                    "%s: aligned with %s (%d samples new here)",
                    self._replica,
                    ", ".join(sorted(r.replier_id for r in replies)),
                    new,
                )
