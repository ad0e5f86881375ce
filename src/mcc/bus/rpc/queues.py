"""Server-side queueing for `mcc.bus.rpc.RpcServer`: which accepted request runs next.

Without a queue a server answers in its reader loop, in arrival order (FIFO), which is what a
control-plane replier wants. `FairQueue` is for a service whose work is long and shared (the
compute service): one FIFO per client served round-robin with bounded shares, so one busy client
cannot starve another, and batching of requests that can run as one call.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from mcc.errors import MccError

T = TypeVar("T")


class QueueFullError(MccError):
    """A server's queue (or a client's share of it) is full."""


class FairQueue(Generic[T]):
    """One FIFO per client, served round-robin; thread-safe.

    `get_batch` takes the head of the next client in turn and, when ``key`` gives the item a
    batch key (not None), further heads with the same key, still client by client in turn.
    ``max_items``/``max_bytes`` bound the whole queue and ``max_items_per_client``/
    ``max_bytes_per_client`` each client's share of it (None: unbounded): `put` raises
    ``full_error`` (`QueueFullError`; a subclass may name its own) naming the bound rather
    than queue past one.
    """

    full_error: type[MccError] = QueueFullError

    def __init__(
        self,
        *,
        max_items: int | None = None,
        max_bytes: int | None = None,
        max_items_per_client: int | None = None,
        max_bytes_per_client: int | None = None,
    ) -> None:
        self._queues: collections.OrderedDict[str, collections.deque[tuple[T, int]]] = (
            collections.OrderedDict()
        )
        self._bytes: dict[str, int] = {}
        self._cond = threading.Condition()
        self._size = 0
        self._size_bytes = 0
        self._closed = False
        self._limits = (max_items, max_bytes, max_items_per_client, max_bytes_per_client)

    def put(self, client: str, item: T, *, nbytes: int = 0) -> int:
        """Queue ``item`` (of ``nbytes``) behind ``client``'s earlier items; the queue's new
        length. `QueueFullError` when a bound would be passed."""
        max_items, max_bytes, per_client, bytes_per_client = self._limits
        with self._cond:
            queue = self._queues.get(client)
            mine, mine_bytes = (len(queue), self._bytes[client]) if queue else (0, 0)
            for bound, name, now, add in (
                (max_items, "max_queued", self._size, 1),
                (max_bytes, "max_queued_bytes", self._size_bytes, nbytes),
                (per_client, "max_queued_per_client", mine, 1),
                (bytes_per_client, "max_queued_bytes_per_client", mine_bytes, nbytes),
            ):
                if bound is not None and now + add > bound:
                    whose = "the queue" if "client" not in name else f"client {client}"
                    raise self.full_error(
                        f"{whose} is full ({name} = {bound}, {now} queued): wait for replies "
                        "before sending more"
                    )
            if queue is None:
                queue = self._queues[client] = collections.deque()
                self._bytes[client] = 0
            queue.append((item, nbytes))
            self._bytes[client] += nbytes
            self._size += 1
            self._size_bytes += nbytes
            self._cond.notify()
            return self._size

    def __len__(self) -> int:
        with self._cond:
            return self._size

    @property
    def nbytes(self) -> int:
        """Bytes queued, all clients together."""
        with self._cond:
            return self._size_bytes

    def _pop(self, client: str) -> T:
        # The client served goes to the back of the round; an empty one leaves it.
        queue = self._queues.pop(client)
        item, nbytes = queue.popleft()
        self._bytes[client] -= nbytes
        self._size_bytes -= nbytes
        if queue:
            self._queues[client] = queue
        else:
            del self._bytes[client]
        return item

    def get_batch(
        self,
        *,
        max_items: int = 1,
        key: Callable[[T], Hashable | None] = lambda _item: None,
        timeout_s: float | None = None,
    ) -> list[T]:
        """Up to ``max_items`` items (see the class docstring); [] after ``timeout_s`` or once
        closed and empty."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._size > 0 or self._closed, timeout_s):
                return []
            if self._size == 0:
                return []
            first = self._pop(next(iter(self._queues)))
            batch = [first]
            batch_key = key(first)
            while batch_key is not None and len(batch) < max_items:
                took = False
                for other in list(self._queues):
                    if key(self._queues[other][0][0]) == batch_key:
                        batch.append(self._pop(other))
                        took = True
                        if len(batch) >= max_items:
                            break
                if not took:
                    break
            self._size -= len(batch)
            return batch

    def close(self) -> None:
        """Wake every waiter; `get_batch` returns [] once the queue is empty."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
