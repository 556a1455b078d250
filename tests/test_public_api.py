"""``import bkframe``: typed names listed in ``__all__``, imported on first use; one error root; the version
from the distribution; what a plain install brings."""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pluggy
import pytest
from packaging.requirements import Requirement

import bkframe
import bkframe.core
import bkframe.core.metadata
import bkframe.errors
from bkframe.core.config import DEFAULT_SECTIONS
from bkframe.core.plugin_manager import SECTION_KINDS, PluginManager


def _type_checking_imports(package: ModuleType) -> dict[str, str]:
    """The names ``package``'s ``if TYPE_CHECKING:`` block imports, and from where."""
    tree = ast.parse(Path(package.__file__ or "").read_text())
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom) and stmt.module:
                    found.update({a.asname or a.name: stmt.module for a in stmt.names})
    return found


def _eager_imports(package: ModuleType) -> set[str]:
    """The names ``package`` imports when it is imported (its top-level imports)."""
    tree = ast.parse(Path(package.__file__ or "").read_text())
    return {a.asname or a.name for node in tree.body if isinstance(node, ast.ImportFrom) for a in node.names}


@pytest.mark.parametrize("package", [bkframe, bkframe.core], ids=["bkframe", "bkframe.core"])
def test_every_public_name_is_there_and_typed(package: ModuleType) -> None:
    """Every name of ``__all__`` is there, imported on first use (PEP 562: ``bkframe --version``
    and a metadata-only command must not pay for the client, docs/benchmarks/process-costs.md);
    type checkers read the ``if TYPE_CHECKING:`` imports, which name the same things, from the
    same modules, as the look-up table."""
    lazy = _type_checking_imports(package)
    table = {name: module for module, names in vars(package)["_DEFINED_IN"].items() for name in names}
    assert lazy == table
    eager = _eager_imports(package)  # from the source: a name looked up once is in vars() too
    assert not eager & set(table) and set(package.__all__) == (eager | set(table)) & set(package.__all__)
    assert set(table) <= set(package.__all__), "each name is imported eagerly or looked up"
    for name in package.__all__:
        value = getattr(package, name)
        if name in table and (inspect.isclass(value) or inspect.isfunction(value)):
            assert any(v is value for v in vars(sys.modules[table[name]]).values()), name
    assert set(package.__all__) <= set(dir(package))


def test_the_main_names_are_public() -> None:
    for name in ("open_client", "connect", "Client", "WriteHandle", "ReadHandle", "Entry", "ClientSettings",
                 "hookimpl", "BKError", "LedgerDeletedError", "NoSuchLedgerError", "Record", "Logs"):
        assert name in bkframe.__all__, name
    assert isinstance(bkframe.hookimpl, pluggy.HookimplMarker)
    assert inspect.signature(bkframe.open_client).return_annotation != inspect.Signature.empty
    with pytest.raises(AttributeError, match="no_such_name"):
        bkframe.no_such_name  # noqa: B018 - the look-up is the test


def test_the_plugin_surface_is_bkframe_core() -> None:
    """``from bkframe.core import ...`` names every part a plugin is written against, each
    defined in a module of bkframe.core (nothing of the bookie, client or built-ins)."""
    import bkframe.core

    assert sorted(bkframe.core.__all__) == sorted(set(bkframe.core.__all__))
    for name in bkframe.core.__all__:
        obj = getattr(bkframe.core, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):  # not the type aliases, nor pluggy's marker
            assert obj.__module__.startswith("bkframe.core"), (name, obj.__module__)
    for protocol in ("Journal", "LedgerStorage", "EntryLogManager", "MetadataStore", "Tier", "PlacementPolicy",
                     "AuthProvider", "DurabilityPolicy"):
        assert protocol in bkframe.core.__all__, protocol
    assert bkframe.core.hookimpl is bkframe.hookimpl


def test_one_error_root_and_one_no_such_ledger() -> None:
    errors = [obj for obj in vars(bkframe.errors).values() if isinstance(obj, type) and issubclass(obj, Exception)]
    assert errors and all(issubclass(e, bkframe.BKError) for e in errors)
    assert bkframe.errors.NoSuchLedgerError is bkframe.NoSuchLedgerError
    assert issubclass(bkframe.ConfigError, ValueError) and issubclass(bkframe.LedgerDeletedError, bkframe.LedgerFencedError)


def test_version_is_the_installed_distributions() -> None:
    version = importlib.metadata.version("bkframe")
    assert bkframe.__version__ == version
    proc = subprocess.run([sys.executable, "-m", "bkframe", "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == f"bkframe, version {version}", proc


def _requirements(distribution: str) -> set[str]:
    """The distributions ``distribution`` needs (not its extras)."""
    return {Requirement(r).name.lower() for r in importlib.metadata.requires(distribution) or [] if "extra ==" not in r}


def test_a_plain_install_runs_a_bookie_on_its_defaults() -> None:
    """Every plugin a default bookie config names comes with ``pip install bkframe``: built in
    (``bkframe.plugins``) or a distribution bkframe itself requires (bkframe-journal-fs)."""
    components = PluginManager(load_entry_points=False).components
    for section, kind in SECTION_KINDS.items():
        component = components.get(kind, DEFAULT_SECTIONS[section]["plugin"])
        assert component is not None, section
        assert component.distribution == "bkframe" or component.distribution in _requirements("bkframe"), (section, component)
    assert "bkframe-journal-fs" in _requirements("bkframe")


def _third_party_imports(paths: list[Path]) -> set[str]:
    """The top-level names of what ``paths`` import that is neither stdlib nor bkframe."""
    found: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            found.update(n.split(".")[0] for n in names)
    return {n for n in found if n not in sys.stdlib_module_names and n not in ("bkframe", "__future__")}


def _distribution_of(module: str) -> str:
    return importlib.metadata.packages_distributions()[module][0].lower().replace("_", "-")


#: The reference storage plugins: distributions though they need nothing beyond bkframe, so
#: that a storage plugin written as a third party's would be is built, tested and shipped here.
REFERENCE_PLUGINS = {"journal_fs", "entrylog_per_ledger"}


def test_built_in_plugins_need_nothing_beyond_bkframe_and_distributed_ones_do() -> None:
    """docs/plugins.md's rule: a plugin that needs no dependency beyond bkframe's own is built
    in (``bkframe/plugins``); one that does (kazoo, etcd3gw, botocore, pyspark) is a
    distribution of its own under ``plugins/``, so that ``pip install bkframe`` stays lean --
    and so are the reference storage plugins, written as a third party's would be."""
    root = Path(bkframe.__file__).parent
    required = _requirements("bkframe")
    builtin = _third_party_imports(list((root / "plugins").rglob("*.py")))
    assert builtin and {_distribution_of(m) for m in builtin} <= required, sorted(builtin)
    ours = {p.name for p in (root.parent / "plugins").glob("*/src/*")}
    distributions = sorted((root.parent / "plugins").glob("*/src"))
    assert REFERENCE_PLUGINS <= {d.parent.name for d in distributions}
    for distribution in distributions:
        if distribution.parent.name in REFERENCE_PLUGINS:
            continue
        imports = _third_party_imports(list(distribution.rglob("*.py"))) - ours
        extra = {_distribution_of(m) for m in imports} - required
        assert extra, f"{distribution.parent.name} needs nothing beyond bkframe: by the rule it belongs in bkframe/plugins"


def test_every_distribution_ships_py_typed() -> None:
    """PEP 561: without py.typed, users' type checkers ignore bkframe's annotations. Hatchling
    puts every file of a package into its wheel, py.typed with them."""
    root = Path(bkframe.__file__).parent.parent
    packages = [root / "bkframe", *(p for p in root.glob("plugins/*/src/*") if (p / "__init__.py").exists())]
    assert len(packages) > 1
    assert [p for p in packages if not (p / "py.typed").is_file()] == []


def test_import_bkframe_leaves_pyarrow_alone() -> None:
    """pyarrow is the optional ``bkframe[arrow]``: ``import bkframe`` (every bookie, CLI and
    client process) must not import it -- tiering and Arrow code import it on first use."""
    code = "import sys, bkframe; print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyarrow'))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
