"""``bkframe ledger ...``: create, append, read, inspect, check (replication), close, delete ledgers."""

from __future__ import annotations

import json
import sys
import tomllib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click

from bkframe.cli import interrupt
from bkframe.cli.interrupt import close_ledger
from bkframe.cli.metadata_only import on_metadata_store
from bkframe.cli.options import ClientGroup, check_quorums, client_security, metadata_option, password_option
from bkframe.core.interfaces.metadata_store import iter_ledger_ids
from bkframe.core.metadata import LEDGER_PAGE

if TYPE_CHECKING:  # the client is imported by the commands that open one, not by `ledger list` or `metadata`
    from bkframe.client.client import Client
    from bkframe.core.interfaces.metadata_store import MetadataStore

T = TypeVar("T")


def _run(metadata: str, fn: Callable[[Client], Awaitable[T]], **settings: Any) -> T:
    from bkframe.client.client import open_client

    async def main() -> T:
        async with open_client(metadata, **{**client_security(), **settings}) as client:
            with interrupt.work():  # a signal cancels the command, never the client under it
                return await fn(client)
            return cast(T, None)  # stopped by a signal: interrupt.run exits

    return interrupt.run(main)


def _option_value(text: str) -> Any:
    """A ``KEY=VALUE`` option's value as TOML reads it (``2``, ``true``), else the text."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _placement(policy: str | None, options: tuple[str, ...]) -> dict[str, Any]:
    """``open_client`` keywords for ``--placement NAME -o KEY=VALUE ...``."""
    out: dict[str, Any] = {} if policy is None else {"placement": policy}
    for option in options:
        key, sep, value = option.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{option!r} should be KEY=VALUE", param_hint="-o/--placement-option")
        out[key.strip()] = _option_value(value.strip())
    return out


@click.group(cls=ClientGroup)
def ledger() -> None:
    """Work with ledgers through the client library."""


@ledger.command()
@metadata_option()
@click.option("-e", "--ensemble", type=int, default=3, show_default=True)
@click.option("-w", "--write-quorum", type=int, default=2, show_default=True)
@click.option("-a", "--ack-quorum", type=int, default=2, show_default=True)
@click.option("--type", "ledger_type", default="PD_JOURNAL", show_default=True)
@click.option("--digest", type=click.Choice(["CRC32C", "HMAC_SHA256"]), default="CRC32C", show_default=True)
@password_option("ledger")
@click.option("--placement", help="Placement policy choosing its bookies: random (default), least_used, rack_aware, ...")
@click.option("-o", "--placement-option", "placement_options", multiple=True, metavar="KEY=VALUE",
              help="An option of the placement policy, e.g. -o min_racks=2 (repeatable).")
def create(
    metadata: str, ensemble: int, write_quorum: int, ack_quorum: int, ledger_type: str, digest: str, password: str,
    placement: str | None, placement_options: tuple[str, ...],
) -> None:
    """Create a ledger; prints its id alone. Append to it with 'bkframe ledger append ID'."""
    check_quorums(ensemble, write_quorum, ack_quorum)

    async def run(client: Client) -> int:
        handle = await client.create_ledger(
            ensemble=ensemble, write_quorum=write_quorum, ack_quorum=ack_quorum, ledger_type=ledger_type,
            digest=digest, password=password.encode(), claim=False,
        )
        return handle.ledger_id

    click.echo(_run(metadata, run, **_placement(placement, placement_options)))


@ledger.command()
@metadata_option()
@password_option("ledger")
@click.option("--keep-open", is_flag=True, help="Do not close the ledger at end of input.")
@click.argument("ledger_id", type=int)
def append(metadata: str, password: str, keep_open: bool, ledger_id: int) -> None:
    """Each stdin line becomes one entry; prints each entry id once it is acknowledged."""

    async def run(client: Client) -> None:
        from bkframe.cli.stdin_lines import append_lines

        writer = await client.open_writer(ledger_id, password=password.encode())
        try:
            refused = await append_lines(writer.append_async)
        finally:
            if interrupt.interrupted():
                await close_ledger(writer, keep_open=keep_open)
        if interrupt.interrupted():
            return
        if not keep_open:
            await writer.close()
        if refused is not None:
            raise refused

    _run(metadata, run)


@ledger.command()
@metadata_option()
@password_option("ledger")
@click.option("--from", "first", type=click.IntRange(min=0), default=0, show_default=True, help="First entry.")
@click.option("--to", "last", type=click.IntRange(min=0), default=None, help="Last entry (default: the LAC).")
@click.option("--recover", is_flag=True, help="Fence and close an open ledger first (its writer stops).")
@click.option("--unconfirmed", is_flag=True, help="Read beyond the LAC, up to --to.")
@click.argument("ledger_id", type=int)
def read(metadata: str, password: str, first: int, last: int | None, recover: bool, unconfirmed: bool, ledger_id: int) -> None:
    """Print one entry per line."""
    if unconfirmed and last is None:
        raise click.UsageError("--unconfirmed needs --to (there is no known end beyond the LAC)")
    if last is not None and first > last:
        raise click.UsageError(f"--from {first} is after --to {last}: give --from <= --to")

    async def run(client: Client) -> None:
        reader = await client.open_ledger(ledger_id, password=password.encode(), recovery=recover)
        lac = await reader.read_lac()
        end = lac if last is None else last
        if last is None and first > lac + 1:
            raise click.UsageError(
                f"--from {first} is beyond the last confirmed entry {lac} of ledger {ledger_id}: give --from {lac + 1} "
                f"or less (or --unconfirmed --to N to read beyond the LAC)"
            )
        out = sys.stdout.buffer
        for start in range(first, end + 1, 1000):
            stop = min(start + 999, end)
            entries = await (reader.read_unconfirmed(start, stop) if unconfirmed else reader.read(start, stop))
            for entry in entries:
                out.write(entry.payload + b"\n")
        out.flush()

    _run(metadata, run)


@ledger.command()
@metadata_option()
@click.argument("ledger_id", type=int)
def metadata(metadata: str, ledger_id: int) -> None:
    """Print the ledger's metadata as JSON."""
    client_security()  # not needed to read the store; a token given two ways is still an error

    async def run(store: MetadataStore) -> dict[str, Any]:
        md = await store.read_ledger(ledger_id)
        return md.to_public_json()  # as the HTTP API's: no password hash

    click.echo(json.dumps(on_metadata_store(metadata, run), indent=2, sort_keys=True))  # the store alone


@ledger.command(name="list")
@metadata_option()
@click.option("--start", type=click.IntRange(min=0), default=0, show_default=True, help="The first ledger id to list.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="List at most this many (default: every one).")
def list_ledgers(metadata: str, start: int, limit: int | None) -> None:
    """Print ledger ids from --start on, ascending, one per line. They are read a page at
    a time and printed as they come: a cluster of any size, in little memory."""
    client_security()  # not needed to read the store; a token given two ways is still an error

    async def run(store: MetadataStore) -> None:
        left = limit
        async for ids in iter_ledger_ids(store, start=start, page=min(LEDGER_PAGE, left or LEDGER_PAGE)):
            ids = ids if left is None else ids[:left]
            click.echo("\n".join(map(str, ids)))
            if left is not None:
                left -= len(ids)
                if left == 0:
                    return

    on_metadata_store(metadata, run)  # the store alone: no client, no bookie


@ledger.command()
@metadata_option()
@password_option("ledger")
@click.argument("ledger_id", type=int)
def close(metadata: str, password: str, ledger_id: int) -> None:
    """Close a ledger (fencing and recovering it if its writer did not close it)."""

    async def run(client: Client) -> int:
        reader = await client.open_ledger(ledger_id, password=password.encode(), recovery=True)
        return reader.lac

    click.echo(f"ledger {ledger_id} closed at entry {_run(metadata, run)}")


@ledger.command()
@metadata_option()
@click.argument("ledger_id", type=int)
def delete(metadata: str, ledger_id: int) -> None:
    """Delete a ledger's metadata (bookies reclaim its space)."""
    _run(metadata, lambda client: client.delete_ledger(ledger_id))
    click.echo(f"deleted ledger {ledger_id}")


@ledger.command()
@metadata_option()
@click.option("--json", "as_json", is_flag=True, help="Print the whole check as one JSON object.")
@click.argument("ledger_id", type=int)
def check(metadata: str, as_json: bool, ledger_id: int) -> None:
    """Which entries each replica bookie of each fragment holds (LIST_ENTRIES), marking
    missing entries and unreachable bookies. Exit status 0 when fully replicated, 2 when
    under-replicated (1 for errors)."""
    from bkframe.autorecovery.ledger_check import LedgerCheck, check_ledger, count, format_runs

    async def run(client: Client) -> LedgerCheck:
        return await check_ledger(client.pool, await client.ledger_metadata(ledger_id))

    result = _run(metadata, run)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2, sort_keys=True))
    else:
        click.echo(f"ledger {ledger_id}: {result.state}, entries 0..{result.last_entry}, write quorum {result.write_quorum}")
        for f in result.fragments:
            span = f"{f.first_entry}..{f.last_entry}" if f.last_entry >= f.first_entry else f"{f.first_entry}.. (empty)"
            click.echo(f"fragment {span}: {', '.join(f.ensemble)}")
            for r in f.replicas:
                held = r.expected - count(r.missing)
                if not r.reachable:
                    line = f"UNREACHABLE ({r.error}); should hold {r.expected}"
                elif r.missing:
                    line = f"holds {held}/{r.expected}, MISSING {format_runs(r.missing)}"
                else:
                    line = f"holds {held}/{r.expected}"
                click.echo(f"  {r.bookie_id}\t{line}{' (in limbo: being repaired)' if r.limbo else ''}")
            if f.under_replicated:
                click.echo(f"  under-replicated entries: {format_runs(f.under_replicated)}")
        click.echo(result.summary())
    if not result.fully_replicated:
        raise SystemExit(2)
