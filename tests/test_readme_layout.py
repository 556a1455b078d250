"""The README's Layout section stays true to the tree: every path it lists exists, and every
package of bkframe and every plugin distribution is listed (a new one must say what it is)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def layout_paths() -> list[str]:
    """The first column of the Layout section's block."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```\n", 1)[1].split("```", 1)[0]
    return [m.group(1) for m in re.finditer(r"^(\S+)", block, re.M)]


def test_every_path_the_layout_lists_exists() -> None:
    paths = layout_paths()
    assert len(paths) > 10, paths
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, f"README's Layout lists paths that are not in the tree: {missing}"


def test_every_package_and_plugin_is_in_the_layout() -> None:
    listed = {p.rstrip("/") for p in layout_paths()}
    packages = sorted(
        str(init.parent.relative_to(ROOT))
        for init in (ROOT / "bkframe").rglob("__init__.py")
        if "__pycache__" not in init.parts and init.parent != ROOT / "bkframe"
    )
    distributions = [str(d.parent.relative_to(ROOT)) for d in sorted((ROOT / "plugins").glob("*/pyproject.toml"))]
    unlisted = [p for p in [*packages, *distributions] if p not in listed]
    assert not unlisted, f"README's Layout does not say what these are: {unlisted}"
