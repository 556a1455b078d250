"""Work started in the blocking client's loop and collected later
(:meth:`bkframe.client.blocking.BlockingClient.run_ahead`).

Part of the blocking facade; apart so that :mod:`bkframe.client.blocking` stays readable.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar, cast

import anyio

from bkframe.errors import BKError

T = TypeVar("T")


class RunAhead(Generic[T]):
    """Work started in the client's loop by :meth:`BlockingClient.run_ahead`."""

    def __init__(self, token: anyio.lowlevel.EventLoopToken, alive: Callable[[], bool]) -> None:
        self._token = token
        #: Whether the loop still runs (a cancel then has something to cancel).
        self._alive = alive
        # Made in the loop, by _run (a cancel scope belongs to its event loop).
        self._scope: anyio.CancelScope | None = None
        self._cancelled = False
        self._done = threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None

    async def _run(self, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...]) -> None:
        finished = False
        try:
            with anyio.CancelScope() as self._scope:
                if self._cancelled:
                    self._scope.cancel()
                self._value = await fn(*args)
                finished = True
        except Exception as e:  # noqa: BLE001 - handed to the caller of result()
            self._error = e
        finally:
            if not finished and self._error is None:
                self._error = BKError("work run ahead was cancelled (by cancel(), or the client closed)")
            self._done.set()

    def result(self) -> T:
        """Wait for the work; its value, or what it raised."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        return cast(T, self._value)

    def cancel(self) -> None:
        """Cancel the work, if it still runs (its outcome is dropped)."""
        if not self._done.is_set() and self._alive():
            try:
                anyio.from_thread.run_sync(self._cancel_in_loop, token=self._token)
            except RuntimeError:
                pass  # the client closed meanwhile, and that cancelled the work

    def _cancel_in_loop(self) -> None:
        self._cancelled = True  # (if _run has not started yet, it cancels itself first thing)
        if self._scope is not None:
            self._scope.cancel()
