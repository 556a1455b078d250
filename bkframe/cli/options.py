"""Options several command groups share, declared once."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
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


#: Environment variables every client command reads for TLS and authentication (bkframe
#: bench also takes them as options): the CA, the client certificate and key, a token file.
SECURITY_ENV = {
    "tls_ca": "BKFRAME_TLS_CA",
    "tls_cert": "BKFRAME_TLS_CERT",
    "tls_key": "BKFRAME_TLS_KEY",
    "auth_token_file": "BKFRAME_AUTH_TOKEN_FILE",
}


def client_security(**given: str | Path | None) -> dict[str, Any]:
    """``open_client`` keywords for TLS and the token: each of ``tls_ca``, ``tls_cert``,
    ``tls_key`` and ``auth_token_file`` as given, else from its environment variable. The
    token is read from its file, never taken on the command line (where ``ps`` shows it)."""
    values = {key: given.get(key) or os.environ.get(env, "") for key, env in SECURITY_ENV.items()}
    out: dict[str, Any] = {k: str(values[k]) for k in ("tls_ca", "tls_cert", "tls_key") if values[k]}
    if values["auth_token_file"]:
        try:
            out["auth_token"] = Path(values["auth_token_file"]).read_text().strip()
        except OSError as e:
            raise click.BadParameter(f"cannot read the token file: {e}", param_hint="--auth-token-file") from None
    return out
