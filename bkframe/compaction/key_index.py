"""Which records are their key's latest, in bounded memory (docs/compaction.md, "The key index").

Compaction reads the range it compacts in position order and :meth:`KeyIndex.add`\\ s each
keyed record's key and position; :meth:`KeyIndex.latest` then yields the positions to keep
(each key's greatest), ascending, in chunks, for the second pass to keep exactly those.

How, with memory bounded by ``memory_bytes`` whatever the number of keys:

- a key is a 128-bit BLAKE2b hash (two uint64 columns), a position the packed
  ``segment << 32 | entry``: a row is 24 bytes, held in numpy arrays;
- rows collect in a buffer; a full buffer keeps each hash's last row (positions come in
  ascending order, and the sort is stable) and appends its rows to one of
  ``2 ** FANOUT_BITS`` bucket files by the hash's top bits;
- :meth:`latest` takes each bucket alone (a bucket larger than the memory is split again by
  the next bits), keeps each hash's last row, and collects the kept positions; each time a
  buffer's worth is collected it is sorted and written as a run; the runs are merged into
  one ascending stream, a chunk at a time.

Every file read and write is sequential. A range whose rows fit in one buffer never touches
the disk. The caller runs this in a worker thread (it is plain blocking code) and owns the
work directory, which :meth:`KeyIndex.close` empties.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

#: Bucket files a full buffer's rows are spread over: 2 ** FANOUT_BITS, by the hash's top bits.
FANOUT_BITS = 8
#: One row on disk: hash high, hash low, position.
ROW = np.dtype([("h1", "<u8"), ("h2", "<u8"), ("pos", "<u8")])
#: The smallest memory budget (below it the buckets' merge has no room to work).
MIN_MEMORY = 64 << 10

U64 = npt.NDArray[np.uint64]


def hash_keys(keys: Sequence[bytes]) -> tuple[U64, U64]:
    """The keys' 128-bit BLAKE2b hashes as two uint64 arrays (high, low)."""
    raw = b"".join(hashlib.blake2b(k, digest_size=16).digest() for k in keys)
    both = np.frombuffer(raw, dtype=">u8").astype(np.uint64).reshape(-1, 2)
    return both[:, 0].copy(), both[:, 1].copy()


def _last_of_each(rows: npt.NDArray[np.void]) -> npt.NDArray[np.void]:
    """``rows`` (positions ascending within each hash) reduced to each hash's last row,
    sorted by hash."""
    if len(rows) == 0:
        return rows
    order = np.lexsort((rows["h2"], rows["h1"]))  # stable: a hash's rows stay in position order
    rows = rows[order]
    last = np.ones(len(rows), dtype=bool)
    last[:-1] = (rows["h1"][1:] != rows["h1"][:-1]) | (rows["h2"][1:] != rows["h2"][:-1])
    return rows[last]


class KeyIndex:
    """Each key's latest position among those added (see the module's docstring)."""

    def __init__(self, workdir: Path, *, memory_bytes: int = 128 << 20, fanout_bits: int = FANOUT_BITS) -> None:
        if memory_bytes < MIN_MEMORY:
            raise ValueError(f"memory_bytes must be at least {MIN_MEMORY}, got {memory_bytes}")
        if not 1 <= fanout_bits <= 16:
            raise ValueError(f"fanout_bits must be from 1 to 16, got {fanout_bits}")
        self.workdir = workdir
        self.memory_bytes = memory_bytes
        self.bits = fanout_bits
        #: Rows the buffer takes before they go to the buckets (a sixth of the memory: the
        #: sort of a full buffer needs about twice as much again).
        self.buffer_rows = max(1024, memory_bytes // 6 // ROW.itemsize)
        self._buffer = np.empty(self.buffer_rows, dtype=ROW)
        self._filled = 0
        self._spilled = False
        self._last_position = -1
        #: Rows added, and rows written to the buckets (for the metrics and the tests).
        self.rows = 0
        self.spilled_rows = 0

    def add(self, keys: Sequence[bytes], positions: Iterable[int] | U64) -> None:
        """Index ``keys`` at ``positions`` (packed, ascending, after every position added
        before)."""
        pos = np.asarray(positions, dtype=np.uint64)
        if len(pos) != len(keys):
            raise ValueError(f"{len(keys)} keys but {len(pos)} positions")
        if len(pos) == 0:
            return
        if int(pos[0]) <= self._last_position or (len(pos) > 1 and bool(np.any(pos[1:] <= pos[:-1]))):
            raise ValueError("positions must be added in ascending order, each once")
        self._last_position = int(pos[-1])
        h1, h2 = hash_keys(keys)
        self.add_hashed(h1, h2, pos)

    def add_hashed(self, h1: U64, h2: U64, pos: U64) -> None:
        """:meth:`add` for keys hashed already (:func:`hash_keys`)."""
        self.rows += len(pos)
        done = 0
        while done < len(pos):
            n = min(len(pos) - done, self.buffer_rows - self._filled)
            part = self._buffer[self._filled : self._filled + n]
            part["h1"], part["h2"], part["pos"] = h1[done : done + n], h2[done : done + n], pos[done : done + n]
            self._filled += n
            done += n
            if self._filled == self.buffer_rows:
                self._spill()

    def latest(self, chunk_rows: int = 1 << 16) -> Iterator[U64]:
        """The positions to keep (each key's greatest), ascending, in chunks of at most
        ``chunk_rows``."""
        if not self._spilled:
            kept = np.sort(_last_of_each(self._buffer[: self._filled])["pos"])
            for lo in range(0, len(kept), chunk_rows):
                yield kept[lo : lo + chunk_rows]
            return
        self._spill()
        self._buffer = np.empty(0, dtype=ROW)  # its memory goes to the merge
        self._kept: list[U64] = []
        self._kept_rows = 0
        self._runs: list[Path] = []
        for bucket in self._bucket_paths(self.workdir / "b"):
            self._reduce(bucket, self.bits)
        self._write_run()
        runs = self._runs
        # The runs' buffers take an eighth of the memory; what one step takes from them is
        # joined and sorted (twice that at most).
        yield from _merge_sorted(runs, max(1024, self.memory_bytes // 8 // 8 // max(1, len(runs))), chunk_rows)

    def close(self) -> None:
        """Remove the index's files."""
        shutil.rmtree(self.workdir / "b", ignore_errors=True)
        shutil.rmtree(self.workdir / "runs", ignore_errors=True)

    # -- spilling ----------------------------------------------------------------------------

    def _spill(self) -> None:
        rows = _last_of_each(self._buffer[: self._filled])
        self._filled = 0
        if not len(rows):
            return
        self._spilled = True
        self.spilled_rows += len(rows)
        _append_by_bucket(self.workdir / "b", rows, 0, self.bits)

    @staticmethod
    def _bucket_paths(directory: Path) -> list[Path]:
        return sorted(directory.glob("*.rows")) if directory.exists() else []

    def _reduce(self, bucket: Path, shift: int) -> None:
        """Collect the kept positions of ``bucket`` (hashes agreeing on their top ``shift``
        bits); a bucket too large for the memory is split by the next bits first."""
        size = bucket.stat().st_size
        if size * 4 > self.memory_bytes and shift + self.bits <= 64:
            parts = bucket.with_suffix("")
            for rows in _read_rows(bucket, self.buffer_rows):
                _append_by_bucket(parts, rows, shift, self.bits)
            bucket.unlink()
            for part in self._bucket_paths(parts):
                self._reduce(part, shift + self.bits)
            return
        rows = np.fromfile(bucket, dtype=ROW)
        bucket.unlink()
        # Rows of one hash came from successive buffers in position order: the last is the latest.
        kept = _last_of_each(rows)["pos"]
        self._kept.append(kept)
        self._kept_rows += len(kept)
        if self._kept_rows * 8 * 4 > self.memory_bytes:
            self._write_run()

    def _write_run(self) -> None:
        """The kept positions collected, sorted, as a run file."""
        if not self._kept_rows:
            return
        kept = np.concatenate(self._kept)
        self._kept, self._kept_rows = [], 0
        kept.sort()
        directory = self.workdir / "runs"
        directory.mkdir(parents=True, exist_ok=True)
        run = directory / f"{len(self._runs):08d}.u64"
        kept.tofile(run)
        self._runs.append(run)


def _append_by_bucket(directory: Path, rows: npt.NDArray[np.void], shift: int, bits: int) -> None:
    """Append ``rows`` to ``directory/<bucket>.rows`` by the ``bits`` bits of the hash after its
    top ``shift`` bits (keeping their order within each bucket)."""
    directory.mkdir(parents=True, exist_ok=True)
    bucket = (rows["h1"] << np.uint64(shift)) >> np.uint64(64 - bits)
    order = np.argsort(bucket, kind="stable")
    rows, bucket = rows[order], bucket[order]
    edges = np.flatnonzero(np.diff(bucket)) + 1
    for start, part in zip(np.concatenate(([0], edges)), np.split(rows, edges), strict=True):
        with open(directory / f"{int(bucket[start]):05d}.rows", "ab") as f:
            part.tofile(f)


def _read_rows(path: Path, rows: int) -> Iterator[npt.NDArray[np.void]]:
    with open(path, "rb") as f:
        while True:
            part = np.fromfile(f, dtype=ROW, count=rows)
            if not len(part):
                return
            yield part


def _merge_sorted(runs: list[Path], buffer_rows: int, chunk_rows: int) -> Iterator[U64]:
    """The sorted uint64 ``runs`` (files) merged into one ascending stream, in chunks; each run
    is read ``buffer_rows`` at a time. Their values are distinct (positions of distinct keys)."""
    files = [open(run, "rb") for run in runs]  # closed in the finally
    try:
        heads: list[U64] = [np.fromfile(f, dtype=np.uint64, count=buffer_rows) for f in files]
        while True:
            live = [i for i, h in enumerate(heads) if len(h)]
            if not live:
                return
            # Everything up to the smallest of the buffers' last values can be emitted: no
            # run holds a smaller value beyond its buffer.
            bound = min(heads[i][-1] for i in live)
            taken = []
            for i in live:
                cut = int(np.searchsorted(heads[i], bound, side="right"))
                taken.append(heads[i][:cut])
                heads[i] = heads[i][cut:]
                if not len(heads[i]):
                    heads[i] = np.fromfile(files[i], dtype=np.uint64, count=buffer_rows)
            merged = np.concatenate(taken)
            merged.sort()
            for lo in range(0, len(merged), chunk_rows):
                yield merged[lo : lo + chunk_rows]
    finally:
        for f in files:
            f.close()
        for run in runs:
            run.unlink(missing_ok=True)
