"""`mcc.files`: a file is replaced whole, with the mode asked for, and nothing is left behind."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from mcc.files import rotate_log, write_atomic, write_private


def test_private_file_is_0600_and_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "users.json"
    path.write_text("old")
    write_private(path, "new")
    assert path.read_text() == "new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(tmp_path) == ["users.json"]


def test_shared_file_is_0644(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    write_atomic(path, "{}\n")
    assert path.read_text() == "{}\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_a_failed_write_keeps_the_old_content(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    path.write_text("old")
    with pytest.raises(UnicodeEncodeError):
        write_atomic(path, "\udc80")  # a lone surrogate cannot be written as UTF-8
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["summary.json"]


def test_a_log_past_its_limit_is_rotated_and_its_writer_goes_on_at_the_start(
    tmp_path: Path,
) -> None:
    path = tmp_path / "radar-0.log"
    writer = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)  # an instance's stderr
    try:
        os.write(writer, b"a" * 1000)
        assert rotate_log(path, 1000) is False  # not past it yet
        os.write(writer, b"b" * 10)
        assert rotate_log(path, 1000) is True
        assert (tmp_path / "radar-0.log.1").read_bytes() == b"a" * 1000 + b"b" * 10
        assert stat.S_IMODE((tmp_path / "radar-0.log.1").stat().st_mode) == 0o600
        os.write(writer, b"after")
        assert path.read_bytes() == b"after"  # no hole of 1010 zero bytes before it
        os.write(writer, b"c" * 2000)
        assert rotate_log(path, 1000) is True  # the previous .1 is replaced
        assert (tmp_path / "radar-0.log.1").read_bytes() == b"after" + b"c" * 2000
    finally:
        os.close(writer)
    assert rotate_log(tmp_path / "gone.log", 1) is False
    assert rotate_log(path, 0) is False  # 0: never
