"""``bkframe log ...``: named logs from the command line."""

from __future__ import annotations

import base64
import json
import re
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar, cast

import attrs
import click

from bkframe.cli import interrupt
from bkframe.cli.compaction_options import compaction_line, compaction_settings, with_compaction_options
from bkframe.cli.interrupt import release_log
from bkframe.cli.metadata_only import on_metadata_store
from bkframe.cli.offload_options import offload_settings, offloaded_line, settings_line, with_offload_options
from bkframe.cli.options import (
    DURATION,
    UNITS,
    ClientGroup,
    client_security,
    metadata_option,
    password_option,
)
from bkframe.cli.options import duration as _duration
from bkframe.cli.options import seconds as _seconds
from bkframe.client.logs.model import EARLIEST, LogEntry, LogSettings, Position, Where, check_name, parse_where
from bkframe.common.cluster_record import require_cluster

if TYPE_CHECKING:  # the client (numpy, trio...) is imported by the commands that open one, not by `log list`
    from bkframe.client.logs.api import CursorInfo, Logs
    from bkframe.client.logs.pending import PendingLogAppend
    from bkframe.client.logs.reader import LogReader
    from bkframe.core.interfaces.metadata_store import MetadataStore

T = TypeVar("T")

#: Log names ``log list`` reads per request.
LIST_PAGE = 1000
#: ``bkframe log append`` publishes its LAC this soon after the input pauses, so a tail
#: shows the last line without waiting for the next one.
APPEND_LAC_INTERVAL_S = 0.2


def run_on_logs(metadata: str, fn: Callable[[Logs], Awaitable[T]], *, explicit_lac_interval_s: float = 0.0) -> T:
    """Run ``fn`` on the logs of a client of ``metadata`` (TLS and token from the command line or
    the environment); a signal stops ``fn``, never the client under it."""
    from bkframe.client.client import open_client

    async def main() -> T:
        async with open_client(
            metadata, explicit_lac_interval_s=explicit_lac_interval_s, **client_security()
        ) as client:
            with interrupt.work():  # a signal cancels the command, never the client under it
                return await fn(client.logs)
            return cast(T, None)  # stopped by a signal: interrupt.run exits

    return interrupt.run(main)


def _log_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return check_name(value, "cursor" if param.name == "cursor" else "log")
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def _where(text: str, option: str) -> Position | str:
    try:
        return parse_where(text)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint=option) from None


def _position(text: str, option: str) -> Position:
    try:
        return Position.parse(text)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint=option) from None


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S") if t else "-"


@click.group(name="log", cls=ClientGroup)
def log_group() -> None:
    """Named logs: unbounded streams made of ledgers, with one writer, cursors and retention."""


@log_group.command()
@metadata_option()
@click.argument("name", callback=_log_name)
@click.option("-e", "--ensemble", type=int, default=3, show_default=True)
@click.option("-w", "--write-quorum", type=int, default=2, show_default=True)
@click.option("-a", "--ack-quorum", type=int, default=2, show_default=True)
@click.option("--type", "ledger_type", default="PD_JOURNAL", show_default=True, help="Ledger type of the segments.")
@click.option("--digest", type=click.Choice(["CRC32C", "HMAC_SHA256"]), default="CRC32C", show_default=True)
@click.option("--rollover-entries", type=int, default=LogSettings().rollover_entries, show_default=True)
@click.option("--rollover-bytes", type=int, default=LogSettings().rollover_bytes, show_default=True)
@click.option("--rollover-s", type=DURATION, default=LogSettings().rollover_s, show_default=True,
              help="Start a new segment after this long (seconds, or a duration such as 4h).")
@click.option("--retention-s", type=DURATION, default=None,
              help="Trim closed segments older than this (seconds, or a duration such as 7d).")
@click.option("--retention-bytes", type=int, default=None, help="Trim the oldest closed segments beyond this size.")
@click.option("--cursor-ttl", default=None, metavar="DURATION",
              help="A cursor idle this long (e.g. 7d, 12h) stops holding retention back (default: never).")
@with_offload_options(defaults=True)
@with_compaction_options(defaults=True)
@password_option("log")
def create(
    metadata: str, name: str, ensemble: int, write_quorum: int, ack_quorum: int, ledger_type: str, digest: str,
    rollover_entries: int, rollover_bytes: int, rollover_s: float, retention_s: float | None,
    retention_bytes: int | None, cursor_ttl: str | None, offload_after: str | None, offload_beyond: str | None,
    offload_deletion_lag: str | None, offload_tier: str | None, compaction: str | None,
    min_compaction_lag: str | None, tombstone_retention: str | None, min_dirty_ratio: str | None, password: str,
) -> None:
    """Create an empty log."""
    ttl = _duration(cursor_ttl, "--cursor-ttl") if cursor_ttl is not None else None
    offloads = offload_settings(offload_after, offload_beyond, offload_deletion_lag, offload_tier)
    compactions = compaction_settings(compaction, min_compaction_lag, tombstone_retention, min_dirty_ratio)
    try:
        settings = LogSettings(
            ensemble=ensemble, write_quorum=write_quorum, ack_quorum=ack_quorum, ledger_type=ledger_type,
            digest=digest, rollover_entries=rollover_entries, rollover_bytes=rollover_bytes, rollover_s=rollover_s,
            retention_s=retention_s, retention_bytes=retention_bytes, cursor_ttl_s=ttl, **offloads, **compactions,
        )
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    run_on_logs(metadata, lambda logs: logs.create(name, settings, password=password.encode()))
    click.echo(f"created log {name}")


def _properties(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for text in values:
        name, sep, value = text.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{text!r}: write NAME=VALUE", param_hint="--property")
        out[name] = value
    return out


def _cursor_state(c: CursorInfo) -> str:
    return "expired" if c.expired else "active"


def _since(text: str | None, option: str) -> datetime | None:
    """A time on the command line: ISO 8601 (UTC unless it gives an offset), milliseconds
    since the epoch, or an age ago (``90s``, ``15m``, ``2h``, ``7d``)."""
    if text is None:
        return None
    word = text.strip()
    ago = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd])", word)
    if ago:
        seconds = float(ago.group(1)) * UNITS[ago.group(2)]
        return datetime.now(UTC) - timedelta(seconds=seconds)
    if word.isdigit():
        return datetime.fromtimestamp(int(word) / 1000, UTC)
    try:
        when = datetime.fromisoformat(word)
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: write a time as 2026-11-26T10:00:00 (UTC unless it has an offset such as +01:00), "
            f"milliseconds since the epoch, or an age such as 15m, 2h or 7d",
            param_hint=option,
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


@log_group.command()
@metadata_option()
@password_option("log")
@click.argument("name", callback=_log_name)
@click.option("--key", default=None, help="Give every record this key.")
@click.option("--key-separator", default=None, help="Each line is KEY<SEP>PAYLOAD (split at the first SEP).")
@click.option("--property", "properties", multiple=True, callback=_properties, metavar="NAME=VALUE",
              help="Give every record this property (repeatable).")
def append(
    metadata: str, password: str, name: str, key: str | None, key_separator: str | None, properties: dict[str, str]
) -> None:
    """Each stdin line becomes one record; prints each record's position once acknowledged.
    Takes the log over from any other writer; closes its segment at end of input."""
    if key is not None and key_separator is not None:
        raise click.UsageError("give --key (one key for every line) or --key-separator (a key per line), not both")
    fixed_key = key.encode() if key is not None else None
    sep = key_separator.encode() if key_separator is not None else None
    if sep == b"":
        raise click.BadParameter("the separator is empty", param_hint="--key-separator")

    async def run(logs: Logs) -> None:
        writer = await logs.open_writer(name, password=password.encode())

        def append_line(line: bytes) -> PendingLogAppend:
            if sep is None:
                return writer.append_async(line, key=fixed_key, properties=properties or None)
            record_key, found, payload = line.partition(sep)
            if not found:  # a line without the separator: a record without a key
                return writer.append_async(line, properties=properties or None)
            return writer.append_async(payload, key=record_key, properties=properties or None)

        from bkframe.cli.stdin_lines import append_lines

        try:
            refused = await append_lines(append_line)
        finally:
            if interrupt.interrupted():
                await release_log(writer)
        if interrupt.interrupted():
            return
        await writer.close()
        if refused is not None:
            raise refused

    run_on_logs(metadata, run, explicit_lac_interval_s=APPEND_LAC_INTERVAL_S)


@attrs.frozen
class Show:
    """What ``log read`` and ``log tail`` print of each record."""

    positions: bool = False
    keys: bool = False
    timestamps: bool = False
    as_json: bool = False


def _show_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        (
            click.option("--positions", "show_positions", is_flag=True, help="Print POSITION<TAB> first."),
            click.option("--keys", "show_keys", is_flag=True, help="Print each record's key (or -)<TAB>."),
            click.option("--timestamps", "show_timestamps", is_flag=True,
                         help="Print each record's time (ISO 8601, UTC)<TAB>."),
            click.option("--json", "as_json", is_flag=True,
                         help="One JSON object per record: position, timestamp (ms), time, key, properties, payload."),
        )
    ):
        fn = option(fn)
    return fn


def _text_or_b64(data: bytes, name: str) -> dict[str, str]:
    try:
        return {name: data.decode()}
    except UnicodeDecodeError:
        return {f"{name}_base64": base64.b64encode(data).decode()}


def _record_json(entry: LogEntry) -> bytes:
    out: dict[str, Any] = {"position": str(entry.position), "timestamp": entry.timestamp}
    out["time"] = _iso(entry.timestamp) if entry.timestamp is not None else None
    if entry.key is not None:
        out.update(_text_or_b64(entry.key, "key"))
    else:
        out["key"] = None
    out["properties"] = dict(entry.properties)
    out.update(_text_or_b64(entry.payload, "payload"))
    return json.dumps(out, ensure_ascii=False).encode() + b"\n"


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _print_entries(show: Show, entries: list[LogEntry]) -> None:
    out = sys.stdout.buffer
    for entry in entries:
        if show.as_json:
            out.write(_record_json(entry))
            continue
        if show.positions:
            out.write(str(entry.position).encode() + b"\t")
        if show.timestamps:
            out.write((_iso(entry.timestamp) if entry.timestamp is not None else "-").encode() + b"\t")
        if show.keys:
            out.write((entry.key if entry.key is not None else b"-") + b"\t")
        out.write(entry.payload + b"\n")
    out.flush()


def _start(start: str | None, since: str | None) -> Where:
    if start is not None and since is not None:
        raise click.UsageError("give --from (a position) or --since (a time), not both")
    when = _since(since, "--since")
    return when if when is not None else _where(start if start is not None else EARLIEST, "--from")


@log_group.command()
@metadata_option()
@password_option("log")
@click.argument("name", callback=_log_name)
@click.option("--from", "start", default=None, help="POS (e.g. 3:41), earliest or latest  [default: earliest]")
@click.option("--since", default=None, help="From the first record at or after this time (ISO 8601, ms, or 15m ago).")
@click.option("--to", "last", default=None, help="Last position to print (default: the last confirmed entry).")
@click.option("--compacted", is_flag=True,
              help="Print the log as a table: each key's latest record (none for a deleted key) and every record "
              "without a key, in log order.")
@_show_options
def read(
    metadata: str, password: str, name: str, start: str | None, since: str | None, last: str | None,
    compacted: bool, show_positions: bool, show_keys: bool, show_timestamps: bool, as_json: bool,
) -> None:
    """Print the confirmed records from --from (or --since) to --to, one per line."""
    first = _start(start, since)
    end = _position(last, "--to").next() if last is not None else None
    show = Show(show_positions, show_keys, show_timestamps, as_json)

    async def run(logs: Logs) -> None:
        reader = await logs.reader(name, password=password.encode())
        async for chunk in reader.chunks(first, end, compacted=compacted):
            _print_entries(show, chunk)

    run_on_logs(metadata, run)


#: ``log tail`` without --from or --since prints this many of the last records, as tail(1) does.
TAIL_LINES = 10


async def _last_records(reader: LogReader, count: int, end: Position) -> Position:
    """The position ``count`` confirmed records before ``end`` (the log's start if it holds fewer)."""
    left = count
    parts = await reader.snapshot(EARLIEST, end)
    for part in reversed(parts):
        if part.entries >= left:
            return Position(part.segment, part.last + 1 - left)
        left -= part.entries
    return Position(parts[0].segment, parts[0].first) if parts else end


@log_group.command()
@metadata_option()
@password_option("log")
@click.argument("name", callback=_log_name)
@click.option("-n", "--lines", type=click.IntRange(min=0), default=None,
              help=f"Start at the last N records (without --from or --since)  [default: {TAIL_LINES}]")
@click.option("--from", "start", default=None, help="POS (e.g. 3:41), earliest or latest: start there instead.")
@click.option("--since", default=None, help="From the first record at or after this time (ISO 8601, ms, or 15m ago).")
@click.option("-f", "--follow", is_flag=True, help="Keep waiting for new entries (until interrupted).")
@click.option("--cursor", default=None, callback=lambda ctx, param, value: value and _log_name(ctx, param, value),
              help="Consume on this durable cursor: start where it is (a new one: where the tail would) and "
              "acknowledge each record once printed, so that the next run resumes after the last one.")
@_show_options
def tail(
    metadata: str, password: str, name: str, lines: int | None, start: str | None, since: str | None, follow: bool,
    cursor: str | None, show_positions: bool, show_keys: bool, show_timestamps: bool, as_json: bool,
) -> None:
    """Print the last records of the log, as tail(1) and Kafka's console consumer do: the last
    10 (-n N), or from --from (earliest: every record) or --since on; with -f, then follow
    the log across segments as it grows. Ctrl-C stops it (with --cursor, its acks stored)."""
    if lines is not None and (start is not None or since is not None):
        raise click.UsageError("give -n (the last N records) or --from/--since (a starting point), not both")
    first: Where | None = None if start is None and since is None else _start(start, since)
    show = Show(show_positions, show_keys, show_timestamps, as_json)

    async def run(logs: Logs) -> None:
        import trio

        reader = await logs.reader(name, password=password.encode())
        # One end for both the start and a dump, so -n N prints N even while writers append.
        end = await reader.end()
        if cursor is not None and cursor in {c.name for c in await logs.cursors(name)}:
            if lines is not None or first is not None:
                raise click.UsageError(
                    f"cursor {cursor} exists and says where to start: give no -n, --from or --since "
                    f"(move it with 'bkframe log cursor {name} {cursor} --to POS')"
                )
            begin: Where = (await logs.cursor(name, cursor)).position
        else:
            begin = first if first is not None else await _last_records(reader, TAIL_LINES if lines is None else lines, end)
            if cursor is not None:
                begin = (await logs.create_cursor(name, cursor, begin, password=password.encode())).position
        printed: list[Position] = []  # the last position printed, and how many: for the line a signal prints
        count = 0
        try:
            async for chunk in reader.tail_chunks(begin) if follow else reader.chunks(begin, end):
                _print_entries(show, chunk)
                if chunk:
                    printed[:] = [chunk[-1].position]
                    count += len(chunk)
                if cursor is not None and chunk:
                    with trio.CancelScope(shield=True):  # printed, so acknowledged: never one without the other
                        await logs.ack(name, cursor, chunk[-1].position)
        finally:
            if cursor is None and interrupt.interrupted():  # (with --cursor: where it resumes, below)
                last = f" (the last at {printed[0]})" if printed else ""
                interrupt.closed(f"stopped reading log {name} after {count} record{'s' if count != 1 else ''}{last}")
            if cursor is not None and interrupt.interrupted():
                with interrupt.closing():
                    stored = await logs.cursor(name, cursor)  # stores this run's acks first
                    interrupt.closed(f"cursor {cursor} stored: it resumes at {stored.position}")

    run_on_logs(metadata, run)


@log_group.command(name="list")
@metadata_option()
def list_logs(metadata: str) -> None:
    """Print every log name, one per line."""
    client_security()  # not needed to read the store; a token given two ways is still an error

    async def run(store: MetadataStore) -> None:
        await require_cluster(store)
        # A page at a time: a cluster may hold 10^5 logs.
        start = ""
        while page := await store.list_logs(start=start, limit=LIST_PAGE):
            for name in page:
                click.echo(name)
            if len(page) < LIST_PAGE:
                break
            start = page[-1] + "\0"

    on_metadata_store(metadata, run)  # the store alone: no client, no bookie (docs/benchmarks/process-costs.md)


@log_group.command()
@metadata_option()
@password_option("log")
@click.argument("name", callback=_log_name)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def info(metadata: str, password: str, name: str, as_json: bool) -> None:
    """Settings, segments (entries, bytes, state: open, closed or offloaded to a tier), what is
    offloaded, the confirmed end and cursors with their lag."""
    result = run_on_logs(metadata, lambda logs: logs.info(name, password=password.encode()))
    md = result.metadata
    if as_json:
        out = json.loads(md.serialize())
        out.update(
            version=md.version,
            segments=[s.to_json() for s in result.segments],
            start=str(md.start),
            end=str(result.end),
            entries={str(k): v for k, v in result.entries.items()},
            offloaded=attrs.asdict(result.offloaded),
            cursors={
                c.cursor.name: {
                    "position": str(c.cursor.position), "lag": c.lag, "idle_s": round(c.idle_s, 3), "ttl_s": c.ttl_s,
                    "expired": c.expired,
                }
                for c in result.cursors
            },
        )
        click.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    s = md.settings
    click.echo(f"log {md.name}: {s.ledger_type} E={s.ensemble} W={s.write_quorum} A={s.ack_quorum} {s.digest.value}")
    click.echo(
        f"rollover: {s.rollover_entries} entries, {s.rollover_bytes} bytes, {_seconds(s.rollover_s)}; "
        f"retention: {_seconds(s.retention_s)}, "
        f"{'-' if s.retention_bytes is None else f'{s.retention_bytes} bytes'}; "
        f"cursor TTL: {_seconds(s.cursor_ttl_s) if s.cursor_ttl_s is not None else 'none'}"
    )
    click.echo(settings_line(s))
    click.echo(compaction_line(s))
    click.echo(f"writer: {md.writer or '-'} (epoch {md.writer_epoch}); start {md.start}, end {result.end}")
    click.echo(
        f"entries: {sum(result.entries.values())} in {len(result.segments)} segment(s), {md.length} bytes closed; "
        f"trimmed so far: {md.trimmed_entries} entries, {md.trimmed_bytes} bytes"
    )
    click.echo(offloaded_line(result))
    click.echo("segment\tledger\tstate\tentries\tbytes\tcreated\tclosed\trecords from\trecords to")
    for seg in result.segments:
        state = ("offloaded" if seg.offload is not None else "closed") if seg.closed else "open"
        if seg.compacted is not None:
            state += f" (compacted, {seg.compacted.kept} kept)"
        size = str(seg.length) if seg.closed else "-"
        known = seg.max_ts >= 0
        click.echo(
            f"{seg.number}\t{seg.ledger_id}\t{state}\t{result.entries.get(seg.number, 0)}\t{size}\t"
            f"{_when(seg.created_at)}\t{_when(seg.closed_at)}\t"
            f"{_when(seg.min_ts / 1000) if known else '-'}\t{_when(seg.max_ts / 1000) if known else '-'}"
        )
    for c in result.cursors:
        click.echo(
            f"cursor {c.cursor.name}: at {c.cursor.position}, lag {c.lag} entries, idle {_seconds(c.idle_s)}, "
            f"TTL {_seconds(c.ttl_s)}, {_cursor_state(c)}"
        )


@log_group.command()
@metadata_option()
@password_option("log")
@click.argument("name", callback=_log_name)
def cursors(metadata: str, password: str, name: str) -> None:
    """Each cursor: NAME, POSITION, LAG (confirmed entries it has not acknowledged), IDLE (since
    it last moved), TTL and whether it is active or expired (no longer holding retention back),
    tab-separated."""
    for c in run_on_logs(metadata, lambda logs: logs.cursor_infos(name, password=password.encode())):
        click.echo(
            f"{c.cursor.name}\t{c.cursor.position}\t{c.lag}\t{_seconds(c.idle_s)}\t{_seconds(c.ttl_s)}\t{_cursor_state(c)}"
        )


@log_group.command()
@metadata_option()
@password_option("log")
@click.argument("name", callback=_log_name)
@click.argument("cursor", callback=_log_name)
@click.option("--to", "target", default=None, help="Move it to POS, earliest or latest (made there if new).")
@click.option("--to-time", "to_time", default=None,
              help="Move it to the first record at or after this time (ISO 8601, ms, or an age such as 15m).")
@click.option("--rewind", is_flag=True, help="Allow moving it back.")
@click.option("--ttl", default=None, metavar="DURATION|none",
              help="Idle this long (e.g. 7d), it stops holding retention back; 'none': the log's cursor TTL.")
@click.option("--delete", "remove", is_flag=True, help="Delete the cursor.")
def cursor(
    metadata: str, password: str, name: str, cursor: str, target: str | None, to_time: str | None, rewind: bool,
    ttl: str | None, remove: bool,
) -> None:
    """Show, create, move or delete a durable cursor (every entry before its position is acknowledged)."""
    if target is not None and to_time is not None:
        raise click.UsageError("give --to (a position) or --to-time (a time), not both")
    where: Where | None = _where(target, "--to") if target is not None else _since(to_time, "--to-time")
    ttl_s = None if ttl is None or ttl.strip().lower() == "none" else _duration(ttl, "--ttl")

    async def run(logs: Logs) -> str:
        if remove:
            await logs.delete_cursor(name, cursor)
            return f"deleted cursor {cursor}"
        existing = {c.name for c in await logs.cursors(name)}
        if cursor not in existing:
            made = await logs.create_cursor(name, cursor, where or EARLIEST, password=password.encode(), ttl_s=ttl_s)
            return f"{cursor}\t{made.position}"
        if ttl is not None:
            await logs.set_cursor_ttl(name, cursor, ttl_s)
        if where is not None:
            moved = await logs.move_cursor(name, cursor, where, rewind=rewind, password=password.encode())
            return f"{cursor}\t{moved.position}"
        return f"{cursor}\t{(await logs.cursor(name, cursor)).position}"

    click.echo(run_on_logs(metadata, run))


@log_group.command()
@metadata_option()
@click.argument("name", callback=_log_name)
@click.option("--before", default=None, help="Remove the segments whose every entry is before POS.")
@click.option("--retention", is_flag=True, help="Remove what the log's retention settings let go.")
@click.option("--force", is_flag=True, help="Also past cursors (they are moved to the new start).")
def trim(metadata: str, name: str, before: str | None, retention: bool, force: bool) -> None:
    """Remove whole segments from the start of the log and delete their ledgers; never past a
    cursor unless --force."""
    if before is None and not retention:
        raise click.UsageError("say what to trim: --before POS and/or --retention")
    until = _position(before, "--before") if before is not None else None
    result = run_on_logs(metadata, lambda logs: logs.trim(name, before=until, retention=retention, force=force))
    removed = ", ".join(f"{s.number} (ledger {s.ledger_id}, {s.entries} entries)" for s in result.removed)
    click.echo(f"removed segments: {removed or 'none'}; the log starts at {result.start}")
    if result.moved_cursors:
        click.echo(f"moved cursors to the start: {', '.join(result.moved_cursors)}")


@log_group.command()
@metadata_option()
@click.argument("name", callback=_log_name)
def delete(metadata: str, name: str) -> None:
    """Delete the log, its cursors and all its ledgers."""
    record = run_on_logs(metadata, lambda logs: logs.delete(name))
    click.echo(f"deleted log {name} ({record.segment_count} segment(s))")
