"""``bkframe plugin new KIND NAME``: a plugin package that works from its first minute.

It writes a distribution of its own (``pyproject.toml`` with the ``bkframe`` entry point, the
plugin module under ``src/``, a test module running the kind's contract suite, a README saying
how to try it in a sandbox) from the templates in ``bkframe/cli/plugin_templates``: ``common/``
for every kind, then the kind's own folder. The implementation starts as one of bkframe's
(subclassed or delegated to, its comments say which and what to change), so a bare ``pytest``
in the new folder passes at once; the contract suites bring their own trio mode
(:mod:`bkframe.testing.trio_contracts`). A template's ``{{key}}`` is replaced by the
:class:`Kind` and names below; a path part ``PACKAGE`` by the package name.
"""

from __future__ import annotations

import re
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import attrs
import click

from bkframe.core.registry import ComponentKind

TEMPLATES = "plugin_templates"
#: In a kind's folder: the README's section on trying the plugin in a sandbox (``{{sandbox}}``).
SANDBOX = "sandbox.md.tmpl"
#: A component name: config files and URIs name it (a metadata store's or tier's is its URI scheme).
NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
SCHEME_NAME = re.compile(r"[a-z][a-z0-9]{0,39}")


@attrs.frozen
class Kind:
    #: The template folder, and the word in the distribution's name (``bkframe-WORD-NAME``).
    folder: str
    word: str
    component: ComponentKind
    #: What it is, for the README and the pyproject's description.
    title: str
    #: The contract suite its tests run.
    contract: str


KINDS: dict[str, Kind] = {
    "journal": Kind("journal", "journal", ComponentKind.JOURNAL, "journal", "JournalContract"),
    "ledger-storage": Kind(
        "ledger_storage", "storage", ComponentKind.LEDGER_STORAGE, "ledger storage", "LedgerStorageContract"
    ),
    "entry-log": Kind(
        "entry_log", "entrylog", ComponentKind.ENTRY_LOG_MANAGER, "entry-log manager", "LedgerStorageContract"
    ),
    "metadata-store": Kind(
        "metadata_store", "metadata", ComponentKind.METADATA_STORE, "metadata store", "MetadataStoreContract"
    ),
    "tier": Kind("tier", "tier", ComponentKind.TIER, "object-store tier", "TierContract"),
    "placement": Kind(
        "placement", "placement", ComponentKind.PLACEMENT_POLICY, "placement policy", "PlacementPolicyContract"
    ),
    "auth": Kind("auth", "auth", ComponentKind.AUTH_PROVIDER, "auth provider", "AuthProviderContract"),
}


def check_name(kind: Kind, name: str) -> None:
    """One line (:class:`click.ClickException`) for a name that cannot be the component's, or is taken."""
    if kind.component.by_scheme:
        if not SCHEME_NAME.fullmatch(name):
            raise click.ClickException(
                f"NAME {name!r}: it is the {kind.title}'s URI scheme, so a lowercase letter, then lowercase "
                "letters and digits (at most 40), e.g. 'gcs'"
            )
    elif not NAME.fullmatch(name):
        raise click.ClickException(
            f"NAME {name!r}: a lowercase letter, then lowercase letters, digits and '_' (at most 40), e.g. 'my_{kind.word}'"
        )
    from bkframe.core.plugin_manager import PluginManager

    taken = PluginManager().components.get(kind.component, name)
    if taken is not None:
        raise click.ClickException(
            f"NAME {name!r}: a {kind.title} of that name is installed already (plugin {taken.plugin}, "
            f"distribution {taken.distribution}); choose another"
        )


def substitutions(kind: Kind, name: str) -> dict[str, str]:
    package = f"bkframe_{kind.word}_{name}"
    return {
        "name": name,
        "kind": next(k for k, v in KINDS.items() if v is kind),
        "title": kind.title,
        "contract": kind.contract,
        "package": package,
        "dist": package.replace("_", "-"),
        "entry_point": f"{kind.word}_{name}",
        "class": "".join(part.capitalize() for part in name.split("_")),
    }


def render(text: str, values: dict[str, str]) -> str:
    return re.sub(r"\{\{(\w+)\}\}", lambda m: values[m.group(1)], text)


def files(folder: Traversable, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Traversable]]:
    """Every template file under ``folder``, with its relative path parts."""
    out = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name == "__pycache__":
            continue
        if entry.is_dir():
            out += files(entry, (*prefix, entry.name))
        else:
            out.append(((*prefix, entry.name), entry))
    return out


def write_package(kind: Kind, name: str, target: Path) -> list[Path]:
    """Write the package of ``kind`` called ``name`` into ``target`` (which must not exist
    or be empty); the files written."""
    values = substitutions(kind, name)
    root = resources.files("bkframe.cli") / TEMPLATES
    values["sandbox"] = render((root / kind.folder / SANDBOX).read_text(), values).strip()
    written = []
    for folder in ("common", kind.folder):
        for parts, template in files(root / folder):
            if parts == (SANDBOX,):
                continue
            relative = [values["package"] if p == "PACKAGE" else p.removesuffix(".tmpl") for p in parts]
            path = target.joinpath(*relative)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(render(template.read_text(), values))
            written.append(path)
    return written


@click.group("plugin")
def plugin_group() -> None:
    """Write plugins of your own (docs/plugins.md). `bkframe plugins` lists the installed ones."""


@plugin_group.command("new")
@click.argument("kind", metavar="KIND", type=click.Choice(sorted(KINDS)))
@click.argument("name")
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Where to write the package (default: ./ and its distribution's name, e.g. bkframe-storage-NAME); "
    "it must not exist, or be empty.",
)
def new(kind: str, name: str, directory: Path | None) -> None:
    """Write a plugin package: a KIND component called NAME that works from the first minute.

    KIND is what it provides: journal, ledger-storage, entry-log, metadata-store, tier,
    placement or auth. NAME is what config files pick it by (a metadata store's or tier's
    URI scheme). The package has its pyproject.toml and bkframe entry point, an
    implementation that starts as one of bkframe's own (its comments say what to change),
    a test running the kind's contract suite (a bare `pytest` in the folder passes) and a
    README saying how to install it and try it in a sandbox.
    """
    spec = KINDS[kind]
    check_name(spec, name)
    values = substitutions(spec, name)
    target = directory if directory is not None else Path(values["dist"])
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise click.ClickException(f"{target} exists and is not empty: choose another --dir, or remove it")
    write_package(spec, name, target)
    click.echo(f"wrote {target}: {values['dist']}, the {spec.title} {name!r}")
    click.echo(f"  install it:  uv pip install -e {target}   (or pip install -e {target})")
    click.echo(f"  test it:     cd {target} && pytest")
    click.echo(f"  try it:      {target}/README.md, 'Try it in a sandbox'")
