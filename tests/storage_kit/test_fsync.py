"""The durable-write helpers every part uses (cookies, markers, LastLogMark, tombstones)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from bkframe.storage_kit import fsync
from bkframe.storage_kit.fsync import append_durably, remove_durably, write_durably


def no_space_after(monkeypatch: pytest.MonkeyPatch, allowed: int) -> None:
    """os.write takes ``allowed`` more bytes, then fails as a full disk does."""
    left = [allowed]
    real = os.write

    def write(fd: int, data: bytes | memoryview) -> int:
        if left[0] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = real(fd, bytes(data[: left[0]]))
        left[0] -= n
        return n

    monkeypatch.setattr(fsync.os, "write", write)


def test_write_durably_replaces_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "state.json"
    write_durably(path, b"old content")
    write_durably(path, b"new content")
    assert path.read_bytes() == b"new content"
    no_space_after(monkeypatch, 3)  # a short write, then no space
    with pytest.raises(OSError) as e:
        write_durably(path, b"newer content")
    assert e.value.errno == errno.ENOSPC
    assert path.read_bytes() == b"new content"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"], "no temporary file is left taking space"


def test_append_durably_leaves_no_partial_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "log"
    append_durably(path, b"one\n")
    append_durably(path, b"two\n")
    no_space_after(monkeypatch, 2)
    with pytest.raises(OSError):
        append_durably(path, b"three\n")
    assert path.read_bytes() == b"one\ntwo\n"
    monkeypatch.undo()
    append_durably(path, b"three\n")
    assert path.read_bytes() == b"one\ntwo\nthree\n"


def test_remove_durably(tmp_path: Path) -> None:
    path = tmp_path / "marker"
    write_durably(path, b"")
    remove_durably(path)
    remove_durably(path)  # gone already: fine
    assert not path.exists()
