"""Known errors become one line and exit status 1: never a traceback, never an ExceptionGroup.

Anything bkframe raises on purpose derives from :class:`bkframe.BKError`; trio wraps the
errors of tasks in exception groups. :class:`Group` (the ``bkframe`` command group) turns a
known error -- alone, or as the only kind of error in a group -- into click's ``Error: ...``.
Known are a BKError, a click error, and an OSError that says what is wrong with this
machine rather than with bkframe (a port in use, a path that is a file, no permission, a
full or read-only disk): the user can act on each. Anything else is a bug: its traceback
is shown, followed by one line that says so.
"""

from __future__ import annotations

import errno
import os
import sys
import traceback
from typing import Any

import click

from bkframe.errors import BKError

#: OSErrors about the machine (its ports, paths, permissions, disks), not about bkframe.
USER_ERRNOS = frozenset({
    errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR, errno.ENOENT,
    errno.EEXIST, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH,
})


def is_user_error(error: BaseException) -> bool:
    """Whether ``error`` is one the user can act on (a leaf, not a group)."""
    if isinstance(error, (BKError, click.ClickException)):
        return True
    return isinstance(error, OSError) and error.errno in USER_ERRNOS


def known_error(error: BaseException) -> BaseException | None:
    """The error to show for ``error``, or None if it is not (only) a known one."""
    if is_user_error(error):
        return error
    if isinstance(error, BaseExceptionGroup):
        known, rest = error.split(is_user_error)
        if rest is None and known is not None:
            leaf: BaseException = known
            while isinstance(leaf, BaseExceptionGroup):
                leaf = leaf.exceptions[0]
            return leaf
    return None


#: The status of a command whose output pipe closed: a shell's for a process SIGPIPE killed.
EXIT_BROKEN_PIPE = 141

#: What to do about an OSError of the machine, by errno.
HINTS = {
    errno.EADDRINUSE: "another process listens on that port; stop it or choose another port",
    errno.EADDRNOTAVAIL: "that is no address of this machine; give one of its addresses",
    errno.EEXIST: "a file is in the way of a directory; give another path or move the file",
    errno.ENOTDIR: "a part of the path is a file, not a directory; give another path",
    errno.EISDIR: "it is a directory; give a file",
    errno.ENOENT: "check the path",
    errno.EACCES: "this user may not do that there; check the path and its permissions",
    errno.EPERM: "this user may not do that there; check the path and its permissions",
    errno.EROFS: "the filesystem is read-only; give a path on a writable one",
    errno.ENOSPC: "the disk is full; free space or give a path on another disk",
    errno.EDQUOT: "the disk quota is used up; free space or give a path on another disk",
}


def message(error: BaseException) -> str:
    """The one line shown for a known error."""
    if isinstance(error, OSError) and not isinstance(error, BKError):
        what = f"{error.strerror or error}: {error.filename}" if error.filename else str(error.strerror or error)
        hint = HINTS.get(error.errno or 0)
        return f"{what}: {hint}" if hint else what
    return str(error)


class Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BrokenPipeError:
            # The reader of our output went away (`bkframe plugins | head`): as cat(1) does,
            # stop without a word; stdout goes to /dev/null so that Python's own flush at exit
            # does not fail on the pipe again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(EXIT_BROKEN_PIPE)
        except Exception as e:  # noqa: BLE001 - every error ends here: a known one as a line, a bug with its traceback
            known = known_error(e)
            if known is None:
                # A bug: the traceback is what a report needs; the last line says what it is.
                traceback.print_exception(e, file=sys.stderr)
                click.echo(
                    f"Error: this is a bug in bkframe ({type(e).__name__}); please report it with the traceback above",
                    err=True,
                )
                ctx.exit(1)
            if isinstance(known, click.ClickException):
                raise known from None
            raise click.ClickException(message(known)) from None
