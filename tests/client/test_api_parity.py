"""The blocking facade and the async client are one API: every public method, property and
attribute of an async class has a blocking twin of the same name and signature.

A twin has the same parameters (names, order, kinds, defaults, annotations) and returns the
blocking twin of what the async one returns: ``WriteHandle`` -> ``BlockingWriteHandle``,
``AsyncIterator[X]`` -> ``BlockingTail[X]``, ``list[LogReader]`` -> ``list[BlockingLogReader]``.
What one side has and the other must not is listed below, each with its reason; an entry
that is no longer true fails too, so the lists stay short.
"""

from __future__ import annotations

import ast
import functools
import inspect
import operator
import subprocess
import sys
import textwrap
import types
import typing
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import prometheus_client
import pyarrow
import pyarrow.dataset
import pytest

import bkframe
from bkframe import (
    BlockingClient,
    BlockingLogReader,
    BlockingLogs,
    BlockingLogWriter,
    BlockingMessage,
    BlockingReadHandle,
    BlockingSubscription,
    BlockingTail,
    BlockingWriteHandle,
    Client,
    LogReader,
    Logs,
    LogWriter,
    Message,
    ReadHandle,
    Subscription,
    WriteHandle,
)

TWINS: dict[type, type] = {
    Client: BlockingClient,
    WriteHandle: BlockingWriteHandle,
    ReadHandle: BlockingReadHandle,
    Logs: BlockingLogs,
    LogWriter: BlockingLogWriter,
    LogReader: BlockingLogReader,
    Subscription: BlockingSubscription,
    Message: BlockingMessage,
}
#: Async protocol methods and the blocking ones they become.
DUNDER_TWINS = {"__aenter__": "__enter__", "__aexit__": "__exit__", "__aiter__": "__iter__", "__anext__": "__next__"}
PUBLIC_DUNDERS = {*DUNDER_TWINS, *DUNDER_TWINS.values()}

#: Public on the async side, deliberately without a blocking twin.
ASYNC_ONLY = {
    "Client.context": "the client's insides (nursery, pool, metadata store): async objects, used inside the loop "
    "(reach them as bk.client.context in a function given to bk.run)",
    "Client.metadata": "the metadata store: an async object, used inside the loop (bk.client.metadata in bk.run)",
    "Client.pool": "the bookie connection pool: an async object, used inside the loop (bk.client.pool in bk.run)",
    "Logs.store": "the metadata store: an async object, used inside the loop (bk.client.metadata in bk.run)",
    "Subscription.owner": "the subscription's owner as the consumer reaches it: an async object, used inside the loop",
    "Logs.owned_subscriptions": "the owners this client runs: async objects (their numbers are on the metrics registry)",
    "WriteHandle.append_async": "returns a PendingAppend to await in the loop; blocking code appends with "
    "append (one) or append_many (pipelined)",
    "WriteHandle.append_many_async": "returns PendingAppends to await in the loop; blocking code uses append_many",
    "LogWriter.append_async": "returns a PendingLogAppend to await in the loop; blocking code uses append_many",
    "LogWriter.append_many_async": "returns a PendingLogBatch to await in the loop; blocking code uses append_many",
}
#: Public on the blocking side only.
BLOCKING_ONLY = {
    "BlockingClient.client": "the async client inside, for async functions given to run()",
    "BlockingClient.run": "runs an async function in the client's loop: several calls in one hop",
    "BlockingClient.run_ahead": "starts an async function in the client's loop and returns at once (read ahead)",
    "BlockingClient.alive": "whether the client's thread and loop still run (the async client lives for its block)",
    "BlockingClient.close": "ends the client's thread; the async client ends with its `async with open_client` block",
    "BlockingClient.__enter__": "the blocking client is its own context manager; the async one's is open_client",
    "BlockingClient.__exit__": "(see __enter__)",
    "BlockingWriteHandle.handle": "the async handle inside, for functions given to BlockingClient.run",
    "BlockingReadHandle.handle": "the async handle inside, for functions given to BlockingClient.run",
    "BlockingLogWriter.writer": "the async writer inside, for functions given to BlockingClient.run",
    "BlockingLogReader.reader": "the async reader inside, for functions given to BlockingClient.run",
    "BlockingSubscription.sub": "the async consumer inside, for functions given to BlockingClient.run",
    "BlockingMessage.message": "the async message inside, for functions given to BlockingClient.run",
    "BlockingLogReader.record_batch_reader": "a pyarrow.RecordBatchReader pulls batches synchronously as DuckDB or "
    "Polars scan it; async code iterates arrow_batches",
}
#: Keyword-only parameters (with defaults) that only the blocking twin takes.
BLOCKING_EXTRA_PARAMETERS = {
    "BlockingReadHandle.tail": {"idle_timeout_s": "a plain iterator cannot be cancelled from outside: it ends when idle"},
    "connect": {
        "timeout_s": "bounds opening the metadata store; `async with` is bounded by the caller's cancel scope",
        "loop": "the event loop of the blocking client's thread; the async client runs in the caller's",
    },
}
#: Twins that return another type than the rule gives, with the reason.
BLOCKING_RETURNS = {
    "BlockingWriteHandle.append_many": (
        list[int],
        "a list, as it always did (callers compare it with lists); the async one returns the ids as a range",
    ),
}
#: Parameters whose name starts with "_" are the callee's own (ReadHandle.read_lac's _retry), not API.


def blocking_type(hint: Any) -> Any:
    """The type a blocking twin gives where the async API gives ``hint``."""
    if isinstance(hint, type) and hint in TWINS:
        return TWINS[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is AsyncIterator:
        return BlockingTail[blocking_type(args[0])]  # type: ignore[misc]
    if origin in (types.UnionType, typing.Union):
        return functools.reduce(operator.or_, [blocking_type(a) for a in args])
    if origin is not None and args:
        return origin[tuple(blocking_type(a) for a in args)]
    return hint


def hints(fn: Callable[..., Any]) -> dict[str, Any]:
    # Names a module imports only for type checking are found among bkframe's public ones.
    # Annotations name pyarrow as `pa` (and pyarrow.dataset as `ds`) under TYPE_CHECKING (an optional dependency),
    # and prometheus_client's CollectorRegistry (imported when a client's metrics are first read).
    public = {name: getattr(bkframe, name) for name in bkframe.__all__}  # imported on first use: not all in vars()
    localns = {**public, "pa": pyarrow, "ds": pyarrow.dataset, "CollectorRegistry": prometheus_client.CollectorRegistry}
    return typing.get_type_hints(fn, localns=localns)


def instance_attributes(cls: type) -> set[str]:
    """The public attributes ``__init__`` sets on ``self`` (the class and its bases)."""
    names: set[str] = set()
    for klass in cls.__mro__[:-1]:
        init = vars(klass).get("__init__")
        if init is None:
            continue
        for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(init)))):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    names.add(t.attr)
    return {n for n in names if not n.startswith("_")}


def members(cls: type) -> dict[str, Any]:
    """Public name -> the class attribute (function, property), or None for an instance attribute."""
    found: dict[str, Any] = dict.fromkeys(instance_attributes(cls))
    for klass in reversed(cls.__mro__[:-1]):
        for name, value in vars(klass).items():
            if (not name.startswith("_") or name in PUBLIC_DUNDERS) and not isinstance(value, type):
                found[name] = value
    return found


def parameters(fn: Callable[..., Any], extra: dict[str, str] | None = None) -> list[tuple[str, str, Any, Any]]:
    """(name, kind, default, annotation) of each parameter but ``self``, ``_private`` ones and ``extra``."""
    types_ = hints(fn)
    return [
        (p.name, p.kind.name, p.default, types_.get(p.name))
        for p in inspect.signature(fn).parameters.values()
        if p.name != "self" and not p.name.startswith("_") and p.name not in (extra or {})
    ]


def value_type(member: Any) -> Any:
    """A property's type (None for a plain attribute: its type is not written anywhere)."""
    fget = member.fget if isinstance(member, property) else getattr(member, "func", None)
    return None if fget is None else hints(fget).get("return")


def differences(
    async_cls: type,
    blocking_cls: type,
    async_only: dict[str, str] = ASYNC_ONLY,
    blocking_only: dict[str, str] = BLOCKING_ONLY,
) -> list[str]:
    """Every way ``blocking_cls`` is not the blocking twin of ``async_cls``."""
    a_members, b_members = members(async_cls), members(blocking_cls)
    problems: list[str] = []
    for name, a in sorted(a_members.items()):
        if f"{async_cls.__name__}.{name}" in async_only:
            continue
        twin = DUNDER_TWINS.get(name, name)
        where = f"{blocking_cls.__name__}.{twin}"
        if twin not in b_members:
            problems.append(f"{where} is missing (the twin of {async_cls.__name__}.{name})")
            continue
        b = b_members[twin]
        if inspect.isfunction(a):
            if not inspect.isfunction(b):
                problems.append(f"{where} should be a method")
                continue
            extra = BLOCKING_EXTRA_PARAMETERS.get(where, {})
            for p in (q for q in inspect.signature(b).parameters.values() if q.name in extra):
                if p.kind != p.KEYWORD_ONLY or p.default is p.empty:
                    problems.append(f"{where}: the extra parameter {p.name} must be keyword-only with a default")
            want = [(n, k, d, blocking_type(t)) for n, k, d, t in parameters(a)]
            if parameters(b, extra) != want:
                problems.append(f"{where} takes {parameters(b, extra)}, its async twin {want}")
            expected = BLOCKING_RETURNS.get(where, (blocking_type(hints(a).get("return")), ""))[0]
            if (got := hints(b).get("return")) != expected and not (got is typing.Self and expected is blocking_cls):
                problems.append(f"{where} returns {got}, expected {expected}")
        elif inspect.isfunction(b):
            problems.append(f"{where} should be a property or attribute, as {async_cls.__name__}.{name} is")
        elif (a_type := value_type(a)) is not None and value_type(b) != blocking_type(a_type):
            problems.append(f"{where} is {value_type(b)}, expected {blocking_type(a_type)}")
    twins = {DUNDER_TWINS.get(n, n) for n in a_members}
    for name in sorted(set(b_members) - twins):
        if f"{blocking_cls.__name__}.{name}" not in blocking_only:
            problems.append(f"{blocking_cls.__name__}.{name} has no async twin (add one, or list it in BLOCKING_ONLY)")
    return problems


@pytest.mark.parametrize("async_cls", list(TWINS), ids=lambda c: c.__name__)
def test_every_blocking_class_is_the_twin_of_its_async_class(async_cls: type) -> None:
    problems = differences(async_cls, TWINS[async_cls])
    assert not problems, "\n".join(problems)


def test_connect_takes_what_open_client_takes() -> None:
    extra = BLOCKING_EXTRA_PARAMETERS["connect"]
    assert parameters(bkframe.connect, extra) == parameters(bkframe.open_client)
    # connect's own keywords are the blocking client's, declared there once.
    own = {n: p for n, p in inspect.signature(BlockingClient).parameters.items() if p.kind is p.KEYWORD_ONLY}
    assert {n: p for n, p in inspect.signature(bkframe.connect).parameters.items() if n in extra} == own
    assert set(own) == set(extra)
    assert inspect.signature(bkframe.connect).parameters["timeout_s"].kind == inspect.Parameter.KEYWORD_ONLY
    assert hints(bkframe.connect)["return"] is BlockingClient


def test_the_exclusions_are_still_true() -> None:
    by_name = {c.__name__: c for pair in TWINS.items() for c in pair}
    for key in ASYNC_ONLY:
        cls, name = key.split(".")
        assert name in members(by_name[cls]), f"ASYNC_ONLY lists {key}, which is gone"
        assert name not in members(TWINS[by_name[cls]]), f"ASYNC_ONLY lists {key}, which has a twin now"
    async_names = {b.__name__: {DUNDER_TWINS.get(n, n) for n in members(a)} for a, b in TWINS.items()}
    for key in BLOCKING_ONLY:
        cls, name = key.split(".")
        assert name in members(by_name[cls]), f"BLOCKING_ONLY lists {key}, which is gone"
        assert name not in async_names[cls], f"BLOCKING_ONLY lists {key}, which has an async twin now"
    for key, extra in BLOCKING_EXTRA_PARAMETERS.items():
        cls, _, name = key.rpartition(".")
        fn = getattr(by_name[cls], name) if cls else getattr(bkframe, name)
        assert set(extra) <= set(inspect.signature(fn).parameters), f"{key} has no parameter {set(extra)}"
    for key in BLOCKING_RETURNS:
        cls, name = key.split(".")
        assert name in members(by_name[cls]), f"BLOCKING_RETURNS lists {key}, which is gone"


# -- the checker itself ------------------------------------------------------------------


class _Async:
    def __init__(self) -> None:
        self.name = "n"

    @property
    def handle(self) -> WriteHandle:
        raise NotImplementedError

    async def get(self, first: int, *, password: bytes = b"") -> list[ReadHandle]:
        raise NotImplementedError

    async def tail(self, start: int = 0) -> AsyncIterator[int]:
        yield start

    async def __aenter__(self) -> _Async:
        return self


class _Blocking:
    name = "n"

    @property
    def handle(self) -> BlockingWriteHandle:
        raise NotImplementedError

    def get(self, first: int, *, password: bytes = b"") -> list[BlockingReadHandle]:
        raise NotImplementedError

    def tail(self, start: int = 0) -> BlockingTail[int]:
        raise NotImplementedError

    def __enter__(self) -> _Blocking:
        return self


def test_the_checker_accepts_a_true_twin() -> None:
    TWINS[_Async] = _Blocking
    try:
        assert differences(_Async, _Blocking) == []
    finally:
        del TWINS[_Async]


@pytest.mark.parametrize(
    "source, complaint",
    [
        ("def get(self, first: int, *, pasword: bytes = b'') -> list[BlockingReadHandle]: ...", "_Blocking.get takes"),
        ("def get(self, first: int, password: bytes = b'') -> list[BlockingReadHandle]: ...", "_Blocking.get takes"),
        ("def get(self, first: int, *, password: bytes = b'x') -> list[BlockingReadHandle]: ...", "_Blocking.get takes"),
        ("def get(self, first: str, *, password: bytes = b'') -> list[BlockingReadHandle]: ...", "_Blocking.get takes"),
        ("def get(self, first: int, *, password: bytes = b'') -> list[ReadHandle]: ...", "_Blocking.get returns"),
        ("def tail(self, start: int = 0) -> list[int]: ...", "_Blocking.tail returns"),
        ("def extra(self) -> None: ...", "_Blocking.extra has no async twin"),
        ("handle = property(lambda self: None)", "_Blocking.handle is None"),
        ("get = property(lambda self: None)", "_Blocking.get should be a method"),
    ],
)
def test_the_checker_catches_drift(source: str, complaint: str) -> None:
    namespace: dict[str, Any] = {}
    exec(f"class Drifted(_Blocking):\n    {source}", {**globals(), "__name__": __name__}, namespace)
    drifted = type("_Blocking", (namespace["Drifted"],), {})
    TWINS[_Async] = _Blocking
    try:
        problems = differences(_Async, drifted)
    finally:
        del TWINS[_Async]
    assert problems and all(p.startswith(complaint) for p in problems), problems


def test_the_checker_notices_a_missing_twin() -> None:
    class Missing:
        name = "n"

    assert "Missing.get is missing (the twin of _Async.get)" in differences(_Async, Missing)


def test_the_blocking_twins_are_generated_from_the_async_classes() -> None:
    """Signatures, defaults and docstrings live once, in the async classes: the generated
    module is what scripts/gen_blocking.py writes from them today."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "scripts/gen_blocking.py", "--check"], cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
