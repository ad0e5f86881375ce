"""The store's SQLite file: schema, version check, creation with owner-only permissions, and
the lock that keeps one replica per file."""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import stat
from pathlib import Path

from mcc.bus.history import StoreError

log = logging.getLogger("mcc.persist")

APPLICATION_ID = 0x4D434350  # "MCCP" in PRAGMA application_id: this file is an MCC store


SCHEMA_VERSION = 1


_SQLITE_MAGIC = b"SQLite format 3\x00"


_SCHEMA = """
CREATE TABLE topics (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    type_name TEXT NOT NULL,
    persistent INTEGER NOT NULL,
    history_depth INTEGER NOT NULL,        -- keep-last depth; -1 = keep-all
    max_samples INTEGER NOT NULL,          -- -1 = unlimited
    max_instances INTEGER NOT NULL,
    max_samples_per_instance INTEGER NOT NULL,
    cleanup_delay_ns INTEGER NOT NULL,
    created_ns INTEGER NOT NULL,
    UNIQUE (name, type_name)
);
CREATE TABLE instances (
    id INTEGER PRIMARY KEY,
    topic_id INTEGER NOT NULL REFERENCES topics (id),
    partitions TEXT NOT NULL,              -- JSON list of the writers' partitions
    key BLOB NOT NULL,                     -- key-only CDR
    key_json TEXT NOT NULL,
    disposed_ns INTEGER,                   -- when an explicit dispose arrived; NULL = alive
    UNIQUE (topic_id, partitions, key)
);
CREATE TABLE writers (
    guid TEXT PRIMARY KEY,
    topic_id INTEGER NOT NULL REFERENCES topics (id),
    partitions TEXT NOT NULL,
    stored INTEGER NOT NULL,               -- samples committed from this writer
    first_source_ns INTEGER NOT NULL,
    last_source_ns INTEGER NOT NULL        -- newest committed source timestamp
);
CREATE TABLE samples (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, -- order of arrival at this replica
    instance_id INTEGER NOT NULL REFERENCES instances (id),
    writer_guid TEXT NOT NULL,
    writer_seq INTEGER NOT NULL,           -- n-th sample of that writer stored here
    source_ns INTEGER NOT NULL,
    stored_ns INTEGER NOT NULL,
    data BLOB NOT NULL,
    UNIQUE (writer_guid, source_ns)
);
CREATE INDEX samples_by_instance ON samples (instance_id, source_ns);
"""


def check_file(path: Path, *, create: bool) -> bool:
    """Whether ``path`` exists; ``StoreError`` when it cannot be an SQLite store."""
    if path.is_dir():
        raise StoreError(f"persistence store {path} is a directory; pass the path of a file")
    if not path.exists():
        if not create:
            raise StoreError(
                f"persistence store {path} does not exist; check the path "
                "(`mcc persist serve --store FILE` creates one)"
            )
        if not path.parent.is_dir():
            _make_folders(path.parent)
        return False
    try:
        with path.open("rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
    except OSError as exc:
        raise StoreError(f"cannot read persistence store {path}: {exc.strerror}") from exc
    if not head:
        raise StoreError(
            f"persistence store {path} is empty (0 bytes): not an MCC store, possibly "
            "truncated; move it away (or delete it) to start an empty store, or restore it "
            "from a backup"
        )
    if head != _SQLITE_MAGIC:
        raise StoreError(
            f"persistence store {path} is not an SQLite database (it starts with {head[:8]!r}); "
            "it is not an MCC store or it is damaged: pass another --store, or move the file "
            "away to start an empty store"
        )
    return True


def create_file(path: Path) -> None:
    """Create an empty store at ``path`` atomically: a killed start-up leaves no half file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
    # The file exists (empty: a valid empty database) with its mode before SQLite opens it:
    # SQLite gives the WAL and shared-memory files beside it the same mode.
    try:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600))
        os.chmod(tmp, 0o600)  # whatever the umask
    except OSError as exc:
        raise StoreError(
            f"cannot create persistence store {path}: {exc.strerror}; check the folder's "
            "permissions or pass another --store"
        ) from exc
    conn = sqlite3.connect(tmp, isolation_level=None)
    try:
        # before the first table: retention's deletes give pages back (Store.expire)
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.executescript(
            f"BEGIN; {_SCHEMA} PRAGMA application_id = {APPLICATION_ID}; "
            f"PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
        )
        conn.execute("PRAGMA journal_mode = WAL")
    finally:
        conn.close()
    try:
        os.link(tmp, path)  # fails if another process created the store meanwhile: use that one
    except FileExistsError:
        pass
    finally:
        tmp.unlink()


def _make_folders(folder: Path) -> None:
    """Create ``folder`` and the missing folders above it, each its owner's only (0700)."""
    missing = []
    while not folder.is_dir():
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for each in reversed(missing):
        try:
            each.mkdir(mode=0o700)
            os.chmod(each, 0o700)  # whatever the umask
        except FileExistsError:
            continue
        except OSError as exc:
            raise StoreError(
                f"cannot create folder {each} for the persistence store: {exc.strerror}; "
                "create it or pass another --store"
            ) from exc


def make_owner_only(path: Path) -> None:
    """Take group and other permissions off a store (and its WAL files) that has them."""
    for each in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        try:
            mode = each.stat().st_mode
            if mode & (stat.S_IRWXG | stat.S_IRWXO):
                os.chmod(each, stat.S_IMODE(mode) & 0o700)
                log.warning("persistence store %s was readable by others: now 0600", each)
        except FileNotFoundError:
            continue
        except PermissionError:  # not ours: SQLite will say whether it can use it
            log.warning("persistence store %s is readable by others and not ours to fix", each)


def check_schema(conn: sqlite3.Connection, path: Path) -> None:
    """``StoreError`` unless ``conn`` is an undamaged MCC store of this schema version."""
    application_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = sorted(
        r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    )
    if application_id != APPLICATION_ID:
        listed = ", ".join(tables) or "none"
        raise StoreError(
            f"persistence store {path} is an SQLite database of another application "
            f"(application_id {application_id}, tables: {listed}), not an MCC store; pass "
            "another --store: MCC never writes into a file it does not own"
        )
    if version != SCHEMA_VERSION:
        raise StoreError(
            f"persistence store {path} has schema version {version}; this MCC reads version "
            f"{SCHEMA_VERSION}: use the MCC release that wrote it, or move it away to start an "
            "empty store"
        )
    problems = [r[0] for r in conn.execute("PRAGMA quick_check(5)")]
    if problems != ["ok"]:
        raise StoreError(
            f"persistence store {path} is damaged (SQLite quick_check: {'; '.join(problems)}); "
            "restore it from a backup, or move it away to start an empty store (its samples "
            "would be lost)"
        )
    missing = {"topics", "instances", "writers", "samples"} - set(tables)
    if missing:
        raise StoreError(
            f"persistence store {path} lacks table(s) {', '.join(sorted(missing))}; it is "
            "damaged: restore it from a backup, or move it away to start an empty store"
        )


def corrupt_error(path: Path, exc: sqlite3.DatabaseError) -> StoreError:
    """The error for a file SQLite cannot read."""
    return StoreError(
        f"persistence store {path} is not a readable SQLite database ({exc}): it is damaged "
        "(truncated?) or not an MCC store; restore it from a backup, or move it away to start "
        "an empty store"
    )


def lock_file(path: Path) -> int:
    """Lock ``path`` for this process (one replica per file); the descriptor that holds it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreError(
            f"persistence store {path} is in use by another persistence service; give each "
            "replica its own --store file"
        ) from None
    return fd


def unlock_file(fd: int | None) -> None:
    """Release a lock ``lock_file`` took (None: there is none)."""
    if fd is not None:
        os.close(fd)  # closing the descriptor releases the flock
