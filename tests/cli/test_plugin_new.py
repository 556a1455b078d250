"""``bkframe plugin new`` (issue 49, item 1): a package per kind that works from its first minute.

Fast: every kind is written (in-process), its Python compiles and no placeholder is left; bad
kinds, names and directories are refused in one line. Slow (a throwaway virtualenv on top of
the development one, and pytest processes): every kind installed, imported and registered
(`bkframe plugins` of that venv); a bare `pytest` passes in the ledger storage's and the auth
provider's folders, and the journal, entry-log, tier and placement suites pass in one more
pytest run (the metadata store's, 20 s, only registers: its suite is bkframe's sqlite one).
docs/plugins.md's ledger-storage and entry-log tutorials, each put in a package written by
`bkframe plugin new` in place of its plugin module, installed, pass that package's tests too.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from click.testing import CliRunner

from bkframe.cli.main import main
from bkframe.cli.plugin_new import KINDS
from bkframe.testing.kit import missing
from tests.plugins.test_plugins_tutorial import ENTRY_LOG, LEDGER_STORAGE, tutorial_source

#: A name per kind: a scheme for the kinds picked by URI scheme.
NAMES = {kind: "x" + kind.replace("-", "") for kind in KINDS}


def plugin_new(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["plugin", "new", *args])
    return result.exit_code, result.output


def write_all(root: Path) -> dict[str, Path]:
    folders = {}
    for kind, name in NAMES.items():
        folders[kind] = root / kind
        code, output = plugin_new(kind, name, "--dir", str(folders[kind]))
        assert code == 0, output
    return folders


def test_every_kind_is_written_whole(tmp_path: Path) -> None:
    for kind, folder in write_all(tmp_path).items():
        spec = KINDS[kind]
        package = f"bkframe_{spec.word}_{NAMES[kind]}"
        written = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
        assert written == sorted(
            [
                "README.md", "pyproject.toml", "tests/test_contract.py",
                f"src/{package}/__init__.py", f"src/{package}/plugin.py", f"src/{package}/py.typed",
            ]
        ), kind
        for path in folder.rglob("*"):
            if path.is_file():
                assert "{{" not in path.read_text(), f"{path}: a placeholder is left"
            if path.suffix == ".py":
                compile(path.read_text(), str(path), "exec")
        pyproject = (folder / "pyproject.toml").read_text()
        assert f'[project.entry-points.bkframe]\n{spec.word}_{NAMES[kind]} = "{package}.plugin"' in pyproject
        readme = (folder / "README.md").read_text()
        assert "## Try it in a sandbox" in readme and "bkframe sandbox" in readme
        assert spec.contract in (folder / "tests" / "test_contract.py").read_text()


def test_default_directory_is_the_distribution_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, output = plugin_new("placement", "zoned")
    assert code == 0, output
    assert (tmp_path / "bkframe-placement-zoned" / "src" / "bkframe_placement_zoned" / "plugin.py").is_file()
    assert output.splitlines()[0] == "wrote bkframe-placement-zoned: bkframe-placement-zoned, the placement policy 'zoned'"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["ledgerstorage", "x"], "Invalid value for 'KIND': 'ledgerstorage' is not one of"),
        (["journal", "My-Journal"], "NAME 'My-Journal': a lowercase letter, then lowercase letters, digits and '_'"),
        (["tier", "my_tier"], "NAME 'my_tier': it is the object-store tier's URI scheme, so a lowercase letter"),
        (["metadata-store", "sqlite"], "NAME 'sqlite': a metadata store of that name is installed already"),
        (["ledger-storage", "default"], "NAME 'default': a ledger storage of that name is installed already"),
    ],
)
def test_bad_kinds_and_names_are_one_line(args: list[str], expected: str, tmp_path: Path) -> None:
    code, output = plugin_new(*args, "--dir", str(tmp_path / "p"))
    assert code != 0 and "Traceback" not in output
    assert expected in output.splitlines()[-1], output
    assert not (tmp_path / "p").exists()


def test_an_existing_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "mine.txt").write_text("keep me")
    code, output = plugin_new("auth", "mine", "--dir", str(tmp_path / "p"))
    assert code == 1 and output == f"Error: {tmp_path / 'p'} exists and is not empty: choose another --dir, or remove it\n"
    assert [p.name for p in (tmp_path / "p").iterdir()] == ["mine.txt"]


# -- installed and tested as a plugin author does -----------------------------------------------


def throwaway_venv(root: Path) -> Path:
    """A virtualenv that sees the development one's packages (bkframe, pytest, pytest-trio,
    installed editable or not) and takes packages of its own: the development venv's
    site-packages is a site directory of it (its .pth files processed), by a .pth of its own."""
    uv = shutil.which("uv") or str(Path.home() / ".local/bin/uv")
    if not Path(uv).exists():
        missing("uv is not installed", "./scripts/test installs it")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], check=True, capture_output=True, text=True
    ).stdout.strip()
    parent = sysconfig.get_paths()["purelib"]
    Path(site, "_bkframe_dev_venv.pth").write_text(f"import site; site.addsitedir({parent!r})\n")
    return python


def clean_env() -> dict[str, str]:
    """The environment of the author's shell: none of this pytest run's own settings."""
    drop = ("PYTEST_", "BKFRAME_", "COV_", "VIRTUAL_ENV", "PYTHONPATH")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


@pytest.mark.slow
def test_every_kind_installs_registers_and_passes_its_contract_suite(tmp_path: Path) -> None:
    folders = write_all(tmp_path)
    # The tutorials, as docs/plugins.md tells a reader to build them.
    for kind, name, title in (("ledger-storage", "files", LEDGER_STORAGE), ("entry-log", "rolling", ENTRY_LOG)):
        folders[f"tutorial {kind}"] = folder = tmp_path / f"tutorial-{kind}"
        code, output = plugin_new(kind, name, "--dir", str(folder))
        assert code == 0, output
        (folder / "src" / f"bkframe_{KINDS[kind].word}_{name}" / "plugin.py").write_text(tutorial_source(title))
    python = throwaway_venv(tmp_path)
    env = clean_env()
    uv = shutil.which("uv") or str(Path.home() / ".local/bin/uv")
    editable = [arg for folder in folders.values() for arg in ("-e", str(folder))]
    subprocess.run([uv, "pip", "install", "--quiet", "--python", str(python), "--no-deps", *editable], check=True, env=env)

    listed = subprocess.run([python, "-m", "bkframe", "plugins"], check=True, capture_output=True, text=True, env=env).stdout
    for kind, name in NAMES.items():
        spec = KINDS[kind]
        shown = f"{name}://" if spec.component.by_scheme else name
        assert f"    {shown}  [{spec.word}_{name}, bkframe-{spec.word}-{name}]" in listed, (kind, listed)

    def pytest_run(*args: str, cwd: Path) -> str:
        run = subprocess.run(
            [python, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd, capture_output=True, text=True, env=env
        )
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
        return re.sub(r"[= ]*(\d+ passed).*", r"\1", run.stdout.splitlines()[-1])

    # A bare pytest, as the generated README says: the suites bring their own trio mode.
    assert pytest_run(cwd=folders["ledger-storage"]) == "8 passed"
    assert pytest_run(cwd=folders["auth"]) == "4 passed"
    # The other suites in one process (the same module name in each: importlib mode).
    others = [
        str(folders[k] / "tests")
        for k in ("journal", "entry-log", "tier", "placement", "tutorial ledger-storage", "tutorial entry-log")
    ]
    metadata = str(folders["metadata-store"] / "tests" / "test_contract.py") + "::test_is_registered"
    assert pytest_run("-q", "--import-mode=importlib", *others, metadata, cwd=tmp_path) == "52 passed"
    # And it serves a sandbox, as its README says: a named log written and read back on a
    # bookie that stores its ledgers with it.
    name = NAMES["ledger-storage"]
    config = tmp_path / f"{name}.toml"
    config.write_text(f'[ledger_storage]\nplugin = "{name}"\n')
    data = tmp_path / "sandbox"
    sandbox = subprocess.Popen(
        [python, "-m", "bkframe", "sandbox", "--bookies", "1", "--data-dir", str(data), "--config", str(config)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )
    try:
        assert sandbox.stdout is not None
        lines = []
        for line in sandbox.stdout:  # until the bookies are up (or the sandbox ends: a failure)
            lines.append(line)
            if line.startswith("status page:"):
                break
        assert lines and lines[-1].startswith("status page:"), "".join(lines)
        meta = ("--metadata", f"sqlite://{data / 'metadata.db'}")

        def cli(*args: str, stdin: str | None = None) -> str:
            done = subprocess.run([python, "-m", "bkframe", *args, *meta], input=stdin, capture_output=True, text=True,
                                  env=env, timeout=120)
            assert done.returncode == 0, done.stderr
            return done.stdout

        cli("log", "create", "plugged", "-e", "1", "-w", "1", "-a", "1")
        cli("log", "append", "plugged", stdin="one\ntwo\n")
        assert cli("log", "read", "plugged") == "one\ntwo\n"
    finally:
        sandbox.send_signal(signal.SIGINT)
        rest = sandbox.communicate(timeout=60)[0]
    # Stopped by Ctrl-C as a user stops it (128 + SIGINT). A bookie whose [ledger_storage]
    # plugin is not installed does not start: the sandbox would have ended before its
    # status page, above.
    assert sandbox.returncode == 128 + signal.SIGINT and "sandbox stopped" in rest, rest
