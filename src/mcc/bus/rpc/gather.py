"""Scatter-gather: one request to every matched replier, the first reply of each.

A request goes to the repliers matched both ways (their request reader reads our writer,
their reply writer our reader) — again when more show up (one discovered a moment later must
not be missed: its reply is the one needed when the first one matched is dead but its lease
has not expired), and again after ``resend_s`` without every reply (a replier can take the
request before its reply writer matched our reader: that reply is lost). Replies are taken
from the participants asked only (the writer's participant from discovery, not a field of the
reply), one per participant; ``refuse`` may drop more (bounds), and each drop is counted and
logged once per reason. The gather ends when every replier asked answered, at the timeout,
or ``grace_s`` after a reply that ``complete`` accepts.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from mcc.bus.loop import ReaderLoop
from mcc.bus.rpc.common import PeerCache, default_client_id, matched_participants
from mcc.lifecycle import Closeable

log = logging.getLogger("mcc.bus.rpc")


@dataclass
class Gathering:
    """One request in flight: who was asked, what came back, and how much of it."""

    asked: set[str] = field(default_factory=set)  # participants the request went to
    replies: dict[str, Any] = field(default_factory=dict)  # participant → its first reply
    samples: int = 0
    nbytes: int = 0
    dropped: int = 0  # replies refused, or from participants not asked
    complete_at: float | None = None  # when a complete reply arrived


class ScatterGather(Closeable):
    """Ask every replier matched with ``writer``/``reader``; see the module docstring.
    Subclasses bound what one gather takes (`refuse`, `taken`) and say which reply is
    `complete`."""

    def __init__(
        self,
        bus: Any,
        writer: Any,
        reader: Any,
        *,
        name: str,
        grace_s: float,
        resend_s: float,
    ) -> None:
        self.bus, self.writer, self.reader = bus, writer, reader
        self.client_id = default_client_id()
        self.grace_s, self.resend_s = grace_s, resend_s
        self.dropped = 0  # replies dropped since the client started
        self._seq = itertools.count(1)
        self._cond = threading.Condition()
        self._gatherings: dict[str, Gathering] = {}
        self._peers = PeerCache(reader)
        self._logged: set[str] = set()
        self._loop = ReaderLoop(bus).add(reader, self._on_replies).start(name)

    def close(self) -> None:
        """Stop taking replies."""
        self._loop.stop()

    # -- what a subclass decides -----------------------------------------------------------
    def refuse(self, gathering: Gathering, reply: Any) -> str:
        """Why ``reply`` is not taken ("" when it is), beyond being from one asked."""
        return ""

    def taken(self, gathering: Gathering, reply: Any) -> None:
        """Account for a reply taken (its samples and bytes)."""

    def complete(self, reply: Any) -> bool:
        """Whether ``reply`` is enough on its own (the others then get ``grace_s``)."""
        return False

    # -- replies -------------------------------------------------------------------------------
    def _on_replies(self, replies: list[Any]) -> None:
        with self._cond:
            for reply in replies:
                gathering = self._gatherings.get(reply.request_id)
                if gathering is None or reply.client_id != self.client_id:
                    continue
                peer = self._peers.of(reply) or ""
                if peer in gathering.replies:
                    continue  # a replier's reply to a resent request: the first one counts
                why = (
                    "its writer is not a replier this request was sent to"
                    if peer not in gathering.asked
                    else self.refuse(gathering, reply)
                )
                if why:
                    gathering.dropped += 1
                    self.dropped += 1
                    if why not in self._logged and len(self._logged) < 100:
                        self._logged.add(why)
                        log.warning(
                            "reply of %r to %s dropped: %s (further ones are counted, not logged)",
                            getattr(reply, "replier_id", peer)[:80],
                            self.writer.topic_name,
                            why,
                        )
                    continue
                gathering.replies[peer] = reply
                self.taken(gathering, reply)
                if gathering.complete_at is None and self.complete(reply):
                    gathering.complete_at = time.monotonic()
            self._cond.notify_all()

    def repliers(self) -> tuple[set[str], set[str]]:
        """Participants of repliers matched both ways, and those matched one way so far."""
        readers = matched_participants(self.writer)
        writers = matched_participants(self.reader)
        return readers & writers, readers - writers

    def gather(self, request: Any, timeout_s: float) -> Gathering:
        """Send ``request`` (its ``request_id`` and ``client_id`` are filled here) and gather
        the replies within ``timeout_s``; see the module docstring."""
        deadline = time.monotonic() + timeout_s
        request.request_id = f"{self.client_id}/{next(self._seq)}"
        request.client_id = self.client_id
        gathering = Gathering()
        asked = gathering.asked
        sent_at = 0.0
        with self._cond:
            self._gatherings[request.request_id] = gathering
        try:
            while True:
                ready, _ = self.repliers()
                now = time.monotonic()
                if ready - asked or (asked and now - sent_at >= self.resend_s):
                    request.issue_ns = time.time_ns()
                    with self._cond:
                        asked |= ready
                    self.writer.write(request)
                    sent_at = now
                with self._cond:
                    if asked and len(gathering.replies) >= len(asked):
                        break
                    limit = deadline
                    if gathering.complete_at is not None:
                        limit = min(limit, gathering.complete_at + self.grace_s)
                    remaining = limit - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(min(remaining, 0.05))
        finally:
            with self._cond:
                self._gatherings.pop(request.request_id, None)
            if asked:
                self.writer.dispose(request)
        return gathering
