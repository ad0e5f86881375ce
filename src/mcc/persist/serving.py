"""History replies of a persistence replica: who asked (discovery, never a field of the
request), what the authorization hook lets them read, within the reply bounds and a request
rate per participant. Requests with over-long identifiers are dropped (a reply would echo
them), as the bus's request/reply core does (`mcc.bus.rpc.ids_too_long`)."""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

from mcc.bus.history import REQUEST_TOPIC, TRUNCATED
from mcc.bus.rpc import ids_too_long
from mcc.errors import MccError
from mcc.persist.policy import Action, Principal
from mcc.persist.state import _Window, _WriterInfo, current_window
from mcc.types import PersistReply

if TYPE_CHECKING:
    from mcc.persist.service import PersistService

log = logging.getLogger("mcc.persist")

_MAX_ID_CHARS = 256  # request ids and client ids a reply echoes
_MAX_PARTITIONS = 64  # partitions named in one history request


class HistoryReplies:
    """Answers the history requests a `PersistService` takes, in its loop."""

    def __init__(self, service: PersistService) -> None:
        self.service = service
        self._request_windows: dict[str, _Window] = {}  # requesting participant → its window

    def requester(self, request: Any) -> Principal | None:
        """Who wrote ``request``: from discovery, never from a field of the request."""
        svc = self.service
        info = getattr(request, "sample_info", None)
        if info is None:
            return None
        writer = svc._writers.get(info.publication_handle)
        if writer is not None:
            return svc._principal(writer)
        data = svc._requests.matched_writer(info.publication_handle)  # not discovered yet
        if data is None:
            return None
        found = _WriterInfo(data.guid, REQUEST_TOPIC, "", (), False, data.participant)
        return svc._principal(found)

    def serve(self) -> None:
        svc = self.service
        for request in svc._requests.take(svc.batch):
            svc.stats.requests += 1
            if ids_too_long(request, _MAX_ID_CHARS):
                svc.stats.bad_requests += 1  # a reply would echo them: not answered
                svc._log_once(
                    "*",
                    "long ids",
                    "%s: a history request with identifiers over %d "
                    "characters dropped (further ones are counted, not logged)",
                    svc.replica,
                    _MAX_ID_CHARS,
                )
                continue
            reply = PersistReply(
                request_id=request.request_id,
                client_id=request.client_id,
                replier_id=svc.replica,
                complete=svc.complete,
                ok=True,
            )
            try:
                self.answer(request, reply)
            except (ValueError, TypeError, RecursionError, MccError) as exc:
                svc.stats.bad_requests += 1
                reply.ok = False
                reply.topics, reply.samples = [], []
                reply.message = (
                    f"bad history request {request.request_id!r} "
                    f"(partitions_json={request.partitions_json[:200]!r}): {exc}"
                )
            reply.reply_ns = time.time_ns()
            if not svc._write(svc._replies, reply, "PersistReply"):
                continue
            log.debug(
                "%s: answered %s (topic %r): %d samples",
                svc.replica,
                request.request_id,
                request.topic,
                len(reply.samples),
            )

    def answer(self, request: Any, reply: PersistReply) -> None:
        """Fill ``reply`` within the bounds and what the hook allows the requester."""
        svc = self.service
        limits = svc.limits
        svc._take_subscriptions()  # the requester's readers, discovered just before it asked
        principal = self.requester(request)
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
            if not svc.authorize(who, Action.ALIGN, "*", "*"):
                svc.stats.unauthorized += 1
                raise MccError("not authorized to align (every topic and partition)")
        else:

            def allow(name: str, partition: str) -> bool:
                return svc.authorize(who, Action.READ, name, partition)

        page = svc.store.page(
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
            svc.stats.truncated_replies += 1
            notes.append(
                f"{TRUNCATED} {len(page.samples)} samples sent, the newest of each instance "
                f"first (max_reply_samples = {limits.max_reply_samples}, max_reply_bytes = "
                f"{limits.max_reply_bytes})"
            )
        if page.denied:
            svc.stats.unauthorized += 1
            notes.append(f"{page.denied} samples left out: partitions not authorized")
        reply.message = "; ".join(notes)

    def within_rate(self, participant: str) -> bool:
        limits = self.service.limits
        window = current_window(
            self._request_windows, participant, limits.window_s, limits.max_writers
        )
        window.samples += 1
        return window.samples <= limits.max_requests_per_window
