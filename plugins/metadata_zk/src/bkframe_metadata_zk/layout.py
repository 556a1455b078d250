"""Where the ZooKeeper store keeps ledgers: a hierarchy with at most 10^4 children per node.

A flat ``ROOT/ledgers`` node with a child per ledger fails at scale: a ``get_children`` of
10^5 ledgers is 2.4 MB, past the 1 MB a ZooKeeper client accepts by default, and every
listing reads all of it. As BookKeeper's LongHierarchicalLedgerManager does, the id is
zero-padded to 19 digits (every id up to 2^63 - 1) and split 3+4+4+4+4 into a path::

    ledger 123456789  ->  BASE/000/0000/0001/2345/L6789

so no node holds more than 10^4 children and walking the buckets in order lists ids in
order. The bookie index (:meth:`~bkframe.core.interfaces.metadata_store.MetadataStore.ledgers_of_bookie`)
uses the same paths under a base per bookie.
"""

from __future__ import annotations

from collections.abc import Callable

#: Digits of the zero-padded id at each level, top first.
SPLIT = (3, 4, 4, 4, 4)
#: Prefix of a leaf's name (a leaf is a ledger, or an index entry).
LEAF = "L"
#: The largest id a path can name.
MAX_ID = 10 ** sum(SPLIT) - 1


def id_parts(ledger_id: int) -> list[int]:
    """The id's number at each level, top first."""
    if not 0 <= ledger_id <= MAX_ID:
        raise ValueError(f"ledger id {ledger_id} is outside 0..{MAX_ID}")
    parts = []
    for width in reversed(SPLIT):
        ledger_id, part = divmod(ledger_id, 10**width)
        parts.append(part)
    return parts[::-1]


def _name(level: int, part: int) -> str:
    name = f"{part:0{SPLIT[level]}d}"
    return LEAF + name if level == len(SPLIT) - 1 else name


def leaf_path(base: str, ledger_id: int) -> str:
    """The node of ``ledger_id`` under ``base``."""
    return base + "".join(f"/{_name(level, part)}" for level, part in enumerate(id_parts(ledger_id)))


def parse_name(level: int, name: str) -> int | None:
    """The number a child named ``name`` stands for at ``level``, or None if it is none of
    this layout's names (left alone by a listing)."""
    if level == len(SPLIT) - 1:
        if not name.startswith(LEAF):
            return None
        name = name[len(LEAF) :]
    if len(name) != SPLIT[level] or not (name.isascii() and name.isdigit()):
        return None
    return int(name)


def walk(
    children: Callable[[str], list[str] | None],
    base: str,
    *,
    start: int,
    limit: int | None,
    on_empty: Callable[[str], None] = lambda path: None,
) -> list[int]:
    """The ids ``>= start`` under ``base``, ascending, at most ``limit`` of them.

    ``children(path)`` lists a node (None if it is gone); a page costs one listing per
    level on the way to ``start``, then one per bucket it reads. ``on_empty(path)`` is told
    of each bucket found empty (the store prunes it, so that deleted ranges cost a later
    walk nothing)."""
    out: list[int] = []
    if limit == 0 or start > MAX_ID:
        return out
    first = id_parts(max(start, 0))
    last_level = len(SPLIT) - 1

    def visit(path: str, level: int, prefix: int, on_first: bool) -> bool:
        """True once the page is full."""
        names = children(path)
        if names is None:
            return False
        if not names and level > 0:
            on_empty(path)
            return False
        found = sorted((part, name) for name in names if (part := parse_name(level, name)) is not None)
        for part, name in found:
            if on_first and part < first[level]:
                continue
            value = prefix * 10 ** SPLIT[level] + part
            if level == last_level:
                out.append(value)
                if limit is not None and len(out) >= limit:
                    return True
            elif visit(f"{path}/{name}", level + 1, value, on_first and part == first[level]):
                return True
        return False

    visit(base, 0, 0, True)
    return out


def lowest_buckets(children: Callable[[str], list[str] | None], base: str) -> list[str]:
    """The paths of the buckets whose children are leaves, in order: a count of the leaves
    reads each one's stat (``numChildren``) instead of its up to 10^4 names. Costs one
    listing per bucket above them (a handful for ids up to 10^6)."""
    paths = [base]
    for level in range(len(SPLIT) - 1):
        below: list[str] = []
        for path in paths:
            names = children(path) or []
            found = sorted((part, name) for name in names if (part := parse_name(level, name)) is not None)
            below.extend(f"{path}/{name}" for _, name in found)
        paths = below
    return paths
