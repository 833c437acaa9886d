"""A least-recently-used cache bounded by bytes, for the in-process caches of the services.

A count bound says nothing about memory when entries differ in size by orders of
magnitude (a data-subject key is a few hundred bytes, a rendered Working Memory
view can be megabytes), so every cache that grows with traffic is bounded by the
bytes of its entries instead, as the caller sizes them. An entry larger than the
whole budget is not kept at all; the oldest entries go first.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ByteLRU(Generic[K, V]):
    """Entries with a size in bytes, evicted oldest-used first once their total passes ``max_bytes``.

    ``ttl_s`` (optional) also drops an entry that many seconds after it was put,
    for caches whose entries go stale (a rendered view is only useful while its
    chunks are being fetched).
    """

    def __init__(self, max_bytes: int, *, ttl_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must be at least 0")
        self.max_bytes = max_bytes
        self._ttl_s = ttl_s
        self._clock = clock
        self._entries: OrderedDict[K, tuple[V, int, float]] = OrderedDict()
        self._bytes = 0

    @property
    def total_bytes(self) -> int:
        """Total size of the entries held now."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def get(self, key: K) -> V | None:
        """The entry (now the most recently used), or None when absent or expired."""
        found = self._entries.get(key)
        if found is None:
            return None
        value, _, expires = found
        if self._ttl_s is not None and self._clock() >= expires:
            self.pop(key)
            return None
        self._entries.move_to_end(key)
        return value

    def put(self, key: K, value: V, size: int) -> bool:
        """Keep ``value`` as ``size`` bytes; False (and nothing kept) when it alone exceeds the budget."""
        self.pop(key)
        if size > self.max_bytes:
            return False
        expires = self._clock() + self._ttl_s if self._ttl_s is not None else 0.0
        self._entries[key] = (value, size, expires)
        self._bytes += size
        while self._bytes > self.max_bytes:
            _, (_, dropped, _) = self._entries.popitem(last=False)
            self._bytes -= dropped
        return True

    def pop(self, key: K) -> V | None:
        found = self._entries.pop(key, None)
        if found is None:
            return None
        self._bytes -= found[1]
        return found[0]

    def keys(self) -> list[K]:
        """The keys held now (a copy: popping while iterating is safe)."""
        return list(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0
