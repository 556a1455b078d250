"""``bkframe log offload`` and ``bkframe log configure``: a log's tiered-storage side (and
its compaction settings, which ``log configure`` changes too).

``log offload NAME --tier URI`` copies the log's closed segments to a tier by hand (see
:mod:`bkframe.tiering.offload`); ``log configure`` changes the offload settings that
``log create`` sets (when a segment may be offloaded, and how long its ledger stays on the
bookies after). docs/tiered-storage.md#offloading-a-log. :mod:`bkframe.cli.main` adds both
to the ``log`` group (this module imports :mod:`bkframe.cli.log`, which cannot import it back).
"""

from __future__ import annotations

import click

from bkframe.cli.compaction_options import compaction_line, compaction_settings, with_compaction_options
from bkframe.cli.log import _log_name, _position, run_on_logs
from bkframe.cli.offload_options import offload_settings, settings_line, with_offload_options
from bkframe.cli.options import metadata_option, password_option
from bkframe.client.logs.model import LogSettings


@click.command()
@metadata_option()
@password_option("log")
@click.argument("name", callback=_log_name)
@click.option("--tier", required=True, metavar="URI",
              help="The tier: file:///PATH or s3://BUCKET[/PREFIX]?... (credentials from the environment, never here).")
@click.option("--until", default=None, metavar="POS",
              help="Only segments whose every entry is before POS (default: every closed segment).")
def offload(metadata: str, password: str, name: str, tier: str, until: str | None) -> None:
    """Copy the log's closed segments to a tier, verify and record them (safe to run again).

    Each segment not offloaded yet becomes one Parquet object, checked entry by entry
    against its ledger, then recorded on the segment; readers read it from the tier from
    then on. The ledgers stay on the bookies (a tier that fails falls back to them)."""
    stop = _position(until, "--until") if until is not None else None
    result = run_on_logs(metadata, lambda logs: logs.offload(name, tier=tier, until=stop, password=password.encode()))
    for seg in result.offloaded:
        assert seg.offload is not None
        click.echo(f"segment {seg.number}: {seg.entries} entries -> {seg.offload.key} ({seg.offload.size} bytes)")
    skipped = f", {len(result.skipped)} skipped (trimmed meanwhile)" if result.skipped else ""
    click.echo(
        f"offloaded {len(result.offloaded)} segment(s) to {result.tier} ({result.object_bytes} bytes); "
        f"{result.already} were already{skipped}"
    )


@click.command()
@metadata_option()
@password_option("log")
@click.argument("name", callback=_log_name)
@with_offload_options(defaults=False)
@with_compaction_options(defaults=False)
def configure(
    metadata: str, password: str, name: str, offload_after: str | None, offload_beyond: str | None,
    offload_deletion_lag: str | None, offload_tier: str | None, compaction: str | None,
    min_compaction_lag: str | None, tombstone_retention: str | None, min_dirty_ratio: str | None,
) -> None:
    """Change a log's offload and compaction settings (those given; 'none' unsets an offload one)."""
    changes = offload_settings(offload_after, offload_beyond, offload_deletion_lag, offload_tier)
    changes.update(compaction_settings(compaction, min_compaction_lag, tombstone_retention, min_dirty_ratio))
    if not changes:
        raise click.UsageError("give a setting to change (see --help)")
    try:
        LogSettings(**changes)  # validated before any request
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    record = run_on_logs(metadata, lambda logs: logs.configure(name, password=password.encode(), **changes))
    click.echo(f"log {name}: {settings_line(record.settings)}; {compaction_line(record.settings)}")
