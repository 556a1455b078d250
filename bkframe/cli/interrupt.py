"""Ctrl-C and SIGTERM for the one-shot commands: close what was opened, say so in one line,
exit 130 or 143.

A command runs its trio code through :func:`run` instead of ``trio.run``. The first SIGINT
or SIGTERM cancels the command's *work* -- the innermost scope it marked with :func:`work`
(``ledger append``: reading stdin; then the appends in flight are acknowledged and printed),
or all of it when none is open -- and lets the ``async with`` blocks and ``finally`` clauses close
what they opened: a ledger closed at its last acknowledged entry, a log writer released,
cursor acks stored, a private cluster stopped. Marking only the work is what lets a client
stay up while its ledger is closed: cancelling the whole command would cancel the client's
own connections first. Each closing step says what it did with :func:`closed` (code outside
trio too: ``its bookie stopped``); :func:`run` raises :class:`Interrupted`, and the root
command group (:func:`reported`), once every block of the command has closed, prints
``interrupted: ledger 12 closed at entry 11852`` (``terminated: ...`` for SIGTERM) on stderr,
no traceback, and exits 128 + the signal's number, as a shell reports a process that signal
killed. A second signal exits at once, closing nothing more. Outside :func:`run` SIGINT is
Python's KeyboardInterrupt, and :func:`reported` makes SIGTERM raise alike, so that a
command's ``finally`` stops the private bookies it started before anything else. Both hold
however the command was started: a shell starts a background job with SIGINT ignored, and
Python then leaves it ignored, while :func:`run` takes it all the same -- a Ctrl-C sent
before :func:`run` was lost, one after it was not (``bench appends``, SIGINTed while its
bookie started, ran its whole benchmark).

Closing steps run in shielded scopes with a timeout at their call site (:func:`closing`), so
a dead bookie cannot hold the exit; :data:`GRACE_S` after the first signal, whatever is still
running is cancelled too.

The services (``bookie``, ``autorecovery``, ``offloader``) stop on a signal by design and exit
0 (:func:`run_until_signal`): a supervisor's stop is their normal end, and systemd counts an
exit status of 143 as a failure.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar, cast

import attrs
import click

from bkframe.cli.errors import known_error, message
from bkframe.errors import BKError

if TYPE_CHECKING:  # trio is imported where a command runs trio code, never by --help or --version
    import trio

    from bkframe.client.logs.writer import LogWriter
    from bkframe.client.write_handle import WriteHandle

T = TypeVar("T")

#: After the first signal the command's closing steps have this long before everything
#: still running is cancelled (each step has a shorter timeout of its own).
GRACE_S = 30.0
#: What one closing step (a ledger's close, a log writer's release) may take at most.
CLOSE_TIMEOUT_S = 15.0
#: The word the one line starts with, by signal.
WORDS = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}


@attrs.define(eq=False)
class Interruption:
    """One command's signal state: which signal came, what its work is, what was closed."""

    signum: int | None = None
    #: What the command closed or left, in order, for the one line.
    done: list[str] = attrs.Factory(list)
    #: The scopes :func:`work` marked, innermost last: the first signal cancels the innermost.
    scopes: list[trio.CancelScope] = attrs.Factory(list)
    #: The whole command (cancelled by the first signal when no work scope is open); made by :func:`run`.
    outer: trio.CancelScope | None = None

    def stop(self, signum: int) -> None:
        """Cancel the innermost work scope (the whole command if none is open)."""
        import trio

        self.signum = signum
        if self.outer is None:  # no trio code is running: nothing to cancel
            return
        if self.scopes:
            self.scopes[-1].cancel()
            self.outer.deadline = min(self.outer.deadline, trio.current_time() + GRACE_S)
        else:
            self.outer.cancel()

    def line(self) -> str:
        word = WORDS.get(signal.Signals(self.signum or signal.SIGINT), "interrupted")
        return f"{word}: {'; '.join(self.done)}" if self.done else word


class Interrupted(SystemExit):
    """A signal stopped the command: its exit status, and what it closed (the root command
    group prints the one line once every block of the command has closed)."""

    def __init__(self, state: Interruption) -> None:
        super().__init__(128 + (state.signum or signal.SIGINT))
        self.state = state


#: The running command's signal state, made for each command by :func:`reported`.
_state: Interruption | None = None


def interrupted() -> bool:
    """Whether a signal has stopped the running command."""
    return _state is not None and _state.signum is not None


def closed(what: str) -> None:
    """Say what the command closed (``ledger 12 closed at entry 11852``, ``its bookie
    stopped``): the one line printed when a signal stopped the command names it."""
    _command().done.append(what)


def _terminate(signum: int, frame: object) -> None:
    state = _command()
    state.signum = state.signum or signum
    raise Interrupted(state)


def _command() -> Interruption:
    """The running command's state (made by :func:`reported`; here, when a command runs
    without the root group, as tests invoke one)."""
    global _state
    if _state is None:
        _state = Interruption()
    return _state


@contextmanager
def reported() -> Iterator[None]:
    """Around a whole command (the root group's ``invoke``): outside :func:`run`, SIGTERM
    raises as Ctrl-C does (so that ``finally`` stops a private bookie), and Ctrl-C raises
    KeyboardInterrupt even if the command inherited SIGINT ignored; an interrupted command's
    one line is printed here, after every block has closed, and it exits 128 + the signal's
    number."""
    global _state
    _state = state = Interruption()
    main_thread = threading.current_thread() is threading.main_thread()
    previous: dict[int, Any] = {}
    if main_thread:  # (SIGINT's first: a SIGTERM handler in /proc/PID/status says both are in)
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
        previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    except (Interrupted, KeyboardInterrupt) as e:  # KeyboardInterrupt: outside run(), Python's SIGINT handler
        stopped = e.state if isinstance(e, Interrupted) else state
        stopped.signum = stopped.signum or signal.SIGINT
        sys.stdout.flush()
        click.echo(stopped.line(), err=True)
        raise SystemExit(128 + stopped.signum) from None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


@contextmanager
def work() -> Iterator[trio.CancelScope]:
    """A part of a command the first signal cancels (reading input, following a log) while
    it is the innermost one open, leaving what encloses it (the client) up while the command
    closes what it opened. Entered after the signal, it is cancelled at once."""
    import trio

    state = _state
    with trio.CancelScope() as scope:
        if state is None:
            yield scope
            return
        if state.signum is not None:
            scope.cancel()
        state.scopes.append(scope)
        try:
            yield scope
        finally:
            state.scopes.remove(scope)


def closing(timeout_s: float = CLOSE_TIMEOUT_S) -> trio.CancelScope:
    """A scope for one closing step: shielded from the signal's cancellation, bounded by
    ``timeout_s`` (``with closing(): await writer.close()``; check ``cancelled_caught``)."""
    import trio

    return trio.CancelScope(deadline=trio.current_time() + timeout_s, shield=True)


async def close_ledger(writer: WriteHandle, *, keep_open: bool = False) -> None:
    """A signal's closing step for a ledger the command appended to: closed at its last
    acknowledged entry (bounded, shielded), and said so."""
    ledger_id = writer.ledger_id
    if keep_open:
        closed(f"ledger {ledger_id} left open at entry {writer.lac} (--keep-open)")
        return
    later = f"`bkframe ledger close {ledger_id}` closes it"
    md = await _close_step(writer.close, lambda why: f"ledger {ledger_id} left open ({why}); {later}")
    if md is not None:
        closed(f"ledger {ledger_id} closed at entry {md.last_entry_id}")


async def release_log(writer: LogWriter) -> None:
    """A signal's closing step for a log the command wrote: its segment closed and the log
    given up, so that the next writer opens it at once (bounded, shielded), and said so."""
    record = await _close_step(writer.close, lambda why: f"log {writer.name} not released ({why}); the next writer recovers it")
    if record is None:
        return
    written = [s for s in record.segments if s.closed and s.last_entry_id >= 0]
    last = f"its last record {written[-1].number}:{written[-1].last_entry_id}" if written else "it holds no record"
    closed(f"log {writer.name} released ({last})")


async def _close_step(close: Callable[[], Awaitable[T]], failed: Callable[[str], str]) -> T | None:
    """``close()`` within :func:`closing`: what it returned, or None once it failed or ran out
    of time and ``failed(why)`` was said."""
    with closing():
        try:
            return await close()
        except BKError as e:
            closed(failed(str(e)))
            return None
    # Only the deadline ends the scope without a return.
    closed(failed(f"its close took over {CLOSE_TIMEOUT_S:g} s"))
    return None


async def _watch(signals: AsyncIterator[int], state: Interruption) -> None:
    async for signum in signals:
        if state.signum is None:
            state.stop(signum)
            continue
        # The second signal: the user does not want to wait for the closing.
        sys.stdout.flush()
        word = WORDS.get(signal.Signals(signum), "interrupted")
        click.echo(f"{word} again: exiting at once; {'; '.join(state.done) or 'nothing was closed'}", err=True)
        os._exit(128 + signum)


def run(main: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``trio.run(main, *args)``, stopped by SIGINT or SIGTERM as the module docstring says:
    then it raises :class:`Interrupted` (the root group prints the one line and exits 128 +
    the signal's number). In a thread other than the main one it is ``trio.run``."""
    import trio

    state = _command()
    state.outer = outer = trio.CancelScope()  # a scope is entered once: one for each run of the command

    async def runner() -> T | None:
        result: T | None = None
        if threading.current_thread() is not threading.main_thread():
            return await main(*args)  # a command invoked in a thread (CliRunner): signals are the main thread's
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_watch, signals, state)
                with outer:
                    result = await main(*args)
                nursery.cancel_scope.cancel()
        return result

    try:
        result = trio.run(runner)
    except KeyboardInterrupt:  # before the signal receiver was open, or after it closed
        state.signum = state.signum or signal.SIGINT
        result = None
    except Exception as e:
        if state.signum is None:
            raise
        known = known_error(e)
        if known is None:
            raise
        state.done.append(f"then: {message(known)}")
        result = None
    except BaseExceptionGroup as group:  # (not an Exception: one that holds a BaseException)
        # Ctrl-C just before the receiver opened: trio raises it in the main task at its next
        # checkpoint, inside the nursery, which wraps it.
        if group.split(KeyboardInterrupt)[1] is not None:
            raise
        state.signum = state.signum or signal.SIGINT
        result = None
    if state.signum is not None:
        raise Interrupted(state)
    return cast(T, result)


# -- a service command (bookie, autorecovery, offloader): run until SIGTERM or SIGINT --

async def run_until_signal(start: Callable[..., Awaitable[Any]], started: str, logger: logging.Logger) -> None:
    """``await nursery.start(start)``, print ``started`` on stderr, then run until SIGTERM or
    SIGINT (logged), which cancels the service."""
    import trio

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(start)
            click.echo(started, err=True)
            async for signum in signals:
                logger.info("received %s; stopping", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break
