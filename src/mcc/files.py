"""Files written whole or not at all: a reader sees the old content or the new, never a part,
even after a crash (the data is on disk before the name points to it)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

#: The largest instance state file read back or carried (a TEWA with thousands of orders in
#: flight is ~1 MB).
MAX_STATE_BYTES = 16 * 1024 * 1024


def instance_state_file(run_dir: str | Path, system: str, index: int | str) -> Path:
    """Where instance ``system/index`` of a run keeps its state (a launcher's answered orders,
    TEWA's orders in flight): ``RUN_DIR/state/SYSTEM-INDEX.json``. Its app writes it; a backend
    that restarts the instance on another host carries it there."""
    return Path(run_dir) / "state" / f"{system}-{index}.json"


def write_atomic(path: str | Path, text: str, *, private: bool = False) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder, synced, then
    renamed over it; mode 0600 when ``private`` (keys, accounts, sessions), 0644 otherwise."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:  # mkstemp: 0600 already
            if not private:
                os.fchmod(file.fileno(), 0o644)
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_private(path: str | Path, text: str) -> None:
    """`write_atomic` of a file only its owner may read (0600)."""
    write_atomic(path, text, private=True)


def write_private_folder(folder: str | Path, files: Mapping[str, bytes]) -> Path:
    """Make ``folder`` (0700; an existing one is replaced whole) holding ``files`` (name →
    content), each 0600, never written through a link: an instance's identity on its host."""
    folder = Path(folder)
    shutil.rmtree(folder, ignore_errors=True)
    folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.mkdir(mode=0o700)
    for name, content in files.items():
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"file name {name[:60]!r}: not a plain file name")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        with os.fdopen(os.open(folder / name, flags, 0o600), "wb") as out:
            out.write(content)
    return folder


def rotate_log(path: str | Path, max_bytes: int) -> bool:
    """Rotate the log at ``path`` once it is larger than ``max_bytes``: its content is copied to
    ``path.1`` (replacing the previous one) and the file emptied in place. Copy-and-truncate
    rather than rename because the writers (instances whose stdout/stderr is the file, opened
    O_APPEND) keep their descriptor: after the truncation they write at the new end, offset 0.
    Lines written between the copy and the truncation are lost (microseconds). True when it
    rotated; False when the file is smaller, absent, or ``max_bytes`` is 0."""
    path = Path(path)
    try:
        if max_bytes <= 0 or path.stat().st_size <= max_bytes:
            return False
        kept = path.with_name(path.name + ".1")
        with path.open("rb") as src, _open_private(kept) as dst:
            shutil.copyfileobj(src, dst)
        os.truncate(path, 0)
    except FileNotFoundError:
        return False
    return True


def _open_private(path: Path) -> BinaryIO:
    """``path`` opened for writing from empty, 0600."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb")
