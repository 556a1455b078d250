"""Small things most tests of a bkframe cluster need, in one place: a password, payloads a
reader can check, and client timeouts short enough for a test that kills bookies.

Plugin authors' tests use them as bkframe's own do::

    from bkframe.testing.kit import FAST, PASSWORD, payload

    async with bkframe.open_client(cluster.metadata, **FAST) as client:
        w = await client.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=PASSWORD)
        await w.append(payload("a", 0))
"""

from __future__ import annotations

import hashlib
import inspect
import os
import subprocess
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, NoReturn, TypeVar

import trio

T = TypeVar("T")

#: The ledger (and log) password of tests that do not test passwords.
PASSWORD: Final = b"pw"

#: Client settings for tests that stop, hang or kill bookies: a request to a dead bookie
#: fails in seconds rather than the defaults' tens of seconds, and a slow replica is read
#: around quickly. ``open_client(uri, **FAST)`` / ``connect(uri, **FAST)``.
FAST: Final[dict[str, float]] = {
    "add_timeout_s": 2.0,
    "read_timeout_s": 2.0,
    "speculative_read_timeout_s": 0.3,
}


def payload(*key: object, size: int = 0) -> bytes:
    """The payload named by ``key`` (e.g. ``payload(ledger_id, entry_id)``): readable, distinct
    for distinct keys, the same on every call, so a test can check what it reads back
    without keeping what it wrote. ``size``: exactly that many bytes (filled with bytes
    derived from the key, so two large payloads differ all along, not only in a prefix)."""
    name = "-".join(map(str, key)).encode()
    if size <= 0:
        return name
    if size <= len(name):
        return name[:size]
    block = hashlib.sha256(name).digest()
    fill = (block * (size // len(block) + 1))[: size - len(name) - 1]
    return name + b":" + fill


def release_together(procs: Sequence[subprocess.Popen[str]], timeout_s: float = 120) -> list[int]:
    """Start the work of several processes at one moment, so that what they do overlaps (two
    writers racing compare-and-sets): each prints ``ready`` once connected, then waits for a
    line on stdin. Blocking (run it with ``trio.to_thread.run_sync``); the exit statuses, in
    order; a process still running when this fails is killed."""
    try:
        for p in procs:  # all connected before any starts
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        return [p.wait(timeout=timeout_s) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


async def wait_until(check: Callable[[], T | Awaitable[T]], what: str, timeout_s: float = 60.0, *, every_s: float = 0.05) -> T:
    """Wait on a condition, never on the clock: call ``check`` (a function, or an async one)
    every ``every_s`` until it returns something true, and return that. After ``timeout_s``
    (a bound for a broken run, not a time the test measures) fail with an AssertionError
    that says ``what`` was awaited."""
    with trio.move_on_after(timeout_s):
        while True:
            result = check()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return result  # type: ignore[return-value]
            await trio.sleep(every_s)
    raise AssertionError(f"waited {timeout_s:g} s for {what}")


def missing(what: str, remedy: str) -> NoReturn:
    """A test cannot run here because ``what`` is missing (a server, a tool, root): it fails
    under ``CI=true`` -- CI must have it, and a skip there would pass unseen -- and is
    skipped elsewhere. ``remedy`` says how to get it (``scripts/test`` installs ...)."""
    import pytest

    message = f"{what}; {remedy}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message} (CI=true: a test whose needs are missing fails)", pytrace=False)
    pytest.skip(message)
