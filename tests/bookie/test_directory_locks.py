"""One process per directory (issue 35): a bookie locks its data dir, every journal dir and
its storage dirs for its whole life. A second bookie process on any of them stops at once
with one line naming the directory and the holder's pid, having changed nothing -- no
replay, no unclean-shutdown marker, no fence or limbo, no journal file, no cookie, no
registration -- and a holder killed with SIGKILL leaves nothing that blocks its restart.

Real ``bkframe bookie`` processes and real flocks. Two holders share the module: A, with an
extra journal dir (``[journal] dirs``), and H, with only its own. The refused starts share a
directory with one of them each way round: A's data dir with another journal dir, A's extra
journal dir from another data dir, H's data dir with an extra journal dir H lacks, and H's
own journal dir as another bookie's extra one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import pytest

import bkframe
from bkframe.client.bookies.connection import connect_bookie
from bkframe.core.config import directory_field, load_config
from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.core.plugin_manager import PluginManager
from bkframe.core.registry import ComponentRegistry
from bkframe.errors import PluginError
from bkframe.storage_kit.directory_lock import LOCK_FILE, DirectoryLockedError, DirectoryLocks, holder_pid
from bkframe.testing.cluster import BOOKIE_COMMAND, BookieProcess
from bkframe.testing.kit import FAST, PASSWORD, payload


@attrs.frozen
class Holders:
    root: Path
    metadata: str
    #: Data dir d1, extra journal dir j1.
    a: BookieProcess
    #: Data dir d3, no extra journal dir.
    h: BookieProcess


def config_file(root: Path, name: str, journal_dirs: list[Path]) -> Path:
    path = root / f"{name}.toml"
    path.write_text(f"[journal]\ndirs = [{', '.join(f'{str(d)!r}' for d in journal_dirs)}]\n")
    return path


@pytest.fixture(scope="module")
def holders(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Holders]:
    root = tmp_path_factory.mktemp("dirlocks")
    metadata = f"sqlite://{root / 'metadata.db'}"
    a_config = ("--config", str(config_file(root, "a", [root / "j1"])))
    a = BookieProcess(root / "d1", bookie_id="a", metadata=metadata, command=BOOKIE_COMMAND, args=a_config)
    h = BookieProcess(root / "d3", bookie_id="h", metadata=metadata, command=BOOKIE_COMMAND)
    try:
        for b in (a, h):
            b.spawn()
        for b in (a, h):
            b.wait_started()
        yield Holders(root, metadata, a, h)
    finally:
        for b in (a, h):
            if b.running:
                b.kill()


def watched_files(dirs: list[Path]) -> dict[str, bytes]:
    """What a second bookie would change first: the journal files there are, the lock
    files' pids, the cookie, the unclean-shutdown marker, the journal-dirs record."""
    found: dict[str, bytes] = {}
    for d in dirs:
        found |= {str(p): b"" for p in d.glob("*.txn")}
        for name in (LOCK_FILE, "cookie.json", "UNCLEAN_SHUTDOWN", "journal_dirs.json"):
            if (d / name).exists():
                found[str(d / name)] = (d / name).read_bytes()
    return found


@asynccontextmanager
async def metadata_store(uri: str) -> AsyncIterator[MetadataStore]:
    store = PluginManager().metadata_store(uri)
    try:
        yield store
    finally:
        await store.aclose()


async def bookie_info(b: BookieProcess) -> dict[str, object]:
    async with connect_bookie(b.host, b.port) as bk:
        return await bk.info()


async def test_a_second_bookie_on_a_live_bookies_directory_is_refused_and_changes_nothing(holders: Holders) -> None:
    root, a, h = holders.root, holders.a, holders.h
    a_dirs = [root / "d1", root / "d1" / "journal", root / "d1" / "entrylogs", root / "d1" / "ledgers", root / "j1"]
    h_dirs = [root / "d3", root / "d3" / "journal", root / "d3" / "entrylogs", root / "d3" / "ledgers"]
    assert a.proc is not None and h.proc is not None
    assert [holder_pid(d) for d in a_dirs] == [a.proc.pid] * 5 and [holder_pid(d) for d in h_dirs] == [h.proc.pid] * 4

    async with bkframe.open_client(holders.metadata, **FAST) as client, metadata_store(holders.metadata) as store:
        # On both bookies (E2 W2 A2): a closed ledger, and two left open -- a BYPASS one, which a
        # second bookie that took the shutdown for unclean would fence and put in limbo.
        closed = await client.create_ledger(ensemble=2, write_quorum=2, ack_quorum=2, password=PASSWORD)
        bypass = await client.create_ledger(
            ensemble=2, write_quorum=2, ack_quorum=2, password=PASSWORD, ledger_type="BYPASS_JOURNAL"
        )
        pd_open = await client.create_ledger(ensemble=2, write_quorum=2, ack_quorum=2, password=PASSWORD)
        writers = (closed, bypass, pd_open)
        for w in writers:
            for e in range(10):
                await w.append(payload(w.ledger_id, e))
        await closed.close()
        before = watched_files(a_dirs + h_dirs)
        cookie_a = await store.read_cookie("a")

        # Each refused start shares exactly one directory with a holder, one each way round.
        refused = {
            "a's data dir, another journal dir": (root / "d1", "a", [root / "j2"], root / "d1", a),
            "a's extra journal dir, another data dir": (root / "d2", "c", [root / "j1"], root / "j1", a),
            "h's data dir, with an extra journal dir": (root / "d3", "h", [root / "j3"], root / "d3", h),
            "h's journal dir as an extra one": (root / "d4", "d", [root / "d3" / "journal"], root / "d3" / "journal", h),
        }
        procs = {}
        for case, (data_dir, bookie_id, journal_dirs, _, _) in refused.items():
            b = BookieProcess(
                data_dir, bookie_id=bookie_id, metadata=holders.metadata, command=BOOKIE_COMMAND,
                args=("--config", str(config_file(root, f"refused-{bookie_id}", journal_dirs))),
                log_path=root / f"refused-{bookie_id}.log",
            )
            b.spawn()
            procs[case] = b
        # Nor may 'bkframe cookie fix' re-stamp a live bookie's data dir.
        cookie_fix = subprocess.Popen(
            [sys.executable, "-m", "bkframe", "cookie", "fix", "--data-dir", str(root / "d1"), "--bookie-id", "a",
             "--metadata", holders.metadata],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for case, (_, _, _, shared, holder) in refused.items():
            b = procs[case]
            assert b.wait(60) == 1, case
            assert holder.proc is not None
            lines = b.log().strip().splitlines()
            assert "Traceback" not in b.log() and sum("Error" in line for line in lines) == 1, (case, lines)
            assert lines[-1].startswith(f"Error: directory {shared} is locked"), (case, lines)
            assert f"pid {holder.proc.pid}" in lines[-1], (case, lines)
        _, err = cookie_fix.communicate(timeout=60)
        assert cookie_fix.returncode == 1 and err.strip().splitlines() == [
            f"Error: directory {root / 'd1'} is locked ({root / 'd1' / LOCK_FILE}): another process (pid "
            f"{a.proc.pid}) is using it. Two processes on one directory would destroy each other's data; stop pid "
            f"{a.proc.pid} first"
        ]

        # Nothing changed: the holders' files, no journal dir made for the refused one of a's
        # data dir (it stopped at the data dir, the first lock), nothing but empty locked
        # dirs in the new data dirs, and no cookie or registration for the refused ids.
        assert watched_files(a_dirs + h_dirs) == before
        assert not (root / "j2").exists() and not (root / "j3").exists()
        for new in (root / "d2", root / "d4"):
            assert {p.name for p in new.rglob("*") if p.is_file()} <= {LOCK_FILE}, sorted(new.rglob("*"))
        assert {b.bookie_id: b.pid for b in await store.list_bookies()} == {"a": a.proc.pid, "h": h.proc.pid}
        assert await store.read_cookie("c") is None and await store.read_cookie("d") is None
        assert await store.read_cookie("a") == cookie_a

        # The holders go on serving: the open ledgers take more entries.
        for w in (bypass, pd_open):
            for e in range(10, 20):
                await w.append(payload(w.ledger_id, e))

        # a's next clean restart finds a clean shutdown and nothing in limbo.
        assert a.stop() == 0
        a.start()
        info = await bookie_info(a)
        assert info["last_shutdown_clean"] is True and info["limbo_ledgers"] == [], info
        for w, last in ((closed, 9), (bypass, 19), (pd_open, 19)):
            reader = await client.open_ledger(w.ledger_id, password=PASSWORD)
            assert reader.lac == last
            got = [e.payload for e in await reader.read(0, last)]
            assert got == [payload(w.ledger_id, e) for e in range(last + 1)]


async def test_a_holder_killed_with_sigkill_does_not_block_its_restart(holders: Holders) -> None:
    h = holders.h
    assert h.proc is not None
    old = h.proc.pid
    os.kill(old, signal.SIGKILL)
    h.proc.wait(timeout=30)
    assert holder_pid(holders.root / "d3") == old  # its lock file stays behind; its lock does not
    h.start()
    assert h.proc.pid != old and holder_pid(holders.root / "d3") == h.proc.pid
    info = await bookie_info(h)
    assert info["last_shutdown_clean"] is False  # it was killed: the lock did not hide that


def test_a_plugin_cannot_forget_a_directory_it_writes(tmp_path: Path) -> None:
    """A storage plugin's config key named like a directory must be declared: declared, the
    bookie locks it with the rest; undeclared, the plugin is refused at registration."""

    @attrs.frozen
    class Declared:
        spill_dirs: tuple[str, ...] = directory_field(())

    @attrs.frozen
    class Undeclared:
        spill_dir: str = ""

    class Plugin:
        def __init__(self, config: type) -> None:
            self.config = config

        @bkframe.hookimpl
        def bkframe_register_components(self, registry: ComponentRegistry) -> None:
            registry.add_journal("spilling", lambda *_: None, config=self.config)

    with pytest.raises(PluginError, match="config key spill_dir looks like a directory; declare it with"):
        PluginManager(extra_plugins=[Plugin(Undeclared)]).components  # noqa: B018 - registration runs here
    plugins = PluginManager(extra_plugins=[Plugin(Declared)])
    config = load_config(None, {"data_dir": tmp_path / "data"})
    section = {"plugin": "spilling", "spill_dirs": ["spill", str(tmp_path / "elsewhere")]}
    journal_dir = tmp_path / "data" / "journal"
    dirs = plugins.directories(section="journal", config=section, directory=journal_dir, source=config.source)
    assert dirs == [journal_dir, journal_dir / "spill", tmp_path / "elsewhere"]
    with DirectoryLocks.acquire(dirs):
        # flock belongs to the open file: even this process cannot take it twice.
        with pytest.raises(DirectoryLockedError, match=rf"this process \(pid {os.getpid()}\) already uses it"):
            DirectoryLocks.acquire([tmp_path / "elsewhere"])
    DirectoryLocks.acquire(dirs).release()  # released: free again
