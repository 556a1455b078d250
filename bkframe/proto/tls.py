"""TLS between clients and bookies, and between bookies: the :class:`ssl.SSLContext` each
side makes of the ``[tls]`` config section (:class:`bkframe.core.config.TLSConfig`; see
docs/security.md), and how a bookie tells a TLS client from a plaintext one.

Both sides live beside the wire protocol because a bookie is also a client (limbo repair, recovery,
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

from bkframe.core.config import TLSConfig

#: The first byte of a TLS handshake record (a ClientHello starts with it).
TLS_HANDSHAKE = 0x16


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
