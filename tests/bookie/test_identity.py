"""Who a bookie is and where it is reached: the advertised address (a bookie bound to
0.0.0.0 never registers 0.0.0.0), a default id stable across restarts, and never two live
bookies under one id -- on real bookie processes and a real metadata store."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest
import trio

import bkframe
from bkframe import ConfigError
from bkframe.bookie.startup.identity import advertised
from bkframe.core.config import WILDCARD_HOSTS, load_config
from bkframe.testing.cluster import BookieProcess, BookieStartError
from bkframe.testing.kit import PASSWORD, wait_until

#: A short registration TTL: a refused start (which waits about a TTL for the other
#: registration to expire) takes seconds.
SHORT_TTL = "[bookie]\nregistration_ttl_s = 1.0\n"


def test_the_advertised_address_is_never_a_wildcard() -> None:
    assert advertised("10.1.2.3", 3181) == advertised("10.1.2.3", 3181, "")
    assert (str(advertised("10.1.2.3", 3181)), advertised("10.1.2.3", 3181).source) == ("10.1.2.3:3181", "the bind host")
    assert str(advertised("0.0.0.0", 3181, "bookie1.example.com")) == "bookie1.example.com:3181"
    assert str(advertised("0.0.0.0", 3181, "203.0.113.7:4181")) == "203.0.113.7:4181"  # behind a NAT
    assert str(advertised("::", 3181, "[2001:db8::5]:3181")) == "[2001:db8::5]:3181"
    for wildcard in ("0.0.0.0", "::", ""):
        found = advertised(wildcard, 3181)
        assert found.host not in WILDCARD_HOSTS and found.port == 3181, found
        assert found.source in ("the hostname", "the primary address"), found


@pytest.mark.parametrize(
    "value, complaint",
    [
        ("0.0.0.0", "is a wildcard: other machines cannot connect to it"),
        ("b1:70000", "the port should be a number from 1 to 65535"),
        ("b1:http", "the port should be a number from 1 to 65535"),
        ("2001:db8::5", "write an IPv6 address in brackets"),
        ("a host", "should be HOST or HOST:PORT"),
    ],
)
def test_a_wrong_advertised_address_is_a_config_error(value: str, complaint: str) -> None:
    with pytest.raises(ConfigError, match=complaint):
        load_config(overrides={"advertised_address": value})


def registered(metadata: str) -> dict[str, dict[str, object]]:
    out = subprocess.run(
        [sys.executable, "-m", "bkframe", "bookies", "list", "--json", "--metadata", metadata],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    return {d["id"]: d for d in map(json.loads, out.splitlines())}


async def test_a_bookie_bound_to_every_interface_registers_where_it_is_reached(tmp_path: Path) -> None:
    metadata = f"sqlite://{tmp_path / 'metadata.db'}"
    bookie = BookieProcess(tmp_path / "b", metadata=metadata, args=("--host", "0.0.0.0")).start()
    try:
        host, port = bookie.address.rsplit(":", 1)
        assert host not in WILDCARD_HOSTS and int(port) > 0
        assert f"bound to 0.0.0.0:{port}, advertised as {bookie.address} (" in bookie.log()
        # The default id is the advertised address, and so is the registered address.
        assert {i: b["address"] for i, b in registered(metadata).items()} == {bookie.address: bookie.address}
        async with bkframe.open_client(metadata) as client:
            writer = await client.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, password=PASSWORD)
            await writer.append(b"reached at the advertised address")
            await writer.close()
            reader = await client.open_ledger(writer.ledger_id, password=PASSWORD)
            assert [e.payload for e in await reader.read(0, 0)] == [b"reached at the advertised address"]
    finally:
        bookie.kill()


def test_a_configured_advertised_address_is_registered_and_the_id_survives_restarts(tmp_path: Path) -> None:
    metadata = f"sqlite://{tmp_path / 'metadata.db'}"
    bookie = BookieProcess(tmp_path / "b", metadata=metadata, args=("--host", "0.0.0.0", "--advertised-address", "127.0.0.1"))
    bookie.start()
    first_id = bookie.address
    assert first_id.startswith("127.0.0.1:")
    assert registered(metadata)[first_id]["address"] == first_id
    assert bookie.stop() == 0
    bookie.start()  # port 0 again: another port, the same id (the data dir's cookie keeps it)
    try:
        assert bookie.address != first_id
        shown = registered(metadata)
        assert list(shown) == [first_id] and shown[first_id]["address"] == bookie.address
    finally:
        bookie.kill()


def test_a_second_live_bookie_with_the_same_id_refuses_and_changes_nothing(tmp_path: Path) -> None:
    metadata = f"sqlite://{tmp_path / 'metadata.db'}"
    (tmp_path / "short.toml").write_text(SHORT_TTL + "auto_fix_cookies = true\n")
    config = ("--config", str(tmp_path / "short.toml"))
    first = BookieProcess(tmp_path / "first", bookie_id="twin", metadata=metadata, args=config).start()
    try:
        before = registered(metadata)
        cookie = (tmp_path / "first" / "cookie.json").read_text()
        second = BookieProcess(tmp_path / "second", bookie_id="twin", metadata=metadata, args=config)
        started = time.monotonic()
        # Even with auto_fix_cookies (which re-stamps a replaced disk), never two bookies on one id.
        with pytest.raises(BookieStartError, match="exit status 1"):
            second.start()
        assert time.monotonic() - started < 30
        errors = [line for line in second.log().splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and "bookie id 'twin' is registered by another live bookie (at " in errors[0], second.log()
        assert "Traceback" not in second.log()
        assert registered(metadata) == before
        assert (tmp_path / "first" / "cookie.json").read_text() == cookie
        assert not (tmp_path / "second" / "cookie.json").exists()
        # The first bookie goes on serving, registered as before: the registration as it was
        # then expires, and heartbeats have renewed it beyond.
        def expiry() -> float:
            with closing(sqlite3.connect(tmp_path / "metadata.db")) as db:
                return float(db.execute("SELECT expires_mono FROM bookies WHERE id = 'twin'").fetchone()[0])

        seen = expiry()
        trio.run(wait_until, lambda: time.monotonic() > seen and expiry() > seen, "a heartbeat past the first expiry", 30)
        assert registered(metadata) == before
    finally:
        first.kill()


async def test_a_bookie_restarted_on_a_new_disk_replaces_its_dead_registration(tmp_path: Path) -> None:
    """Killed, its data dir replaced, restarted at once (before its registration expired):
    the registration of the dead process of this machine is replaced, without waiting."""
    metadata = f"sqlite://{tmp_path / 'metadata.db'}"
    (tmp_path / "fix.toml").write_text("[bookie]\nregistration_ttl_s = 30.0\nauto_fix_cookies = true\n")
    bookie = BookieProcess(tmp_path / "b", bookie_id="phoenix", metadata=metadata, args=("--config", str(tmp_path / "fix.toml")))
    bookie.start()
    old = json.loads((tmp_path / "b" / "cookie.json").read_text())["instance_id"]
    bookie.kill()
    for f in sorted((tmp_path / "b").rglob("*"), reverse=True):
        f.unlink() if f.is_file() else f.rmdir()
    started = time.monotonic()
    bookie.start()
    try:
        assert time.monotonic() - started < 20  # not the 30 s TTL
        new = json.loads((tmp_path / "b" / "cookie.json").read_text())["instance_id"]
        assert new != old
        with trio.fail_after(10):
            async with bkframe.open_client(metadata) as client:
                [info] = await client.metadata.list_bookies()
        assert (info.bookie_id, info.instance, info.address) == ("phoenix", new, bookie.address)
    finally:
        bookie.kill()


async def test_a_bookie_killed_and_restarted_at_once_takes_its_id_back(tmp_path: Path) -> None:
    """SIGKILL leaves the registration until its TTL; the same bookie (same data dir, same
    cookie instance) restarting at once is its previous life, not another bookie."""
    metadata = f"sqlite://{tmp_path / 'metadata.db'}"
    (tmp_path / "ttl.toml").write_text("[bookie]\nregistration_ttl_s = 30.0\n")
    bookie = BookieProcess(tmp_path / "b", bookie_id="lazarus", metadata=metadata, args=("--config", str(tmp_path / "ttl.toml")))
    bookie.start()
    bookie.kill()
    started = time.monotonic()
    bookie.start()
    try:
        assert time.monotonic() - started < 20  # not the 30 s TTL
        with trio.fail_after(10):
            async with bkframe.open_client(metadata) as client:
                [info] = await client.metadata.list_bookies()
        assert (info.bookie_id, info.address) == ("lazarus", bookie.address)
    finally:
        bookie.kill()
