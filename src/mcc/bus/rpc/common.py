"""What every request/reply exchange on the bus shares: identities, correlation fields, who
sent a sample (discovery, never a field), which peers are matched, and sample hygiene."""

from __future__ import annotations

import itertools
import os
import socket
import time
from typing import Any

from mcc.errors import MccError

_client_seq = itertools.count(1)

#: Channels of requests on the ``Command`` topic: the supervisor's and TEWA's approvals.
COMMAND_CHANNEL = "cmd"
APPROVAL_CHANNEL = "approval"
CHANNELS = (COMMAND_CHANNEL, APPROVAL_CHANNEL)
#: Entries a `PeerCache` keeps before it forgets them all (writers come and go).
MAX_PEERS = 4096


def default_client_id() -> str:
    """``host/pid/n``: unique per requester in a process."""
    return f"{socket.gethostname()}/{os.getpid()}/{next(_client_seq)}"


def principal_partition(channel: str, principal: str) -> str:
    """The partition in which ``principal`` sends requests on ``channel``."""
    return f"{channel}/{principal}"


def channel_partitions(channel: str) -> tuple[str, ...]:
    """What a replier on ``channel`` reads: every principal's partition of it."""
    return (f"{channel}/*",)


def id_field(type_: type) -> str:
    """The correlation field of a request or reply type: its first key field."""
    annotations = getattr(type_, "__idl_field_annotations__", {})
    keys = [name for name, ann in annotations.items() if ann.get("key")]
    if not keys:
        raise MccError(f"{type_.__name__} has no key field to carry a request id")
    return keys[0]


def ids_too_long(request: Any, max_chars: int, id_name: str = "request_id") -> bool:
    """True when the request's id or ``client_id`` is over ``max_chars``: a reply would echo
    them, so such a request is dropped (counted), not answered."""
    ids = (getattr(request, id_name, ""), getattr(request, "client_id", ""))
    return max(len(i) for i in ids) > max_chars


def deadline_passed(request: Any, now_ns: int | None = None) -> bool:
    """True when ``request`` carries a ``deadline_ns`` (0: none) that has passed."""
    deadline_ns = getattr(request, "deadline_ns", 0)
    return bool(deadline_ns) and (time.time_ns() if now_ns is None else now_ns) > deadline_ns


def stamp_reply(reply: Any, request: Any, reply_id: str, request_id: str, replier_id: str) -> Any:
    """Fill the reply's correlation and provenance fields (those its type has)."""
    setattr(reply, reply_id, request_id)
    stamps: tuple[tuple[str, object], ...] = (
        ("client_id", getattr(request, "client_id", "")),
        ("replier_id", replier_id),
        ("server_id", replier_id),
        ("reply_ns", time.time_ns()),
    )
    for name, value in stamps:
        if hasattr(reply, name):
            setattr(reply, name, value)
    return reply


def fail_reply(reply: Any, text: str) -> Any:
    """Mark ``reply`` failed with ``text`` (``ok``/``message``/``error``, those it has)."""
    for name, value in (("ok", False), ("message", text), ("error", text)):
        if hasattr(reply, name):
            setattr(reply, name, value)
    return reply


def write_dispose(writer: Any, data: bytes, key_sample: Any) -> None:
    """Write serialised ``data`` as a disposed instance, then unregister it: readers free the
    instance once they took the sample, the writer keeps nothing per request or reply."""
    writer.write_cdr(data, dispose=True)
    writer.dds.unregister_instance(key_sample)


def matched_participants(entity: Any) -> set[str]:
    """Participants of the endpoints matched with ``entity`` (a `Reader` or `Writer`) at one
    instant (the native core's snapshot: safe while peers come and go)."""
    if hasattr(entity, "matched_readers"):
        found = entity.matched_readers()
    else:
        found = entity.matched_writers()
    return {e.participant for e in found}


class PeerCache:
    """Who wrote a sample a reader took: its writer's DDS participant (discovery, not a field
    the sender fills in; in a secured domain an authenticated one). Bounded."""

    def __init__(self, reader: Any) -> None:
        self._reader = reader
        self._peers: dict[int, str] = {}

    def of_handle(self, handle: int) -> str | None:
        """The participant behind ``publication_handle``; None when discovery lost it."""
        peer = self._peers.get(handle)
        if peer is None:
            data = self._reader.matched_writer(handle)
            if data is None:
                return None
            if len(self._peers) >= MAX_PEERS:  # writers come and go: forget old ones
                self._peers.clear()
            peer = self._peers[handle] = data.participant
        return peer

    def of(self, sample: Any) -> str | None:
        """The participant that wrote ``sample``; None when it has no ``sample_info`` or its
        writer is unknown."""
        info = getattr(sample, "sample_info", None)
        return None if info is None else self.of_handle(info.publication_handle)
