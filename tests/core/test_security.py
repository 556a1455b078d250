"""TLS and authentication on real bookie processes: each wrong client is refused with a
clear error (never a hang), a correct one writes and reads, requests before AUTH touch no
ledger, and no secret reaches the bookie's log even at DEBUG.

Certificates are made at test time (``trustme``): one CA signs the bookies' certificates
(for 127.0.0.1) and the client's (``CN=alice``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import trio
import trustme

import bkframe
from bkframe import ClientSettings, ConfigError, UnauthorizedError
from bkframe.client.bookies.connection import connect_bookie
from bkframe.client.bookies.errors import BookieConnectionError
from bkframe.core.config import load_config
from bkframe.core.interfaces.auth import AuthenticationError, Peer
from bkframe.core.plugin_manager import PluginManager
from bkframe.plugins.auth import TLSAuth, TLSAuthConfig, TokenAuth, TokenConfig
from bkframe.proto.codes import FRAME_HEADER, Status
from bkframe.proto.frames import pack_frame
from bkframe.proto.ops.add import encode_add
from bkframe.proto.ops.connection_setup import AuthRequest
from bkframe.proto.ops.read import encode_read
from bkframe.proto.table import Response, decode_responses
from bkframe.proto.tls import client_context
from bkframe.testing.backends import on_both_backends

TOKEN = "s3cret-token-for-tests-91d2"
PASSWORD = b"ledger-password-7f3a"
#: Refusals must come at once: far below the connect timeout, so a timeout never passes for one.
NO_HANG_S = 8.0


class Certs:
    def __init__(self, root: Path) -> None:
        ca = trustme.CA()
        self.ca = root / "ca.pem"
        ca.cert_pem.write_to_path(str(self.ca))
        server = ca.issue_cert("127.0.0.1", "localhost")
        self.cert = root / "bookie.pem"
        self.key = root / "bookie.key"
        server.cert_chain_pems[0].write_to_path(str(self.cert))
        server.private_key_pem.write_to_path(str(self.key))
        client = ca.issue_cert("alice@example.com", common_name="alice")
        self.client_cert = root / "alice.pem"
        self.client_key = root / "alice.key"
        client.cert_chain_pems[0].write_to_path(str(self.client_cert))
        client.private_key_pem.write_to_path(str(self.client_key))
        # A certificate from another CA: a client that trusts it must refuse our bookies.
        self.other_ca = root / "other-ca.pem"
        trustme.CA().cert_pem.write_to_path(str(self.other_ca))

    def client(self, *, cert: bool = True, token: str = TOKEN) -> dict[str, Any]:
        out: dict[str, Any] = {"tls_ca": str(self.ca), "auth_token": token}
        if cert:
            out.update(tls_cert=str(self.client_cert), tls_key=str(self.client_key))
        return out


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    (tmp_path / "certs").mkdir()
    return Certs(tmp_path / "certs")


def secure_config(certs: Certs, *, provider: str = "token", client_cert: bool = True, extra: str = "") -> str:
    auth = f'provider = "token"\ntokens = ["{TOKEN}", "another-token"]' if provider == "token" else f'provider = "{provider}"'
    return f"""
[bookie]
auto_fix_cookies = true

[tls]
enabled = true
cert = "{certs.cert}"
key = "{certs.key}"
ca = "{certs.ca}"
require_client_cert = {str(client_cert).lower()}

[auth]
{auth}
{extra}
"""


async def write_and_read(client: bkframe.Client, ensemble: int, ledger_type: str = "PD_JOURNAL") -> None:
    writer = await client.create_ledger(
        ensemble=ensemble,
        write_quorum=ensemble,
        ack_quorum=max(1, ensemble - 1),
        password=PASSWORD,
        ledger_type=ledger_type,
    )
    for i in range(20):
        await writer.append(b"entry %d" % i)
    await writer.close()
    reader = await client.open_ledger(writer.ledger_id, password=PASSWORD)
    assert [e.payload for e in await reader.read(0, 19)] == [b"entry %d" % i for i in range(20)]


async def refused(cluster: Any, **settings: Any) -> BaseException:
    """The error a client with ``settings`` gets connecting to the cluster's first bookie."""
    async with bkframe.open_client(cluster.metadata, connect_timeout_s=60.0, **settings) as client:
        with anyio.fail_after(NO_HANG_S):
            try:
                await client.pool.get(cluster.bookies[0].bookie_id)
            except (BookieConnectionError, UnauthorizedError) as e:
                return e
    raise AssertionError("the bookie accepted the client")


@on_both_backends  # TLS and AUTH are the loop's streams: asyncio's and trio's
async def test_a_correct_client_writes_and_reads_over_tls_with_a_token(cluster_factory: Callable[..., Any], certs: Certs) -> None:
    cluster = cluster_factory(3, config=secure_config(certs))
    async with bkframe.open_client(cluster.metadata, **certs.client()) as client:
        await write_and_read(client, 3)
    log = cluster.bookies[0].log()
    assert "authenticated as token #0" in log


@on_both_backends  # TLS and AUTH are the loop's streams: asyncio's and trio's
async def test_plaintext_client_against_a_tls_bookie_is_told_the_bookie_requires_tls(
    cluster_factory: Callable[..., Any], certs: Certs
) -> None:
    cluster = cluster_factory(1, config=secure_config(certs, client_cert=False))
    error = await refused(cluster, auth_token=TOKEN)
    assert isinstance(error, BookieConnectionError)
    assert "requires TLS" in str(error) and cluster.bookies[0].address in str(error), error
    assert "refused a plaintext connection" in cluster.bookies[0].log()


@on_both_backends  # TLS and AUTH are the loop's streams: asyncio's and trio's
async def test_tls_client_against_a_plaintext_bookie_is_told_to_check_tls(
    cluster_factory: Callable[..., Any], certs: Certs
) -> None:
    cluster = cluster_factory(1)
    error = await refused(cluster, tls_ca=str(certs.ca))
    assert isinstance(error, BookieConnectionError)
    assert "TLS handshake" in str(error) and "does the bookie serve TLS" in str(error), error
    assert "refused a TLS connection" in cluster.bookies[0].log()


@on_both_backends  # TLS and AUTH are the loop's streams: asyncio's and trio's
async def test_a_bookie_certificate_from_an_unknown_ca_is_refused(cluster_factory: Callable[..., Any], certs: Certs) -> None:
    cluster = cluster_factory(1, config=secure_config(certs, client_cert=False))
    error = await refused(cluster, tls_ca=str(certs.other_ca), auth_token=TOKEN)
    assert "not signed by the CA given" in str(error), error


@on_both_backends  # TLS and AUTH are the loop's streams: asyncio's and trio's
async def test_a_client_without_certificate_is_refused_by_require_client_cert(
    cluster_factory: Callable[..., Any], certs: Certs
) -> None:
    cluster = cluster_factory(1, config=secure_config(certs))
    error = await refused(cluster, **certs.client(cert=False))
    assert isinstance(error, BookieConnectionError)
    assert "client certificate" in str(error) and cluster.bookies[0].address in str(error), error


@pytest.mark.parametrize("token", ["wrong-token", ""], ids=["wrong", "none"])
@on_both_backends  # TLS and AUTH are the loop's streams: asyncio's and trio's
async def test_a_wrong_or_missing_token_is_unauthorized(cluster_factory: Callable[..., Any], certs: Certs, token: str) -> None:
    cluster = cluster_factory(1, config=secure_config(certs))
    error = await refused(cluster, **certs.client(token=token))
    assert isinstance(error, UnauthorizedError)
    message = str(error)
    assert cluster.bookies[0].address in message and "auth_token" in message, message
    assert ("no token given" if not token else "not accepted") in message
    # What a user sees first: creating a ledger says the same, not "not enough bookies".
    async with bkframe.open_client(cluster.metadata, **certs.client(token=token)) as client:
        with pytest.raises(UnauthorizedError, match="refused authentication"):
            await client.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1)


@on_both_backends  # TLS and AUTH are the loop's streams: asyncio's and trio's
async def test_the_tls_provider_takes_the_principal_from_the_certificate(
    cluster_factory: Callable[..., Any], certs: Certs
) -> None:
    cluster = cluster_factory(1, config=secure_config(certs, provider="tls"))
    async with bkframe.open_client(cluster.metadata, **certs.client(token="")) as client:
        await write_and_read(client, 1)
    authenticated = [line for line in cluster.bookies[0].log().splitlines() if "authenticated as" in line]
    assert authenticated and all(line.endswith(",CN=alice") for line in authenticated), authenticated


async def test_requests_before_auth_are_unauthorized_and_touch_no_ledger(cluster_factory: Callable[..., Any]) -> None:
    cluster = cluster_factory(1, config=f'[auth]\nprovider = "token"\ntokens = ["{TOKEN}"]\n')
    bookie = cluster.bookies[0]
    add = encode_add(1, 77, 0, -1, 0, b"k" * 20, b"payload")
    stream = await trio.open_tcp_stream(bookie.host, bookie.port)
    async with stream:
        await stream.send_all(pack_frame([*add, encode_read(2, 77, 0, fence=True)]))
        responses = await read_responses(stream, 2)
    assert [(r.request_id, r.status) for r in responses] == [(1, Status.UNAUTHORIZED), (2, Status.UNAUTHORIZED)]
    assert "AUTH" in responses[0].message
    # Authenticated now: the ledger does not exist (the refused add did not create it, nor
    # did the refused fence).
    async with connect_bookie(bookie.host, bookie.port, auth=("token", TOKEN.encode())) as conn:
        got = await conn.read(77, 0)
        assert got.status == Status.NO_LEDGER
        info = await conn.info()
        assert info["ledgers"] == 0


async def read_responses(stream: trio.SocketStream, count: int) -> list[Response]:
    buf = bytearray()
    out: list[Response] = []
    with trio.fail_after(NO_HANG_S):
        while len(out) < count:
            data = await stream.receive_some(65536)
            assert data, "the bookie closed the connection"
            buf += data
            while len(buf) >= 4 and len(buf) >= 4 + FRAME_HEADER.unpack_from(buf)[0]:
                (length,) = FRAME_HEADER.unpack_from(buf)
                out += decode_responses(bytes(buf[4 : 4 + length]))
                del buf[: 4 + length]
    return out


async def test_no_secret_reaches_the_log_at_debug(cluster_factory: Callable[..., Any], certs: Certs) -> None:
    cluster = cluster_factory(2, config=secure_config(certs, extra='\n[logging]\nlevel = "debug"\n'))
    async with bkframe.open_client(cluster.metadata, **certs.client()) as client:
        await write_and_read(client, 2)
    async with bkframe.open_client(cluster.metadata, **certs.client(token="a-wrong-guess-token")) as client:
        with pytest.raises(UnauthorizedError):
            await client.pool.get(cluster.bookies[0].bookie_id)
    cluster.stop()
    store = PluginManager().metadata_store(cluster.metadata)
    try:
        record = await store.read_cluster()
    finally:
        await store.aclose()
    assert record is not None and record.secret.hex() not in repr(record)
    key_lines = [line for line in certs.key.read_text().splitlines() if line and not line.startswith("-----")]
    secrets = [TOKEN, "another-token", "a-wrong-guess-token", PASSWORD.decode(), PASSWORD.hex(), *key_lines, record.secret.hex()]
    for bookie in cluster.bookies:
        log = bookie.log()
        assert "DEBUG" in log and "requests Add" in log, "the bookie did not log at debug"
        leaked = [s for s in secrets if s in log]
        assert not leaked, f"{bookie.bookie_id} logged secrets: {leaked}"


def test_token_provider_compares_every_token_and_names_none() -> None:
    provider = TokenAuth(TokenConfig(tokens=("a" * 16, "b" * 16)))
    peer = Peer("127.0.0.1:1")
    assert provider.authenticate(peer, "token", b"b" * 16) == "token #1"
    with pytest.raises(AuthenticationError, match="not accepted") as e:
        provider.authenticate(peer, "token", b"c" * 16)
    assert "a" * 16 not in str(e.value)
    assert provider.client_credential() == ("token", b"a" * 16)
    assert "aaaa" not in repr(TokenConfig(tokens=("a" * 16,)))
    assert TOKEN not in repr(ClientSettings(auth_token=TOKEN))
    assert "aaaa" not in repr(AuthRequest(1, "token", b"a" * 16))


def test_token_file_and_tls_principals(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("# operators\nfirst-token\n\nsecond-token\n")
    provider = TokenAuth(TokenConfig(token_file=tokens))
    assert provider.authenticate(Peer("x"), "token", b"second-token") == "token #1"
    tls = TLSAuth(TLSAuthConfig(principals=("CN=alice",)))
    assert tls.authenticate(Peer("x", "CN=alice", tls=True), "tls", b"") == "CN=alice"
    with pytest.raises(AuthenticationError, match="not allowed"):
        tls.authenticate(Peer("x", "CN=mallory", tls=True), "tls", b"")
    with pytest.raises(AuthenticationError, match="no client certificate"):
        tls.authenticate(Peer("x"), "tls", b"")


def test_auth_config_mistakes_are_clear(tmp_path: Path, certs: Certs) -> None:
    plugins = PluginManager()
    cases = {
        '[auth]\nprovider = "kerberos"\n': "no installed plugin provides it",
        '[auth]\nprovider = "token"\n': "needs tokens",
        '[auth]\nprovider = "tls"\n': "require_client_cert",
        "[tls]\nenabled = true\n": "needs cert",
        '[logging]\nformat = "xml"\n': "should be one of text, json",
    }
    for text, expected in cases.items():
        path = tmp_path / "bookie.toml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=expected):
            plugins.check_config(load_config(path))
    assert client_context(certs.ca) is not None


def test_auth_providers_are_registered_through_bkframe_register_components() -> None:
    """The built-in auth providers come through the one registration hook."""
    from bkframe.core.registry import ComponentKind

    assert PluginManager().components.names(ComponentKind.AUTH_PROVIDER) == ["none", "tls", "token"]


async def test_the_command_line_takes_tls_and_the_token_from_the_environment(
    cluster_factory: Callable[..., Any], certs: Certs, tmp_path: Path
) -> None:
    import json
    import os
    import sys

    cluster = cluster_factory(1, config=secure_config(certs))
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    env = {
        **os.environ,
        "BKFRAME_TLS_CA": str(certs.ca),
        "BKFRAME_TLS_CERT": str(certs.client_cert),
        "BKFRAME_TLS_KEY": str(certs.client_key),
        "BKFRAME_AUTH_TOKEN_FILE": str(token_file),
    }
    command = [sys.executable, "-m", "bkframe", "bookies", "info", "--metadata", cluster.metadata]
    shown = await trio.run_process(command, capture_stdout=True, env=env)
    assert json.loads(shown.stdout)["bookie_id"] == "bookie-0"
    del env["BKFRAME_AUTH_TOKEN_FILE"]
    refused = await trio.run_process(command, capture_stdout=True, capture_stderr=True, env=env, check=False)
    assert refused.returncode == 1 and b"refused authentication" in refused.stdout + refused.stderr
    # The token itself in $BKFRAME_AUTH_TOKEN, or its file as --auth-token-file, does as well.
    for extra, more_env in ((["--auth-token-file", str(token_file)], {}), ([], {"BKFRAME_AUTH_TOKEN": TOKEN})):
        shown = await trio.run_process([*command, *extra], capture_stdout=True, env={**env, **more_env})
        assert json.loads(shown.stdout)["bookie_id"] == "bookie-0"
