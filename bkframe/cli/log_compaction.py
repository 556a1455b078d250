"""``bkframe log compact``: one compaction of a log by key (docs/compaction.md)."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import click

from bkframe.cli.log import _log_name, run_on_logs
from bkframe.cli.options import metadata_option, password_option


@click.command()
@metadata_option()
@password_option("log")
@click.argument("name", callback=_log_name)
@click.option("--memory", "memory_mb", type=click.IntRange(min=1), default=64, show_default=True,
              help="Memory (MiB) for the key index; beyond it, the index spills to --work-dir.")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the key index spills (default: a temporary directory).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A bookie TOML config whose [offload] section holds the cluster's defaults of the settings the log "
              "leaves unset (compaction_lag_s, tombstone_retention_s; default: the built-in ones).")
@click.option("--json", "as_json", is_flag=True, help="Print what it did as one JSON object.")
def compact(
    metadata: str, password: str, name: str, memory_mb: int, work_dir: Path | None, config_path: Path | None,
    as_json: bool,
) -> None:
    """Compact the log by key once: in its closed segments older than its lag, drop every
    keyed record a later one of the same key replaced. Positions stay; the log must have
    --compaction key (log configure)."""
    defaults = None
    if config_path is not None:
        from bkframe.compaction.service import defaults_of
        from bkframe.core.config import load_config

        try:
            defaults = defaults_of(load_config(config_path).offload)
        except (OSError, ValueError) as e:
            raise click.ClickException(f"config {config_path}: {e}") from None
    result = run_on_logs(
        metadata,
        lambda logs: logs.compact(
            name, password=password.encode(), work_dir=work_dir, memory_bytes=memory_mb << 20, defaults=defaults
        ),
    )
    if as_json:
        out = attrs.asdict(result)
        out["end"] = str(result.end)
        click.echo(json.dumps(out, sort_keys=True))
        return
    click.echo(
        f"compacted log {name} up to {result.end}: {result.segments_read} segment(s) read, "
        f"{len(result.rewritten)} rewritten; dropped {result.records_dropped} of {result.records_read} record(s) "
        f"({result.bytes_dropped} of {result.bytes_read} bytes); {result.keys} key(s), "
        f"{result.tombstones} tombstone(s) ({result.tombstones_dropped} dropped)"
        + (f"; {len(result.skipped)} segment(s) changed meanwhile, left as they were" if result.skipped else "")
        + (f"; {result.retired} replaced ledger(s) deleted" if result.retired else "")
    )
