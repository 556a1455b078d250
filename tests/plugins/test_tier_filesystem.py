"""The built-in filesystem tier keeps the tier contract on a real directory, survives a power
cut and a put killed half-way (real processes), and says so when its disk is full; tiers
are opened by URI scheme through the plugin manager."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from bkframe.core.interfaces.tier import InvalidKeyError, Tier
from bkframe.core.plugin_manager import PluginManager
from bkframe.core.registry import ComponentRegistry
from bkframe.errors import ConfigError, ObjectExistsError, TierError
from bkframe.plugins.tier_filesystem import TEMP_DIR, FilesystemTier
from bkframe.testing.faults import powerloss
from bkframe.testing.faults.small_fs import SmallFilesystem
from bkframe.testing.tier_contract import TierContract, pattern


class TestFilesystemTier(TierContract):
    part_size = 1 << 20  # the tier copies in chunks of this size

    @pytest.fixture
    def tier_uri(self, tmp_path: Path) -> str:
        return f"file://{tmp_path}/tier?create=true"

    def leftovers(self, tier: Tier) -> list[str]:
        assert isinstance(tier, FilesystemTier)
        return sorted(os.listdir(tier.root / TEMP_DIR))


def test_tiers_are_opened_by_uri_scheme(tmp_path: Path) -> None:
    """The scheme picks the plugin; an unknown one is one line naming what is installed
    (and what to install), never echoing the URI, which may hold credentials."""
    marker = object()

    class SchemePlugin:
        from bkframe import hookimpl

        @hookimpl
        def bkframe_register_components(self, registry: ComponentRegistry) -> None:
            registry.add_tier("test", lambda uri: marker, description="a test tier")  # type: ignore[arg-type,return-value]

    pm = PluginManager(load_entry_points=False, extra_plugins=[SchemePlugin()])
    assert pm.tier("test://anything") is marker
    assert isinstance(pm.tier(f"file://{tmp_path}"), FilesystemTier)
    with pytest.raises(ConfigError) as raised:
        pm.tier("s3://AKIDEXAMPLE:s3cr3t@bucket/prefix")
    message = str(raised.value)
    assert message == (
        "no installed plugin serves tier URIs of scheme 's3' (installed: file://, test://); "
        "install bkframe-tier-s3 for s3:// URIs"
    )
    with pytest.raises(ConfigError, match=r"scheme 'gs' \(installed: file://, test://\); run 'bkframe plugins'"):
        pm.tier("gs://bucket")


def test_uri_options_and_refusals(tmp_path: Path) -> None:
    pm = PluginManager(load_entry_points=False)
    with pytest.raises(ConfigError, match=r"does not exist; create it \(or mount the share\), or add \?create=true"):
        pm.tier(f"file://{tmp_path}/missing")
    assert not (tmp_path / "missing").exists()
    with pytest.raises(ConfigError, match=r"unknown option 'secret' \(known: create, temp_grace_s\)"):
        pm.tier(f"file://{tmp_path}?secret=hunter2")
    with pytest.raises(ConfigError, match="expected file:///ABSOLUTE/PATH"):
        pm.tier("file://relative/path")
    tier = pm.tier(f"file://{tmp_path}/made?create=true&temp_grace_s=5")
    assert isinstance(tier, FilesystemTier) and tier.temp_grace_s == 5 and tier.uri == f"file://{tmp_path}/made"
    with pytest.raises(InvalidKeyError, match="reserved"):
        tier.put(f"{TEMP_DIR}/x", b"x")
    # A directory cannot be an object and a prefix at once: one clear error, nothing stored.
    tier.put("a/b", b"object")
    with pytest.raises(TierError, match="cannot hold both an object and keys under it"):
        tier.put("a/b/c", b"under an object")
    with pytest.raises(TierError, match="cannot hold both"):
        tier.put("a", b"over a prefix")
    assert [o.key for o in tier.list()] == ["a/b"] and tier.head("a") is None


def test_a_full_disk_fails_the_put_and_says_so(
    small_filesystem: Callable[[str, Path, int], SmallFilesystem], tmp_path: Path
) -> None:
    fs = small_filesystem("tmpfs", tmp_path / "small", 2 << 20)
    tier = FilesystemTier(fs.path / "tier", create=True)
    with pytest.raises(TierError, match=r"put 'big': the tier's filesystem is full \(No space left on device\)"):
        tier.put("big", pattern(4 << 20))
    assert tier.head("big") is None and os.listdir(tier.root / TEMP_DIR) == []
    tier.put("small", b"fits")  # the failed put's space was given back
    assert tier.get_range("small", 0, 10) == b"fits"


def test_racing_conditional_puts_have_one_winner(tmp_path: Path) -> None:
    """Eight writers put one key with if_absent at once (two offloaders of one segment):
    exactly one wins, and the object is the winner's, whole."""
    tier = FilesystemTier(tmp_path / "tier", create=True)
    barrier = threading.Barrier(8)
    won: list[int] = []

    def writer(i: int) -> None:
        barrier.wait()
        try:
            tier.put("contested/object", bytes([i]) * 300_000, if_absent=True)
            won.append(i)
        except ObjectExistsError:
            pass

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(won) == 1
    assert tier.get_range("contested/object", 0, 1 << 20) == bytes([won[0]]) * 300_000
    assert os.listdir(tier.root / TEMP_DIR) == []


PUTTER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from bkframe.testing.faults import powerloss
    assert powerloss.install_from_env()
    from bkframe.plugins.tier_filesystem import FilesystemTier
    tier = FilesystemTier(Path(sys.argv[1]), create=True)
    tier.put("done/object", bytes(range(256)) * 12288)
    print("put done", flush=True)
    tier.put("half/object", Path(sys.argv[2]))  # a FIFO: blocks for more, until killed
    """
)


def test_a_power_cut_keeps_whole_objects_and_a_killed_put_leaves_none(tmp_path: Path) -> None:
    """A process puts one object, then is killed -9 in the middle of a second put (its
    source, a FIFO, ran dry half-way), then the power goes: the first object is whole (its
    file and its directory entry were fsynced), the second is nowhere, before or after the
    power cut, and the temporary file the killed put left is swept by the next list."""
    root, shadow, fifo = tmp_path / "tier", tmp_path / "shadow", tmp_path / "fifo"
    root.mkdir()
    os.mkfifo(fifo)
    env = {**os.environ, powerloss.SHADOW_ENV: str(shadow), powerloss.ROOT_ENV: str(root)}
    proc = subprocess.Popen(
        [sys.executable, "-c", PUTTER, str(root), str(fifo)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "put done\n"
        with open(fifo, "wb") as writer:
            writer.write(b"x" * (1 << 20))
            writer.flush()
            deadline = time.monotonic() + 30
            while not any(f.stat().st_size >= 1 << 20 for f in (root / TEMP_DIR).iterdir()):
                assert time.monotonic() < deadline, "the put never wrote its temporary file"
                time.sleep(0.05)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    tier = FilesystemTier(root, temp_grace_s=0)
    assert tier.head("half/object") is None and len(os.listdir(root / TEMP_DIR)) == 1
    assert [o.key for o in tier.list()] == ["done/object"]  # ... and the list swept the temporary file
    assert os.listdir(root / TEMP_DIR) == []
    powerloss.lose_power(root, shadow)
    after = FilesystemTier(root)
    assert [o.key for o in after.list()] == ["done/object"]
    assert after.get_range("done/object", 0, 4 << 20) == bytes(range(256)) * 12288
