"""A known error is one line on stderr and exit status 1: never a traceback, never an
ExceptionGroup. (The ledger commands' own errors are in test_ledger_and_sandbox.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import trio

from bkframe import BKError, MetadataError
from bkframe.cli.errors import known_error
from tests.cli.forked_cli import bkframe_text


def bk(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return bkframe_text(*args, timeout=timeout)


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *says: str) -> None:
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "ExceptionGroup" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, proc.stderr
    for what in says:
        assert what in errors[0], proc.stderr


def test_sandbox_on_a_metadata_store_that_is_down(tmp_path: Path) -> None:
    proc = bk("sandbox", "--bookies", "2", "--data-dir", str(tmp_path), "--metadata", "zk://127.0.0.1:1/nothing-here")
    assert_one_line_error(proc, "zk://127.0.0.1:1/nothing-here")
    assert "listening" not in proc.stdout


def test_a_client_command_on_a_store_that_does_not_exist(tmp_path: Path) -> None:
    """Only bookies and the sandbox create a store: a typo is an error, not an empty cluster."""
    uri = f"sqlite://{tmp_path / 'typo' / 'x.db'}"
    for args in (["ledger", "list"], ["ledger", "create"], ["bookies", "list"]):
        assert_one_line_error(bk(*args, "--metadata", uri), f"metadata store '{uri}' does not exist")
    assert not (tmp_path / "typo").exists()


def test_bookie_with_a_bad_config(tmp_path: Path) -> None:
    config = tmp_path / "bookie.toml"
    config.write_text('[journal]\nplugin = "journal_fs"\nmax_wiat_ms = 1\n')
    proc = bk("bookie", "--config", str(config), "--data-dir", str(tmp_path / "data"), "--port", "0")
    assert_one_line_error(proc, f"{config}: [journal] (plugin 'journal_fs'): unknown key(s) max_wiat_ms")
    config.write_text('[ledger_storage]\nplugin = "rocksdb"\n')
    proc = bk("bookie", "--config", str(config), "--data-dir", str(tmp_path / "data"), "--port", "0")
    assert_one_line_error(proc, "plugin = 'rocksdb': no installed plugin provides it")


def test_known_errors_inside_exception_groups() -> None:
    """trio wraps a task's error in an ExceptionGroup; the CLI still shows just the error."""

    async def fails() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            raise MetadataError("store gone")

    with pytest.raises(BaseException) as caught:
        trio.run(fails)
    assert isinstance(caught.value, BaseExceptionGroup)
    found = known_error(caught.value)
    assert isinstance(found, MetadataError) and str(found) == "store gone"
    # A group that also holds a bug is a bug: its traceback is shown.
    assert known_error(ExceptionGroup("mixed", [BKError("known"), KeyError("bug")])) is None
    assert known_error(KeyError("bug")) is None


def test_user_errors_in_groups_are_one_line_and_a_bug_says_so() -> None:
    """An OSError about the machine (a port in use) inside an exception group is one line that
    says what to do; a bug keeps its traceback and ends with a line saying it is a bug."""
    import errno

    import click
    from click.testing import CliRunner

    from bkframe.cli.errors import Group

    @click.group(cls=Group)
    def cli() -> None:
        pass

    @cli.command()
    def busy() -> None:
        raise ExceptionGroup("nursery", [OSError(errno.EADDRINUSE, "Address already in use")])

    @cli.command()
    def bug() -> None:
        raise ExceptionGroup("nursery", [KeyError("oops"), MetadataError("store gone")])

    result = CliRunner().invoke(cli, ["busy"])
    assert result.exit_code == 1
    assert result.output == (
        "Error: Address already in use: another process listens on that port; stop it or choose another port\n"
    )
    result = CliRunner().invoke(cli, ["bug"])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert "Traceback" in result.output and "KeyError: 'oops'" in result.output
    assert lines[-1] == "Error: this is a bug in bkframe (ExceptionGroup); please report it with the traceback above"


def test_output_to_a_pipe_whose_reader_went_away() -> None:
    """``bkframe plugins | head -1``: head exits after its line, and bkframe stops quietly as
    cat(1) does (it printed a "bug" traceback for BrokenPipeError)."""
    proc = subprocess.Popen([sys.executable, "-m", "bkframe", "plugins"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before it writes a byte (its imports take far longer)
    stderr = proc.stderr.read()
    assert proc.wait(timeout=60) == 141 and stderr == "", stderr
