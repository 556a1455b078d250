"""``bkframe tier check``: a tier against the metadata, both ways.

Objects no log holds (orphans: shown with their size and age, deleted with
``--delete-orphans`` once older than ``--grace``), objects of live segments not recorded on
this tier (kept), and offloads the metadata records whose object is missing or of the wrong
size -- data at risk when the segment's ledger is deleted from the bookies: then the command
exits 1. The work is :func:`bkframe.tiering.sweep.sweep_tier`, the offload
service's orphan sweep. docs/tiered-storage.md#nothing-leaks.
"""

from __future__ import annotations

import json
import logging

import click

from bkframe.cli import interrupt
from bkframe.cli.options import client_security, duration, metadata_option, seconds
from bkframe.client.client import open_client
from bkframe.errors import TierError
from bkframe.tiering.sweep import DEFAULT_GRACE_S, TierFinding, TierSummary, sweep_tier


@click.group(name="tier")
def tier_group() -> None:
    """Object-store tiers of offloaded log segments (docs/tiered-storage.md)."""


@tier_group.command()
@metadata_option()
@click.option("--tier", "tier_uri", required=True, metavar="URI",
              help="The tier: file:///PATH or s3://BUCKET[/PREFIX]?... as the logs' offloads name it.")
@click.option("--delete-orphans", is_flag=True, help="Delete the orphans older than the grace.")
@click.option("--grace", default=None, metavar="DURATION",
              help=f"How old an orphan must be to be deleted (default {seconds(DEFAULT_GRACE_S)}: longer than any "
                   "offload takes from its put to its commit).")
@click.option("--json", "as_json", is_flag=True, help="One JSON document: the findings and the summary.")
def check(metadata: str, tier_uri: str, delete_orphans: bool, grace: str | None, as_json: bool) -> None:
    """Compare a tier with the logs' metadata: orphans, and recorded objects missing or wrong.

    Exits 1 when an offloaded segment whose ledger is no longer on the bookies has its
    object missing or of the wrong size (its data is at risk)."""
    grace_s = duration(grace, "--grace") if grace is not None else DEFAULT_GRACE_S
    quiet = logging.getLogger("bkframe.tiering")
    if quiet.getEffectiveLevel() >= logging.WARNING:  # not -v: the findings say it, once each
        quiet.setLevel(logging.ERROR)
    findings: list[TierFinding] = []

    def found(finding: TierFinding) -> None:
        if as_json:
            findings.append(finding)
        else:
            click.echo(_line(finding))

    async def main() -> TierSummary:
        async with open_client(metadata, **client_security()) as client:
            try:
                return await sweep_tier(client, tier_uri, grace_s=grace_s, delete=delete_orphans, on_finding=found)
            except TierError as e:
                raise click.ClickException(
                    f"{e}; check the tier's URI, credentials and that the store is reachable, then run the check again"
                ) from None

    summary = interrupt.run(main)
    if as_json:
        click.echo(json.dumps({"findings": [f.to_json() for f in findings], "summary": summary.to_json()}, indent=2))
    else:
        click.echo(_summary(summary, delete_orphans))
    if summary.at_risk:
        raise click.ClickException(
            f"{summary.at_risk} offloaded segment(s) are only in this tier and their object is missing or damaged: "
            "restore the objects listed above (AT RISK) from a backup of the tier"
        )


def _line(f: TierFinding) -> str:
    parts = [f"{f.size} bytes"]
    if f.kind != "missing":
        parts.append(f"{seconds(f.age_s)} old")
    if f.log is not None:
        parts.append(f"log {f.log!r} segment {f.segment}")
    risk = " AT RISK" if f.at_risk else ""
    return f"{f.kind}{risk}\t{f.key}\t{', '.join(parts)}: {f.detail}"


def _summary(s: TierSummary, deleting: bool) -> str:
    waiting = s.orphans - s.deleted
    orphans = f"{s.orphans} orphan(s) of {s.orphan_bytes} bytes"
    if deleting:
        orphans += f" ({s.deleted} deleted, {waiting} left: {s.young} younger than the {seconds(s.grace_s)} grace)"
    elif s.orphans:
        orphans += (f" ({s.orphans - s.young} past the {seconds(s.grace_s)} grace: --delete-orphans deletes them; "
                    f"{s.young} younger)")
    other = f"; offloads on other tiers: {', '.join(s.other_tiers)}" if s.other_tiers else ""
    return (
        f"tier {s.tier}: {s.objects} object(s), {s.bytes} bytes; {s.logs} log(s), {s.recorded} offload(s) recorded "
        f"on this tier; {orphans}; {s.unrecorded} unrecorded; {s.missing} missing or wrong-size ({s.at_risk} at risk)"
        f"{other}; {s.elapsed_s:.1f} s"
    )
