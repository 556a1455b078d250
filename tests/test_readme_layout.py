"""README.md's Layout section is true of the tree: every path it names exists, and every
package of bkframe (and every plugin distribution) is named there, so a newcomer who reads
it finds each concern where it says."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def layout_paths() -> list[str]:
    """The first word of each unindented line of the Layout section's code block."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```\n(.*?)```", section, re.S)
    assert block, "README.md's Layout section has no code block"
    return [line.split()[0] for line in block.group(1).splitlines() if line and not line[0].isspace()]


def test_every_path_the_layout_names_exists() -> None:
    missing = [p for p in layout_paths() if not (ROOT / p).exists()]
    assert not missing, f"README.md's Layout names paths that are not in the tree: {missing}"


def test_every_package_is_in_the_layout() -> None:
    named = {p.rstrip("/") for p in layout_paths()}
    packages = sorted(
        str(d.relative_to(ROOT)) for d in (ROOT / "bkframe").rglob("*") if d.is_dir() and (d / "__init__.py").exists()
    )
    distributions = sorted(str(d.relative_to(ROOT)) for d in (ROOT / "plugins").iterdir() if (d / "pyproject.toml").exists())
    unnamed = [p for p in [*packages, *distributions] if p not in named]
    assert not unnamed, f"say in README.md's Layout what lives in: {unnamed}"


def test_the_top_level_is_the_design_cards() -> None:
    """The design card names the top level: the package's core and built-in plugins, and the
    reference storage plugins beside the metadata stores as distributions of their own."""
    card = [
        "pyproject.toml",
        "bkframe/core",
        "bkframe/plugins",
        "plugins/journal_fs",
        "plugins/entrylog_per_ledger",
        "plugins/metadata_zk",
        "plugins/metadata_etcd",
        "tests",
        "docs",
    ]
    assert [p for p in card if not (ROOT / p).exists()] == []
    assert [d for d in card if d.startswith("plugins/") and not (ROOT / d / "pyproject.toml").is_file()] == []
