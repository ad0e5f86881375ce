"""History replies of a persistence replica: who asked (discovery, never a field of the
request), what the authorization hook lets them read, within the reply bounds and a request
rate per participant. Requests with over-long identifiers are dropped (a reply would echo
them), as the bus's request/reply core does (`mcc.bus.rpc.ids_too_long`)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from mcc.bus import Reader
from mcc.bus.history import TRUNCATED
from mcc.bus.rpc import ids_too_long
from mcc.errors import MccError
from mcc.persist.policy import Action, Authorize, Principal
from mcc.persist.state import LogOnce, ServiceStatistics, Window, current_window
from mcc.persist.store import Store
from mcc.types import PersistReply

log = logging.getLogger("mcc.persist")

_MAX_ID_CHARS = 256  # request ids and client ids a reply echoes
_MAX_PARTITIONS = 64  # partitions named in one history request


class HistoryReplies:
    """Answers the history requests of one replica, in its loop.

    Args:
        requests: the replica's reader of history requests.
        store: what it serves, within its bounds (``store.limits``).
        replica: the replica's name, in every reply.
        authorize: the authorization hook, asked for every topic and partition served.
        requester: who wrote a request, from discovery (None while discovery has not shown it).
        send: sends a reply; False when the write was dropped (a reader stopped acknowledging).
        stats: the replica's counters.
        log_once: the replica's once-only warnings.
        batch: requests taken at a time.
    """

    def __init__(
        self,
        requests: Reader[Any],
        store: Store,
        *,
        replica: str,
        authorize: Authorize,
        requester: Callable[[Any], Principal | None],
        send: Callable[[PersistReply], bool],
        stats: ServiceStatistics,
        log_once: LogOnce,
        batch: int,
    ) -> None:
        self._requests = requests
        self._store = store
        self._replica = replica
        self._authorize = authorize
        self._requester = requester
        self._send = send
        self._stats = stats
        self._log_once = log_once
        self._batch = batch
        self._request_windows: dict[str, Window] = {}  # requesting participant → its window

    def serve(self, *, complete: bool) -> None:
        """Answer the requests taken so far; replies say whether the replica is ``complete``."""
        for request in self._requests.take(self._batch):
            self._stats.requests += 1
            if ids_too_long(request, _MAX_ID_CHARS):
                self._stats.bad_requests += 1  # a reply would echo them: not answered
                self._log_once(
                    "*",
                    "long ids",
                    "%s: a history request with identifiers over %d "
                    "characters dropped (further ones are counted, not logged)",
                    self._replica,
                    _MAX_ID_CHARS,
                )
                continue
            reply = PersistReply(
                request_id=request.request_id,
                client_id=request.client_id,
                replier_id=self._replica,
                complete=complete,
                ok=True,
            )
            try:
                self.answer(request, reply)
            except (ValueError, TypeError, RecursionError, MccError) as exc:
                self._stats.bad_requests += 1
                reply.ok = False
                reply.topics, reply.samples = [], []
                reply.message = (
                    f"bad history request {request.request_id!r} "
                    f"(partitions_json={request.partitions_json[:200]!r}): {exc}"
                )
            reply.reply_ns = time.time_ns()
            if not self._send(reply):
                continue
            log.debug(
                "%s: answered %s (topic %r): %d samples",
                self._replica,
                request.request_id,
                request.topic,
                len(reply.samples),
            )

    def answer(self, request: Any, reply: PersistReply) -> None:
        """Fill ``reply`` within the bounds and what the hook allows the requester."""
        limits = self._store.limits
        principal = self._requester(request)
        if principal is not None and not self.within_rate(principal.participant):
            raise MccError(
                f"more than {limits.max_requests_per_window} history requests from "
                f"participant {principal.participant} within {limits.window_s:g} s; ask less often"
            )
        if len(request.partitions_json) > 64 * _MAX_PARTITIONS:
            raise ValueError(f"partitions_json longer than {64 * _MAX_PARTITIONS} characters")
        partitions = json.loads(request.partitions_json or "[]")
        if (
            not isinstance(partitions, list)
            or len(partitions) > _MAX_PARTITIONS
            or not all(isinstance(p, str) and len(p) <= 256 for p in partitions)
        ):
            raise ValueError(f"not a JSON list of at most {_MAX_PARTITIONS} partition names")
        # Who asked is the writer of the request (DDS discovery), never a field of it; a
        # request whose writer discovery has not shown yet is asked about as an unknown one.
        who = principal or Principal(participant="", writer="")
        topic = request.topic
        allow = None
        if not topic:  # every topic and partition: alignment between replicas
            if not self._authorize(who, Action.ALIGN, "*", "*"):
                self._stats.unauthorized += 1
                raise MccError("not authorized to align (every topic and partition)")
        else:

            def allow(name: str, partition: str) -> bool:
                return self._authorize(who, Action.READ, name, partition)

        page = self._store.page(
            topic,
            type_name=request.type_name,
            partitions=partitions,
            max_samples=limits.max_reply_samples,
            max_bytes=limits.max_reply_bytes,
            allow=allow,
        )
        reply.topics = [t.to_msg() for t in page.topics]
        reply.samples = page.samples
        notes = []
        if page.truncated:
            self._stats.truncated_replies += 1
            notes.append(
                f"{TRUNCATED} {len(page.samples)} samples sent, the newest of each instance "
                f"first (max_reply_samples = {limits.max_reply_samples}, max_reply_bytes = "
                f"{limits.max_reply_bytes})"
            )
        if page.denied:
            self._stats.unauthorized += 1
            notes.append(f"{page.denied} samples left out: partitions not authorized")
        reply.message = "; ".join(notes)

    def within_rate(self, participant: str) -> bool:
        limits = self._store.limits
        window = current_window(
            self._request_windows, participant, limits.window_s, limits.max_writers
        )
        window.samples += 1
        return window.samples <= limits.max_requests_per_window
