"""Rebuild and verify a projection of a reserved subject (``spec.SubjectFold``).

The build reads the projection's subject of every tenant with an ordered
consumer and folds it with the fold the live loop runs, a batch at a time
(``REBUILD_BATCH_EVENTS`` events or ``REBUILD_BATCH_BYTES`` of bodies, each in
a transaction of its own), into a schema beside the live one: memory is bounded
by a batch, not by the stream or the largest tenant. It passes over what the
live projection passed over (what ``unfoldable`` refuses, what ``decode``
rejects, the sequences recorded in ``projection_rejections``); a batch that a
message's content fails is bisected as the live loop does, and the message
skipped (the live loop records it).

``rebuild_subject`` builds beside the live tables and switches to them
(``rebuild.replace_live``): reads of the projection are never blocked longer
than the switch. ``verify_subject`` builds into a scratch schema, waits until
the live projection holds the subject's last message, catches the build up to
the live watermark in one snapshot and compares every table row by row as the
fold's ``rows`` say (``compare``): the differences, as
``<tenant>: <what> <key> missing|extra|different``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from typing import Any, Generic

import asyncpg
import structlog
from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.core.ledger_chain import GENESIS
from agentledger.errors import UnavailableError
from agentledger.projection.chain_gate import ChainGate
from agentledger.projection.live import leader_key
from agentledger.projection.poison import bisect, passed_over, unfoldable
from agentledger.projection.rebuild import LIVE_SCHEMA, Build, replace_live_by, verify
from agentledger.projection.spec import Rows, StoreT, SubjectFold
from agentledger.projection.stream import read_ordered, stream_last_seq, subject_filter, subject_last_seq
from agentledger.stores.db import check_schema
from agentledger.stores.ledger import chain_key_of

log = structlog.get_logger()

REBUILD_BATCH_EVENTS = 1000
REBUILD_BATCH_BYTES = 16 << 20
# Embeddings equal within this (they are computed in batches and stored as float4).
VECTOR_TOLERANCE = 1e-5


class SubjectBuild(Generic[StoreT]):
    """A ``SubjectFold`` folded into ``schema`` up to ``last_seq``; see the module docstring."""

    def __init__(self, nc: Client, conn: asyncpg.Connection, settings: Settings, fold: SubjectFold[StoreT],
                 schema: str) -> None:
        self._nc, self._conn, self._settings = nc, conn, settings
        self.fold = fold
        self.store = fold.store(schema)
        self.last_seq = 0
        self.events = 0
        self.tenants: set[str] = set()
        # Rows per table once sealed.
        self.counts: dict[str, int] = {}
        # The ledger chain, checked as the live loop checks it, from the ledger's first message.
        self.chain = ChainGate(chain_key_of(settings), settings.prefix, start=GENESIS)

    async def catch_up(self, upto: int | None = None) -> None:
        end = await stream_last_seq(self._nc, self._settings) if upto is None else upto
        if end <= self.last_seq:
            return
        fold, prefix = self.fold, self._settings.prefix
        skip = await passed_over(self._conn, fold.durable)
        batch: list[tuple[int, ev.EventBase]] = []
        size = [0]

        def handle(msg: Any, seq: int) -> Any:
            if seq in skip or unfoldable(msg.data) is not None:
                return None
            if self.chain.refused(msg.subject, seq, msg.data, msg.headers) is not None:
                return None
            self.chain.commit()
            event = fold.decode(prefix, msg.subject, msg.data, seq)
            if event is None:
                return None
            batch.append((seq, event))
            size[0] += len(msg.data)
            if len(batch) >= REBUILD_BATCH_EVENTS or size[0] >= REBUILD_BATCH_BYTES:
                return self._flush(batch, size)
            return None

        await read_ordered(self._nc, self._settings, handle, subject=subject_filter(prefix, fold.task),
                           start_seq=self.last_seq + 1, upto=end)
        await self._flush(batch, size)
        self.last_seq = end

    async def _flush(self, batch: list[tuple[int, ev.EventBase]], size: list[int]) -> None:
        items, size[0] = list(batch), 0
        batch.clear()
        if not items:
            return
        conn, fold = self._conn, self.fold

        async def commit(part: list[tuple[int, ev.EventBase]]) -> list[None]:
            async with conn.transaction():
                await fold.fold(conn, self.store, part)
            return []

        async def poisoned(item: tuple[int, ev.EventBase], exc: BaseException) -> None:
            log.warning("replay.poison_message", projection=fold.noun, seq=item[0], error=type(exc).__name__)

        await bisect(items, commit, poisoned)
        self.events += len(items)
        self.tenants.update(e.tenant for _, e in items)

    async def count(self, schema: str) -> None:
        s = check_schema(schema)
        for rows in self.fold.rows:
            self.counts[rows.table] = int(await self._conn.fetchval(f"SELECT count(*) FROM {s}.{rows.table}"))  # noqa: S608 - names checked


class SubjectRebuild(Generic[StoreT]):
    """``rebuild.Rebuildable`` of a ``SubjectFold``."""

    def __init__(self, fold: SubjectFold[StoreT], wait_s: float = 60.0) -> None:
        self.fold = fold
        self.wait_s = wait_s
        self.noun = fold.noun
        self.rebuild_schema = f"replay_rebuild_{fold.log_name}"
        self.verify_schema = f"replay_verify_{fold.log_name}"
        self.lock_key = leader_key(f"rebuild/{fold.durable}")
        self.tables = fold.tables
        self.forget_index = fold.forget_index

    async def build(self, nc: Client, conn: asyncpg.Connection, settings: Settings, schema: str) -> Build:
        build = SubjectBuild(nc, conn, settings, self.fold, schema)
        await build.catch_up()
        return build

    async def seal(self, conn: asyncpg.Connection, build: Build, schema: str) -> None:
        assert isinstance(build, SubjectBuild)
        await build.store.set_watermark(conn, build.last_seq)
        await build.count(schema)

    async def wait_live(self, nc: Client, conn: asyncpg.Connection, settings: Settings, build: Build) -> None:
        """Until the live watermark is at the subject's last message (not the stream's: the live
        consumer sees only the subject)."""
        target = await subject_last_seq(nc, settings, subject_filter(settings.prefix, self.fold.task))
        store = self.fold.store(LIVE_SCHEMA)
        deadline = time.monotonic() + self.wait_s
        while (await store.watermark(conn) or 0) < target:
            if time.monotonic() > deadline:
                raise UnavailableError(f"the {self.noun} projection did not reach seq {target} within "
                                       f"{self.wait_s}s; is {self.fold.runner} running?", code="projection_behind")
            await asyncio.sleep(0.1)

    async def compare(self, nc: Client, conn: asyncpg.Connection, settings: Settings, build: Build,
                      schema: str) -> list[str]:
        live = await self.fold.store(LIVE_SCHEMA).watermark(conn) or 0
        if live > build.last_seq:  # the live projection moved on while the build ran
            await build.catch_up(live)
        problems: list[str] = []
        for rows in self.fold.rows:
            problems += await compare(conn, rows, LIVE_SCHEMA, schema)
        return problems


async def rebuild_subject(settings: Settings, fold: SubjectFold[Any]) -> dict[str, int]:
    """Rebuild ``fold``'s projection from the ledger beside the live one and switch to it; what it holds."""
    started = time.perf_counter()
    build = await replace_live_by(settings, SubjectRebuild(fold))
    assert isinstance(build, SubjectBuild)
    counts = {"tenants": len(build.tenants), "events": build.events, **build.counts, "last_seq": build.last_seq}
    log.info(f"{fold.log_name}.rebuilt", seconds=round(time.perf_counter() - started, 3), **counts)
    return counts


async def verify_subject(settings: Settings, fold: SubjectFold[Any], wait_s: float = 60.0) -> list[str]:
    """Fold the ledger's subject and compare with the live tables; the differences."""
    problems = (await verify(settings, SubjectRebuild(fold, wait_s))).result
    log.info(f"{fold.log_name}.verified", ok=not problems, differences=len(problems))
    return problems


# ---- comparing tables --------------------------------------------------------------------------

def same_vector(want: Sequence[float] | None, got: Sequence[float] | None) -> bool:
    if want is None or got is None:
        return want is got
    return len(want) == len(got) and all(math.isclose(a, b, abs_tol=VECTOR_TOLERANCE)
                                         for a, b in zip(want, got, strict=True))


def parse_vector(text: str | None) -> list[float] | None:
    """pgvector's text form (``[x,y,...]``) as floats."""
    if text is None:
        return None
    return [float(x) for x in text.strip("[]").split(",")] if text != "[]" else []


def _compare_sql(rows: Rows, live: str, want: str) -> str:
    keys = ("tenant", *rows.key)
    on = " AND ".join(f"a.{k} = b.{k}" for k in keys)
    flags = [f"ROW({', '.join(f'a.{c}' for c in cols)}) IS DISTINCT FROM ROW({', '.join(f'b.{c}' for c in cols)})"
             for _, cols in rows.parts]
    vectors = [f"a.{c}::text, b.{c}::text" for c in sorted(rows.vectors)]
    return (f"SELECT {', '.join(f'coalesce(a.{k}, b.{k})' for k in keys)}, a.tenant IS NULL, b.tenant IS NULL, "  # noqa: S608 - names
            + ", ".join([*flags, *vectors])
            + f" FROM {check_schema(live)}.{rows.table} a FULL JOIN {check_schema(want)}.{rows.table} b ON {on}"
            + f" WHERE a.tenant IS NULL OR b.tenant IS NULL OR {' OR '.join(flags)}")


async def compare(conn: asyncpg.Connection, rows: Rows, live: str, want: str) -> list[str]:
    """The rows of ``rows.table`` in ``live`` that differ from those in ``want`` (a fold of the
    ledger), as ``<tenant>: <what> <key> missing|extra|different`` lines (see ``Rows``)."""
    width = 1 + len(rows.key)
    vectors = sorted(rows.vectors)
    out: list[tuple[Any, ...]] = []
    for r in await conn.fetch(_compare_sql(rows, live, want)):
        tenant, key = r[0], r[1] if width == 2 else tuple(r[1:width])
        missing, extra = r[width], r[width + 1]
        if missing or extra:
            out.append((tenant, str(key), "missing" if missing else "extra"))
            continue
        flags = list(r[width + 2: width + 2 + len(rows.parts)])
        texts = list(r[width + 2 + len(rows.parts):])
        for (part, cols), flagged in zip(rows.parts, flags, strict=True):
            if flagged and set(cols) <= rows.vectors:
                at = [vectors.index(c) for c in cols]
                if all(same_vector(parse_vector(texts[2 * i + 1]), parse_vector(texts[2 * i])) for i in at):
                    continue  # equal within the tolerance
            if flagged:
                out.append((tenant, str(key), f"{part} different" if part else "different"))
    return [f"{tenant}: {rows.what} {key} {problem}" for tenant, key, problem in sorted(out)]
