"""Audit logs: one JSON line per control action, login and refusal (who, what, when, result).

The web console writes one (its users' logins and commands, before the answer goes back to the
browser); a mission writes one in its run folder, ``RUN_DIR/audit.jsonl``, where the supervisor
records every command and TEWA every approval and rejection, accepted or refused::

    {"time": "2025-01-01T12:00:00.123Z", "time_ns": ..., "who": "alice", "role": "commander",
     "remote": "127.0.0.1", "action": "phase", "target": "engagement", "args": {},
     "result": "ok", "status": 200, "message": "phase engagement"}

``who`` is authenticated: the console's logged-in user, or on the bus the sender's identity
(its partition, checked against its signed permissions), never a field the sender wrote; a
mission's entry adds ``by`` (the recorder: ``supervisor``, ``tewa/0``) and ``on_behalf_of``
(the web user the console says it acts for: the console's word, recorded as such).
``result`` is ``ok`` (done), ``refused`` (no session or not allowed), ``invalid`` (malformed),
``failed`` (the supervisor or TEWA said no) or ``timeout`` (nobody answered). Several processes
may append to one file: each entry is one ``write`` of at most `MAX_LINE` bytes (O_APPEND).
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
#: A mission's audit, in its run folder.
AUDIT_FILE = "audit.jsonl"
#: The command argument naming the person a client acts for (the console's web user).
ON_BEHALF_OF = "on_behalf_of"
#: An entry's longest line (bytes): each entry is one O_APPEND write, whole.
MAX_LINE = 4000


class AuditLog:
    """Append-only JSON lines in ``path`` (0600); the last ``keep`` entries also in memory."""

    def __init__(self, path: str | Path, *, keep: int = 200) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._recent: deque[dict[str, Any]] = deque(maxlen=keep)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

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
        **extra: str,
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
            **{key: value[:200] for key, value in extra.items()},
        }
        line = json.dumps(entry, default=str)
        if len(line.encode()) > MAX_LINE:  # what a sender wrote (args) is clipped, not the rest
            entry["args"] = {"clipped": json.dumps(entry["args"], default=str)[:1000]}
            line = json.dumps(entry, default=str)
        with self._lock:
            os.write(self._fd, (line + "\n").encode())
            self._recent.append(entry)
        return entry

    def record_command(
        self,
        *,
        who: str,
        role: str,
        verb: str,
        target: str,
        args_json: str,
        client: str,
        result: str,
        message: str,
        by: str,
    ) -> dict[str, Any]:
        """Write one command or approval taken from the bus (`record`): its arguments parsed,
        the person the sender says it acts for taken out of them as ``on_behalf_of``, the
        status from the result (ok 200, refused 403, else 409)."""
        try:
            args = json.loads(args_json or "{}")
        except ValueError:
            args = {"unreadable": args_json[:200]}
        if not isinstance(args, dict):
            args = {"args": args}
        behalf = args.pop(ON_BEHALF_OF, "")
        return self.record(
            who=who, role=role, action=verb[:64], target=target[:200], args=args,
            result=result, status={"ok": 200, "refused": 403}.get(result, 409), message=message,
            by=by, on_behalf_of=str(behalf), client=client,
        )  # fmt: skip

    def recent(self, limit: int = 50) -> list[dict[str, Any]]:
        """The latest entries, newest first."""
        with self._lock:
            return list(self._recent)[::-1][:limit]

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def read_audit(path: str | Path) -> list[dict[str, Any]]:
    """Every entry of an audit file, oldest first."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
