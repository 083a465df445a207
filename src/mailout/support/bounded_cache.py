"""One bounded cache type for mailout's in-process memos.

A cache that grows with its inputs (statements built per lane filter, environments a
test suite sets, template folders) must stop growing somewhere. ``BoundedCache``
keeps at most ``limit`` weight, one unit per entry unless a ``weigh`` function says
otherwise (bytes, for attachment contents), and when full drops the least recently
used entries first, so that what is in steady use stays.

Reads take no lock: each is one ``OrderedDict`` operation, atomic under the GIL, and
a read races a write only to miss a refresh of recency. Writes take a lock, so the
weight total stays exact.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

__all__ = ["BoundedCache"]


def _one(_value: object) -> int:
    return 1


class BoundedCache(Generic[K, V]):
    """A least-recently-used mapping of at most ``limit`` total weight. Thread-safe.

    ``weigh(value)`` is an entry's weight (default 1: ``limit`` counts entries). A
    value heavier than ``limit`` alone is not kept: :meth:`put` returns False.
    """

    def __init__(self, limit: int, weigh: Callable[[V], int] = _one) -> None:
        if limit < 1:
            raise ValueError(f"a cache holds at least 1, not {limit}")
        self.limit = limit
        self._weigh = weigh
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """The value for ``key`` (now the most recently used), or None."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        try:  # noqa: SIM105  # (a with-suppress costs a context manager per hit)
            self._entries.move_to_end(key)
        except KeyError:  # evicted by another thread since the read: still a hit
            pass
        return entry[0]

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def weight(self) -> int:
        """The total weight held."""
        return self._weight

    def put(self, key: K, value: V) -> bool:
        """Keep ``value`` for ``key``, dropping least recently used entries to make
        room. False (and nothing kept or dropped) when ``value`` alone is too heavy."""
        weight = self._weigh(value)
        if weight > self.limit:
            return False
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._weight -= old[1]
            self._entries[key] = (value, weight)
            self._weight += weight
            while self._weight > self.limit:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._weight -= dropped
        return True

    def snapshot(self) -> dict[K, V]:
        """A copy of the entries, for a reader that must not see them change."""
        with self._lock:
            while True:
                try:  # one C-level copy; a lock-free read may reorder it meanwhile
                    items = list(self._entries.items())
                except RuntimeError:  # "mutated during iteration": copy again
                    continue
                return {key: entry[0] for key, entry in items}

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._weight = 0
