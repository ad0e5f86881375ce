"""What the compute service and its clients share on the bus: the service's partition, readers
whose samples the wire codec decodes (array views, no copy), and the inbox of the large arrays
that travel as bulk transfers beside their request or reply (`BulkInbox`)."""

from __future__ import annotations

import collections
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from mcc import settings
from mcc.bus import Bus, Reader
from mcc.bus.bulk import BulkReader, transfer_id
from mcc.bus.topics import topic_spec
from mcc.bus.transport import Transport
from mcc.errors import ComputeError, PeerLostError
from mcc.lifecycle import Closeable

log = logging.getLogger("mcc.compute.remote")

#: Service ``NAME`` talks on DDS partition ``PARTITION_PREFIX + NAME``.
PARTITION_PREFIX = "mcc.compute."
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def service_partition(name: str) -> str:
    """The DDS partition of compute service ``name``; `ComputeError` for a bad name."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ComputeError(
            f"compute service name {name!r}: use 1-64 letters, digits and _.- (e.g. 'compute')"
        )
    return PARTITION_PREFIX + name


def domain_of(domain_id: int | None) -> int:
    """``domain_id``, else ``MCC_DOMAIN``, else 0."""
    return settings.current().domain if domain_id is None else int(domain_id)


def open_service_bus(
    domain_id: int | None,
    name: str,
    discovery_tag: str | None,
    what: str,
    transport: Transport | None = None,
) -> Bus:
    """A bus in compute service ``name``'s partition (``what``: "service" or "client"), on
    ``transport`` (default: the environment's)."""
    return Bus(
        domain_of(domain_id),
        partitions=[service_partition(name)],
        transport=transport,
        discovery_tag=discovery_tag,
        name=f"mcc compute {what} {name}",
    )


class WireReader(Reader[Any]):
    """A `Reader` whose samples are decoded by a `mcc.compute.wire` codec (array views)."""

    def __init__(self, bus: Bus, topic: str, decode: Callable[[bytes], Any]) -> None:
        profile = topic_spec(topic).profile
        super().__init__(bus, bus.topic(topic, profile=profile), profile, validate=False)
        self.decode = decode  # the wire codec checks what it decodes


# -- bulk transfers ----------------------------------------------------------------------------

#: Arrays of at least this many bytes travel as bulk transfers (`mcc.bus.bulk`) beside the
#: request or reply that names them; smaller ones inside it.
BULK_MIN_BYTES = 1 << 19
#: How long a receiver waits for a transfer named by a request or reply it took.
BULK_WAIT_S = 5.0
#: A transfer that stopped coming for this long is broken (dropped and counted).
BULK_IDLE_S = 2.0
#: A transfer that no request or reply claimed within this long is dropped (counted).
BULK_HOLD_S = 10.0
#: Transfers known broken, remembered (so that a claim fails at once) up to this many.
_MAX_BROKEN = 1024


def result_transfer(client_id: str, request_id: str, index: int) -> int:
    """The transfer id of result ``index`` of a call: both sides derive it, so a client knows
    which result transfers are its own before its reply comes (the others it drops)."""
    return transfer_id(f"{client_id}\0{request_id}\0{index}")


class BulkInbox(Closeable):
    """The bulk transfers of ``topic``, each taken whole into a buffer of its own by a thread
    of this inbox, for a request or reply to `claim` by transfer id.

    A transfer larger than ``max_bytes``, or one that would hold more than ``pool_bytes`` in
    all, is dropped at once (counted ``refused``); one that stops coming for `BULK_IDLE_S`
    (counted ``broken``), or is not claimed within `BULK_HOLD_S` (``unclaimed``), is dropped.
    With ``wanted``, only the transfers it says yes to are taken, the others dropped
    (``foreign``: a client's inbox drops the results of the other clients).
    """

    def __init__(
        self,
        bus: Bus,
        topic: str,
        *,
        name: str,
        max_bytes: int,
        pool_bytes: int,
        wanted: Callable[[int], bool] | None = None,
        hold_s: float = BULK_HOLD_S,
        idle_s: float = BULK_IDLE_S,
    ) -> None:
        self._reader = BulkReader(bus, topic)
        self._max_bytes, self._pool_bytes = max_bytes, pool_bytes
        self._wanted, self._hold_s, self._idle_s = wanted, hold_s, idle_s
        self._cond = threading.Condition()
        self._held: dict[int, tuple[np.ndarray, float]] = {}
        self._held_bytes = 0
        self._broken: dict[int, str] = {}
        #: Transfers refused (counted once): the blocks of one that come after its refusal are
        #: dropped uncounted. Only the inbox's thread reads and writes it.
        self._refused: dict[int, None] = {}
        self.counts: collections.Counter[str] = collections.Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._take, name=name, daemon=True)
        self._thread.start()

    @property
    def reader(self) -> BulkReader:
        return self._reader

    def _take(self) -> None:
        while not self._stop.is_set():
            try:
                self._take_one()
            except Exception:  # the inbox must outlive any one transfer
                if self._stop.is_set():
                    return
                log.exception("bulk inbox %s", self._thread.name)
                self._stop.wait(0.1)

    def _take_one(self) -> None:
        head = self._reader.peek(timeout_s=0.1)
        self._expire()
        if head is None:
            return
        self._count("bad blocks", head.bad)
        if self._wanted is not None and not self._wanted(head.transfer):
            # Only the blocks there now: a discard that waits for the rest keeps waiting while
            # any block comes, this client's own transfer's too (measured: 10-14 ms a call
            # with two clients of one service).
            self._reader.discard(head, idle_s=0.0)
            self._count("foreign")
            return
        with self._cond:
            fits = 0 < head.total <= self._max_bytes
            room = self._held_bytes + head.total <= self._pool_bytes
        if not (fits and room):
            self._reader.discard(head, idle_s=0.0)
            if head.transfer in self._refused:
                return  # its later blocks (a loaded host delivers a transfer in several takes)
            if len(self._refused) >= _MAX_BROKEN:
                self._refused.clear()
            self._refused[head.transfer] = None
            why = "no room left" if fits else f"more than {self._max_bytes}"
            self._fail(head.transfer, "refused", f"{head.total} bytes refused ({why})")
            return
        self._refused.pop(head.transfer, None)
        buffer = np.empty(head.total, np.uint8)
        try:
            receipt = self._reader.receive(head, buffer, idle_s=self._idle_s)
        except PeerLostError as exc:
            self._fail(head.transfer, "broken", str(exc))
            return
        self._count("bad blocks", receipt.bad)
        self._count("duplicate blocks", receipt.duplicate)
        with self._cond:
            old = self._held.pop(head.transfer, None)
            if old is not None:  # sent again (a resent call): the latest counts
                self._held_bytes -= old[0].nbytes
            self._held[head.transfer] = (buffer, time.monotonic())
            self._held_bytes += buffer.nbytes
            self._broken.pop(head.transfer, None)
            self.counts["received"] += 1
            self._cond.notify_all()

    def _count(self, what: str, n: int = 1) -> None:
        if n:
            with self._cond:
                self.counts[what] += n

    def _fail(self, transfer: int, what: str, why: str) -> None:
        with self._cond:
            self.counts[what] += 1
            if len(self._broken) >= _MAX_BROKEN:
                self._broken.clear()
            self._broken[transfer] = why
            self._cond.notify_all()

    def _expire(self) -> None:
        now = time.monotonic()
        with self._cond:
            old = [t for t, (_, at) in self._held.items() if now - at > self._hold_s]
            for transfer in old:
                self._held_bytes -= self._held.pop(transfer)[0].nbytes
            self.counts["unclaimed"] += len(old)

    def claim(self, transfer: int, nbytes: int, *, timeout_s: float) -> np.ndarray:
        """The buffer of ``transfer`` (taken out of the inbox), waiting up to ``timeout_s``
        for it; `ComputeError` saying why when it did not come whole, or is not
        ``nbytes`` long."""
        with self._cond:
            self._cond.wait_for(
                lambda: transfer in self._held or transfer in self._broken or self._stop.is_set(),
                timeout_s,
            )
            got = self._held.pop(transfer, None)
            if got is None:
                why = self._broken.pop(transfer, None)
                if why is None and self._stop.is_set():
                    why = "not taken: the inbox closed"
                self.counts["missing"] += why is None
                raise ComputeError(
                    f"bulk transfer {transfer:#x} of {nbytes} bytes: "
                    + (why or f"did not arrive within {timeout_s:g} s")
                )
            buffer = got[0]
            self._held_bytes -= buffer.nbytes
            if buffer.nbytes != nbytes:
                self.counts["wrong size"] += 1
                raise ComputeError(
                    f"bulk transfer {transfer:#x}: {buffer.nbytes} bytes arrived, the message "
                    f"said {nbytes}"
                )
            return buffer

    def drop(self, transfers: Iterable[int]) -> None:
        """Forget ``transfers`` (held or not: a call refused or given up)."""
        with self._cond:
            for transfer in transfers:
                got = self._held.pop(transfer, None)
                if got is not None:
                    self._held_bytes -= got[0].nbytes
                self._broken.pop(transfer, None)

    def statistics(self) -> dict[str, int]:
        """Counts: received, refused, broken, unclaimed, missing, wrong size, foreign, bad and
        duplicate blocks."""
        with self._cond:
            return dict(self.counts)

    def cancel(self) -> None:
        """Take no more transfers; claims waiting fail now (`close` still to be called)."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        self.cancel()
        self._thread.join(5.0)
        self._reader.close()
