"""``import bkframe``: typed, eager names listed in ``__all__``; one error root."""

from __future__ import annotations

import inspect

import pluggy

import bkframe
import bkframe.core.metadata
import bkframe.errors


def test_every_public_name_is_there_eagerly() -> None:
    assert "__getattr__" not in vars(bkframe), "names are imported, not looked up lazily"
    for name in bkframe.__all__:
        assert name in vars(bkframe), name
    for name in ("open_client", "connect", "Client", "WriteHandle", "ReadHandle", "Entry", "ClientSettings",
                 "hookimpl", "BKError", "LedgerDeletedError", "NoSuchLedgerError"):
        assert name in bkframe.__all__, name
    assert isinstance(bkframe.hookimpl, pluggy.HookimplMarker)
    assert inspect.signature(bkframe.open_client).return_annotation != inspect.Signature.empty


def test_one_error_root_and_one_no_such_ledger() -> None:
    errors = [obj for obj in vars(bkframe.errors).values() if isinstance(obj, type) and issubclass(obj, Exception)]
    assert errors and all(issubclass(e, bkframe.BKError) for e in errors)
    assert bkframe.core.metadata.NoSuchLedgerError is bkframe.NoSuchLedgerError
    assert issubclass(bkframe.ConfigError, ValueError) and issubclass(bkframe.LedgerDeletedError, bkframe.LedgerFencedError)
