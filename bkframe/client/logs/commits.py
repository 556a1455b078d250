"""Committing closed ledgers to logs: to one (:meth:`~bkframe.client.logs.api.Logs.commit_ledgers`)
or to several at once (:meth:`~bkframe.client.logs.api.Logs.commit_many`).

A commit reads every log record it touches, checks the ledgers (closed, the log's password,
in no log already), then stores every record with its new segments in **one** step: one
compare-and-set for one log, :meth:`~bkframe.core.interfaces.metadata_store.MultiLogStore.update_logs` (all or
nothing) for several. If a record moved meanwhile, it reads them all again and retries. Each
record remembers the commit's token, so a commit retried after a crash or a timeout finds it
and changes nothing; since the records are stored together, a token is in all of a commit's
logs or in none -- a token found in some of them only is refused (:class:`CommitError`).

The ledgers staged under the token in each log and left out of the commit go to that log's
garbage in the same step, and are deleted after it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence

from bkframe.client.logs.envelope import FORMAT_ENVELOPE, FORMAT_KEY, FORMAT_RAW
from bkframe.client.logs.model import TOKEN_HISTORY, Commit, CommitResult, LogMetadata, check_name
from bkframe.client.logs.records import LogRecords
from bkframe.core.metadata import LedgerMetadata
from bkframe.errors import BadVersionError, CommitError, NoSuchLedgerError

log = logging.getLogger("bkframe.logs")

#: What a commit takes: ledger ids per log.
Commits = Mapping[str, Iterable[int]]


def passwords_for(names: Iterable[str], password: bytes | Mapping[str, bytes], what: str) -> dict[str, bytes]:
    """Each log's password: one for all (bytes), or one per log (a mapping naming every log)."""
    names = list(names)
    if isinstance(password, bytes | bytearray):
        return {name: bytes(password) for name in names}
    missing = [name for name in names if name not in password]
    if missing:
        raise ValueError(f"{what}: no password for log(s) {missing}; give one per log, or one password (bytes) for all")
    return {name: password[name] for name in names}


def _ledger_lists(commits: Commits) -> dict[str, list[int]]:
    """The commit's ledgers per log, checked: each ledger once, in one log."""
    lists = {check_name(name): list(ids) for name, ids in sorted(commits.items())}
    owner: dict[int, str] = {}
    for name, ids in lists.items():
        if len(set(ids)) != len(ids):
            raise CommitError(f"commit to log {name!r}: a ledger is listed twice in {ids}")
        for ledger_id in ids:
            if ledger_id in owner:
                raise CommitError(
                    f"commit: ledger {ledger_id} is listed for logs {owner[ledger_id]!r} and {name!r}; a ledger is "
                    f"committed to one log only"
                )
            owner[ledger_id] = name
    return lists


async def _read(records: LogRecords, names: Iterable[str]) -> dict[str, LogMetadata]:
    return {name: await records.read(name) for name in names}


def _replayed(found: Mapping[str, LogMetadata], token: str) -> dict[str, CommitResult] | None:
    """The first result if ``token`` was committed (to every log here), None if to none."""
    done = {name: record.commit(token) for name, record in found.items()}
    present = sorted(name for name, c in done.items() if c is not None)
    if not present:
        return None
    absent = sorted(set(found) - set(present))
    if absent:
        raise CommitError(
            f"commit {token!r}: the token is committed in log(s) {present} but not in {absent}, and a commit lands "
            f"in all of its logs or in none: it was committed with other logs than these, or it left the last "
            f"{TOKEN_HISTORY} commits that {absent} remember, or one of them was deleted and made again. Nothing "
            f"was changed; commit new ledgers under a new token"
        )
    return {name: CommitResult(token, c.segments, replayed=True) for name, c in done.items() if c is not None}


def _check_fences(found: Mapping[str, LogMetadata], fences: Mapping[str, tuple[str, int]]) -> None:
    for name, (fence, epoch) in fences.items():
        held = found[name].fences.get(fence)
        if held != epoch:
            raise CommitError(
                f"commit to log {name!r}: {fence} is at epoch {held}, not {epoch}: a newer owner took it over, and this "
                f"commit is refused (nothing was changed)"
            )


async def _closed_ledgers(
    records: LogRecords, lists: Mapping[str, list[int]], found: Mapping[str, LogMetadata]
) -> dict[int, LedgerMetadata]:
    """Each ledger's metadata, once it is known to be closed and to have its log's password."""
    mds: dict[int, LedgerMetadata] = {}
    for name, ids in lists.items():
        for ledger_id in ids:
            try:
                md = await records.ledgers.ledger_metadata(ledger_id)
            except NoSuchLedgerError:
                raise CommitError(f"commit to log {name!r}: ledger {ledger_id} does not exist") from None
            if not md.closed:
                raise CommitError(
                    f"commit to log {name!r}: ledger {ledger_id} is {md.state.value}; only closed ledgers can be "
                    f"committed (close it first)"
                )
            if md.password_hash != found[name].password_hash:
                raise CommitError(f"commit to log {name!r}: ledger {ledger_id} has another password than the log")
            mds[ledger_id] = md
    return mds


def _committed(
    record: LogMetadata,
    mds: Sequence[LedgerMetadata],
    others: Iterable[LogMetadata],
    token: str,
    time_bounds: Mapping[int, tuple[int, int]],
    now: float,
) -> LogMetadata:
    """``record`` with the ledgers of ``mds`` appended as closed segments (empty ones to the
    garbage), the commit remembered, and the token's other staged ledgers in the garbage."""
    ids = [md.ledger_id for md in mds]
    taken = (record.ledger_ids() - record.staged_ids()) & set(ids)
    if taken:
        raise CommitError(f"commit to log {record.name!r}: ledger(s) {sorted(taken)} are in the log already")
    for other in others:
        if elsewhere := other.ledger_ids() & set(ids):
            raise CommitError(f"commit to log {record.name!r}: ledger(s) {sorted(elsewhere)} are in log {other.name!r}")
    new = record
    for md in mds:
        if md.last_entry_id < 0:
            continue
        fmt = FORMAT_ENVELOPE if md.custom.get(FORMAT_KEY) == str(FORMAT_ENVELOPE) else FORMAT_RAW
        lo, hi = time_bounds.get(md.ledger_id, (-1, -1)) if fmt == FORMAT_ENVELOPE else (-1, -1)
        new = new.add_segment(
            md.ledger_id, now=now, closed=True, last_entry_id=md.last_entry_id, length=md.length, format=fmt,
            min_ts=lo, max_ts=hi,
        )
    commit = Commit(token, record.next_segment, new.next_segment - 1, now)
    empty = [md.ledger_id for md in mds if md.last_entry_id < 0]
    # Ledgers staged for this token and left out can never be committed: garbage.
    return new.unstage(token=token, keep=ids).with_commit(commit).with_garbage(empty)


async def commit(
    records: LogRecords,
    commits: Commits,
    token: str,
    *,
    password: bytes | Mapping[str, bytes] = b"",
    time_bounds: Mapping[int, tuple[int, int]] | None = None,
    fences: Mapping[str, tuple[str, int]] | None = None,
) -> dict[str, CommitResult]:
    """Append each log's closed ledgers to it as consecutive segments, every log in one
    atomic step; see the module docstring. The result per log, by name. ``fences``: per log,
    a fence (name, epoch) its record must hold for the commit to land
    (:attr:`~bkframe.client.logs.model.LogMetadata.fences`)."""
    if not token:
        raise ValueError("a commit needs a non-empty token (e.g. the job's or batch's id)")
    lists = _ledger_lists(commits)
    if not lists:
        return {}
    if len(lists) > 1:
        records.multi_log_store()  # a store that cannot: say so before any work
    passwords = passwords_for(lists, password, "commit")
    found = await _read(records, lists)
    for name, record in found.items():
        records.check_password(record, passwords[name])
    replayed = _replayed(found, token)
    if replayed is not None:
        return replayed
    mds = await _closed_ledgers(records, lists, found)
    while True:
        _check_fences(found, fences or {})
        now = time.time()
        changes = []
        for name, record in found.items():
            others = [r for n, r in found.items() if n != name]
            new = _committed(record, [mds[i] for i in lists[name]], others, token, time_bounds or {}, now)
            # Only segments that were in the record already may move to chunk records: a
            # retry may number this commit's segments differently.
            changes.append((new, record.version, record.next_segment))
        try:
            stored = await records.cas_many(changes)
            break
        except BadVersionError:
            found = await _read(records, lists)
            replayed = _replayed(found, token)  # our own store landed, though it said otherwise
            if replayed is not None:
                return replayed
    for name, record in found.items():
        if any(mds[i].last_entry_id < 0 for i in lists[name]) or any(s.token == token for s in record.staged):
            try:
                await records.collect_garbage(name)
            except Exception as e:  # noqa: BLE001 - the commit stands; the garbage is deleted later
                log.warning("log %r: deleting ledgers the commit let go failed (retried later): %s", name, e)
    results = {}
    for new in stored:
        done = new.commit(token)
        assert done is not None
        results[new.name] = CommitResult(token, done.segments)
    return results
