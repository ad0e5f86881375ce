"""An app's state that survives ``kill -9``: one JSON file under the run folder, written
atomically, read back defensively.

TEWA keeps the orders it has in flight there and the launcher the orders it answered (fired or
aborted) and the engagement it is flying, so that an instance restarted under the same identity
(``mission/system/index``: the same file) neither re-issues an order nor fires one twice.

- **Atomic**: the document goes to a temporary file in the same folder, which is flushed and
  ``fsync``\\ ed, then renamed over the old one, and the folder is ``fsync``\\ ed: after a crash at
  any point the file holds the old document or the new one, never a mix. Files are 0600,
  folders 0700 (the run folder's rule).
- **Defensive**: a file that is not a JSON object of this app (garbage, truncated, another
  version, too large) is hostile input like any other: counted (``corrupt``), logged once, set
  aside as ``NAME.corrupt`` for a person to look at, and the app starts clean. A document that
  parses is checked field by field by its app (`mcc.apps.tewa`, `mcc.apps.launcher`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mcc import settings
from mcc.files import MAX_STATE_BYTES, instance_state_file

__all__ = ["MAX_STATE_BYTES", "StateFile", "open_state", "state_path"]

log = logging.getLogger("mcc.apps.statefile")


def state_path(run_dir: Path, system: str, index: int) -> Path:
    """Where instance ``system/index`` keeps its state: ``RUN_DIR/state/SYSTEM-INDEX.json``
    (`mcc.files.instance_state_file`: the Ray backend carries it to another host)."""
    return instance_state_file(run_dir, system, index)


def open_state(
    given: str | Path | None,
    *,
    run_dir: Path,
    system: str,
    index: int,
    kind: str,
    env: Mapping[str, str] | None = None,
) -> StateFile:
    """The state file of an instance: ``given`` (an app's ``state`` config field), else
    `state_path` in the mission's run folder; outside a mission (no ``MCC_RUN_DIR``) none: a
    record in the working folder would be read back by an unrelated later run. ``env``: the
    environment to read ``MCC_RUN_DIR`` from (default: this process's, `mcc.settings`)."""
    if given:
        return StateFile(Path(given), kind=kind)
    found = settings.current() if env is None else settings.Settings.from_env(env)
    if found.run_dir is not None:
        return StateFile(state_path(run_dir, system, index), kind=kind)
    log.info("%s: no run folder (MCC_RUN_DIR) and no --state: no durable record", kind)
    return StateFile(None, kind=kind)


class StateFile:
    """The state file of one app instance.

    Args:
        path: the file (its folder is created, 0700, on the first save); None: no record
            (``load`` finds nothing, ``save`` keeps nothing).
        kind: what the document is (``"tewa"``, ``"launcher"``): a file of another kind or
            version is not taken.
        version: the document's format version.
    """

    def __init__(self, path: Path | None, *, kind: str, version: int = 1) -> None:
        self.path = None if path is None else Path(path)
        self.kind = kind
        self.version = version
        self.corrupt = 0  # files found unreadable and set aside
        self.save_errors = 0
        self._last: str | None = None

    def load(self) -> dict[str, Any] | None:
        """The saved document (without its ``kind``/``version``), or None: no file yet, or
        one that could not be taken (counted in ``corrupt``, logged, set aside)."""
        if self.path is None:
            return None
        try:
            with self.path.open("rb") as f:
                raw = f.read(MAX_STATE_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._reject(f"unreadable ({exc})")
            return None
        if len(raw) > MAX_STATE_BYTES:
            self._reject(f"larger than {MAX_STATE_BYTES} bytes")
            return None
        try:
            doc = json.loads(raw)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            self._reject(f"not JSON ({str(exc)[:120]})")
            return None
        if not isinstance(doc, dict):
            self._reject(f"not a JSON object (a {type(doc).__name__})")
            return None
        if doc.get("kind") != self.kind or doc.get("version") != self.version:
            got = (str(doc.get("kind"))[:40], str(doc.get("version"))[:20])
            self._reject(f"kind/version {got}, expected {(self.kind, self.version)}")
            return None
        self._last = raw.decode()
        return {k: v for k, v in doc.items() if k not in ("kind", "version")}

    def reject(self, why: str) -> None:
        """The app found the document's content unusable: count, log, set the file aside."""
        self._reject(why)

    def _reject(self, why: str) -> None:
        self.corrupt += 1
        if self.path is None:
            return
        aside = self.path.with_name(self.path.name + ".corrupt")
        try:
            os.replace(self.path, aside)
        except OSError:
            aside = self.path
        log.warning(
            "%s state %s ignored: %s; starting clean (the file is kept as %s)",
            self.kind,
            self.path,
            why,
            aside,
        )

    def save(self, doc: dict[str, Any]) -> bool:
        """Write ``doc`` atomically (nothing when it is what the file already holds); False,
        logged and counted, when the disk refused it."""
        text = json.dumps(
            {"kind": self.kind, "version": self.version, **doc}, separators=(",", ":")
        )
        if text == self._last or self.path is None:
            return True
        folder = self.path.parent
        tmp = folder / f".{self.path.name}.{os.getpid()}.tmp"
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(text.encode())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            dir_fd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            self.save_errors += 1
            if self.save_errors == 1:
                log.error(
                    "%s state %s not saved: %s; a restart now would not know the latest "
                    "(further failures are counted)",
                    self.kind,
                    self.path,
                    exc,
                )
            return False
        self._last = text
        return True
