"""A metadata store wrapper that counts the calls made on it: how a test proves that a
component reads what concerns it and not the cluster's ledgers (issue 27)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, cast

from bkframe.core.interfaces.metadata_store import MetadataStore


class CountingStore:
    """Every attribute of ``inner``; each method call is counted by name in :attr:`calls`.
    Pass it where a :class:`~bkframe.core.interfaces.metadata_store.MetadataStore` is expected with
    :meth:`as_store`."""

    def __init__(self, inner: MetadataStore) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attr(*args, **kwargs)

        return cast(Callable[..., Any], counted)

    def as_store(self) -> MetadataStore:
        return cast(MetadataStore, self)
