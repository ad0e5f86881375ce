"""`mcc.files`: a file is replaced whole, with the mode asked for, and nothing is left behind."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from mcc.files import write_atomic, write_private


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
