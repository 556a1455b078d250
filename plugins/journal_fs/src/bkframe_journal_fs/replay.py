"""Replay of the filesystem journal's files, with torn-tail repair.

**The tail rule.** Records are acknowledged only once their group's fdatasync completed,
and every group commit starts with a sync mark saying where the file's last completed
fdatasync ended (:mod:`.file_format`), so:

* in the **last** file, a bad record at offset P (zeros, a torn or CRC-failing record)
  followed by valid records is an *unfinished group* -- pages written back by the kernel
  while its fdatasync had not completed, the earlier ones lost in a power cut -- unless a
  valid sync mark after P says the file was fsynced beyond P. Nothing at or after P was
  then acknowledged: the file is truncated at P. If a mark proves P was fsynced,
  acknowledged records were damaged: replay refuses, naming the file and offset;
* a **rolled** file was fsynced whole when the journal moved to the next file: any bad
  record followed by valid ones refuses, naming the file and offset.

The proof can only come from a later group, so damage inside the very last fsynced group
of the last file (a disk corrupting synced data, not a power cut) cannot be told from an
unfinished group and is truncated too. Version 1 files (no sync marks) replay by the same
rule, with no proofs.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import crc32c

from bkframe.core.interfaces.journal import JournalCorruptError, JournalPosition
from bkframe_journal_fs.file_format import (
    FILE_HEADER,
    FILE_MAGIC,
    READABLE_VERSIONS,
    RECORD_HEADER,
    RECORD_MAGIC,
    SYNC_BODY,
    SYNC_MAGIC,
    journal_file_ids,
    journal_path,
)

log = logging.getLogger("bkframe.journal_fs")

_MAGIC_BYTES = struct.pack("<I", RECORD_MAGIC)
_SYNC_MAGIC_BYTES = struct.pack("<I", SYNC_MAGIC)


def replay_journal(
    directory: Path, before_file_id: int, since: JournalPosition | None
) -> Iterator[tuple[JournalPosition, bytes]]:
    """Every record of the files in ``directory`` with ids below ``before_file_id`` (the
    files of earlier runs) after ``since``, as :meth:`~bkframe.core.interfaces.journal.Journal.replay`."""
    ids = [i for i in journal_file_ids(directory) if i < before_file_id]
    if since is not None:
        ids = [i for i in ids if i >= since.file_id]
    for n, file_id in enumerate(ids):
        start = since.offset if since is not None and file_id == since.file_id else FILE_HEADER.size
        yield from replay_file(journal_path(directory, file_id), file_id, start, last=n == len(ids) - 1)


def replay_file(path: Path, file_id: int, start: int, *, last: bool) -> Iterator[tuple[JournalPosition, bytes]]:
    """The records of one file from ``start``; ``last``: it is the newest file (see the tail rule)."""
    data = path.read_bytes()
    if len(data) < FILE_HEADER.size:
        if last:
            log.warning("journal file %s has a torn header; removing it", path)
            path.unlink()
            return
        raise JournalCorruptError(str(path), 0, "the file header is incomplete")
    magic, version, low_id = FILE_HEADER.unpack_from(data)
    if magic != FILE_MAGIC or version not in READABLE_VERSIONS or low_id != file_id & 0xFFFFFFFF:
        raise JournalCorruptError(str(path), 0, "not a bkframe journal file of a version this bkframe reads")
    pos = max(start, FILE_HEADER.size)
    end = len(data)
    while pos < end:
        problem = check_record(data, pos)
        if problem is None:
            magic, length, _ = RECORD_HEADER.unpack_from(data, pos)
            body_at = pos + RECORD_HEADER.size
            pos = body_at + length
            if magic == RECORD_MAGIC:
                yield JournalPosition(file_id, pos), data[body_at:pos]
            continue
        after, synced = valid_records_after(data, pos + 1)
        if not after:
            if problem == "end":
                return  # preallocated zeros: the end of the data
            if last:
                log.warning("journal %s: torn tail at offset %d (%s); truncating", path, pos, problem)
                truncate(path, pos)
                return
            raise JournalCorruptError(str(path), pos, problem)
        if problem == "end":
            problem = "zeroed bytes followed by valid records"
        if not last:
            raise JournalCorruptError(str(path), pos, f"{problem}, in a file fsynced whole when the journal rolled")
        if synced > pos:
            raise JournalCorruptError(
                str(path), pos, f"{problem}, but a later group commit records that the file was fsynced up to "
                f"offset {synced}, so acknowledged records were damaged"
            )
        # The group commit that wrote this never completed its fdatasync: nothing from
        # here on was acknowledged (see the module docstring).
        log.warning(
            "journal %s: %s at offset %d, then %d valid-looking records of a group whose fdatasync never "
            "completed (the file was fsynced up to offset %d); none was acknowledged; truncating",
            path, problem, pos, after, synced,
        )
        truncate(path, pos)
        return


def truncate(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(offset)
        os.fsync(f.fileno())


def check_record(data: bytes, pos: int) -> str | None:
    """None if a valid record (or sync mark) starts at ``pos``; "end" at preallocated
    zeros; else why not."""
    if len(data) - pos < RECORD_HEADER.size:
        return "end" if not any(data[pos:]) else "truncated record header"
    magic, length, crc = RECORD_HEADER.unpack_from(data, pos)
    if magic == 0 and length == 0 and crc == 0:
        return "end" if not any(data[pos : pos + 4096]) else "zeroed record header"
    if magic not in (RECORD_MAGIC, SYNC_MAGIC):
        return f"bad record magic {magic:#010x}"
    if magic == SYNC_MAGIC and length != SYNC_BODY.size:
        return f"sync mark of {length} bytes (expected {SYNC_BODY.size})"
    body_at = pos + RECORD_HEADER.size
    if body_at + length > len(data):
        return f"record of {length} bytes runs past the end of the file"
    if crc32c.crc32c(data[body_at : body_at + length]) != crc:
        return "record CRC mismatch"
    return None


def valid_records_after(data: bytes, pos: int) -> tuple[int, int]:
    """Valid records (sync marks included) starting at or after ``pos``: how many, and
    the highest fsynced end their sync marks record (0 if none)."""
    count = 0
    synced = 0
    for magic_bytes in (_MAGIC_BYTES, _SYNC_MAGIC_BYTES):
        at = data.find(magic_bytes, pos)
        while at >= 0:
            if check_record(data, at) is None:
                count += 1
                if magic_bytes == _SYNC_MAGIC_BYTES:
                    (mark,) = SYNC_BODY.unpack_from(data, at + RECORD_HEADER.size)
                    synced = max(synced, mark)
            at = data.find(magic_bytes, at + 1)
    return count, synced
