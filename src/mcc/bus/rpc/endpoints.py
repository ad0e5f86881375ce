"""`Requester` and `Replier`: typed request/reply for the control plane, on the core.

The requester stamps each request with ``client_id`` and a unique id (the request type's first
key field, e.g. ``command_id``), the replier copies both into the reply, and the requester
matches replies to waiting calls (`RpcClient`). A missing replier or a late reply gives
``RequestTimeoutError``, never a hang. Requests are disposed once answered so a
transient-local topic does not replay them to a replier that starts later. The replier answers
in its reader loop, in arrival order (`RpcServer` without a queue), each request id once.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

from mcc.bus.core import Bus
from mcc.bus.rpc.client import Call, RpcClient
from mcc.bus.rpc.common import (
    channel_partitions,
    default_client_id,
    fail_reply,
    id_field,
    stamp_reply,
)
from mcc.bus.rpc.server import Pending, RpcServer
from mcc.errors import MccError, PeerLostError, RequestTimeoutError
from mcc.lifecycle import Closeable, Service

Req = TypeVar("Req")
Rep = TypeVar("Rep")
log = logging.getLogger("mcc.bus.rpc")
_MAX_ANSWERED = 100_000  # request ids a replier remembers (a resent request is answered once)


class Requester(Closeable, Generic[Req, Rep]):
    """Send requests and wait for their replies.

    >>> with Requester(bus, "Command", "CommandReply") as rq:
    ...     reply = rq.request(Command(verb="status"), timeout_s=2.0)

    ``replier_source``: take replies only from that identity (a sourced reply topic such as
    ``CommandReply``: `Reader.source_of`), so another system allowed to reply on the topic
    cannot answer in the replier's place.
    """

    def __init__(
        self,
        bus: Bus,
        request_topic: str = "Command",
        reply_topic: str = "CommandReply",
        *,
        client_id: str | None = None,
        profile: str | None = None,
        partition: str | None = None,
        replier_source: str | None = None,
    ) -> None:
        self.bus = bus
        self.client_id = client_id or default_client_id()
        self._writer = bus.writer(
            request_topic, profile=profile, partitions=None if partition is None else [partition]
        )
        self._reader = bus.reader(reply_topic, profile=profile)
        self._request_id = id_field(self._writer.type)
        self._client = RpcClient(
            bus,
            self._writer,
            self._reader,
            client_id=self.client_id,
            send=lambda call: self._writer.write(call.payload),
            resolve=lambda call, reply: reply,
            timed_out=self._timed_out,
            lost=lambda call, what: PeerLostError(f"replier {what}: {call.request_id}"),
            name=f"mcc-rq-{request_topic}",
            reply_id=id_field(self._reader.type),
            accept=None if replier_source is None else self._from(replier_source),
        )

    def _from(self, source: str) -> Callable[[Any], bool]:
        """Replies only from the identity ``source`` (a sourced reply topic: the replier's
        source partition, authenticated on a secured bus)."""
        return lambda reply: self._reader.source_of(reply) == source

    def _timed_out(self, call: Call) -> BaseException:
        return RequestTimeoutError(f"no reply to {self._writer.topic_name} {call.request_id!r}")

    def request_async(self, request: Req, *, timeout_s: float = 5.0) -> Future[Rep]:
        """Send ``request``; the future resolves to the reply (no timeout applied to it)."""
        return self._client.submit(self._call(request, timeout_s))

    def _call(self, request: Req, timeout_s: float) -> Call:
        """Stamp ``request``, wait up to ``timeout_s`` for a replier: its `Call`."""
        request_id = self._client.new_request_id()
        setattr(request, self._request_id, request_id)
        if hasattr(request, "client_id"):
            setattr(request, "client_id", self.client_id)  # noqa: B010
        if hasattr(request, "issue_ns"):
            setattr(request, "issue_ns", time.time_ns())  # noqa: B010
        if not self._writer.wait_for_readers(1, timeout_s=timeout_s):
            raise RequestTimeoutError(
                f"no replier on topic {self._writer.topic_name!r} within {timeout_s:g} s; "
                "is the service running on this domain (and partition)?"
            )
        return Call(request_id, request, Future())

    def request(self, request: Req, *, timeout_s: float = 5.0) -> Rep:
        """Send ``request`` and return its reply (taken in this thread: `RpcClient.call`);
        ``RequestTimeoutError`` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        call = self._call(request, timeout_s)
        request_id = call.request_id
        try:
            reply: Rep = self._client.call(call, timeout_s=max(deadline - time.monotonic(), 1e-6))
            return reply
        except TimeoutError:
            raise RequestTimeoutError(
                f"no reply to {self._writer.topic_name} {request_id!r} within {timeout_s:g} s"
            ) from None
        finally:
            self._client.forget(request_id)
            self._writer.dispose(request)

    def close(self) -> None:
        self._client.close()


class Replier(Service, Generic[Req, Rep]):
    """Answer requests with ``handler(request) -> reply``.

    The replier fills the reply's id, ``client_id``, replier identity and timestamp. A handler
    that raises answers ``ok=False`` with the error text (when the reply type has those
    fields); the replier keeps serving.
    """

    def __init__(
        self,
        bus: Bus,
        handler: Callable[[Req], Rep],
        request_topic: str = "Command",
        reply_topic: str = "CommandReply",
        *,
        replier_id: str | None = None,
        profile: str | None = None,
        channel: str | None = None,
    ) -> None:
        self.bus = bus
        self.handler = handler
        self.replier_id = replier_id or default_client_id()
        self.channel = channel
        self._reader = bus.reader(
            request_topic,
            profile=profile,
            partitions=None if channel is None else channel_partitions(channel),
        )
        self._writer = bus.writer(reply_topic, profile=profile)
        self._request_id = id_field(self._reader.type)
        self._reply_id = id_field(self._writer.type)
        self._answered: OrderedDict[str, None] = OrderedDict()
        self.served = 0
        self._server: RpcServer[str] = RpcServer(
            bus,
            self._reader,
            self._writer,
            admit=self._admit,
            run=self._run,
            expire=self._expire,
            name=f"mcc-replier-{self._reader.topic_name}",
        )

    def sender(self, request: Any) -> str:
        """Who sent ``request`` (taken by this replier): the principal named by its writer's
        partition on this replier's channel; ``"unknown"`` when there is none."""
        info = getattr(request, "sample_info", None)
        if info is None or self.channel is None:
            return "unknown"
        prefix = f"{self.channel}/"
        for partition in self._reader.writer_partitions(info.publication_handle):
            name = partition[len(prefix) :]
            # a pattern (``cmd/*``) is no one's name: identities never carry one
            if partition.startswith(prefix) and name and not any(c in name for c in "*?[]\\"):
                return name
        return "unknown"

    def _admit(self, request: Any, client: str) -> Pending[str] | None:
        request_id = getattr(request, self._request_id)
        if request_id in self._answered:
            return None
        self._answered[request_id] = None
        if len(self._answered) > _MAX_ANSWERED:
            self._answered.popitem(last=False)
        return Pending(request, client, request_id)

    def _run(self, batch: list[Pending[str]]) -> None:
        for pending in batch:
            self._server.reply(pending.request, self._answer(pending.request, pending.work))
            self.served += 1

    def _expire(self, pending: Pending[str], waited_ms: float) -> None:
        reply = fail_reply(self._writer.type(), "deadline passed before it was run")
        self._server.reply(pending.request, self._stamp(reply, pending))

    def _stamp(self, reply: Any, pending: Pending[str]) -> Any:
        return stamp_reply(reply, pending.request, self._reply_id, pending.work, self.replier_id)

    def _answer(self, request: Any, request_id: str) -> Any:
        try:
            reply = self.handler(request)
        except Exception as exc:  # the service must outlive a bad request
            if not isinstance(exc, MccError):
                log.exception("handler failed on %s", request_id)
            reply = fail_reply(self._writer.type(), str(exc))
        return stamp_reply(reply, request, self._reply_id, request_id, self.replier_id)

    def start(self) -> Replier[Req, Rep]:
        self._server.start()
        return self

    def run(self) -> None:
        """Serve in the calling thread until ``stop()``."""
        self._server.run_here()

    def stop(self) -> None:
        self._server.stop()
