"""The S3 tier: a :class:`~bkframe.core.interfaces.tier.Tier` on a bucket (and a key prefix in it), through
the AWS SDK's S3 client -- the one ``boto3.client("s3")`` returns, made from botocore (boto3's
core) directly, so that every tier a process opens shares one parsed S3 model: a boto3
Session parses it again each time, ~0.1 s of CPU per tier.

A put smaller than ``part_size`` is one PutObject; a larger one streams as a multipart
upload, one part in memory at a time, and a failed one is aborted so that no part is left
costing space. ``if_absent`` is S3's conditional write, ``If-None-Match: *``, on PutObject
and on CompleteMultipartUpload (a multipart put also asks HeadObject first, so that it
does not upload gigabytes only to be refused). A ranged get is one GetObject with a
``Range``; a list is ListObjectsV2, one page per request, fetched as the caller iterates.

Every request is bounded by botocore's ``connect_timeout``, ``read_timeout`` and retry
attempts (the URI's options); a failure is a TierError naming the operation, the key and
the endpoint (the tier's URI), and never a credential: messages are built here, and any
text that came from botocore is scrubbed of the keys this tier was given.
"""

from __future__ import annotations

import email.utils
import functools
import logging
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import botocore.exceptions
import botocore.loaders
import botocore.session
from botocore.config import Config

from bkframe.core.interfaces.tier import ObjectInfo, Source, check_key, check_prefix, open_source, read_full
from bkframe.errors import NoSuchObjectError, ObjectExistsError, TierError
from bkframe_tier_s3.options import MAX_PART_SIZE, MAX_PARTS, Credentials, S3Options, read_credentials

log = logging.getLogger("bkframe.tier.s3")
# botocore's DEBUG records hold whole requests, the Authorization header (and so the access
# key id) included: a process at DEBUG (``bkframe -vv``) must not log them. A level set for
# the ``botocore`` logger on purpose is kept.
if logging.getLogger("botocore").level == logging.NOTSET:
    logging.getLogger("botocore").setLevel(logging.INFO)
T = TypeVar("T")

_NOT_FOUND_CODES = frozenset({"NoSuchKey", "NotFound", "404"})
_UNREACHABLE = (
    botocore.exceptions.EndpointConnectionError,
    botocore.exceptions.ConnectTimeoutError,
    botocore.exceptions.ReadTimeoutError,
    botocore.exceptions.ConnectionClosedError,
)


#: The service models (JSON files botocore parses once and caches): shared by every tier.
_LOADER = botocore.loaders.create_loader()


def _etag(raw: str | None) -> str:
    return (raw or "").strip('"')


def _store_time(response: dict[str, Any]) -> float:
    """When the store answered, by its own clock (the ``Date`` header; ours if it sent none):
    a put's response carries no LastModified, and ObjectInfo.modified is the store's time."""
    date = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    try:
        return email.utils.parsedate_to_datetime(date).timestamp() if date else time.time()
    except (TypeError, ValueError):
        return time.time()


class S3Tier:
    """See the module docstring. Thread-safe (botocore's clients are); ``close`` ends its connections."""

    def __init__(self, options: S3Options) -> None:
        self.options = options
        self.uri = options.uri
        credentials: Credentials | None = None
        if options.credentials is not None:
            credentials = read_credentials(options.credentials, options.profile)
        #: What no message may show (the keys of the credentials file; the environment's are
        #: never put into messages here to begin with).
        self._secrets = credentials.secrets() if credentials else ()
        # A session of its own: it resolves the environment's credentials (boto3's chain) when
        # the client is made; only the loader of the service model is shared.
        session = botocore.session.Session()
        session.register_component("data_loader", _LOADER)
        config = Config(
            connect_timeout=options.connect_timeout_s,
            read_timeout=options.read_timeout_s,
            retries={"total_max_attempts": options.attempts, "mode": "standard"},
            s3={"addressing_style": options.addressing},
            request_checksum_calculation=options.checksums,
            response_checksum_validation=options.checksums,
            user_agent_extra="bkframe-tier-s3",
        )
        self._client: Any = session.create_client(
            "s3",
            region_name=options.region,
            endpoint_url=options.endpoint,
            aws_access_key_id=credentials.access_key_id if credentials else None,
            aws_secret_access_key=credentials.secret_access_key if credentials else None,
            aws_session_token=credentials.session_token if credentials else None,
            config=config,
        )

    # -- errors -----------------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _error(self, op: str, key: str, e: Exception) -> TierError:
        where = f"tier {self.uri}: {op} {key!r}"
        if isinstance(e, botocore.exceptions.ClientError):
            error = e.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code == "NoSuchBucket":
                return TierError(f"{where}: the bucket {self.options.bucket} does not exist")
            if code in _NOT_FOUND_CODES or (status == 404 and code != "NoSuchUpload"):
                return NoSuchObjectError(f"{where}: no such object")
            if status == 412 or code == "PreconditionFailed":
                return ObjectExistsError(f"{where}: the object exists")
            detail = self._scrub(str(error.get("Message", "")))
            return TierError(f"{where}: {code or status} {detail}".rstrip())
        if isinstance(e, botocore.exceptions.NoCredentialsError | botocore.exceptions.PartialCredentialsError):
            return TierError(
                f"{where}: no credentials: give credentials=FILE in the URI, or set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY in the environment"
            )
        if isinstance(e, _UNREACHABLE):
            return TierError(f"{where}: the store does not answer ({type(e).__name__}: {self._scrub(str(e))})")
        return TierError(f"{where}: {type(e).__name__}: {self._scrub(str(e))}")

    def _call(self, op: str, key: str, request: Callable[[], T]) -> T:
        """``request()``, its botocore errors turned into tier errors."""
        try:
            return request()
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            raise self._error(op, key, e) from None

    def _full(self, key: str) -> str:
        return self.options.prefix + check_key(key)

    # -- the Tier protocol ------------------------------------------------------------------

    def put(self, key: str, source: Source, *, if_absent: bool = False) -> ObjectInfo:
        full = self._full(key)
        part_size = self.options.part_size
        if isinstance(source, Path):
            # S3 takes at most MAX_PARTS parts: a file too large for them gets larger parts.
            size = source.stat().st_size
            part_size = min(MAX_PART_SIZE, max(part_size, math.ceil(size / MAX_PARTS)))
        condition = {"IfNoneMatch": "*"} if if_absent else {}
        with open_source(source) as stream:
            first = read_full(stream, part_size)
            second = read_full(stream, part_size) if len(first) == part_size else b""
            if not second:
                response = self._call(
                    "put", key,
                    lambda: self._client.put_object(Bucket=self.options.bucket, Key=full, Body=first, **condition),
                )
                return ObjectInfo(key, len(first), _store_time(response), _etag(response.get("ETag")))
            if if_absent and self.head(key) is not None:
                raise ObjectExistsError(f"tier {self.uri}: put {key!r}: the object exists")
            return self._multipart(key, full, [first, second], stream, part_size, condition)

    def _multipart(
        self, key: str, full: str, parts: list[bytes], stream: Any, part_size: int, condition: dict[str, str]
    ) -> ObjectInfo:
        bucket = self.options.bucket
        created = self._call("put", key, lambda: self._client.create_multipart_upload(Bucket=bucket, Key=full))
        upload_id = created["UploadId"]
        try:
            done: list[dict[str, Any]] = []
            size = 0
            data = parts.pop(0)
            while data:
                number = len(done) + 1
                if number > MAX_PARTS:
                    raise TierError(f"tier {self.uri}: put {key!r}: more than {MAX_PARTS} parts of {part_size} bytes")
                upload = functools.partial(
                    self._client.upload_part, Bucket=bucket, Key=full, UploadId=upload_id, PartNumber=number, Body=data
                )
                response = self._call("put", key, upload)
                part = {"PartNumber": number, "ETag": response["ETag"]}
                # The part's checksum, where botocore sent one, must be named again on completion.
                part.update({k: v for k, v in response.items() if k.startswith("Checksum") and k != "ChecksumType"})
                done.append(part)
                size += len(data)
                data = parts.pop(0) if parts else read_full(stream, part_size)
            response = self._call(
                "put", key,
                lambda: self._client.complete_multipart_upload(
                    Bucket=bucket, Key=full, UploadId=upload_id, MultipartUpload={"Parts": done}, **condition
                ),
            )
        except BaseException:
            self._abort(key, full, upload_id)
            raise
        return ObjectInfo(key, size, _store_time(response), _etag(response.get("ETag")))

    def _abort(self, key: str, full: str, upload_id: str) -> None:
        """Abort an upload that failed, so that its parts do not stay (and cost) forever.
        Best effort: if the store cannot be reached now, a bucket lifecycle rule
        (AbortIncompleteMultipartUpload, docs/tiered-storage.md) reclaims them."""
        try:
            self._client.abort_multipart_upload(Bucket=self.options.bucket, Key=full, UploadId=upload_id)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            log.warning("%s; its parts stay until a lifecycle rule removes them", self._error("abort upload of", key, e))

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        full = self._full(key)
        if offset < 0 or length < 0:
            raise ValueError(f"get_range({key!r}, {offset}, {length}): offset and length are >= 0")
        if length == 0:
            if self.head(key) is None:
                raise NoSuchObjectError(f"tier {self.uri}: get {key!r}: no such object")
            return b""
        try:
            response = self._client.get_object(
                Bucket=self.options.bucket, Key=full, Range=f"bytes={offset}-{offset + length - 1}"
            )
            body = response["Body"]
            try:
                data: bytes = body.read()
            finally:
                body.close()
        except botocore.exceptions.ClientError as e:
            if e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 416:
                return b""  # the range starts at or past the end: nothing there
            raise self._error("get", key, e) from None
        except botocore.exceptions.BotoCoreError as e:
            raise self._error("get", key, e) from None
        if len(data) > length:
            raise TierError(f"tier {self.uri}: get {key!r}: the store answered {len(data)} bytes for a range of {length}")
        return data

    def head(self, key: str) -> ObjectInfo | None:
        full = self._full(key)
        try:
            response = self._call("head", key, lambda: self._client.head_object(Bucket=self.options.bucket, Key=full))
        except NoSuchObjectError:
            return None
        return ObjectInfo(key, int(response["ContentLength"]), response["LastModified"].timestamp(), _etag(response.get("ETag")))

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        check_prefix(prefix)
        return self._pages(prefix)

    def _pages(self, prefix: str) -> Iterator[ObjectInfo]:
        strip = len(self.options.prefix)
        request: dict[str, Any] = {
            "Bucket": self.options.bucket, "Prefix": self.options.prefix + prefix, "MaxKeys": self.options.page_size,
        }
        while True:
            page = self._call("list", prefix, lambda: self._client.list_objects_v2(**request))
            for item in page.get("Contents", ()):
                modified = item["LastModified"].timestamp()
                yield ObjectInfo(item["Key"][strip:], int(item["Size"]), modified, _etag(item.get("ETag")))
            if not page.get("IsTruncated"):
                return
            request["ContinuationToken"] = page["NextContinuationToken"]

    def delete(self, key: str) -> None:
        full = self._full(key)
        self._call("delete", key, lambda: self._client.delete_object(Bucket=self.options.bucket, Key=full))

    def close(self) -> None:
        self._client.close()
