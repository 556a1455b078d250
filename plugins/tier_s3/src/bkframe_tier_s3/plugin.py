"""The ``tier_s3`` plugin: registers the ``s3://BUCKET[/PREFIX]?...`` tier scheme."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bkframe import hookimpl
from bkframe.core.registry import ComponentRegistry

if TYPE_CHECKING:
    from bkframe_tier_s3.tier import S3Tier


def open_tier(uri: str) -> S3Tier:
    """The options are checked and the credentials file read now; the store is first
    reached by the first request."""
    # Imported here, not at the top: every plugin manager (each bookie, client and CLI
    # command) imports this module, and botocore takes a few hundred milliseconds to import.
    from bkframe_tier_s3.options import parse_uri
    from bkframe_tier_s3.tier import S3Tier

    return S3Tier(parse_uri(uri))


@hookimpl
def bkframe_register_components(registry: ComponentRegistry) -> None:
    registry.add_tier(
        "s3", open_tier,
        description="s3://BUCKET[/PREFIX]?endpoint=...&region=...&credentials=FILE: S3 and S3-compatible stores (AWS SDK)",
    )
