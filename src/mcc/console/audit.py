"""The audit log: one JSON line per control action, login and refusal (who, what, when, result).

Every attempt is written, refused ones too, before the answer goes back to the browser::

    {"time": "2025-01-01T12:00:00.123Z", "time_ns": ..., "who": "alice", "role": "commander",
     "remote": "127.0.0.1", "action": "phase", "target": "engagement", "args": {},
     "result": "ok", "status": 200, "message": "phase engagement"}

``result`` is ``ok`` (done), ``refused`` (no session or not allowed), ``invalid`` (malformed),
``failed`` (the supervisor or TEWA said no) or ``timeout`` (nobody answered).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = ("ok", "refused", "invalid", "failed", "timeout")


class AuditLog:
    """Append-only JSON lines in ``path`` (0600); the last ``keep`` entries also in memory."""

    def __init__(self, path: str | Path, *, keep: int = 200) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._recent: deque[dict[str, Any]] = deque(maxlen=keep)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._file = os.fdopen(fd, "a", buffering=1)

    def record(
        self,
        *,
        who: str,
        role: str,
        action: str,
        result: str,
        status: int,
        target: str = "",
        args: dict[str, Any] | None = None,
        message: str = "",
        remote: str = "",
    ) -> dict[str, Any]:
        """Write one entry (flushed before returning) and return it."""
        if result not in RESULTS:
            raise ValueError(f"result {result!r}: expected one of {', '.join(RESULTS)}")
        now_ns = time.time_ns()
        entry = {
            "time": datetime.fromtimestamp(now_ns / 1e9, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "time_ns": now_ns,
            "who": who,
            "role": role,
            "remote": remote,
            "action": action,
            "target": target,
            "args": args or {},
            "result": result,
            "status": status,
            "message": message[:500],
        }
        line = json.dumps(entry, default=str)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()
            self._recent.append(entry)
        return entry

    def recent(self, limit: int = 50) -> list[dict[str, Any]]:
        """The latest entries, newest first."""
        with self._lock:
            return list(self._recent)[::-1][:limit]

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read_audit(path: str | Path) -> list[dict[str, Any]]:
    """Every entry of an audit file, oldest first."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
