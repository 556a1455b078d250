"""The contract every object-store tier keeps, as a test suite a tier plugin runs on its store.

Subclass in a test module of your plugin and provide the ``tier_uri`` fixture (a fresh,
empty tier per test: a new directory, bucket or prefix)::

    from bkframe.testing.tier_contract import TierContract

    class TestMyTier(TierContract):
        part_size = 5 * 2**20      # the size above which a put is split (say in the URI)
        page_size = 3              # the list page size the URI asks for

        @pytest.fixture
        def tier_uri(self, my_server):
            return f"gs://{my_server.bucket()}?endpoint={my_server.url}&part_size=5MiB&page_size=3"

        def leftovers(self, tier):   # optional: what a failed put may leave behind
            return [...]             # (incomplete uploads, temporary files): must be empty

Tiers are opened through the plugin manager (override ``plugins`` to register a plugin that
is not installed). The suite writes objects of 2.5 parts (so a store's multipart path is
taken) and more than two list pages of objects, so keep both sizes small in tests.
"""

from __future__ import annotations

import io
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bkframe.core.interfaces.tier import InvalidKeyError, Tier
from bkframe.core.plugin_manager import PluginManager
from bkframe.errors import NoSuchObjectError, ObjectExistsError, TierError
from bkframe.testing.plugin_contract import PluginContract

#: Keys no tier accepts (bkframe.core.interfaces.tier.check_key).
BAD_KEYS = ("", "/abs", "a//b", "a/", "a/../b", "..", ".", "a/./b", "a\0b", "k" * 1025)


def pattern(size: int, seed: int = 0) -> bytes:
    """``size`` reproducible bytes that differ at every offset of a small window (a range
    read at the wrong offset cannot pass)."""
    return random.Random(seed).randbytes(size)


class SourceBroke(OSError):
    """The source of a put failed while the tier read it (a test's own error)."""


class BreakingStream(io.RawIOBase):
    """A binary stream that gives ``good`` bytes and then raises :class:`SourceBroke`."""

    def __init__(self, good: bytes) -> None:
        self._data = io.BytesIO(good)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = self._data.readinto(buffer)
        if not n:
            raise SourceBroke("the source broke half-way")
        return n


class TierContract(PluginContract):
    """What every :class:`~bkframe.core.interfaces.tier.Tier` does; see the module docstring."""

    #: A put larger than this is split into parts by the tier (as the URI asks); the suite
    #: writes 2.5 of it. Tiers that do not split take the default.
    part_size: int = 1 << 20
    #: How many objects a list page holds (as the URI asks); the suite lists more than two pages.
    page_size: int = 3

    @pytest.fixture
    def tier_uri(self) -> str:
        raise NotImplementedError("a subclass provides the tier_uri fixture: a fresh, empty tier per test")

    @pytest.fixture
    def tier(self, plugins: PluginManager, tier_uri: str) -> Iterator[Tier]:
        tier = plugins.tier(tier_uri)
        yield tier
        tier.close()

    def leftovers(self, tier: Tier) -> list[str]:
        """What failed puts left in the store that costs space (temporary files, incomplete
        multipart uploads): the suite checks it is empty after each failure."""
        return []

    # -- put and ranged get -----------------------------------------------------------------

    def test_put_bytes_and_read_exact_ranges(self, tier: Tier) -> None:
        data = pattern(1000)
        info = tier.put("seg/one", data)
        assert isinstance(tier, Tier)
        assert (info.key, info.size) == ("seg/one", 1000)
        assert abs(info.modified - time.time()) < 3600
        head = tier.head("seg/one")
        assert head is not None and (head.key, head.size) == ("seg/one", 1000)
        cases = [(0, 10), (0, 1000), (437, 100), (990, 10), (995, 10), (999, 1), (1000, 10), (5000, 10), (10, 0)]
        for offset, length in cases:
            assert tier.get_range("seg/one", offset, length) == data[offset : offset + length], (offset, length)

    def test_a_file_larger_than_a_part_streams_and_reads_back(self, tier: Tier, tmp_path: Path) -> None:
        size = self.part_size * 5 // 2 + 7
        data = pattern(size, seed=1)
        source = tmp_path / "big"
        source.write_bytes(data)
        info = tier.put("big/from-file", source)
        assert info.size == size
        assert tier.put("big/from-stream", io.BufferedReader(io.BytesIO(data))).size == size  # type: ignore[arg-type]
        edges = [0, self.part_size - 3, self.part_size * 2 - 1, size - 5]
        for key in ("big/from-file", "big/from-stream"):
            head = tier.head(key)
            assert head is not None and head.size == size
            for offset in edges:
                assert tier.get_range(key, offset, 64) == data[offset : offset + 64], (key, offset)
        whole = b"".join(tier.get_range("big/from-file", o, self.part_size) for o in range(0, size, self.part_size))
        assert whole == data

    # -- list -------------------------------------------------------------------------------

    def test_list_by_prefix_in_key_order_across_pages(self, tier: Tier) -> None:
        nested = ["logs/a/1", "logs/a/2", "logs/a-b", "logs/a0", "logs/b/x/y", "logs/b/x0", "other"]
        many = [f"many/{i:03d}" for i in range(self.page_size * 2 + 1)]
        keys = nested + many
        for i, key in enumerate(random.Random(2).sample(keys, len(keys))):
            tier.put(key, key.encode() + bytes(i))
        listed = list(tier.list())
        assert [o.key for o in listed] == sorted(keys)  # '-' < '/' < '0': key order, not a tree walk's
        for info in listed:
            head = tier.head(info.key)
            assert head is not None and (head.size, head.etag) == (info.size, info.etag)
        assert [o.key for o in tier.list("logs/a")] == ["logs/a-b", "logs/a/1", "logs/a/2", "logs/a0"]
        assert [o.key for o in tier.list("logs/a/")] == ["logs/a/1", "logs/a/2"]
        assert [o.key for o in tier.list("logs/b/x")] == ["logs/b/x/y", "logs/b/x0"]
        assert [o.key for o in tier.list("many/")] == many
        assert [o.key for o in tier.list("many/00")] == [k for k in many if k.startswith("many/00")]
        assert list(tier.list("nothing/")) == [] and list(tier.list("logs/c")) == []

    # -- conditional put, replace, delete ---------------------------------------------------

    def test_put_if_absent_twice(self, tier: Tier, tmp_path: Path) -> None:
        tier.put("once", b"first", if_absent=True)
        with pytest.raises(ObjectExistsError):
            tier.put("once", b"second", if_absent=True)
        assert tier.get_range("once", 0, 100) == b"first"
        # The same for a put split into parts: it fails as a whole, the object stays.
        big = tmp_path / "big"
        big.write_bytes(pattern(self.part_size * 5 // 2, seed=3))
        with pytest.raises(ObjectExistsError):
            tier.put("once", big, if_absent=True)
        assert tier.get_range("once", 0, 100) == b"first"
        assert self.leftovers(tier) == []

    def test_put_replaces(self, tier: Tier) -> None:
        tier.put("k/v", b"old value")
        info = tier.put("k/v", b"new")
        assert info.size == 3 and tier.get_range("k/v", 0, 100) == b"new"
        head = tier.head("k/v")
        assert head is not None and head.size == 3
        assert [o.key for o in tier.list("k/")] == ["k/v"]

    def test_delete_twice_and_absent_keys(self, tier: Tier) -> None:
        tier.put("gone/soon", b"x")
        tier.put("gone/stays", b"y")
        tier.delete("gone/soon")
        tier.delete("gone/soon")  # deletes are retried: an absent object is no error
        tier.delete("never/was")
        assert tier.head("gone/soon") is None
        with pytest.raises(NoSuchObjectError) as raised:
            tier.get_range("gone/soon", 0, 1)
        assert isinstance(raised.value, TierError)
        with pytest.raises(NoSuchObjectError):
            tier.get_range("never/was", 0, 0)
        assert [o.key for o in tier.list("gone/")] == ["gone/stays"]
        # A key under a deleted one's prefix can be written again.
        tier.put("gone/soon/after", b"z")
        assert tier.get_range("gone/soon/after", 0, 1) == b"z"

    # -- what is refused, and what a failure leaves -----------------------------------------

    def test_bad_keys_are_refused(self, tier: Tier) -> None:
        calls: list[Callable[[str], object]] = [
            lambda key: tier.put(key, b"x"),
            lambda key: tier.get_range(key, 0, 1),
            tier.head,
            tier.delete,
        ]
        for key in BAD_KEYS:
            for call in calls:
                with pytest.raises(InvalidKeyError, match="keys are '/'-separated relative paths"):
                    call(key)
        for prefix in ("/abs", "a//", "../", "a/../"):
            with pytest.raises(InvalidKeyError):
                list(tier.list(prefix))
        assert list(tier.list()) == []

    def test_a_failed_put_leaves_no_object(self, tier: Tier, tmp_path: Path) -> None:
        """The source breaks after 2.5 parts: the put raises the source's error, no object
        (nor a part of one) is there, nothing is left costing space, and an object the put
        would have replaced is still whole."""
        good = pattern(self.part_size * 5 // 2, seed=4)
        with pytest.raises(SourceBroke):
            tier.put("failed/new", BreakingStream(good))  # type: ignore[arg-type]
        assert tier.head("failed/new") is None and list(tier.list("failed/")) == []
        tier.put("failed/old", b"old")
        with pytest.raises(SourceBroke):
            tier.put("failed/old", BreakingStream(good))  # type: ignore[arg-type]
        assert tier.get_range("failed/old", 0, 100) == b"old"
        assert self.leftovers(tier) == []
        with pytest.raises(FileNotFoundError):
            tier.put("failed/missing", tmp_path / "no-such-file")
        assert tier.head("failed/missing") is None
