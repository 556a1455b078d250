"""A request's answer to come: what a connection to a bookie hands back for each request
it sends (:mod:`bkframe.client.bookies.connection`), awaited by one task or delivered to a callback."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar, cast

import anyio
import attrs

from bkframe.client.bookies.errors import BookieConnectionError
from bkframe.core.interfaces import Buffer
from bkframe.errors import ProtocolError
from bkframe.proto.base import ErrorResponse, Reply

R = TypeVar("R", bound=Reply)


@attrs.define(slots=True, eq=False)
class Completion:
    """Done once, and awaited by whoever cares. The wake-up event is made by the first task
    that waits before it is done: a writer's adds are followed by callbacks, and an event
    per request would be made for nobody. Also a writer's appends
    (:class:`~bkframe.client.write_handle.PendingAppend`)."""

    _done: bool = attrs.field(default=False, init=False)
    _event: anyio.Event | None = attrs.field(default=None, init=False)

    def done(self) -> bool:
        return self._done

    async def _until_done(self) -> None:
        if not self._done:
            if self._event is None:
                self._event = anyio.Event()
            await self._event.wait()

    def _mark_done(self) -> None:
        self._done = True
        if self._event is not None:
            self._event.set()


class PendingResponse(Completion, Generic[R]):
    """A response that will come; ``await pending.wait()`` returns it, as its request's
    response class (``kind``) whatever the bookie answered: an ERROR message (a request it
    could not parse or serve) comes as that class with the ERROR's status and message."""

    __slots__ = ("_error", "_response", "callback", "deadline", "kind", "parts", "submitted", "timeout_s")

    def __init__(
        self,
        kind: type[R],
        deadline: float = float("inf"),
        parts: list[Buffer] | None = None,
        submitted: float = 0.0,
        timeout_s: float = 0.0,
    ) -> None:
        super().__init__()
        self.kind = kind
        #: event loop clock time after which the request fails with :class:`BookieTimeoutError`.
        self.deadline = deadline
        #: What was sent, when, and each try's timeout: to send it again on TRY_AGAIN.
        self.parts = parts
        self.submitted = submitted
        self.timeout_s = timeout_s
        self._response: R | None = None
        self._error: BaseException | None = None
        #: Called synchronously with (response, None) or (None, error) when it completes;
        #: lets a writer track thousands of adds without a task each.
        self.callback: Callable[[R | None, BaseException | None], None] | None = None

    async def wait(self) -> R:
        await self._until_done()
        if self._error is not None:
            raise self._error
        assert self._response is not None
        return self._response

    def result(self) -> R:
        """The response of a done request (raises its error); no waiting, no checkpoint."""
        if not self._done:
            raise RuntimeError("the response has not come yet")
        if self._error is not None:
            raise self._error
        assert self._response is not None
        return self._response

    def complete(self, response: Reply | None, error: BaseException | None = None) -> None:
        """Complete it from outside a connection: a request relayed to a bookie still being
        connected to (:meth:`~bkframe.client.bookies.pool.BookiePool.request`). The first completion wins."""
        if self._done:
            return
        if response is not None:
            self._set(response)
        else:
            self._fail(error if error is not None else BookieConnectionError("no answer"))

    def _set(self, response: Reply) -> None:
        if type(response) is not self.kind and self.kind is not Reply:
            if type(response) is not ErrorResponse:
                self._fail(ProtocolError(f"a {type(response).__name__} answered a request that expects a {self.kind.__name__}"))
                return
            response = self.kind(response.request_id, response.status, response.message)
        self._finish(cast(R, response), None)

    def _fail(self, error: BaseException) -> None:
        if not self._done:
            self._finish(None, error)

    def _finish(self, response: R | None, error: BaseException | None) -> None:
        self._response, self._error = response, error
        self._mark_done()
        if self.callback is not None:
            self.callback(response, error)
