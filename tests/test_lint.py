"""The code passes ruff (rules in pyproject.toml); every ``noqa`` that remains says why."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
        cwd=ROOT, capture_output=True, text=True, timeout=280,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_noqa_is_justified() -> None:
    bare = [
        f"{path.relative_to(ROOT)}:{n}"
        for d in ("bkframe", "plugins", "tests")
        for path in (ROOT / d).rglob("*.py")
        if ".venv" not in path.parts and path.resolve() != Path(__file__).resolve()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"#\s*noqa", line) and not re.search(r"# noqa: [A-Z]+\d+(, [A-Z]+\d+)* - \S", line)
    ]
    assert not bare, f"a noqa names its rule and says why ('# noqa: RULE - reason'): {bare}"
