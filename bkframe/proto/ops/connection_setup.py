"""The messages that open a connection: AUTH (who the client is: an auth method and its
credential; see bkframe.core.interfaces.auth) and FEATURES (what the client understands beyond
protocol version 1, :class:`~bkframe.proto.codes.Feature`, sent right after AUTH in its
frame)."""

from __future__ import annotations

import struct
from typing import ClassVar

import attrs

from bkframe.errors import ProtocolError
from bkframe.proto.base import Reply, fixed_request, text
from bkframe.proto.codes import MAX_AUTH_CREDENTIAL, MAX_AUTH_METHOD, Op, Status
from bkframe.proto.frames import pack_message

_AUTH = struct.Struct("<HI")  # method length, credential length (then both)
_FEATURES = struct.Struct("<I")  # feature bits (request and answer)


@attrs.frozen
class AuthRequest:
    """The credential is a secret: never in a repr or a log."""

    request_id: int
    method: str
    credential: bytes = attrs.field(default=b"", repr=False)


@attrs.frozen
class AuthResponse(Reply):
    """OK with the principal as its message, or UNAUTHORIZED with why."""

    op: ClassVar[Op] = Op.AUTH


@attrs.frozen
class FeaturesRequest:
    request_id: int
    features: int


@attrs.frozen
class FeaturesResponse(Reply):
    op: ClassVar[Op] = Op.FEATURES
    #: The feature bits the bookie will use on this connection.
    features: int = 0


def encode_auth(request_id: int, method: str, credential: bytes) -> bytes:
    name = method.encode()
    return pack_message(Op.AUTH, 0, request_id, _AUTH.pack(len(name), len(credential)), name, credential)


def decode_auth(body: memoryview, flags: int, request_id: int, at: int, end: int, max_entry_size: int) -> AuthRequest:
    if flags or end - at < _AUTH.size:
        raise ProtocolError("AUTH message is too short or has unknown flags")
    name_len, cred_len = _AUTH.unpack_from(body, at)
    name_at = at + _AUTH.size
    if name_len > MAX_AUTH_METHOD or cred_len > MAX_AUTH_CREDENTIAL or name_at + name_len + cred_len != end:
        raise ProtocolError("AUTH message has the wrong length, method length or credential length")
    return AuthRequest(request_id, text(body, name_at, name_at + name_len), bytes(body[name_at + name_len : end]))


def encode_auth_response(request_id: int, status: Status, message: str) -> bytes:
    """OK with the principal, or UNAUTHORIZED with why (never the credential)."""
    return pack_message(Op.AUTH, status, request_id, message.encode())


def decode_auth_response(body: memoryview, status: Status, request_id: int, at: int, end: int) -> AuthResponse:
    return AuthResponse(request_id, status, text(body, at, end))


def encode_features(request_id: int, features: int) -> bytes:
    return pack_message(Op.FEATURES, 0, request_id, _FEATURES.pack(features))


def decode_features(body: memoryview, flags: int, request_id: int, at: int, end: int, max_entry_size: int) -> FeaturesRequest:
    # Bits this bookie does not know are ignored: a newer client may understand more.
    return FeaturesRequest(request_id, *fixed_request("FEATURES", _FEATURES, body, flags, at, end))


def encode_features_response(request_id: int, features: int) -> bytes:
    """OK with the feature bits this bookie will use on the connection."""
    return pack_message(Op.FEATURES, Status.OK, request_id, _FEATURES.pack(features))


def decode_features_response(body: memoryview, status: Status, request_id: int, at: int, end: int) -> FeaturesResponse:
    if status != Status.OK:
        return FeaturesResponse(request_id, status, text(body, at, end))
    return FeaturesResponse(request_id, status, "", _FEATURES.unpack_from(body, at)[0])
