"""``bkframe cookie show|fix``: inspect and repair a bookie's identity stamps."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from bkframe.bookie.startup.cookies import Cookie, fix_cookies, read_local
from bkframe.cli import interrupt
from bkframe.cli.options import metadata_option
from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.core.metadata import Versioned
from bkframe.core.plugin_manager import PluginManager
from bkframe.storage_kit.directory_lock import DirectoryLocks

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

options = [
    click.option("--data-dir", type=click.Path(path_type=Path), required=True, help="The bookie's data dir."),
    metadata_option(),
    click.option("--bookie-id", required=True, help="The bookie's id."),
]


def with_options(fn: F) -> F:
    for option in reversed(options):
        fn = option(fn)
    return fn


@click.group()
def cookie() -> None:
    """A bookie's cookies: its identity on its data dir and in the metadata store."""


def _run(metadata: str, fn: Callable[[MetadataStore], Awaitable[T]]) -> T:
    async def main() -> T:
        store = PluginManager().metadata_store(metadata)
        try:
            return await fn(store)
        finally:
            await store.aclose()

    return interrupt.run(main)


@cookie.command()
@with_options
def show(data_dir: Path, metadata: str, bookie_id: str) -> None:
    """Print the data dir's cookie and the metadata store's, and whether they match."""

    async def read(store: MetadataStore) -> Versioned | None:
        return await store.read_cookie(bookie_id)

    local = read_local(data_dir)
    remote_v = _run(metadata, read)
    remote = Cookie.deserialize(remote_v.value, "the metadata store") if remote_v else None
    match = local is not None and remote is not None and local.instance_id == remote.instance_id
    click.echo(json.dumps({
        "data_dir": json.loads(local.serialize()) if local else None,
        "metadata": json.loads(remote.serialize()) if remote else None,
        "metadata_version": remote_v.version if remote_v else None,
        "match": match,
    }, indent=2))


@cookie.command()
@with_options
@click.option("--address", default="", help="Address to record (informational).")
def fix(data_dir: Path, metadata: str, bookie_id: str, address: str) -> None:
    """Stamp a new instance on the data dir and in the metadata store (after a lost disk).
    Refused while a bookie runs on the data dir: stop it first."""

    async def fix_locked(store: MetadataStore) -> Cookie:
        # Once the store is known good (a mistake leaves no data dir behind); held while stamping.
        with DirectoryLocks.acquire([data_dir], user=""):
            return await fix_cookies(store, data_dir, bookie_id, address)

    new = _run(metadata, fix_locked)
    click.echo(f"bookie {bookie_id}: new cookie instance {new.instance_id} stamped on {data_dir} and in {metadata}")
