"""Every command of the CLI through a table of bad inputs: ports in use, data dirs that are
files, bad ranges, bad flags, two sources of one secret, stores that are missing or down,
entries over the maximum size. Each must end with exit status 1 or 2 and one line,
``Error: ...``, that names the problem and what to do (click's usage lines may come
before it), with no traceback and no exception group anywhere; a bookie that fails to
start must leave nothing behind: no data dir made, no cookie and no registration in the
metadata store.

The rows run as real processes (forked from one that imported the CLI once:
tests/cli/forked_cli.py), four at a time, once for the module; each row is then its own
test. Bookies that fail to start point at the shared cluster's metadata store, so that
anything they stamped would be found there.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs
import pytest
import trio

import bkframe
from bkframe.core.plugin_manager import PluginManager
from bkframe.testing.cluster import Cluster
from tests.cli.forked_cli import bkframe_cli

#: A stdin line over the default maximum entry size (5 MiB).
BIG_LINE = b"x" * (6 * 1024 * 1024)
#: A metadata store in a directory that does not exist, and one whose server is not running.
MISSING_STORE = "sqlite:///nonexistent-dir-of-bkframe-tests/x.db"
DOWN_STORE = "zk://127.0.0.1:1/nothing-here"
#: An address of no machine (TEST-NET-3, RFC 5737).
NOT_HERE = "203.0.113.7"
#: A row takes a few seconds (a metadata store that is down: about ten); one still running
#: after this long is a command that did not fail at all (a bookie that started).
ROW_TIMEOUT_S = 60
#: Rows that wait on a timeout (a ZooKeeper or an S3 store that is down; the rest take a moment).
LONG_ROWS = frozenset({"create-store-down", "tier-check-s3-down"})
#: Variables a row must not inherit from whoever runs the tests.
CLEARED_ENV = ("BKFRAME_METADATA", "BKFRAME_PASSWORD", "BKFRAME_AUTH_TOKEN", "BKFRAME_AUTH_TOKEN_FILE")


@attrs.frozen
class Scene:
    """What the rows refer to, made once for the module."""

    root: Path
    metadata: str
    #: A port something listens on for the whole module.
    busy_port: int
    #: A regular file where a directory is expected.
    a_file: Path
    #: A config file whose [bookie] port is "abc".
    bad_config: Path
    password_file: Path
    token_file: Path
    #: A closed ledger with 3 entries (password "pw"); an unclaimed open one; a log with 2
    #: entries; an empty log (both password "pw").
    ledger: str
    fresh_ledger: str
    log: str
    fresh_log: str

    def data_dir(self, row: str) -> Path:
        return self.root / row / "data"


@attrs.frozen
class Row:
    name: str
    args: Callable[[Scene], list[str]]
    #: Substrings of the error line.
    says: Callable[[Scene], tuple[str, ...]]
    stdin: bytes = b""
    env: tuple[tuple[str, str], ...] = ()
    #: A bookie start-up: it must leave nothing behind (see the module's text).
    startup: bool = False


def bookie(name: str, *flags: str) -> Callable[[Scene], list[str]]:
    """``bkframe bookie`` on the shared store, with its own id and data dir, and ``flags``
    (``{port}``, ``{file}`` and ``{config}`` are the scene's)."""

    def args(s: Scene) -> list[str]:
        given = [f.format(port=s.busy_port, file=s.a_file, config=s.bad_config) for f in flags]
        data_dir = [] if "--data-dir" in given else ["--data-dir", str(s.data_dir(name))]
        port = [] if "--port" in given else ["--port", "0"]
        return ["bookie", "--metadata", s.metadata, "--bookie-id", f"bad-input-{name}", *data_dir, *port, *given]

    return args


def says(*texts: str) -> Callable[[Scene], tuple[str, ...]]:
    return lambda s: tuple(t.format(port=s.busy_port, ledger=s.ledger, fresh=s.fresh_ledger) for t in texts)


def meta(*args: str) -> Callable[[Scene], list[str]]:
    """A client command on the shared cluster (``{ledger}``, ``{fresh}``, ``{log}``,
    ``{fresh_log}``, ``{file}``, ``{password_file}``, ``{token_file}`` are the scene's)."""

    def made(s: Scene) -> list[str]:
        values = {
            "ledger": s.ledger, "fresh": s.fresh_ledger, "log": s.log, "fresh_log": s.fresh_log, "file": s.a_file,
            "password_file": s.password_file, "token_file": s.token_file, "metadata": s.metadata, "root": s.root,
        }
        out = [a.format(**values) for a in args]
        return out if "--metadata" in out else [*out, "--metadata", s.metadata]

    return made


ROWS = [
    # -- bkframe bookie: start-up failures leave nothing behind --------------------------------
    Row("port-in-use", bookie("port-in-use", "--port", "{port}"),
        says("cannot listen on 127.0.0.1:{port}", "the port is in use", "choose another port"), startup=True),
    Row("http-port-in-use", bookie("http-port-in-use", "--http-port", "{port}"),
        says("cannot listen on 127.0.0.1:{port}, the [http] host and port (--http-port)", "in use"), startup=True),
    Row("data-dir-is-a-file", bookie("data-dir-is-a-file", "--data-dir", "{file}"),
        says("is a file, not a directory", "give a directory"), startup=True),
    Row("data-dir-under-a-file", bookie("data-dir-under-a-file", "--data-dir", "{file}/data"),
        says("cannot make the data dir", "Not a directory"), startup=True),
    Row("host-not-here", bookie("host-not-here", "--host", NOT_HERE),
        says(f"{NOT_HERE} is no address of this machine"), startup=True),
    Row("port-abc", bookie("port-abc", "--port", "abc"), says("'--port': 'abc' is not a valid integer"), startup=True),
    Row("port-70000", bookie("port-70000", "--port", "70000"),
        says("--port: port = 70000 should be an integer from 0 to 65535"), startup=True),
    Row("flag-over-bad-file", bookie("flag-over-bad-file", "--config", "{config}", "--port", "0"),
        says("[bookie]: port = 'abc' should be an integer"), startup=True),
    Row("http-port-negative", bookie("http-port-negative", "--http-port", "-1"),
        says("--http-port: port = -1 should be an integer from 0 to 65535"), startup=True),
    Row("config-missing", bookie("config-missing", "--config", "{file}.nope"), says("does not exist"), startup=True),
    # -- bkframe ledger ------------------------------------------------------------------------
    Row("read-from-negative", meta("ledger", "read", "{ledger}", "--password", "pw", "--from", "-3"),
        says("'--from': -3 is not in the range x>=0")),
    Row("read-to-negative", meta("ledger", "read", "{ledger}", "--password", "pw", "--to", "-1"),
        says("'--to': -1 is not in the range")),
    Row("read-from-after-to", meta("ledger", "read", "{ledger}", "--password", "pw", "--from", "2", "--to", "1"),
        says("--from 2 is after --to 1")),
    Row("read-beyond-lac", meta("ledger", "read", "{ledger}", "--password", "pw", "--from", "10"),
        says("--from 10 is beyond the last confirmed entry 2 of ledger {ledger}", "give --from 3 or less")),
    Row("read-id-abc", meta("ledger", "read", "abc"), says("'LEDGER_ID': 'abc' is not a valid integer")),
    Row("read-wrong-password", meta("ledger", "read", "{ledger}", "--password", "nope"), says("wrong password")),
    Row("read-two-passwords", meta("ledger", "read", "{ledger}", "--password", "pw", "--password-file", "{password_file}"),
        says("the password is given 2 ways (--password, --password-file); give one")),
    Row("read-password-flag-and-env", meta("ledger", "read", "{ledger}", "--password", "pw"),
        says("the password is given 2 ways (--password, $BKFRAME_PASSWORD)"), env=(("BKFRAME_PASSWORD", "pw"),)),
    Row("read-password-file-missing", meta("ledger", "read", "{ledger}", "--password-file", "{root}/nope"),
        says("cannot read the password file")),
    Row("two-tokens", meta("ledger", "list", "--auth-token-file", "{token_file}"),
        says("the token is given 2 ways (--auth-token-file, $BKFRAME_AUTH_TOKEN)"), env=(("BKFRAME_AUTH_TOKEN", "t"),)),
    Row("append-too-large", meta("ledger", "append", "{fresh}", "--password", "pw"),
        says("stdin line 2 is 6291456 bytes, over the maximum entry of", "max_entry_size", "split it"),
        stdin=b"ok\n" + BIG_LINE + b"\n"),
    Row("create-bad-quorums", meta("ledger", "create", "-e", "2", "-w", "3"), says("E >= W >= A >= 1")),
    Row("create-unknown-type", meta("ledger", "create", "--type", "NOPE"), says("unknown ledger type 'NOPE'")),
    Row("metadata-no-ledger", meta("ledger", "metadata", "999999"), says("ledger 999999 does not exist")),
    Row("close-no-ledger", meta("ledger", "close", "999999"), says("ledger 999999 does not exist")),
    Row("delete-no-ledger", meta("ledger", "delete", "999999"), says("ledger 999999 does not exist")),
    Row("check-no-ledger", meta("ledger", "check", "999999"), says("ledger 999999 does not exist")),
    Row("list-missing-store", meta("ledger", "list", "--metadata", MISSING_STORE),
        says(f"metadata store '{MISSING_STORE}' does not exist")),
    Row("create-store-down", meta("ledger", "create", "--metadata", DOWN_STORE),
        says(f"cannot reach the ZooKeeper metadata store '{DOWN_STORE}'", "is ZooKeeper running")),
    # -- bkframe log -----------------------------------------------------------------------------
    Row("log-read-bad-from", meta("log", "read", "{log}", "--from", "-3"), says("--from", "bad position '-3'")),
    Row("log-read-bad-to", meta("log", "read", "{log}", "--to", "0:x"), says("--to", "bad position '0:x'")),
    Row("log-tail-no-log", meta("log", "tail", "no-such-log"), says("log 'no-such-log' does not exist")),
    Row("log-tail-lines-and-from", meta("log", "tail", "{log}", "-n", "3", "--from", "earliest"),
        says("give -n (the last N records) or --from/--since", "not both")),
    Row("log-append-too-large", meta("log", "append", "{fresh_log}", "--password", "pw"),
        says("stdin line 2 is 6291456 bytes, over the maximum entry of"), stdin=b"ok\n" + BIG_LINE + b"\n"),
    Row("log-create-bad-name", meta("log", "create", "bad/name"), says("bad log name 'bad/name'")),
    Row("log-create-exists", meta("log", "create", "{log}"), says("already exists")),
    Row("log-create-unknown-type", meta("log", "create", "typed-log", "--type", "NOPE"), says("unknown ledger type 'NOPE'")),
    Row("log-create-bad-cursor-ttl", meta("log", "create", "ttl-log", "--cursor-ttl", "soon"), says("--cursor-ttl", "7d")),
    Row("log-append-wrong-password", meta("log", "append", "{log}", "--password", "wrong"), says("wrong password for log")),
    Row("log-append-bad-property", meta("log", "append", "{log}", "--password", "pw", "--property", "novalue"),
        says("--property", "'novalue': write NAME=VALUE")),
    Row("log-read-bad-since", meta("log", "read", "{log}", "--password", "pw", "--since", "yesterday"),
        says("--since", "write a time as 2026-11-26T10:00:00")),
    Row("log-read-from-and-since", meta("log", "read", "{log}", "--password", "pw", "--from", "0:0", "--since", "1h"),
        says("--from (a position) or --since (a time)")),
    Row("log-cursor-bad-ttl", meta("log", "cursor", "{log}", "c", "--ttl", "0"), says("--ttl", "a duration > 0")),
    Row("log-create-bad-quorums", meta("log", "create", "q-log", "-e", "2", "-w", "3"), says("E >= W >= A >= 1")),
    Row("log-info-no-log", meta("log", "info", "no-such-log"), says("log 'no-such-log' does not exist")),
    Row("log-cursors-no-log", meta("log", "cursors", "no-such-log"), says("log 'no-such-log' does not exist")),
    Row("log-cursor-bad-to", meta("log", "cursor", "{log}", "c", "--to", "x:1"), says("--to", "bad position 'x:1'")),
    Row("log-trim-nothing", meta("log", "trim", "{log}"), says("say what to trim")),
    Row("log-delete-no-log", meta("log", "delete", "no-such-log"), says("log 'no-such-log' does not exist")),
    Row("log-list-missing-store", meta("log", "list", "--metadata", MISSING_STORE), says("does not exist")),
    Row("bench-log-window-0", meta("bench", "log", "--window", "0"), says("'--window': 0 is not in the range x>=1")),
    # -- bkframe tier --------------------------------------------------------------------------
    Row("tier-check-no-directory", meta("tier", "check", "--tier", "file://{root}/no-tier-here"),
        says("no-tier-here does not exist", "add ?create=true to the URI")),
    Row("tier-check-unknown-scheme", meta("tier", "check", "--tier", "gcs://lake"),
        says("no installed plugin serves tier URIs of scheme 'gcs'")),
    Row("tier-check-s3-down", meta("tier", "check", "--tier", "s3://lake?endpoint=http://127.0.0.1:1&attempts=1"),
        says("tier s3://lake", "check the tier's URI, credentials and that the store is reachable"),
        env=(("AWS_ACCESS_KEY_ID", "test-key"), ("AWS_SECRET_ACCESS_KEY", "test-secret"))),
    Row("tier-check-bad-grace", meta("tier", "check", "--tier", "file://{root}", "--grace", "soon"),
        says("--grace", "a duration > 0")),
    # -- cookie, bookies, autorecovery ---------------------------------------------------------
    Row("cookie-data-dir-is-a-file", meta("cookie", "show", "--data-dir", "{file}", "--bookie-id", "x"),
        says("a part of the path is a file, not a directory")),
    Row("cookie-fix-missing-store",
        meta("cookie", "fix", "--data-dir", "{root}/cookie-fix", "--bookie-id", "x", "--metadata", MISSING_STORE),
        says("does not exist")),
    Row("bookies-list-missing-store", meta("bookies", "list", "--metadata", MISSING_STORE), says("does not exist")),
    Row("bookies-info-missing-store", meta("bookies", "info", "--metadata", MISSING_STORE), says("does not exist")),
    Row("decommission-missing-store", meta("bookies", "decommission", "x", "--metadata", MISSING_STORE),
        says("does not exist")),
    Row("autorecovery-no-metadata", lambda s: ["autorecovery"],
        says("Missing option '--metadata' (or set $BKFRAME_METADATA)")),
    Row("ledger-list-no-metadata", lambda s: ["ledger", "list"],
        says("Missing option '--metadata' (or set $BKFRAME_METADATA)")),
    Row("autorecovery-status-missing-store", meta("autorecovery", "status", "--metadata", MISSING_STORE),
        says("does not exist")),
    # -- sandbox, benchmarks, plugins ------------------------------------------------------------
    Row("sandbox-no-bookies", lambda s: ["sandbox", "--bookies", "0", "--data-dir", str(s.root / "sb")],
        says("'--bookies': 0 is not in the range x>=1")),
    Row("sandbox-data-dir-is-a-file", lambda s: ["sandbox", "--data-dir", str(s.a_file)],
        says("a file is in the way of a directory")),
    Row("bench-appends-count-0", lambda s: ["bench", "appends", "--count", "0"], says("'--count': 0 is not in the range x>=1")),
    Row("bench-appends-bad-quorums", meta("bench", "appends", "-e", "2", "-w", "3", "--count", "10"), says("E >= W >= A >= 1")),
    Row("bench-sweep-bad-sizes", lambda s: ["bench", "sweep", "--sizes", "abc", "--out-dir", str(s.root / "sweep")],
        says("--sizes", "'abc' should be whole numbers >= 1")),
    Row("bench-autorecovery-under-a-file",
        lambda s: ["bench", "autorecovery", "--data-dir", str(s.a_file / "bench"), "--size-mb", "1"],
        says("a part of the path is a file, not a directory")),
    Row("plugins-extra-argument", lambda s: ["plugins", "extra"], says("unexpected extra argument (extra)")),
]


@pytest.fixture(scope="module")
def scene(shared_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    root = tmp_path_factory.mktemp("bad-input")
    (a_file := root / "a-file").write_text("a regular file\n")
    (bad_config := root / "bad.toml").write_text('[bookie]\nport = "abc"\n')
    (password_file := root / "password").write_text("pw\n")
    (token_file := root / "token").write_text("t\n")
    with bkframe.connect(shared_cluster.metadata) as bk:
        writer = bk.create_ledger(password=b"pw")
        writer.append_many([b"a", b"b", b"c"])
        writer.close()
        fresh = bk.create_ledger(password=b"pw", claim=False)
        bk.logs.create("bad-input-log", password=b"pw")
        log_writer = bk.logs.open_writer("bad-input-log", password=b"pw")
        log_writer.append_many([b"a", b"b"])
        log_writer.close()
        bk.logs.create("bad-input-fresh-log", password=b"pw")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        yield Scene(
            root=root, metadata=shared_cluster.metadata, busy_port=busy.getsockname()[1], a_file=a_file,
            bad_config=bad_config, password_file=password_file, token_file=token_file,
            ledger=str(writer.ledger_id), fresh_ledger=str(fresh.ledger_id), log="bad-input-log",
            fresh_log="bad-input-fresh-log",
        )


def run(row: Row, scene: Scene) -> subprocess.CompletedProcess[str]:
    """The row's process; one that does not end in time (a bookie that started after all) is
    killed and fails its row only."""
    env = {k: v for k, v in os.environ.items() if k not in CLEARED_ENV} | dict(row.env)
    args = [sys.executable, "-m", "bkframe", *row.args(scene)]
    try:
        proc = bkframe_cli(*row.args(scene), input=row.stdin, env=env, timeout=ROW_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(args, -9, (e.stdout or b"").decode(errors="replace"),
                                           f"(still running after {ROW_TIMEOUT_S} s: killed)")
    return subprocess.CompletedProcess(args, proc.returncode, proc.stdout.decode(errors="replace"),
                                       proc.stderr.decode(errors="replace"))


@pytest.fixture(scope="module")
def results(scene: Scene) -> dict[str, subprocess.CompletedProcess[str]]:
    """Every row's process, four at a time, the long ones (a store that is down) first: the
    others run meanwhile."""
    rows = sorted(ROWS, key=lambda r: r.name not in LONG_ROWS)
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip((r.name for r in rows), pool.map(lambda r: run(r, scene), rows), strict=True))


#: Lines click prints before a usage error's ``Error:`` line.
USAGE = ("Usage: ", "Try '")


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_bad_input_is_one_line(row: Row, scene: Scene, results: dict[str, subprocess.CompletedProcess[str]]) -> None:
    proc = results[row.name]
    shown = f"exit {proc.returncode}\nstdout:\n{proc.stdout[-2000:]}\nstderr:\n{proc.stderr[-4000:]}"
    assert proc.returncode in (1, 2), shown
    for output in (proc.stdout, proc.stderr):
        assert not any(t in output for t in ("Traceback", "ExceptionGroup", "Exception Group", "+-+-")), shown
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith(USAGE)]
    assert len(lines) == 1 and lines[0].startswith("Error: "), shown
    for text in row.says(scene):
        assert text in lines[0], shown
    if row.startup:
        assert_nothing_left(row, scene)


def assert_nothing_left(row: Row, scene: Scene) -> None:
    """No data dir made (a file given as one is untouched), no cookie, no registration."""
    assert not scene.data_dir(row.name).exists()
    assert scene.a_file.is_file() and scene.a_file.read_text() == "a regular file\n"
    assert sorted(p.name for p in scene.root.iterdir() if p.name.startswith(scene.a_file.name)) == ["a-file"]

    async def stamped() -> tuple[object, list[str]]:
        store = PluginManager().metadata_store(scene.metadata)
        try:
            bookie_id = f"bad-input-{row.name}"
            return await store.read_cookie(bookie_id), [b.bookie_id for b in await store.list_bookies()]
        finally:
            await store.aclose()

    cookie, registered = trio.run(stamped)
    assert cookie is None and f"bad-input-{row.name}" not in registered


def test_appends_before_an_oversized_line_are_kept(
    scene: Scene, results: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    """``ledger append`` and ``log append`` stop at the oversized line: the line before it is
    appended, acknowledged and printed, and the ledger or log is closed as at end of input."""
    assert results["append-too-large"].stdout.split() == ["0"]
    assert results["log-append-too-large"].stdout.split() == ["0:0"]
    with bkframe.connect(scene.metadata) as bk:
        md = bk.ledger_metadata(int(scene.fresh_ledger))
        assert (md.state.value, md.last_entry_id) == ("CLOSED", 0)
        assert [e.payload for e in bk.open_ledger(md.ledger_id, password=b"pw").read(0, 0)] == [b"ok"]
        log_md = bk.logs.metadata(scene.fresh_log)
        assert [s.closed for s in log_md.segments] == [True]
