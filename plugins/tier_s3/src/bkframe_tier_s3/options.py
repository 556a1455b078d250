"""What an ``s3://`` tier URI says: the bucket, the key prefix, and the options in its query
(:class:`S3Options`), and the credentials a ``credentials=FILE`` option names.

``s3://BUCKET[/PREFIX][?OPTION=VALUE&...]``; the options (docs/tiered-storage.md, "Tiers"):

* ``endpoint=http://HOST:PORT`` -- an S3-compatible store (MinIO, Ceph RGW, moto); AWS's
  own endpoints when absent;
* ``region=NAME`` -- the signing region (boto3's chain, ``AWS_DEFAULT_REGION`` ..., when absent);
* ``addressing=path|virtual`` -- ``http://HOST/BUCKET/KEY`` or ``http://BUCKET.HOST/KEY``;
  ``path`` by default with an ``endpoint`` (self-hosted stores expect it), ``virtual``
  without (AWS);
* ``credentials=/PATH/FILE`` and ``profile=NAME`` -- a file in the AWS shared-credentials
  format (``[default]``, ``aws_access_key_id = ...``, ``aws_secret_access_key = ...``,
  optionally ``aws_session_token``); without it, boto3's chain (``AWS_ACCESS_KEY_ID`` and
  ``AWS_SECRET_ACCESS_KEY``, ``~/.aws/credentials``, an instance role ...);
* ``part_size=8MiB`` -- puts larger than this go up as multipart uploads of such parts
  (S3's bounds: 5 MiB to 5 GiB);
* ``connect_timeout=5``, ``read_timeout=30`` (seconds) and ``attempts=3`` (tries per
  request, the first included: botocore's standard retry mode) -- every request's bounds;
* ``page_size=1000`` -- keys per list request (1 to 1000);
* ``checksums=when_supported|when_required`` -- botocore's CRC checksums on uploads (the
  default) or only where S3 demands them, for older S3-compatible stores that refuse them.

Secrets never go in the URI: one with a user or password part is refused, and no message
here quotes a URI that might hold one, nor any option's value.
"""

from __future__ import annotations

import configparser
import re
import urllib.parse
from pathlib import Path

import attrs

from bkframe.core.interfaces.tier import check_key, query_options
from bkframe.errors import ConfigError

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
DEFAULT_PART_SIZE = 8 * MiB
#: S3's bounds on a part of a multipart upload (all but the last are at least the minimum).
MIN_PART_SIZE, MAX_PART_SIZE = 5 * MiB, 5 * GiB
#: S3's bound on the number of parts of one upload.
MAX_PARTS = 10_000
OPTIONS = (
    "endpoint", "region", "addressing", "credentials", "profile", "part_size",
    "connect_timeout", "read_timeout", "attempts", "page_size", "checksums",
)
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_SIZE = re.compile(r"(\d+)\s*(|B|KiB|MiB|GiB)")
_UNITS = {"": 1, "B": 1, "KiB": KiB, "MiB": MiB, "GiB": GiB}


@attrs.frozen
class Credentials:
    """Keys read from a credentials file; ``repr`` shows none of them."""

    access_key_id: str = attrs.field(repr=False)
    secret_access_key: str = attrs.field(repr=False)
    session_token: str | None = attrs.field(default=None, repr=False)

    def secrets(self) -> tuple[str, ...]:
        return tuple(s for s in (self.access_key_id, self.secret_access_key, self.session_token) if s)


@attrs.frozen
class S3Options:
    bucket: str
    #: Prepended to every key: "" or ending in "/".
    prefix: str
    endpoint: str | None = None
    region: str | None = None
    addressing: str = "virtual"
    credentials: Path | None = None
    profile: str = "default"
    part_size: int = DEFAULT_PART_SIZE
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 30.0
    attempts: int = 3
    page_size: int = 1000
    checksums: str = "when_supported"

    @property
    def uri(self) -> str:
        """The URI again, normalized: safe to log and show (it holds no secret)."""
        query = {"endpoint": self.endpoint, "region": self.region, "addressing": self.addressing,
                 "credentials": str(self.credentials) if self.credentials else None}
        shown = urllib.parse.urlencode({k: v for k, v in query.items() if v}, safe="/:")
        path = f"/{self.prefix.rstrip('/')}" if self.prefix else ""
        return f"s3://{self.bucket}{path}" + (f"?{shown}" if shown else "")


def _number(options: dict[str, str], name: str, default: float, low: float, high: float, where: str) -> float:
    raw = options.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not low <= value <= high:
        raise ConfigError(f"{where}: {name} is a number from {low:g} to {high:g}")
    return value


def _size(raw: str, where: str) -> int:
    match = _SIZE.fullmatch(raw.strip())
    size = int(match.group(1)) * _UNITS[match.group(2)] if match else -1
    if not MIN_PART_SIZE <= size <= MAX_PART_SIZE:
        raise ConfigError(f"{where}: part_size is a size from 5MiB to 5GiB (S3's bounds), in bytes or with KiB, MiB, GiB")
    return size


def parse_uri(uri: str) -> S3Options:
    """The options of ``s3://BUCKET[/PREFIX][?...]``; ConfigError if it cannot work."""
    parts = urllib.parse.urlsplit(uri)
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        # Not quoted back: the user part is a key, the password part a secret.
        raise ConfigError(
            "an s3:// tier URI holds no credentials (user:password@): give credentials=FILE, "
            "or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment"
        )
    where = f"tier URI s3://{parts.netloc}{parts.path}"
    usage = "expected s3://BUCKET[/PREFIX][?endpoint=http://HOST:PORT&region=...&credentials=FILE&...]"
    if parts.scheme != "s3" or parts.fragment:
        raise ConfigError(f"{where}: {usage}")
    if not _BUCKET.fullmatch(parts.netloc) or ".." in parts.netloc:
        raise ConfigError(f"{where}: {parts.netloc!r} is no S3 bucket name (3-63 of a-z, 0-9, '.', '-'); {usage}")
    prefix = urllib.parse.unquote(parts.path).strip("/")
    if prefix:
        try:
            check_key(prefix)
        except ValueError as e:
            raise ConfigError(f"{where}: the prefix: {e}") from None
        prefix += "/"
    options = query_options(parts.query, OPTIONS, where=where)
    endpoint = options.get("endpoint")
    if endpoint is not None:
        ep = urllib.parse.urlsplit(endpoint)
        if ep.scheme not in ("http", "https") or not ep.hostname or ep.username or ep.password:
            raise ConfigError(f"{where}: endpoint is http(s)://HOST[:PORT], without credentials")
    addressing = options.get("addressing", "path" if endpoint else "virtual")
    if addressing not in ("path", "virtual"):
        raise ConfigError(f"{where}: addressing is path or virtual")
    checksums = options.get("checksums", "when_supported")
    if checksums not in ("when_supported", "when_required"):
        raise ConfigError(f"{where}: checksums is when_supported or when_required")
    credentials = options.get("credentials")
    if credentials is not None and not Path(credentials).is_absolute():
        raise ConfigError(f"{where}: credentials is the absolute path of a credentials file")
    if "profile" in options and credentials is None:
        raise ConfigError(f"{where}: profile names a section of the credentials=FILE, which is not given")
    return S3Options(
        bucket=parts.netloc,
        prefix=prefix,
        endpoint=endpoint,
        region=options.get("region") or None,
        addressing=addressing,
        credentials=Path(credentials) if credentials else None,
        profile=options.get("profile", "default"),
        part_size=_size(options["part_size"], where) if "part_size" in options else DEFAULT_PART_SIZE,
        connect_timeout_s=_number(options, "connect_timeout", 5.0, 0.1, 600, where),
        read_timeout_s=_number(options, "read_timeout", 30.0, 0.1, 3600, where),
        attempts=int(_number(options, "attempts", 3, 1, 20, where)),
        page_size=int(_number(options, "page_size", 1000, 1, 1000, where)),
        checksums=checksums,
    )


def read_credentials(path: Path, profile: str) -> Credentials:
    """The keys of section ``profile`` of an AWS shared-credentials file; ConfigError naming
    the file and what is missing (never a value)."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        with open(path) as f:
            parser.read_file(f)
    except OSError as e:
        raise ConfigError(f"s3 tier: cannot read the credentials file {path}: {e.strerror}") from None
    except configparser.Error:
        raise ConfigError(f"s3 tier: the credentials file {path} is not in the AWS credentials format") from None
    if not parser.has_section(profile):
        raise ConfigError(f"s3 tier: the credentials file {path} has no [{profile}] section")
    section = parser[profile]
    missing = [k for k in ("aws_access_key_id", "aws_secret_access_key") if not section.get(k, "").strip()]
    if missing:
        raise ConfigError(f"s3 tier: [{profile}] of the credentials file {path} lacks {' and '.join(missing)}")
    token = section.get("aws_session_token", "").strip() or None
    return Credentials(section["aws_access_key_id"].strip(), section["aws_secret_access_key"].strip(), token)
