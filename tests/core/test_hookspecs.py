"""Every hookspec is documented in docs/plugins.md and exercised by a test."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from bkframe.core import hookspecs

ROOT = Path(__file__).resolve().parents[2]
HOOKS = sorted(n for n, f in inspect.getmembers(hookspecs, inspect.isfunction) if n.startswith("bkframe_"))


def test_there_are_hooks() -> None:
    # One registration hook, tox-style: every component comes through it.
    assert HOOKS == ["bkframe_register_components"]


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_is_documented(hook: str) -> None:
    doc = (ROOT / "docs" / "plugins.md").read_text()
    assert f"`{hook}`" in doc, f"{hook} is not documented in docs/plugins.md"
    assert inspect.getdoc(getattr(hookspecs, hook)), f"{hook} has no docstring"


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_is_tested(hook: str) -> None:
    this = Path(__file__).resolve()
    sources = [f for d in ("tests", "plugins") for f in (ROOT / d).rglob("test_*.py") if f.resolve() != this]
    assert any(hook in f.read_text() for f in sources), f"no test mentions {hook}"
