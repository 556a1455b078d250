"""``bkframe sub ...``: a log's subscriptions from the command line (docs/subscriptions.md)."""

from __future__ import annotations

import json
import sys
from typing import Any

import attrs
import click

from bkframe.cli.log import _log_name, _record_json, run_on_logs
from bkframe.cli.options import ClientGroup, F, metadata_option, password_option
from bkframe.client.logs.api import Logs
from bkframe.client.logs.model import LogEntry, check_name
from bkframe.subscriptions.consumer import Message
from bkframe.subscriptions.settings import STATE_LEDGER_TYPES


def _sub_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return check_name(value, "subscription")
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def _of_subscription(fn: F) -> F:
    """What every command on one subscription takes: LOG and NAME, the metadata store and
    the log's password."""
    # Innermost first, as stacked decorators apply: the help lists them in the usual order.
    for decorate in (
        click.argument("name", callback=_sub_name),
        click.argument("log", callback=_log_name),
        password_option("log"),
        metadata_option(),
    ):
        fn = decorate(fn)
    return fn


@click.group("sub", cls=ClientGroup)
def sub_group() -> None:
    """Subscriptions: a log's records shared by many consumers, each leased, acked once."""


@sub_group.command()
@_of_subscription
@click.option("--key-shared", is_flag=True, help="One key's records go to one consumer at a time, in log order.")
@click.option("--lease-s", type=click.FloatRange(min=0, min_open=True), default=30.0, show_default=True,
              help="How long a consumer holds a record before it is delivered to another.")
@click.option("--max-deliveries", type=click.IntRange(min=1), default=None,
              help="After this many deliveries without an ack, a record goes to --dead-letter.")
@click.option("--dead-letter", default=None, callback=lambda ctx, p, v: v and _log_name(ctx, p, v),
              help="The log records delivered --max-deliveries times go to (made when first needed).")
@click.option("--from", "start", default="earliest", show_default=True, help="POS, earliest or latest: the first record.")
@click.option("--state-ledger-type", type=click.Choice(STATE_LEDGER_TYPES), default="PD_JOURNAL",
              show_default=True,
              help="What a confirmed ack survives: PD_JOURNAL a power cut (fsynced); BYPASS_JOURNAL any process "
                   "crash, not a power cut of the bookies (faster).")
def create(
    metadata: str, password: str, log: str, name: str, key_shared: bool, lease_s: float, max_deliveries: int | None,
    dead_letter: str | None, start: str, state_ledger_type: str,
) -> None:
    """Create subscription NAME of LOG."""
    from bkframe.cli.log import _where

    where = _where(start, "--from")
    if max_deliveries is not None and dead_letter is None:
        click.echo("note: without --dead-letter, a record past --max-deliveries is delivered again", err=True)
    record = run_on_logs(metadata, lambda logs: logs.create_subscription(
        log, name, kind="key_shared" if key_shared else "shared", lease_s=lease_s, max_deliveries=max_deliveries,
        dead_letter=dead_letter, start=where, password=password.encode(), state_ledger_type=state_ledger_type,
    ))
    click.echo(f"created subscription {name} of log {log} ({record.settings.kind.value}) at {record.mark_delete}")


@sub_group.command()
@_of_subscription
@click.option("-n", "count", type=click.IntRange(min=1), default=None, help="Stop after N records.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object a line: position, key, payload, delivery_count, time, properties.")
@click.option("--prefetch", type=click.IntRange(min=1), default=16, show_default=True,
              help="Records leased at a time.")
@click.option("--idle-timeout", "idle_s", type=click.FloatRange(min=0), default=None,
              help="Stop once no record came for this long (s).")
def consume(
    metadata: str, password: str, log: str, name: str, count: int | None, as_json: bool, prefetch: int,
    idle_s: float | None,
) -> None:
    """Print each record as it is leased (flushed), then ack it; runs until interrupted, -n N
    records, or --idle-timeout. A record printed and not acked (the process was killed) is
    delivered again."""
    done = 0

    async def run(logs: Logs) -> int:
        nonlocal done
        async with await logs.subscribe(log, name, prefetch=prefetch, password=password.encode()) as sub:
            while count is None or done < count:
                msg = await sub.receive(timeout_s=idle_s)
                if msg is None:
                    break
                _print(msg, as_json)
                await msg.ack()
                done += 1
        return done

    run_on_logs(metadata, run)
    click.echo(f"consumed {done} record(s) of {log}/{name}", err=True)


def _print(msg: Message, as_json: bool) -> None:
    out = sys.stdout.buffer
    if as_json:
        entry = LogEntry(msg.position, 0, msg.payload, msg.key, msg.timestamp, msg.properties)
        line = json.loads(_record_json(entry))
        line["delivery_count"] = msg.delivery_count
        out.write(json.dumps(line, ensure_ascii=False).encode() + b"\n")
    else:
        out.write(str(msg.position).encode() + b"\t" + msg.payload + b"\n")
    out.flush()


@sub_group.command()
@_of_subscription
@click.option("--json", "as_json", is_flag=True, help="As one JSON object.")
def stats(metadata: str, password: str, log: str, name: str, as_json: bool) -> None:
    """Backlog, records in flight, waiting and delayed, deliveries, redeliveries, acks and dead letters."""
    found = run_on_logs(metadata, lambda logs: logs.subscription_stats(log, name, password=password.encode()))
    d: dict[str, Any] = attrs.asdict(found)
    d["mark_delete"] = str(found.mark_delete)
    if as_json:
        click.echo(json.dumps(d, sort_keys=True))
    else:
        for k, v in d.items():
            click.echo(f"{k}\t{v}")


@sub_group.command("list")
@metadata_option()
@click.argument("log", callback=_log_name)
def list_(metadata: str, log: str) -> None:
    """Each subscription of LOG: NAME, KIND, MARK-DELETE (as of its last snapshot), LEASE, MAX DELIVERIES, DEAD LETTER,
    STATE LEDGER TYPE."""
    for r in run_on_logs(metadata, lambda logs: logs.subscriptions(log)):
        s = r.settings
        fields = (r.name, s.kind.value, r.mark_delete, f"{s.lease_s:g}s", s.max_deliveries or "-", s.dead_letter or "-",
                  s.state_ledger_type)
        click.echo("\t".join(map(str, fields)))


@sub_group.command()
@metadata_option()
@click.argument("log", callback=_log_name)
@click.argument("name", callback=_sub_name)
def delete(metadata: str, log: str, name: str) -> None:
    """Delete subscription NAME of LOG and its state."""
    run_on_logs(metadata, lambda logs: logs.delete_subscription(log, name))
    click.echo(f"deleted subscription {name} of log {log}")
