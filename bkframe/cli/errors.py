"""Turning known errors into one-line command-line errors."""

from __future__ import annotations


def find_error(error: BaseException, kinds: tuple[type[BaseException], ...]) -> BaseException | None:
    """The first error of one of ``kinds`` in ``error`` (trio wraps task errors in groups)."""
    if isinstance(error, kinds):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = find_error(inner, kinds)
            if found is not None:
                return found
    return None
