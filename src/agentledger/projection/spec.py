"""What a projection of a reserved ledger subject writes: its fold, and the description of its rows.

The memory projection (``_memory``) and the document index (``_documents``)
differ only in how a batch of their events becomes rows. A ``SubjectFold``
says that, and what the base needs to run it live, rebuild it beside the live
one and verify it:

* the subject (``task``: every tenant's ``<prefix>.ledger.<tenant>.<task>``), the
  durable consumer's name (also the projection's key in ``projection_rejections``)
  and the words its logs and errors use;
* ``store(schema)``: its statements against the tables of one schema, the
  watermark among them (``WatermarkStore``);
* ``kinds``: the event kinds of the subject; ``decode`` gives the event a message
  carries, or None when it is not one of them, of the subject's tenant (passed
  over, recorded as ``undecodable``);
* ``fold_tenant(conn, store, tenant, events)``: one tenant's decoded events, in
  ledger order, folded into the rows of ``store``'s schema inside the caller's
  transaction (``fold`` hands it a batch's events tenant by tenant). The live
  loop, a rebuild and a verify all call it, in batches, so they cannot disagree
  on what a message means;
* ``tables`` (the watermark table first: every batch locks it first) and ``rows``
  (``Rows``: how ``verify`` compares each table with a fold of the ledger).

The fold must be deterministic: the rows after folding a stream must not
depend on how the stream was cut into batches.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import asyncpg
import msgspec
import structlog

from agentledger.contracts import events as ev
from agentledger.stores.db import check_schema
from agentledger.stores.ledger import subject_key

log = structlog.get_logger()

_decoder = msgspec.json.Decoder(ev.AnyEvent)


class WatermarkStore(Protocol):
    """The watermark row a projection keeps in the same transaction as its rows."""

    async def watermark(self, conn: Any) -> int | None: ...

    async def lock_watermark(self, conn: asyncpg.Connection) -> tuple[int, int] | None:
        """(seq, oid of the watermark table), row-locked until the end of the transaction."""
        ...

    async def set_watermark(self, conn: asyncpg.Connection, seq: int) -> None: ...


StoreT = TypeVar("StoreT", bound=WatermarkStore)


class WatermarkRow:
    """A ``WatermarkStore``: the row ``name`` of the table ``<schema>.<table>(name, seq)``.

    ``lock_watermark`` also answers which table it is (its oid): a rebuild switches in
    another one, and a live loop that sees it starts over from the new watermark.
    """

    def __init__(self, schema: str, table: str, name: str) -> None:
        self.schema = s = check_schema(schema)
        self._name = name
        self._get_wm = f"SELECT seq FROM {s}.{table} WHERE name = $1"  # noqa: S608 - checked names
        self._position = f"SELECT seq, tableoid::bigint FROM {s}.{table} WHERE name = $1"  # noqa: S608
        self._lock_wm = f"{self._position} FOR UPDATE"
        self._set_wm = (f"INSERT INTO {s}.{table}(name, seq) VALUES ($1, $2)"  # noqa: S608
                        " ON CONFLICT (name) DO UPDATE SET seq = excluded.seq")

    def sql(self, template: str) -> str:
        """``template`` with ``{s}`` naming this store's schema."""
        return template.replace("{s}", self.schema)

    async def watermark(self, conn: Any) -> int | None:
        value = await conn.fetchval(self._get_wm, self._name)
        return None if value is None else int(value)

    async def lock_watermark(self, conn: asyncpg.Connection) -> tuple[int, int] | None:
        """(seq, oid of the watermark table), row-locked until the end of the transaction."""
        row = await conn.fetchrow(self._lock_wm, self._name)
        return None if row is None else (int(row[0]), int(row[1]))

    async def position(self, conn: Any) -> tuple[int, int] | None:
        """(seq, oid of the watermark table) as committed, without a lock (a reader's)."""
        row = await conn.fetchrow(self._position, self._name)
        return None if row is None else (int(row[0]), int(row[1]))

    async def set_watermark(self, conn: asyncpg.Connection, seq: int) -> None:
        await conn.execute(self._set_wm, self._name, seq)


@dataclass(frozen=True)
class Rows:
    """How ``verify`` compares one table of a projection with a fold of the ledger.

    Rows are matched on ``tenant`` and ``key``; a row only one side holds is ``missing``
    (from the live table) or ``extra``; ``parts`` name groups of columns compared as a
    whole, each reported as ``<what> <key> different`` (the part ``""``) or
    ``<what> <key> <part> different``. Columns in ``vectors`` are equal within
    ``VECTOR_TOLERANCE`` (embeddings are computed in batches, stored as float4).
    """

    table: str
    what: str
    key: tuple[str, ...]
    parts: tuple[tuple[str, tuple[str, ...]], ...]
    vectors: frozenset[str] = frozenset()


class SubjectFold(Generic[StoreT]):
    """The fold of one reserved subject; see the module docstring."""

    # The durable consumer's name, and the projection's name in ``projection_rejections``.
    durable: ClassVar[str]
    # The reserved task whose subject of every tenant is folded (``events.MEMORY_TASK``).
    task: ClassVar[str]
    # The namespace of the log events ("memory" -> "memory.batch").
    log_name: ClassVar[str]
    # The word for it in messages ("memory" -> "the memory projection is at seq ...").
    noun: ClassVar[str]
    # The consumer's description on the server.
    description: ClassVar[str]
    # Who runs it live (named when a verify waits for it in vain).
    runner: ClassVar[str]
    # The index of the tombstone-fanout's registry that deletes its rows (see ``rebuild``).
    forget_index: ClassVar[str]
    # Its tables, the watermark table first; and how verify compares them.
    tables: ClassVar[tuple[str, ...]]
    rows: ClassVar[tuple[Rows, ...]]

    # The event kinds of the subject.
    kinds: ClassVar[frozenset[str]]
    # Its statements (``store_type(schema)``).
    store_type: ClassVar[type[Any]]

    def store(self, schema: str = "public") -> StoreT:
        store: StoreT = self.store_type(schema)
        return store

    async def fold_tenant(self, conn: asyncpg.Connection, store: StoreT, tenant: str,
                          events: Sequence[tuple[int, ev.EventBase]]) -> dict[str, int]:
        """Fold one tenant's events (in ledger order) into ``store``'s rows; counts for the log."""
        raise NotImplementedError

    async def fold(self, conn: asyncpg.Connection, store: StoreT,
                   events: Sequence[tuple[int, ev.EventBase]]) -> dict[str, int]:
        """Fold a batch's events, tenant by tenant; the counts summed."""
        counts: dict[str, int] = {}
        for tenant, items in sorted(by_tenant(events).items()):
            for name, n in (await self.fold_tenant(conn, store, tenant, items)).items():
                counts[name] = counts.get(name, 0) + n
        return counts

    @classmethod
    def decode(cls, prefix: str, subject: str, data: bytes, seq: int) -> ev.EventBase | None:
        """The event of ``kinds`` a message on the subject carries, or None (logged) if it is not
        one, or names another tenant or task than its subject."""
        key = subject_key(prefix, subject)
        try:
            event = _decoder.decode(data)
        except (msgspec.MsgspecError, RecursionError) as exc:
            log.warning(f"{cls.log_name}.undecodable", seq=seq, error=type(exc).__name__)
            return None
        if key is None or ev.kind_of(event) not in cls.kinds or (event.tenant, event.task_id) != key:
            log.warning(f"{cls.log_name}.not_a_{cls.noun}_event", seq=seq, kind=ev.kind_of(event))
            return None
        return event


def by_tenant(events: Sequence[tuple[int, ev.EventBase]]) -> dict[str, list[tuple[int, ev.EventBase]]]:
    """``events`` by tenant, each tenant's in their order."""
    out: dict[str, list[tuple[int, ev.EventBase]]] = defaultdict(list)
    for seq, event in events:
        out[event.tenant].append((seq, event))
    return out
