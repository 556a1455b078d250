"""The S3 tier keeps the tier contract on a real S3-compatible server (moto's, a process
started by the ``s3_server`` fixture); large puts really are multipart uploads, the
conditional write holds on completion, credentials come from a file or the environment and
never show, and an unreachable store is a TierError within the configured timeouts."""

from __future__ import annotations

import functools
import io
import re
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from bkframe_tier_s3.options import MiB, parse_uri
from bkframe_tier_s3.tier import S3Tier
from botocore.config import Config

from bkframe.core.interfaces.tier import Tier
from bkframe.core.plugin_manager import PluginManager
from bkframe.errors import ConfigError, ObjectExistsError, TierError
from bkframe.testing.servers import S3Server, free_port
from bkframe.testing.tier_contract import TierContract, pattern

PART = 5 * MiB  # S3's smallest part (moto enforces it too)
KEY, SECRET = S3Server.ACCESS_KEY_ID, S3Server.SECRET_ACCESS_KEY


@functools.cache
def raw_client(endpoint: str) -> Any:
    """A plain S3 client on the server: to look at the bucket behind the tier's back (one
    per endpoint: making a client parses botocore's S3 model, a tenth of a second)."""
    return botocore.session.Session().create_client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=KEY, aws_secret_access_key=SECRET,
        config=Config(connect_timeout=5, read_timeout=30, retries={"total_max_attempts": 2}),
    )


def uploads_in_progress(tier: Tier) -> list[str]:
    assert isinstance(tier, S3Tier)
    listed = raw_client(tier.options.endpoint or "").list_multipart_uploads(Bucket=tier.options.bucket)
    return [u["Key"] for u in listed.get("Uploads", [])]


class TestS3Tier(TierContract):
    part_size = PART
    page_size = 3

    @pytest.fixture
    def tier_uri(self, s3_server: S3Server, tmp_path: Path) -> str:
        credentials = s3_server.credentials_file(tmp_path / "credentials")
        return (
            f"s3://{s3_server.bucket()}/tier/prefix?endpoint={s3_server.endpoint}&region=us-east-1"
            f"&credentials={credentials}&part_size=5MiB&page_size=3&connect_timeout=2&read_timeout=20"
        )

    def leftovers(self, tier: Tier) -> list[str]:
        return uploads_in_progress(tier)

    def test_a_file_larger_than_a_part_streams_and_reads_back(self, tier: Tier, tmp_path: Path) -> None:
        """... and they really are multipart uploads of three parts (S3's multipart ETag ends
        in -3), under the URI's prefix; what the bucket holds outside it is not the tier's."""
        super().test_a_file_larger_than_a_part_streams_and_reads_back(tier, tmp_path)
        assert isinstance(tier, S3Tier)
        raw, bucket = raw_client(tier.options.endpoint or ""), tier.options.bucket
        for key in ("big/from-file", "big/from-stream"):
            assert raw.head_object(Bucket=bucket, Key=f"tier/prefix/{key}")["ETag"].strip('"').endswith("-3")
        raw.put_object(Bucket=bucket, Key="tier/outside", Body=b"not the tier's")
        assert [o.key for o in tier.list()] == ["big/from-file", "big/from-stream"]


@pytest.fixture
def tier(s3_server: S3Server, tmp_path: Path) -> Iterator[S3Tier]:
    credentials = s3_server.credentials_file(tmp_path / "credentials")
    uri = f"s3://{s3_server.bucket()}/p?endpoint={s3_server.endpoint}&credentials={credentials}&part_size=5MiB"
    made = PluginManager().tier(uri)
    assert isinstance(made, S3Tier)
    yield made
    made.close()


class CallbackStream(io.RawIOBase):
    """A stream of ``data`` that calls ``at_offset`` once, when a read reaches ``offset``."""

    def __init__(self, data: bytes, offset: int, at_offset: Callable[[], None]) -> None:
        self._data, self._offset, self._at_offset, self._called = io.BytesIO(data), offset, at_offset, False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if not self._called and self._data.tell() >= self._offset:
            self._called = True
            self._at_offset()
        return self._data.readinto(buffer)


def test_if_absent_holds_at_completion_of_a_multipart_put(tier: S3Tier) -> None:
    """Another writer stores the key while a conditional multipart put uploads its parts
    (after its HeadObject found nothing: the third part is read after it): only
    CompleteMultipartUpload's If-None-Match can refuse now, and does; the upload is aborted
    and the other writer's object stays."""
    raw = raw_client(tier.options.endpoint or "")

    def other_writer() -> None:
        raw.put_object(Bucket=tier.options.bucket, Key="p/contested", Body=b"the other writer's")

    with pytest.raises(ObjectExistsError):
        tier.put("contested", CallbackStream(pattern(PART * 5 // 2), 2 * PART, other_writer), if_absent=True)  # type: ignore[arg-type]
    assert tier.get_range("contested", 0, 100) == b"the other writer's"
    assert uploads_in_progress(tier) == []


def test_credentials_from_the_environment_and_never_shown(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pm = PluginManager()
    bucket = s3_server.bucket()
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    tier = pm.tier(f"s3://{bucket}?endpoint={s3_server.endpoint}&region=us-east-1")
    tier.put("from/env", b"signed with the environment's keys")
    assert tier.get_range("from/env", 0, 6) == b"signed"
    assert tier.uri == f"s3://{bucket}?endpoint={s3_server.endpoint}&region=us-east-1&addressing=path"
    missing = pm.tier(f"s3://no-such-bucket-here?endpoint={s3_server.endpoint}&region=us-east-1")
    with pytest.raises(TierError, match="the bucket no-such-bucket-here does not exist") as raised:
        missing.get_range("k", 0, 1)
    # In the URI: refused, and not quoted back.
    with pytest.raises(ConfigError) as refused:
        pm.tier(f"s3://{KEY}:{SECRET}@{bucket}?endpoint={s3_server.endpoint}")
    # Without any: one clear line.
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    anonymous = pm.tier(f"s3://{bucket}?endpoint={s3_server.endpoint}&region=us-east-1")
    with pytest.raises(TierError, match="no credentials: give credentials=FILE in the URI, or set AWS_ACCESS_KEY_ID") as none:
        anonymous.head("from/env")
    # A credentials file lacking the secret names the file and what is missing, not the key.
    partial = tmp_path / "partial"
    partial.write_text(f"[default]\naws_access_key_id = {KEY}\n")
    lacks = r"\[default\] of the credentials file .*/partial lacks aws_secret_access_key"
    with pytest.raises(ConfigError, match=lacks) as lacking:
        pm.tier(f"s3://{bucket}?endpoint={s3_server.endpoint}&credentials={partial}")
    for message in (str(raised.value), str(refused.value), str(none.value), str(lacking.value), tier.uri):
        assert KEY not in message and SECRET not in message, message


def test_uri_options_are_checked() -> None:
    """Options are parsed once, with S3's bounds; a mistake is one line that names the
    option, never its value."""
    options = parse_uri("s3://lake/a/b?endpoint=https://s3.internal:9000&part_size=16MiB&attempts=5&page_size=10")
    assert (options.bucket, options.prefix, options.addressing, options.part_size) == ("lake", "a/b/", "path", 16 * MiB)
    assert (options.attempts, options.page_size, options.connect_timeout_s, options.read_timeout_s) == (5, 10, 5.0, 30.0)
    assert options.uri == "s3://lake/a/b?endpoint=https://s3.internal:9000&addressing=path"
    assert parse_uri("s3://lake").addressing == "virtual"  # AWS: virtual-hosted
    for uri, message in [
        ("s3://lake?part_size=1MiB", "part_size is a size from 5MiB to 5GiB"),
        ("s3://lake?secret_key=abc123", "unknown option 'secret_key'"),
        ("s3://lake?addressing=dns", "addressing is path or virtual"),
        ("s3://lake?read_timeout=0", "read_timeout is a number from 0.1 to 3600"),
        ("s3://lake?credentials=relative/file", "credentials is the absolute path"),
        ("s3://Not_A_Bucket", "is no S3 bucket name"),
        ("s3://lake/a/../b", "the prefix: tier key 'a/../b'"),
        ("s3://lake?endpoint=ftp://x", "endpoint is http(s)://HOST[:PORT]"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(message)) as raised:
            parse_uri(uri)
        assert "abc123" not in str(raised.value)


def test_an_unreachable_store_is_a_tier_error_within_the_timeouts(s3_server: S3Server, tmp_path: Path) -> None:
    """Nothing listening (connection refused), and a listener that never answers (each
    request waits out read_timeout): a TierError naming the operation, key and endpoint,
    within attempts x (connect_timeout + read_timeout) and botocore's backoff, and no key
    or secret in it."""
    credentials = s3_server.credentials_file(tmp_path / "credentials")
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # the kernel completes connections; nobody ever reads or answers
    try:
        for port, what in ((free_port(), "refused"), (silent.getsockname()[1], "silent")):
            endpoint = f"http://127.0.0.1:{port}"
            tier = PluginManager().tier(
                f"s3://bucket-{what}?endpoint={endpoint}&credentials={credentials}"
                "&connect_timeout=0.5&read_timeout=0.5&attempts=2"
            )
            started = time.monotonic()
            with pytest.raises(TierError) as raised:
                tier.get_range("segments/one", 0, 10)
            elapsed = time.monotonic() - started
            message = str(raised.value)
            # 2 attempts x (0.5 s + 0.5 s), one backoff of at most 2 s, and slack for a loaded machine.
            assert elapsed < 8, (what, elapsed)
            assert "get 'segments/one'" in message and endpoint in message and "does not answer" in message, message
            assert KEY not in message and SECRET not in message, message
            tier.close()
    finally:
        silent.close()
