"""The environment variables the command line reads, by name: the command line's options
take them, and the launcher keeps them from the bookie processes it starts (a bookie must
not serve another cluster's store, or a user's password, because the shell that started
the sandbox had them set)."""

from __future__ import annotations

METADATA_ENV = "BKFRAME_METADATA"

#: The environment variables a password and a token may come from (instead of a flag, which
#: ``ps`` shows to every user of the machine).
PASSWORD_ENV = "BKFRAME_PASSWORD"
AUTH_TOKEN_ENV = "BKFRAME_AUTH_TOKEN"

#: Environment variables every client command reads for TLS and authentication (bkframe
#: bench also takes them as options): the CA, the client certificate and key, a token file.
SECURITY_ENV = {
    "tls_ca": "BKFRAME_TLS_CA",
    "tls_cert": "BKFRAME_TLS_CERT",
    "tls_key": "BKFRAME_TLS_KEY",
    "auth_token_file": "BKFRAME_AUTH_TOKEN_FILE",
}
