"""The projector's in-memory task states, bounded by count and by bytes.

A plain dict to the projection loop (``cache[key]``, ``key in cache``, ``pop``,
``clear``, insertion order = least recently changed first) that also knows each
state's size: the bytes of its core row plus those of each of its variable rows,
as read (``load``) or last written (``note``: a batch writes the core and only
the variables it set, so the others keep their known size). ``trim`` then evicts the oldest
states while either bound is exceeded, down to half of it, so the cost of
trimming is paid once per many batches. A counted bound alone let 50,000 states
of 10 MB each be held; an evicted state is simply read back from PostgreSQL by
the next batch that touches its task.

It also keeps each held state's variable rows as stored bytes (``variable_rows``), so the
core row's integrity tag, which covers every variable row, costs a batch the encoding of the
variables it changed, not of all of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentledger.core.state import WorkingMemory, encode_variable
from agentledger.services.projector.store import Loaded

Key = tuple[str, str]


class StateCache(dict[Key, WorkingMemory]):
    """Task states by (tenant, task); see the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self._sizes: dict[Key, int] = {}
        self._variable_sizes: dict[Key, dict[str, int]] = {}
        self._rows: dict[Key, dict[str, bytes]] = {}
        self._bytes = 0

    @property
    def total_bytes(self) -> int:
        """Sum of the known encoded sizes of the states held (a state loaded but not yet
        rewritten counts 0 until its next write)."""
        return self._bytes

    def _forget(self, key: Key) -> None:
        self._bytes -= self._sizes.pop(key, 0)
        self._variable_sizes.pop(key, None)
        self._rows.pop(key, None)

    def __delitem__(self, key: Key) -> None:
        super().__delitem__(key)
        self._forget(key)

    def pop(self, key: Key, *default: Any) -> Any:
        self._forget(key)
        return super().pop(key, *default)

    def clear(self) -> None:
        super().clear()
        self._sizes.clear()
        self._variable_sizes.clear()
        self._rows.clear()
        self._bytes = 0

    def touch(self, key: Key) -> None:
        """Move a held state to the young end (recently changed), keeping its known sizes."""
        dict.__setitem__(self, key, dict.pop(self, key))

    def load(self, loaded: Loaded) -> None:
        """Hold a state read back from PostgreSQL, sized by the rows it was read from."""
        self._forget(loaded.key)
        self[loaded.key] = loaded.state
        self._variable_sizes[loaded.key] = dict(loaded.variable_bytes)
        self._rows[loaded.key] = dict(loaded.variables)
        self._sizes[loaded.key] = loaded.core_bytes + sum(loaded.variable_bytes.values())
        self._bytes += self._sizes[loaded.key]

    def note(self, key: Key, core_bytes: int, variable_bytes: Mapping[str, int]) -> None:
        """Record the sizes of the rows just written for a held state: its core and the
        variables written (the others are unchanged)."""
        if key not in self:
            return
        sizes = self._variable_sizes.setdefault(key, {})
        sizes.update(variable_bytes)
        total = core_bytes + sum(sizes.values())
        self._bytes += total - self._sizes.get(key, 0)
        self._sizes[key] = total

    def variable_rows(self, key: Key, written: Mapping[str, bytes]) -> dict[str, bytes]:
        """Every variable row of a held state as stored once ``written`` (the rows a batch
        writes, name -> bytes) are: the ones kept, updated; encoded from the state when none
        are kept (a new task) or they do not name the state's variables."""
        state = self[key]
        rows = self._rows.get(key)
        if rows is not None:
            rows.update(written)
        if rows is None or rows.keys() != state.variables.keys():
            rows = self._rows[key] = {n: encode_variable(v) for n, v in state.variables.items()}
        return rows

    def trim(self, max_count: int, max_bytes: int) -> None:
        """Evict the least recently changed states once over a bound, down to half of it."""
        if len(self) <= max_count and self._bytes <= max_bytes:
            return
        count, total = len(self), self._bytes
        count_goal = max_count // 2 if count > max_count else max_count
        bytes_goal = max_bytes // 2 if total > max_bytes else max_bytes
        evict = []
        for key in self:  # oldest first
            if count <= count_goal and total <= bytes_goal:
                break
            evict.append(key)
            count -= 1
            total -= self._sizes.get(key, 0)
        for key in evict:
            del self[key]
