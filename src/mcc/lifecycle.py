"""Context-manager mixins for MCC's long-lived objects, so each class says what it is instead of
repeating `__enter__`/`__exit__`.

- `Closeable`: an object that holds resources from construction until `close()` (a bus, a store,
  a requester): ``with Store(path) as store: ...`` closes it on the way out.
- `Service`: an object that runs between `start()` and `stop()` (a reader loop, a replier, a
  heartbeat publisher): ``with Replier(...) as replier: ...`` starts it and stops it.

Exceptions are never swallowed: `__exit__` returns None.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ["Closeable", "Service"]


class Closeable:
    """``with obj:`` returns ``obj`` and calls ``obj.close()`` on exit."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Service:
    """``with obj:`` returns ``obj.start()`` and calls ``obj.stop()`` on exit."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
