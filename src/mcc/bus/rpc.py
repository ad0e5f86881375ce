"""Request/reply over two topics, with correlation ids and timeouts.

Cyclone DDS has no DDS-RPC, so a request topic and a reply topic carry it: the requester
stamps each request with ``client_id`` and a unique id (the request type's first key field,
e.g. ``command_id``), the replier copies both into the reply, and the requester matches
replies to waiting calls. A missing replier or a late reply gives ``RequestTimeoutError``,
never a hang. Requests are disposed once answered so a transient-local topic does not replay
them to a replier that starts later.

**Who asked.** A requester writes in the partition of its *principal* on a *channel*
(``cmd/operator``, ``approval/console``: `principal_partition`); a replier reads its channel's
partitions (``cmd/*``) and learns who asked from the partition of the matched writer
(`Replier.sender`), never from a field the sender fills in. In a secured mission that is the
authenticated identity: each identity's permissions let it publish requests in its own
partitions only, and access control checks a remote writer's partitions against its signed
permissions.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from types import TracebackType
from typing import Any, Generic, TypeVar

from mcc.bus.core import Bus
from mcc.bus.loop import ReaderLoop
from mcc.errors import MccError, RequestTimeoutError

Req = TypeVar("Req")
Rep = TypeVar("Rep")
log = logging.getLogger("mcc.bus.rpc")


def _id_field(type_: type) -> str:
    annotations = getattr(type_, "__idl_field_annotations__", {})
    keys = [name for name, ann in annotations.items() if ann.get("key")]
    if not keys:
        raise MccError(f"{type_.__name__} has no key field to carry a request id")
    return keys[0]


def default_client_id() -> str:
    """``host/pid/n``: unique per requester in a process."""
    return f"{socket.gethostname()}/{os.getpid()}/{next(_client_seq)}"


_client_seq = itertools.count(1)

#: Channels of requests on the ``Command`` topic: the supervisor's and TEWA's approvals.
COMMAND_CHANNEL = "cmd"
APPROVAL_CHANNEL = "approval"
CHANNELS = (COMMAND_CHANNEL, APPROVAL_CHANNEL)


def principal_partition(channel: str, principal: str) -> str:
    """The partition in which ``principal`` sends requests on ``channel``."""
    return f"{channel}/{principal}"


def channel_partitions(channel: str) -> tuple[str, ...]:
    """What a replier on ``channel`` reads: every principal's partition of it."""
    return (f"{channel}/*",)


class Requester(Generic[Req, Rep]):
    """Send requests and wait for their replies.

    >>> with Requester(bus, "Command", "CommandReply") as rq:
    ...     reply = rq.request(Command(verb="status"), timeout_s=2.0)
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
    ) -> None:
        self.bus = bus
        self.client_id = client_id or default_client_id()
        self._writer = bus.writer(
            request_topic, profile=profile, partitions=None if partition is None else [partition]
        )
        self._reader = bus.reader(reply_topic, profile=profile)
        self._request_id = _id_field(self._writer.type)
        self._reply_id = _id_field(self._reader.type)
        self._seq = itertools.count(1)
        self._pending: dict[str, Future[Any]] = {}
        self._lock = threading.Lock()
        self._loop = (
            ReaderLoop(bus).add(self._reader, self._on_replies).start(f"mcc-rq-{request_topic}")
        )

    def _on_replies(self, replies: list[Any]) -> None:
        for reply in replies:
            if getattr(reply, "client_id", self.client_id) != self.client_id:
                continue
            with self._lock:
                future = self._pending.pop(getattr(reply, self._reply_id), None)
            if future is not None and not future.done():
                future.set_result(reply)

    def request_async(self, request: Req, *, timeout_s: float = 5.0) -> Future[Rep]:
        """Send ``request``; the future resolves to the reply (no timeout applied to it)."""
        request_id = f"{self.client_id}/{next(self._seq)}"
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
        future: Future[Rep] = Future()
        with self._lock:
            self._pending[request_id] = future
        self._writer.write(request)
        return future

    def request(self, request: Req, *, timeout_s: float = 5.0) -> Rep:
        """Send ``request`` and return its reply; ``RequestTimeoutError`` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        future = self.request_async(request, timeout_s=timeout_s)
        request_id = getattr(request, self._request_id)
        try:
            return future.result(timeout=max(deadline - time.monotonic(), 0.0))
        except FutureTimeout:
            raise RequestTimeoutError(
                f"no reply to {self._writer.topic_name} {request_id!r} within {timeout_s:g} s"
            ) from None
        finally:
            with self._lock:
                self._pending.pop(request_id, None)
            self._writer.dispose(request)

    def close(self) -> None:
        self._loop.stop()
        with self._lock:
            for future in self._pending.values():
                future.cancel()
            self._pending.clear()

    def __enter__(self) -> Requester[Req, Rep]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Replier(Generic[Req, Rep]):
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
        self._request_id = _id_field(self._reader.type)
        self._reply_id = _id_field(self._writer.type)
        self._answered: set[str] = set()
        self.served = 0
        self._loop = ReaderLoop(bus).add(self._reader, self._on_requests)

    def sender(self, request: Any) -> str:
        """Who sent ``request`` (taken by this replier): the principal named by its writer's
        partition on this replier's channel; ``"unknown"`` when there is none."""
        info = getattr(request, "sample_info", None)
        if info is None or self.channel is None:
            return "unknown"
        prefix = f"{self.channel}/"
        for partition in self._reader.writer_partitions(info.publication_handle):
            if partition.startswith(prefix) and len(partition) > len(prefix):
                return partition[len(prefix) :]
        return "unknown"

    def _on_requests(self, requests: list[Any]) -> None:
        for request in requests:
            request_id = getattr(request, self._request_id)
            if request_id in self._answered:
                continue
            self._answered.add(request_id)
            self._writer.write(self._answer(request, request_id))
            self.served += 1

    def _answer(self, request: Any, request_id: str) -> Any:
        try:
            reply = self.handler(request)
        except Exception as exc:  # the service must outlive a bad request
            if not isinstance(exc, MccError):
                log.exception("handler failed on %s", request_id)
            reply = self._writer.type()
            failure: tuple[tuple[str, object], ...] = (
                ("ok", False),
                ("message", str(exc)),
                ("error", str(exc)),
            )
            for field_name, field_value in failure:
                if hasattr(reply, field_name):
                    setattr(reply, field_name, field_value)
        setattr(reply, self._reply_id, request_id)
        stamps: tuple[tuple[str, object], ...] = (
            ("client_id", getattr(request, "client_id", "")),
            ("replier_id", self.replier_id),
            ("server_id", self.replier_id),
            ("reply_ns", time.time_ns()),
        )
        for name, value in stamps:
            if hasattr(reply, name):
                setattr(reply, name, value)
        return reply

    def start(self) -> Replier[Req, Rep]:
        self._loop.start(f"mcc-replier-{self._reader.topic_name}")
        return self

    def run(self) -> None:
        """Serve in the calling thread until ``stop()``."""
        self._loop.run()

    def stop(self) -> None:
        self._loop.stop()

    def __enter__(self) -> Replier[Req, Rep]:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
