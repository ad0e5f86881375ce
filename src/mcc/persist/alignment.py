"""Alignment between replicas: a replica that finds another asks it for everything it holds
(every topic and partition, through the bus's scatter-gather history client) and stores what
it did not have; until then its replies say it is not complete."""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
from typing import TYPE_CHECKING

from cyclonedds.core import DDSException

from mcc.bus.history import history_client
from mcc.errors import MccError
from mcc.persist.store import Dispose, TopicPolicy, Write
from mcc.types import PersistReply

if TYPE_CHECKING:
    from mcc.persist.service import PersistService

log = logging.getLogger("mcc.persist")


class Alignment:
    """The alignment of one `PersistService` with the other replicas (one at a time)."""

    def __init__(self, service: PersistService) -> None:
        self.service = service
        self._aligning = threading.Event()  # one alignment at a time
        self._aligned: queue.Queue[list[PersistReply]] = queue.Queue()

    def start(self) -> None:
        """Ask the other replicas for everything they hold (in a thread: the loop answers)."""
        svc = self.service

        if self._aligning.is_set():
            return  # the running alignment asks every replica matched by then

        def fetch() -> None:
            try:
                replies = history_client(svc.bus).fetch(
                    "", partitions=["*"], timeout_s=10.0, exclude=svc.replica
                )
            except (MccError, DDSException) as exc:
                log.warning("%s: alignment failed: %s", svc.replica, exc)
                replies = []
            finally:
                self._aligning.clear()
            self._aligned.put(replies)  # even none: the loop then knows it is on its own
            with contextlib.suppress(DDSException):  # the service may have closed meanwhile
                svc._guard.set(True)

        self._aligning.set()
        threading.Thread(target=fetch, name="mcc-persist-align", daemon=True).start()

    def take(self) -> None:
        svc = self.service
        while True:
            try:
                replies = self._aligned.get_nowait()
            except queue.Empty:
                return
            ops: list[Write | Dispose] = []
            for reply in replies:
                if not reply.ok:
                    log.warning(
                        "%s: alignment refused by %s: %s",
                        svc.replica,
                        reply.replier_id,
                        reply.message[:300],
                    )
                    continue
                if reply.message:
                    log.warning(
                        "%s: alignment with %s: %s",
                        svc.replica,
                        reply.replier_id,
                        reply.message[:300],
                    )
                types = {t.topic: t.type_name for t in reply.topics}
                for topic in reply.topics:
                    svc.store.ensure_topic(TopicPolicy.from_msg(topic))
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
            svc.complete = True
            if ops:
                svc._commit(ops, aligned=True)
                log.info(
                    "%s: aligned with %s (%d samples new here)",
                    svc.replica,
                    ", ".join(sorted(r.replier_id for r in replies)),
                    svc.stats.aligned,
                )
