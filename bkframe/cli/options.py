"""Options several command groups share, declared once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

METADATA_ENV = "BKFRAME_METADATA"


def metadata_option(*, required: bool = True, help: str = "") -> Callable[[F], F]:
    """``--metadata URI`` (or ``$BKFRAME_METADATA``): the metadata store of the cluster."""
    return click.option(
        "--metadata",
        envvar=METADATA_ENV,
        required=required,
        help=help or f"Metadata store URI, e.g. sqlite:///path/meta.db (or ${METADATA_ENV}).",
    )


#: ``--password``: a ledger's password (empty by default, as the client's).
password_option = click.option("--password", default="", help="The ledger's password.")


#: ``click`` context meta key: the ``-v`` level and ``--log-format`` given to ``bkframe``
#: (None each when not given), which win over a bookie's ``[logging]`` section.
LOG_OVERRIDES = "bkframe.log_overrides"
