"""bkframe's errors reach a Spark user as the first line of what Spark shows.

Spark reports an error of a Python data source as text: ``[PYTHON_DATA_SOURCE_ERROR]
Failed to initialize Python data source reader: `` and then the Python traceback, whose
first line is ``Traceback (most recent call last):`` and whose last is the message -- 5 to
40 lines below. A traceback starts with the causes of the error, and a cause that was never
raised has no frames: it prints as one line, ``Type: message``. So :func:`message_first`
gives each bkframe error a copy of itself as its cause, never raised: the message comes
first, the full traceback follows.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

from bkframe.errors import BKError

F = TypeVar("F", bound=Callable[..., Any])


def summary(error: BaseException) -> BaseException:
    """A copy of ``error`` with its message and no traceback, cause or context."""
    copy = type(error).__new__(type(error))
    copy.args = error.args
    return copy


def message_first(fn: F) -> F:
    """Wrap a data source method (run on the driver) so that a bkframe error it raises shows
    its message as the first line (see the module's text)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except BKError as e:
            raise e from summary(e)

    return cast(F, wrapper)
