"""A cluster is created on purpose: the check every bookie, autorecovery service and writing
client makes of its metadata store, and how a cluster is made.

``bkframe cluster init --metadata URI`` (BookKeeper's ``initnewcluster``) stores a
:class:`~bkframe.core.metadata.ClusterRecord` at the store's root. A store that holds none is
no cluster: a bookie refuses to start on it (nothing is stamped), so that a typo in a URI is
an error naming the command that makes a cluster, never a new, empty cluster. A record of a
layout this bkframe does not know is refused too, rather than read or written in the wrong
places.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import anyio

from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.core.metadata import LAYOUT_VERSION, ClusterRecord
from bkframe.errors import MetadataError, NoClusterError

#: The layout versions this bkframe reads and writes.
KNOWN_LAYOUT_VERSIONS = frozenset({LAYOUT_VERSION})
#: How long a start-up waits for the store to say whether it holds a cluster.
CLUSTER_CHECK_TIMEOUT_S = 30.0


def no_cluster(uri: str, hint: str = "") -> NoClusterError:
    """The error for a store that holds no cluster (``hint``: another way the caller has)."""
    return NoClusterError(f"no bkframe cluster in {uri}: create one with `bkframe cluster init --metadata {uri}`{hint}")


def check_layout(record: ClusterRecord, uri: str) -> ClusterRecord:
    """``record`` if this bkframe knows its layout, else :class:`NoClusterError` saying so."""
    if record.layout_version not in KNOWN_LAYOUT_VERSIONS:
        known = ", ".join(str(v) for v in sorted(KNOWN_LAYOUT_VERSIONS))
        raise NoClusterError(
            f"the bkframe cluster in {uri} (instance {record.instance_id}) has metadata layout version "
            f"{record.layout_version}; this bkframe knows layout version {known} only: run a bkframe release "
            f"that knows it (nothing was changed)"
        )
    return record


async def require_cluster(store: MetadataStore, *, hint: str = "") -> ClusterRecord:
    """The store's cluster record; :class:`NoClusterError` if it holds none or one of a
    layout this bkframe does not know, :class:`MetadataError` if the store does not answer
    within :data:`CLUSTER_CHECK_TIMEOUT_S`."""
    with _in_time(store.uri):
        record = await store.read_cluster()
    if record is None:
        raise no_cluster(store.uri, hint)
    return check_layout(record, store.uri)


async def init_cluster(store: MetadataStore) -> tuple[ClusterRecord, bool]:
    """Make the store a cluster unless it is one: (its record, whether it was made now).
    Of several processes doing this at once, exactly one makes it and all get its record."""
    made = ClusterRecord.new()
    with _in_time(store.uri):
        stored = await store.init_cluster(made)
    if stored:
        return made, True
    return await require_cluster(store), False


@contextmanager
def _in_time(uri: str) -> Iterator[None]:
    """A store that is down is one clear error naming it, not a hang."""
    try:
        with anyio.fail_after(CLUSTER_CHECK_TIMEOUT_S):
            yield
    except TimeoutError:
        raise MetadataError(
            f"metadata store {uri} did not answer within {CLUSTER_CHECK_TIMEOUT_S:.0f} s; is it running?"
        ) from None
