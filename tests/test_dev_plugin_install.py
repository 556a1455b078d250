"""A plugin installed into the development venv the documented way (docs/plugins.md, "Developing
a plugin against a checkout": ``uv pip install -e ../my-plugin``) is still installed after what
``./scripts/test`` and ``./scripts/sandbox`` run before anything else: ``scripts/bootstrap``'s
sync, then ``uv run --all-packages`` (issue 49, item 3). Run on a venv of its own
(``UV_PROJECT_ENVIRONMENT``), made by that same sync: uv links packages from its cache, ~1 s.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from click.testing import CliRunner

from bkframe.cli.main import main
from bkframe.testing.kit import missing

ROOT = Path(__file__).resolve().parents[1]
DIST = "bkframe-placement-devplugin"


def test_a_plugin_installed_for_development_survives_the_scripts_sync(tmp_path: Path) -> None:
    uv = shutil.which("uv") or str(Path.home() / ".local/bin/uv")
    if not Path(uv).exists():
        missing("uv is not installed", "./scripts/test installs it")
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "UV_"))}
    env |= {"UV_PROJECT_ENVIRONMENT": str(venv), "PATH": f"{Path(uv).parent}:{env.get('PATH', '')}"}

    def bootstrap() -> None:
        subprocess.run(["bash", "-c", "source scripts/bootstrap"], cwd=ROOT, env=env, check=True)

    def installed() -> bool:
        check = f"import importlib.metadata as m; m.distribution({DIST!r})"
        return subprocess.run([venv / "bin" / "python", "-c", check], capture_output=True).returncode == 0

    bootstrap()  # makes the venv, as on a fresh clone
    result = CliRunner().invoke(main, ["plugin", "new", "placement", "devplugin", "--dir", str(tmp_path / "devplugin")])
    assert result.exit_code == 0, result.output
    # The documented way, with the venv as the author's shell has it.
    subprocess.run(
        [uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), "-e", str(tmp_path / "devplugin")],
        cwd=ROOT, env=env, check=True,
    )
    assert installed()
    # What the exact sync (uv's default, what the scripts ran before) would have done to it:
    # the premise of this test.
    exact = subprocess.run(
        [uv, "sync", "--all-packages", "--dry-run"], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert f"- {DIST}==" in exact.stderr, exact.stderr

    bootstrap()
    assert installed(), "scripts/bootstrap's sync uninstalled the plugin"
    subprocess.run([uv, "run", "--all-packages", "--quiet", "python", "-c", "pass"], cwd=ROOT, env=env, check=True)
    assert installed(), "uv run --all-packages (scripts/test, scripts/sandbox) uninstalled the plugin"
