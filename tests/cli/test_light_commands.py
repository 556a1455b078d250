"""What ``bkframe --version``, ``bkframe --help`` and the commands that only read the metadata
store (``log list``, ``ledger list``, ``bookies list``, ``cluster info``) import: never the client's, the
bookie's nor the optional libraries. Their cost is measured in
docs/benchmarks/process-costs.md; here only what they import is checked, in a fresh
interpreter each, never their time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

#: Modules none of these commands needs: numpy and pyarrow (entries, Arrow tables), the
#: client's connections, the bookie, the HTTP server and the benchmarks.
HEAVY = ("numpy", "pyarrow", "hypercorn", "starlette", "bkframe.client.client", "bkframe.client.bookies",
         "bkframe.bookie", "bkframe.bench", "bkframe.proto", "bkframe.subscriptions", "bkframe.tiering.offload")
#: What --version and --help do without, on top: trio, anyio and the plugin manager.
NOT_FOR_VERSION = (*HEAVY, "trio", "anyio", "bkframe.core.plugin_manager", "bkframe.cli.log", "bkframe.cli.bookie")

RUN = """
import json, sys
from bkframe.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def imported(*argv: str) -> set[str]:
    """The modules ``bkframe ARGV`` has imported when it ends (it must succeed)."""
    done = subprocess.run([sys.executable, "-c", RUN, *argv], capture_output=True, text=True, timeout=120)
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report["code"] in (0, None), done
    return set(report["modules"])


def heavy(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


@pytest.mark.parametrize("argv", [["--version"], ["--help"]])
def test_version_and_help_import_no_heavy_module(argv: list[str]) -> None:
    assert heavy(imported(*argv), NOT_FOR_VERSION) == []


def test_a_groups_help_imports_its_module_only() -> None:
    modules = imported("log", "--help")
    assert "bkframe.cli.log" in modules
    assert heavy(modules, HEAVY) == []


@pytest.mark.parametrize(
    "command", [["log", "list"], ["ledger", "list"], ["bookies", "list"], ["cluster", "info"]], ids=" ".join
)
def test_a_metadata_command_reads_the_store_without_a_client(tmp_path: Path, command: list[str]) -> None:
    uri = f"sqlite:///{tmp_path}/meta.db"
    init = subprocess.run([sys.executable, "-m", "bkframe", "cluster", "init", "--metadata", uri],
                          capture_output=True, text=True, timeout=120)
    assert init.returncode == 0, init
    modules = imported(*command, "--metadata", uri)
    assert "bkframe.core.plugin_manager" in modules  # it did open the store
    assert heavy(modules, (*HEAVY, "trio")) == []  # on asyncio (bkframe.cli.metadata_only): trio is a third of it


def test_import_bkframe_imports_names_when_used() -> None:
    """``import bkframe`` is cheap (the CLI imports it first); the client comes with its first name."""
    code = ("import sys, bkframe; before = 'bkframe.client.client' in sys.modules; bkframe.open_client; "
            "print(before, 'bkframe.client.client' in sys.modules, 'numpy' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "True", "True"], done
