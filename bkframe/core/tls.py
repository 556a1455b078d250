"""TLS between clients and bookies, and between bookies: the ``[tls]`` config section and
the :class:`ssl.SSLContext` each side makes of it (see docs/security.md).

Both sides live in the core because a bookie is also a client (limbo repair, recovery,
re-replication): its own connections to other bookies use the same certificate, key and CA
as its server, so one ``[tls]`` section secures both directions.

A connection's first bytes tell whether its peer speaks TLS: a TLS connection starts with
a handshake record (byte 0x16, then the version 0x03 0x0N), a bkframe frame with its
length (little-endian u32). :func:`looks_like_tls` is how a bookie tells a plaintext client
from a TLS one and answers each with a clear error instead of a hang.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import attrs

from bkframe.errors import ConfigError

#: The first byte of a TLS handshake record (a ClientHello starts with it).
TLS_HANDSHAKE = 0x16


@attrs.frozen
class TLSConfig:
    """``[tls]``: a bookie's certificate for its server and for its own client connections."""

    #: Serve TLS only: plaintext clients are refused with a clear error.
    enabled: bool = False
    #: PEM certificate chain of this bookie (the server certificate; also presented as the
    #: client certificate when this bookie connects to other bookies).
    cert: Path = attrs.field(default=Path(), converter=Path)
    #: PEM private key of ``cert``.
    key: Path = attrs.field(default=Path(), converter=Path)
    #: PEM CA bundle that signs clients' certificates (with ``require_client_cert``) and the
    #: other bookies' certificates (for this bookie's own client connections).
    ca: Path = attrs.field(default=Path(), converter=Path)
    #: Refuse clients that present no certificate signed by ``ca`` (mutual TLS; needed by
    #: the ``tls`` auth provider, which takes the principal from that certificate).
    require_client_cert: bool = False

    def check(self, where: str) -> None:
        """Clear errors for a section that cannot work, before the bookie starts."""
        if not self.enabled:
            return
        for name in ("cert", "key", "ca"):
            path: Path = getattr(self, name)
            if path == Path():
                raise ConfigError(f"{where}: enabled = true needs {name} (a PEM file)")
            if not path.is_file():
                raise ConfigError(f"{where}: {name} = {str(path)!r} is not a file")


def server_context(config: TLSConfig) -> ssl.SSLContext:
    """The context a TLS bookie serves with."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(config.ca))
    context.load_cert_chain(str(config.cert), str(config.key))
    context.verify_mode = ssl.CERT_REQUIRED if config.require_client_cert else ssl.CERT_OPTIONAL
    return context


def client_context(ca: str | Path, cert: str | Path = "", key: str | Path = "") -> ssl.SSLContext:
    """The context a client connects with: bookies' certificates must be signed by ``ca``
    and name the address the client connects to; ``cert`` and ``key`` are the client's own
    certificate (for bookies that require one)."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca))
    if cert:
        context.load_cert_chain(str(cert), str(key) if key else None)
    return context


def looks_like_tls(first: bytes) -> bool:
    """Whether a connection's first three bytes are a TLS handshake record header.

    As a frame header they would be a frame of 16 MiB or more whose length is 0x??0N0316
    (N = 1..4): a bkframe client's first frame (an AUTH message) is never one.
    """
    return len(first) >= 3 and first[0] == TLS_HANDSHAKE and first[1] == 0x03 and 0x01 <= first[2] <= 0x04


def peer_principal(certificate: dict[str, object] | None) -> str:
    """A client certificate's subject as ``CN=alice,O=example`` ("" without a certificate)."""
    if not certificate:
        return ""
    parts = []
    for rdn in certificate.get("subject", ()):  # type: ignore[attr-defined]
        for name, value in rdn:
            short = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
                     "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST"}.get(name, name)
            parts.append(f"{short}={value}")
    return ",".join(parts)
