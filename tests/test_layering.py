"""The shape of the package: what may import what, no import circles, and modules a reader
can take in.

``bkframe.core`` (the plugin API) holds the contracts only and imports none of the packages
built on it; built-in plugins use the plugin API and the storage kit, as distributions may;
the wire protocol imports only the plugin API; the client never imports the bookie and the bookie
never imports the client -- only ``bkframe.autorecovery`` uses both. Tiered storage
(``bkframe.tiering``) is the client's: a package of its own so that everything about the tier
is in one place, it and the client import each other's modules (a log reads its offloaded
segments, an offload reads its ledger), never around a circle of modules. No two modules import
each other, directly or around a circle, counting every import (type-checking-only and
function-local ones too): a circle means two modules are one concept, or one reaches back
into the other's insides. A module past ``LONG_LINES`` says why it is one concept.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "bkframe"
#: Each part, and which other parts it may import. ``bkframe.errors`` and the package's own
#: ``__init__`` (the public API, imported by nothing inside) are outside every part.
ALLOWED: dict[str, tuple[str, ...]] = {
    "bkframe.core": (),
    "bkframe.storage_kit": ("bkframe.core",),
    "bkframe.common": ("bkframe.core",),
    "bkframe.plugins": ("bkframe.core", "bkframe.storage_kit"),
    "bkframe.proto": ("bkframe.core",),
    "bkframe.bookie": ("bkframe.core", "bkframe.storage_kit", "bkframe.common", "bkframe.proto"),
    "bkframe.client": (
        "bkframe.core", "bkframe.common", "bkframe.proto", "bkframe.tiering", "bkframe.subscriptions",
        "bkframe.compaction",
    ),
    "bkframe.tiering": ("bkframe.core", "bkframe.common", "bkframe.client"),
    # Subscriptions are the client's too (a log's consumers, its owner reading the log).
    "bkframe.subscriptions": ("bkframe.core", "bkframe.common", "bkframe.proto", "bkframe.client", "bkframe.tiering"),
    # Compaction (docs/compaction.md) rewrites a log's segments through the client, on the
    # bookies and in the tier; the client's ``Logs.compact`` runs it.
    "bkframe.compaction": ("bkframe.core", "bkframe.common", "bkframe.client", "bkframe.tiering"),
    "bkframe.autorecovery": (
        "bkframe.core", "bkframe.storage_kit", "bkframe.common", "bkframe.proto", "bkframe.bookie", "bkframe.client",
        "bkframe.tiering",
    ),
    "bkframe.admin": (
        "bkframe.core", "bkframe.storage_kit", "bkframe.common", "bkframe.proto", "bkframe.bookie", "bkframe.client",
        "bkframe.tiering", "bkframe.plugins", "bkframe.subscriptions", "bkframe.compaction",
    ),
    "bkframe.cli": (
        "bkframe.core", "bkframe.storage_kit", "bkframe.common", "bkframe.proto", "bkframe.bookie", "bkframe.client",
        "bkframe.tiering", "bkframe.autorecovery", "bkframe.admin", "bkframe.plugins", "bkframe.launcher",
        "bkframe.subscriptions", "bkframe.compaction",
    ),
    # The launcher of bookie processes (sandbox, benchmarks, tests): it runs `bkframe bookie`
    # and keeps the command line's own variables ($BKFRAME_METADATA...) from the bookies.
    "bkframe.launcher": ("bkframe.common",),
    # The benchmarks: what the command line may use, and its option types and signal
    # handling; the `bench` group names their commands as strings, so nothing imports them
    # but tests.
    "bkframe.bench": (
        "bkframe.core", "bkframe.storage_kit", "bkframe.common", "bkframe.proto", "bkframe.bookie", "bkframe.client",
        "bkframe.tiering", "bkframe.autorecovery", "bkframe.admin", "bkframe.plugins", "bkframe.cli", "bkframe.launcher",
        "bkframe.subscriptions", "bkframe.compaction",
    ),
    "bkframe.testing": (
        "bkframe.core", "bkframe.storage_kit", "bkframe.common", "bkframe.proto", "bkframe.bookie", "bkframe.client",
        "bkframe.tiering", "bkframe.autorecovery", "bkframe.admin", "bkframe.plugins", "bkframe.cli", "bkframe.launcher",
        "bkframe.subscriptions", "bkframe.compaction",
    ),
}
#: What ``bkframe.core`` holds: the contracts between bkframe and its plugins, and nothing
#: else (helpers for storage plugins are ``bkframe.storage_kit``; what the bookie, the client
#: and the tools share beyond contracts is ``bkframe.common``). A new module here needs its
#: reason written down, as each of these has.
CORE_CONTRACTS: dict[str, str] = {
    "bkframe.core": "the package",
    "bkframe.core.hookspecs": "the hooks a plugin implements",
    "bkframe.core.plugin_manager": "how plugins are found, loaded and turned into parts",
    "bkframe.core.registry": "the components a plugin registers, by kind and name",
    "bkframe.core.interfaces": "the protocols plugins implement, one module each",
    "bkframe.core.config": "the config sections (one validator for all) plugins' sections plug into",
    "bkframe.core.metadata": "the metadata model every store keeps and every part reads",
    "bkframe.core.ledger_keys": "what a ledger's password becomes: the master key bookies check, the hash metadata keeps",
    "bkframe.core.counters": "the counters plugins report into (journal and storage bytes, fsyncs)",
    "bkframe.core.heartbeat": "the keep-alive MetadataStore asks to run in the holder's nursery until a lease is closed",
    "bkframe.core.errors": "the errors plugins raise and the bookie and client catch, under one root (bkframe.errors)",
}
#: The reference storage plugins (docs/plugins.md): distributions written against the plugin
#: API and the storage kit only, exactly what a third party's storage plugin has.
REFERENCE_STORAGE_PLUGINS = ("bkframe_journal_fs", "bkframe_entrylog_per_ledger")
#: The distributions under plugins/ (third-party style), with the bkframe parts they may use:
#: storage plugins only the plugin API; the Spark connector the public client API too.
DISTRIBUTIONS = sorted(p for p in (ROOT / "plugins").glob("*/src/*") if p.is_dir() and (p / "__init__.py").exists())
#: Modules are cut by concept, not by count. Past this many lines a module must say here why
#: it is still one concept (a reader takes it in as one); a listed module that shrank below is
#: taken off the list.
LONG_LINES = 800
LONG_MODULES: dict[str, str] = {
    "bkframe/client/blocking_twins.py": "generated (scripts/gen_blocking.py): every blocking twin class, one per async "
    "class, each the one place its API is restated; a reader reads the async class",
}


def module_name(path: Path, base: Path = ROOT) -> str:
    parts = path.relative_to(base).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, name: str) -> Iterator[str]:
    """Every module name ``path`` (module ``name``) imports, relative imports resolved and
    type-checking-only or function-local imports included; ``from m import x`` yields both
    ``m`` and ``m.x`` (``x`` may be a submodule)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package
                for _ in range(node.level - 1):
                    parent = parent.rpartition(".")[0]
                base = f"{parent}.{base}" if base else parent
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def all_modules() -> dict[str, Path]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    for src in DISTRIBUTIONS:
        modules.update({module_name(p, src.parent): p for p in src.rglob("*.py")})
    return modules


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of bkframe (and the plugin distributions) it imports. A module's
    own parent packages are left out: importing ``a.b.c`` runs ``a.b``'s ``__init__`` first,
    which is Python's order, not a dependency of ``c`` on its package."""
    modules = all_modules()

    def known(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = {t for m in imported(path, name) if (t := known(m)) is not None}
        graph[name] = {t for t in targets if t != name and not name.startswith(t + ".")}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def part_of(module: str) -> str | None:
    for part in sorted(ALLOWED, key=len, reverse=True):
        if module == part or module.startswith(part + "."):
            return part
    return None


def test_no_import_circles() -> None:
    found = circles(import_graph())
    assert not found, f"these modules import each other (around a circle): {found}"


def test_the_circle_finder_finds_circles() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_parts_import_only_what_they_may() -> None:
    bad = {}
    for module, targets in import_graph().items():
        part = part_of(module)
        if part is None:
            continue
        wrong = sorted(t for t in targets if (other := part_of(t)) not in (None, part) and other not in ALLOWED[part])
        if wrong:
            bad[module] = wrong
    assert not bad, f"imports across the layers (see ALLOWED): {bad}"


def test_every_module_belongs_to_a_part() -> None:
    outside = sorted(m for m in all_modules() if m.startswith("bkframe.") and part_of(m) is None)
    # bkframe.tiering: the public names of segment objects for connectors (imports pyarrow).
    assert outside == ["bkframe.__main__", "bkframe.errors"], outside


@pytest.mark.parametrize("src", DISTRIBUTIONS, ids=lambda p: p.name)
def test_plugin_distributions_use_only_public_names(src: Path) -> None:
    """A plugin distribution is written as a third party would: the plugin API
    (``bkframe.core``, the storage kit ``bkframe.storage_kit``, ``bkframe.testing`` in tests), the public client API (``bkframe``,
    ``bkframe.errors``, ``bkframe.tiering``), never the insides of the bookie, the client or the protocol."""
    inside = (
        "bkframe.bookie", "bkframe.client", "bkframe.proto", "bkframe.autorecovery", "bkframe.cli", "bkframe.admin",
        "bkframe.plugins", "bkframe.common",
    )
    graph = import_graph()
    bad = {
        m: sorted(t for t in targets if t.startswith(inside))
        for m, targets in graph.items()
        if m == src.name or m.startswith(src.name + ".")
    }
    bad = {m: t for m, t in bad.items() if t}
    assert not bad, f"{src.name} reaches past the public API: {bad}"


@pytest.mark.parametrize("name", REFERENCE_STORAGE_PLUGINS)
def test_reference_storage_plugins_use_the_plugin_api_and_storage_kit_only(name: str) -> None:
    assert name in {d.name for d in DISTRIBUTIONS}, f"{name} is not a distribution under plugins/"
    graph = import_graph()
    own = {m for m in graph if m == name or m.startswith(name + ".")}
    assert own
    allowed = ("bkframe.core", "bkframe.storage_kit", name)
    bad = {m: sorted(t for t in graph[m] if not (t.split(".")[0] == name or t.startswith(allowed))) for m in own}
    bad = {m: t for m, t in bad.items() if t}
    assert not bad, f"{name} imports more of bkframe than bkframe.core and bkframe.storage_kit: {bad}"


def test_core_holds_contracts_only() -> None:
    core = sorted(m for m in all_modules() if m == "bkframe.core" or m.startswith("bkframe.core."))
    unexplained = [m for m in core if m not in CORE_CONTRACTS and m.rpartition(".")[0] != "bkframe.core.interfaces"]
    assert not unexplained, (
        f"bkframe.core holds the plugin contracts only; {unexplained} are not among them: move a helper beside its "
        f"users (bkframe.storage_kit for storage plugins, bkframe.common for the bookie and the client), or add "
        f"the contract and why to CORE_CONTRACTS"
    )
    gone = sorted(set(CORE_CONTRACTS) - set(core))
    assert not gone, f"CORE_CONTRACTS names modules that are gone: {gone}"


def test_a_long_module_says_why_it_is_one() -> None:
    lengths = {
        str(p.relative_to(ROOT)): len(p.read_text().splitlines())
        for d in ("bkframe", "plugins")
        for p in (ROOT / d).rglob("*.py")
        if ".venv" not in p.parts
    }
    long = {path: n for path, n in lengths.items() if n > LONG_LINES and path not in LONG_MODULES}
    assert not long, (
        f"over {LONG_LINES} lines: {long}. Cut by concept if it holds several; if it is one concept, say why in "
        f"LONG_MODULES (tests/test_layering.py)"
    )
    stale = sorted(path for path in LONG_MODULES if lengths.get(path, 0) <= LONG_LINES)
    assert not stale, f"LONG_MODULES lists modules that are no longer long (or gone): {stale}"
