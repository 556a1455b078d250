"""Write bkframe/client/blocking_twins.py: the blocking twin of each async client class.

The async classes (``Client``, ``WriteHandle``, ``ReadHandle``, ``Logs``, ``LogWriter``,
``LogReader``) are the one source of every signature, default and docstring; this script
reads them (their source, by ``ast``, and the live classes) and writes a twin class for each
in which every public coroutine method becomes a plain method that runs it in the blocking
client's event loop, every property or public attribute a property, every async iterator a
:class:`~bkframe.client.blocking_tail.BlockingTail`, and every returned async class its twin.
What a twin does differently (an iterator that ends when idle, a batch materialized first)
is written by hand in :mod:`bkframe.client.blocking_extras`, which the twins inherit from;
a name defined there is not generated. In the manner of trio's ``gen_exports``.

    .venv/bin/python scripts/gen_blocking.py          # rewrite the generated module
    .venv/bin/python scripts/gen_blocking.py --check  # exit 1 if it is out of date

tests/client/test_api_parity.py checks the result against the async API independently.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bkframe" / "client" / "blocking_twins.py"

#: async class (module, name) -> (twin name, the attribute holding the async object, hand-written base).
TWINS: dict[tuple[str, str], tuple[str, str, str]] = {
    ("bkframe.client.client", "Client"): ("BlockingClient", "client", "ClientBase"),
    ("bkframe.client.write_handle", "WriteHandle"): ("BlockingWriteHandle", "handle", "WriteHandleExtras"),
    ("bkframe.client.read_handle", "ReadHandle"): ("BlockingReadHandle", "handle", "ReadHandleExtras"),
    ("bkframe.client.logs.api", "Logs"): ("BlockingLogs", "_logs", "LogsExtras"),
    ("bkframe.client.logs.writer", "LogWriter"): ("BlockingLogWriter", "writer", "LogWriterExtras"),
    ("bkframe.client.logs.reader", "LogReader"): ("BlockingLogReader", "reader", "LogReaderExtras"),
    ("bkframe.subscriptions.consumer", "Subscription"): ("BlockingSubscription", "sub", "SubscriptionExtras"),
    ("bkframe.subscriptions.consumer", "Message"): ("BlockingMessage", "message", "MessageExtras"),
}
#: The async client, and the protocol that stands for it in the logs layer: their twin is the blocking client itself.
TWIN_OF = {name: twin for (_, name), (twin, _, _) in TWINS.items()} | {"LedgerClient": "BlockingClient"}
#: Public on the async side, without a twin (tests/client/test_api_parity.py says why).
ASYNC_ONLY = {
    "Client.context", "Client.metadata", "Client.pool", "Logs.store", "Subscription.owner", "Logs.owned_subscriptions",
    "WriteHandle.append_async", "WriteHandle.append_many_async", "LogWriter.append_async", "LogWriter.append_many_async",
}  # fmt: skip
BUILTIN_NAMES = set(dir(builtins)) | {"None"}
#: Coroutine methods with a synchronous fast path on the async class, tried in the caller's
#: thread first (with the same arguments, or none if it takes none): a ``bool`` one says it did the work, another returns the
#: result or None. Only the slow path costs a trip to the client's loop (~0.1-0.5 ms).
FAST = {
    "Subscription.receive": "receive_nowait", "Subscription.__anext__": "receive_nowait",
    "Subscription.ack": "ack_nowait", "Message.ack": "ack_nowait",
}  # fmt: skip


class Imports:
    """The names the generated module uses, each imported from where its source module got it."""

    def __init__(self) -> None:
        self.runtime: dict[str, str] = {}  # name -> "from M import N" / "import M as N"
        self.typing_only: dict[str, str] = {}

    def need(self, name: str, module: str) -> None:
        if name in BUILTIN_NAMES or name in self.runtime or name in TWIN_OF.values():
            return
        tree = parse(module)
        for node, guarded in _imports(tree):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    line = (
                        f"from {node.module} import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
                        if isinstance(node, ast.ImportFrom)
                        else f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
                    )
                    (self.typing_only if guarded else self.runtime)[name] = line
                    return
        if not any(name in _defined(node) for node in tree.body):
            raise SystemExit(f"gen_blocking: {module} uses {name!r}, defined nowhere this script can find")
        self.runtime[name] = f"from {module} import {name}"

    def render(self) -> str:
        runtime = sorted(set(self.runtime.values()))
        guarded = sorted(set(self.typing_only.values()) - set(runtime))
        text = "\n".join(runtime)
        if guarded:
            text += "\n\nif TYPE_CHECKING:\n" + "\n".join("    " + line for line in guarded)
        return text


def parse(module: str) -> ast.Module:
    """A module's source, read (never imported: the package imports what this writes)."""
    path = ROOT.joinpath(*module.split("."))
    return ast.parse((path / "__init__.py" if path.is_dir() else path.with_suffix(".py")).read_text())


def _defined(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    return set()


def _imports(tree: ast.Module) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append((node, False))
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            found += [(n, True) for n in node.body if isinstance(n, ast.Import | ast.ImportFrom)]
    return found


def twin_text(expr: ast.expr, module: str, imports: Imports, *, default: bool = False) -> str:
    """An annotation or default, its async classes replaced by their twins and
    ``AsyncIterator[X]`` by ``BlockingTail[X]``; the names it uses imported."""

    class Swap(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.expr:
            if node.id in TWIN_OF:
                return ast.copy_location(ast.Name(TWIN_OF[node.id], node.ctx), node)
            if node.id == "AsyncIterator":
                return ast.copy_location(ast.Name("BlockingTail", node.ctx), node)
            imports.need(node.id, module)
            return node

    if not default and isinstance(expr, ast.Constant) and isinstance(expr.value, str):  # a quoted annotation
        expr = ast.parse(expr.value, mode="eval").body
    return ast.unparse(Swap().visit(ast.parse(ast.unparse(expr), mode="eval").body))


def public(args: ast.arguments) -> ast.arguments:
    """``args`` without the callee's own ``_private`` parameters (ReadHandle.read_lac's
    ``_retry``): not API, so not the twin's."""
    keep = [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if not a.arg.startswith("_")]
    return ast.arguments(
        posonlyargs=args.posonlyargs, args=args.args, vararg=args.vararg,
        kwonlyargs=[a for a, _ in keep], kw_defaults=[d for _, d in keep], kwarg=args.kwarg, defaults=args.defaults,
    )  # fmt: skip


def call_arguments(args: ast.arguments) -> str:
    """How a twin passes its own parameters on, each as it was given."""
    parts = [a.arg for a in [*args.posonlyargs, *args.args][1:]]
    if args.vararg:
        parts.append("*" + args.vararg.arg)
    parts += [f"{a.arg}={a.arg}" for a in args.kwonlyargs]
    if args.kwarg:
        parts.append("**" + args.kwarg.arg)
    return ", ".join(parts)


def signature_text(args: ast.arguments, module: str, imports: Imports) -> str:
    def one(a: ast.arg, default: ast.expr | None) -> str:
        text = a.arg + (f": {twin_text(a.annotation, module, imports)}" if a.annotation else "")
        if default is not None:
            text += (" = " if a.annotation else "=") + twin_text(default, module, imports, default=True)
        return text

    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    parts = [one(a, d) for a, d in zip(positional, defaults)]
    if args.posonlyargs:
        parts.insert(len(args.posonlyargs), "/")
    if args.vararg:
        parts.append("*" + one(args.vararg, None))
    elif args.kwonlyargs:
        parts.append("*")
    parts += [one(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    if args.kwarg:
        parts.append("**" + one(args.kwarg, None))
    return ", ".join(parts)


def docstring(node: ast.AST, indent: str) -> str:
    doc = ast.get_docstring(node, clean=False)  # type: ignore[arg-type]
    if not doc:
        return ""
    body = doc.replace("\\", "\\\\")
    return f'{indent}"""{body}"""\n'


def class_node(module: str, name: str) -> ast.ClassDef:
    return next(n for n in parse(module).body if isinstance(n, ast.ClassDef) and n.name == name)


def class_chain(module: str, name: str) -> list[tuple[ast.ClassDef, str]]:
    """The class and, after it, the classes it inherits from, with their modules."""
    node = class_node(module, name)
    chain = [(node, module)]
    for base in node.bases:
        if not isinstance(base, ast.Name):
            raise SystemExit(f"gen_blocking: {module}.{name}: teach this script to follow a base {ast.unparse(base)}")
        chain += class_chain(imported_from(module, base.id), base.id)
    return chain


def imported_from(module: str, name: str) -> str:
    """The module ``module`` imports ``name`` from."""
    for node, _ in _imports(parse(module)):
        if isinstance(node, ast.ImportFrom) and node.module and any((a.asname or a.name) == name for a in node.names):
            return node.module
    raise SystemExit(f"gen_blocking: {module} imports no {name!r}")


def members(module: str, name: str) -> dict[str, tuple[ast.AST, str]]:
    """Public name -> (its definition: a function or an annotated class attribute, its
    module); a base class's first, as a class's own definitions override them."""
    found: dict[str, tuple[ast.AST, str]] = {}
    for node, mod in reversed(class_chain(module, name)):
        own: dict[str, tuple[ast.AST, str]] = {}
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                for set_ in item.body:  # public attributes annotated where __init__ sets them
                    target = getattr(set_, "target", None)
                    if isinstance(set_, ast.AnnAssign) and isinstance(target, ast.Attribute) and not target.attr.startswith("_"):
                        own.setdefault(target.attr, (ast.AnnAssign(ast.Name(target.attr), set_.annotation, None, 1), mod))
                continue
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                key = item.name
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                key = item.target.id
            else:
                continue
            if not key.startswith("_") and key not in own:  # (the extras write __enter__/__exit__)
                own[key] = (item, mod)
        found.update(own)
    return found


def is_property(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id in ("property", "cached_property") for d in fn.decorator_list)


def is_async_iterator(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    returns = fn.returns
    return returns is not None and ast.unparse(returns).startswith("AsyncIterator[")


def wrap(result: str, returns: ast.expr | None, owner: str) -> str:
    """``result`` as the twin returns it: an async class's object in its twin."""
    text = "" if returns is None else ast.unparse(returns)
    if TWIN_OF.get(text) == "BlockingClient":
        return owner
    if text in TWIN_OF:
        return f"{TWIN_OF[text]}({owner}, {result})"
    if text.endswith(" | None") and text[: -len(" | None")] in TWIN_OF:
        return f"twin_or_none({TWIN_OF[text[: -len(' | None')]]}, {owner}, {result})"
    if any(name in text.replace("[", " ").replace("]", " ").replace("|", " ").split() for name in TWIN_OF):
        raise SystemExit(f"gen_blocking: cannot wrap a {text}: write the twin in blocking_extras.py")
    return result


def generate_class(module: str, name: str, imports: Imports) -> str:
    twin, inner, base = TWINS[(module, name)]
    extras = class_node("bkframe.client.blocking_extras", base)
    hand_written = {n for item in extras.body for n in _defined(item)}
    owner = "self" if name == "Client" else "self._owner"
    out = [f"class {twin}({base}):\n", f'    """:class:`~{module}.{name}`, blocking."""\n\n']
    if name != "Client":
        out.append(f"    def __init__(self, owner: BlockingClient, {inner.lstrip('_')}: {name}) -> None:\n")
        out.append("        self._owner = owner\n")
        if not inner.startswith("_"):
            out.append("        #: The async object inside, for async functions given to :meth:`BlockingClient.run`.\n")
        out.append(f"        self.{inner} = {inner.lstrip('_')}\n\n")
        imports.need(name, module)
    for key, (node, mod) in members(module, name).items():
        if key in hand_written or f"{name}.{key}" in ASYNC_ONLY:
            continue
        target = f"self.{inner}.{key}"
        if isinstance(node, ast.AnnAssign) or (isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and is_property(node)):
            returns = node.annotation if isinstance(node, ast.AnnAssign) else node.returns
            assert returns is not None, f"{name}.{key} needs a type"
            out.append(f"    @property\n    def {key}(self) -> {twin_text(returns, mod, imports)}:\n")
            out.append(docstring(node, "        ") if not isinstance(node, ast.AnnAssign) else "")
            out.append(f"        return {wrap(target, returns, owner)}\n\n")
            continue
        assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        params = signature_text(public(node.args), mod, imports)
        returns_text = twin_text(node.returns, mod, imports) if node.returns is not None else "None"
        out.append(f"    def {key}({params}) -> {returns_text}:\n")
        out.append(docstring(node, "        "))
        call = f"{target}({call_arguments(public(node.args))})"
        if is_async_iterator(node):
            out.append(f"        return BlockingTail({owner}, singly({call}))\n\n")
        elif isinstance(node, ast.AsyncFunctionDef):
            for a in [*node.args.args, *node.args.kwonlyargs]:  # a one-shot iterable is read in the caller's thread
                if a.annotation is not None and ast.unparse(a.annotation).startswith("Iterable["):
                    out.append(f"        {a.arg} = list({a.arg})\n")
            out += fast_path(module, name, key, inner, call_arguments(public(node.args)), node.returns, owner)
            ran = f"{owner}._run(lambda: {call})"
            out.append(f"        return {wrap(ran, node.returns, owner)}\n\n")
        else:
            out.append(f"        return {wrap(call, node.returns, owner)}\n\n")
    out += protocol_twins(module, name, twin, inner, owner, hand_written, imports)
    return "".join(out).rstrip("\n") + "\n"


def fast_path(module: str, name: str, key: str, inner: str, arguments: str, returns: ast.expr | None, owner: str) -> list[str]:
    """The lines trying :data:`FAST`'s synchronous method of ``name.key`` first (none if it has none)."""
    fast = FAST.get(f"{name}.{key}")
    if fast is None:
        return []
    method = next(n for n in class_node(module, name).body if isinstance(n, ast.FunctionDef) and n.name == fast)
    takes = [*method.args.args[1:], *method.args.kwonlyargs] or method.args.vararg
    call = f"self.{inner}.{fast}({arguments if takes else ''})"
    if method.returns is not None and ast.unparse(method.returns) == "bool":
        return [f"        if {call}:\n            return None\n"]
    assert returns is not None
    plain = ast.unparse(returns).removesuffix(" | None")
    value = wrap("fast", ast.parse(plain, mode="eval").body, owner)
    return [f"        fast = {call}\n        if fast is not None:\n            return {value}\n"]


def protocol_twins(
    module: str, name: str, twin: str, inner: str, owner: str, hand_written: set[str], imports: Imports
) -> list[str]:
    """An async iterator's ``__iter__``/``__next__`` and an async context manager's
    ``__enter__``/``__exit__`` (each hop one run in the loop), unless written by hand."""
    defined = {n.name: n for n in class_node(module, name).body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    out: list[str] = []
    anext = defined.get("__anext__")
    if anext is not None and "__next__" not in hand_written:
        returns = twin_text(anext.returns, module, imports) if anext.returns is not None else "None"
        ran = f"{owner}._run(self.{inner}.__anext__)"
        out.append(f"    def __iter__(self) -> {twin}:\n        return self\n\n")
        out.append(f"    def __next__(self) -> {returns}:\n")
        out += fast_path(module, name, "__anext__", inner, "", anext.returns, owner)
        out.append("        try:\n")
        out.append(f"            return {wrap(ran, anext.returns, owner)}\n")
        out.append("        except StopAsyncIteration:\n            raise StopIteration from None\n\n")
    if "__aexit__" in defined and "__exit__" not in hand_written:
        imports.need("TracebackType", module)  # as the async class annotates its __aexit__
        out.append(f"    def __enter__(self) -> {twin}:\n        return self\n\n")
        out.append(
            "    def __exit__(\n        self, exc_type: type[BaseException] | None, exc: BaseException | None, "
            "tb: TracebackType | None\n    ) -> None:\n"
        )
        out.append(f"        {owner}._run(lambda: self.{inner}.__aexit__(exc_type, exc, tb))\n\n")
    return out


def generate() -> str:
    imports = Imports()
    classes = [generate_class(module, name, imports) for module, name in TWINS]
    header = textwrap.dedent(
        '''\
        """The blocking twins of the async client's classes. GENERATED by scripts/gen_blocking.py
        from the async classes (every signature, default and docstring is theirs): do not edit;
        change the async class, or bkframe/client/blocking_extras.py, and run the script.

        Each coroutine method runs in the blocking client's event loop (one hop); each async
        iterator is a :class:`~bkframe.client.blocking_tail.BlockingTail`; each async class
        returned, its twin.
        """

        from __future__ import annotations

        from typing import TYPE_CHECKING

        from bkframe.client.blocking_extras import (
            ClientBase,
            LogReaderExtras,
            LogsExtras,
            LogWriterExtras,
            MessageExtras,
            ReadHandleExtras,
            SubscriptionExtras,
            WriteHandleExtras,
            twin_or_none,
        )
        from bkframe.client.blocking_tail import BlockingTail, singly
        '''
    )
    body = header + imports.render() + "\n\n\n" + "\n\n".join(classes)
    return _formatted(body)


def _formatted(text: str) -> str:
    """As ruff formats and sorts it, so that the lint test and the check agree."""
    for args in (["check", "--fix-only", "--select", "I,F401", "-q"], ["format", "-q"]):
        text = subprocess.run(
            [sys.executable, "-m", "ruff", *args, "--stdin-filename", str(OUT), "-"],
            input=text, capture_output=True, text=True, check=True, cwd=ROOT,
        ).stdout  # fmt: skip
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the generated module is out of date")
    args = parser.parse_args()
    text = generate()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} is out of date: run .venv/bin/python scripts/gen_blocking.py", file=sys.stderr)
            sys.exit(1)
        return
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
