"""The shape of the package: what may import what, and modules a reader can take in.

``bkframe.core`` (the plugin API) imports none of the packages built on it; the wire
protocol imports neither side; the client never imports the bookie and the bookie never
imports the client -- only ``bkframe.core.replication`` uses both.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "bkframe"
SIDES = ("bkframe.core.bookie", "bkframe.core.client", "bkframe.core.replication", "bkframe.core.proto")
#: Which of SIDES each part may import (besides the plugin API and bkframe.errors).
ALLOWED = {
    "bkframe.core": (),
    "bkframe.core.proto": (),
    "bkframe.core.bookie": ("bkframe.core.proto",),
    "bkframe.core.client": ("bkframe.core.proto",),
    "bkframe.core.replication": SIDES,
}
MAX_LINES = 600


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, type-checking-only imports included."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return out


def part_of(module: str) -> str | None:
    for part in sorted(ALLOWED, key=len, reverse=True):
        if module == part or module.startswith(part + "."):
            return part
    return None


@pytest.mark.parametrize("path", sorted((PACKAGE / "core").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_core_packages_import_only_what_they_may(path: Path) -> None:
    part = part_of(module_name(path))
    assert part is not None
    forbidden = [side for side in SIDES if side != part and side not in ALLOWED[part]]
    bad = sorted(m for m in imports(path) if any(m == f or m.startswith(f + ".") for f in forbidden))
    assert not bad, f"{part} must not import {bad}"


def test_no_module_is_too_long_to_read() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for d in ("bkframe", "plugins")
        for p in (ROOT / d).rglob("*.py")
        if ".venv" not in p.parts and (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"split these by concern (over {MAX_LINES} lines): {long}"
