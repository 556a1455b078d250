"""Known errors become one line and exit status 1: never a traceback, never an ExceptionGroup.

Anything bkframe raises on purpose derives from :class:`bkframe.BKError`; trio wraps the
errors of tasks in exception groups. :class:`Group` (the ``bkframe`` command group) turns a
BKError -- alone, or as the only kind of error in a group -- into click's ``Error: ...``.
Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from typing import Any

import click

from bkframe.errors import BKError

KNOWN = (BKError, click.ClickException)


def known_error(error: BaseException) -> BaseException | None:
    """The error to show for ``error``, or None if it is not (only) a known one."""
    if isinstance(error, KNOWN):
        return error
    if isinstance(error, BaseExceptionGroup):
        known, rest = error.split(KNOWN)
        if rest is None and known is not None:
            leaf: BaseException = known
            while isinstance(leaf, BaseExceptionGroup):
                leaf = leaf.exceptions[0]
            return leaf
    return None


class Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as e:
            known = known_error(e)
            if known is None:
                raise
            if isinstance(known, click.ClickException):
                raise known from None
            raise click.ClickException(str(known)) from None
