"""Memory-policy read figures: the gated read, end to end, and vector recall under a filter.

The memory-policy service gates every read in SQL (scope, status, TTL, subject version, privacy,
authority); the question is what the gates cost, so each figure is measured beside the same work
without them, in the same run.

* **Gated read** (``memory_read_p50`` / ``_p99``): each sample is one read of a random tenant
  naming one of its projects, users and tasks: the service's full-text and vector statements
  (``reads.TEXT_SQL``, ``reads.VECTOR_SQL``, every gate in SQL) on an asyncpg connection set as
  the service's pool is, against the same two searches with no scope, status, TTL, version,
  privacy or authority filter (same query text, same embedding, same limit) on the same
  connection, alternated sample by sample.
* **End to end** (``memory_read_e2e_p50`` / ``_p99``): the same reads through the client to the
  memory-policy service (a fourth process: NATS hop, query embedding, the statements, scoring,
  merge, token budget, the receipt INSERT), against the gated statements alone.
* **Recall** (``memory_vector_recall_at_10``): the top 10 of the vector statement against an
  exact search (same statement with ``enable_indexscan = off``: a sequential or bitmap scan,
  sorted), under the service's gates and under a tenant filter alone, each as PostgreSQL plans
  it (a prepared statement, as the pool runs it: the B-tree on the scope, or HNSW with
  ``hnsw.iterative_scan = relaxed_order``, the service's setting) and with the HNSW scan forced
  (``enable_sort = off``). ``full_k_share``: the share of queries that returned as many rows as
  the exact search; ``recall_in_candidates``: the share of the exact top 10 among the 30
  candidates the service fetches for k = 10 (it re-scores them).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg

from agentledger.bench.common import emit, pct
from agentledger.bench.memory_corpus import COMPONENTS, QUERIES, Layout, Sizes, tenant_name
from agentledger.client import Client
from agentledger.contracts import events as ev
from agentledger.contracts.memory_api import ReadRequest
from agentledger.core.memory.authority import scope_key
from agentledger.core.memory.tags import KeyOf
from agentledger.models.embedding import WordLlamaEmbedder
from agentledger.security.integrity_keys import keys_of
from agentledger.services.memory_policy.reads import (
    OVERFETCH,
    TEXT_SQL,
    VECTOR_SQL,
    Candidate,
    Checked,
    passed_all,
    text_sql,
)
from agentledger.services.memory_policy.record_reach import RecordReach
from agentledger.services.memory_policy.store import decode_row, vector_text

K = 10
RECALL_K = 10
# The service's pool sets this for every read (services/memory_policy/service.py).
POOL_SETTINGS = {"hnsw.iterative_scan": "relaxed_order"}

# The ungated baseline: the same two searches (BM25 then over every record) with no filter but
# the index's own.
UNGATED_TEXT_SQL = text_sql("true", "$1", "$2")
UNGATED_VECTOR_SQL = ("SELECT row, embedding <=> $1::vector AS dist FROM memory_records"
                      " WHERE embedding IS NOT NULL ORDER BY embedding <=> $1::vector LIMIT $2")
# The service's vector statement returning ids only, with k as the limit (recall).
RECALL_GATED_SQL = VECTOR_SQL.replace("SELECT row, ", "SELECT record_id, ", 1)
RECALL_TENANT_SQL = ("SELECT record_id FROM memory_records WHERE tenant = $1 AND embedding IS NOT NULL"
                     " ORDER BY embedding <=> $2::vector LIMIT $3")


@dataclass(frozen=True)
class Query:
    """One read: a tenant, the project, user and task it names, its text and embedding."""

    tenant: str
    project: str
    user: str
    task: str
    text: str
    vector: str

    @property
    def scopes(self) -> list[str]:
        # As ``core.memory.allowed_scopes`` orders them for a read naming all three.
        t = self.tenant
        return [scope_key(ev.Scope(level="tenant", tenant=t)),
                scope_key(ev.Scope(level="project", tenant=t, id=self.project)),
                scope_key(ev.Scope(level="user", tenant=t, id=self.user)),
                scope_key(ev.Scope(level="task", tenant=t, id=self.task))]

    def gate_args(self, now: datetime) -> tuple[Any, ...]:
        # The service's defaults: any subject version, up to internal, any authority, any kind.
        return (self.tenant, self.scopes, now, None, 1, 1, [])


def make_queries(n: int, sizes: Sizes, embedder: WordLlamaEmbedder, rng: random.Random) -> list[Query]:
    lay = Layout.of(sizes.records // sizes.tenants)
    raw = []
    for _ in range(n):
        lang = rng.choice(list(QUERIES))
        text = rng.choice(QUERIES[lang]).format(c=rng.choice(COMPONENTS))
        raw.append((tenant_name(rng.randrange(sizes.tenants)), f"p{rng.randrange(lay.projects)}",
                    f"u{rng.randrange(lay.users)}", f"k{rng.randrange(lay.tasks)}", text))
    vectors = embedder.embed_sync([r[-1] for r in raw])
    return [Query(*r, vector_text(v) or "") for r, v in zip(raw, vectors, strict=True)]


async def gated(conn: asyncpg.Connection, q: Query, limit: int) -> int:
    """The service's two search statements of one read (no exact key): rows fetched."""
    args = q.gate_args(datetime.now(UTC))
    text = await conn.fetch(TEXT_SQL, *args, q.text, limit)
    vector = await conn.fetch(VECTOR_SQL, *args, q.vector, limit)
    return len(text) + len(vector)


async def decoded(conn: asyncpg.Connection, q: Query, limit: int, key_of: KeyOf | None) -> int:
    """The two search statements of one read, each row decoded as the service decodes it, and
    with ``key_of`` checked as the service checks them: the ``K`` records a read of ``k = K``
    returns (``reads._finish`` verifies the winners it is about to return, each once: its
    tag, its scope, every gate again on the verified row), here the first ``K`` distinct ones
    found; rows read."""
    now = datetime.now(UTC)
    args = q.gate_args(now)
    reach = RecordReach()  # what the service compares with: empty here, each lookup still made
    check = None if key_of is None else Checked(q.tenant, q.scopes, key_of,
                                                ReadRequest(tenant=q.tenant, query=q.text), now,
                                                reached=reach.reached, mark=reach.mark())
    found: dict[str, tuple[Candidate, bytes, str | None]] = {}
    n = 0
    for sql, arg in ((TEXT_SQL, q.text), (VECTOR_SQL, q.vector)):
        for r in await conn.fetch(sql, *args, arg, limit):
            row = decode_row(r[0])
            found.setdefault(row.record_id, (Candidate(row, gates=passed_all(False)), r[0], r["mac"]))
            n += 1
    if check is not None:
        for c, data, tag in list(found.values())[:K]:
            check(c, data, tag)
    return n


async def ungated(conn: asyncpg.Connection, q: Query, limit: int) -> int:
    text = await conn.fetch(UNGATED_TEXT_SQL, q.text, limit)
    vector = await conn.fetch(UNGATED_VECTOR_SQL, q.vector, limit)
    return len(text) + len(vector)


async def timed(coro: Any) -> float:
    t = time.perf_counter()
    await coro
    return (time.perf_counter() - t) * 1000


async def plan_indexes(conn: asyncpg.Connection, sql: str, args: Sequence[Any], *,
                       generic: bool = False) -> list[str]:
    """The indexes PostgreSQL's plan for ``sql`` uses: the custom plan for ``args``, or the
    generic plan, which a prepared statement may switch to after five runs."""
    option = "GENERIC_PLAN, " if generic else ""
    plan = json.loads(await conn.fetchval(f"EXPLAIN ({option}FORMAT JSON) {sql}", *args))
    found: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        name = node.get("Index Name")
        if name and name not in found:
            found.append(name)
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return found or ["seq scan"]


async def bench_reads(conn: asyncpg.Connection, client: Client, sizes: Sizes, *, embedder: WordLlamaEmbedder,
                      rng: random.Random, ctx: dict[str, Any]) -> None:
    limit = K * OVERFETCH
    key_of = keys_of(client.settings).mac_key_of
    queries = make_queries(sizes.read_samples, sizes, embedder, rng)
    for q in queries[:20]:  # warm: plans, caches, the statements prepared (and any generic plan)
        await gated(conn, q, limit)
        await ungated(conn, q, limit)
    g_ms: list[float] = []
    u_ms: list[float] = []
    hits = [0, 0]
    for i, q in enumerate(queries):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        for which in order:
            t = time.perf_counter()
            n = await (gated(conn, q, limit) if which == 0 else ungated(conn, q, limit))
            (g_ms if which == 0 else u_ms).append((time.perf_counter() - t) * 1000)
            hits[which] += n
    sample = queries[0]
    gate = sample.gate_args(datetime.now(UTC))
    text_args, vector_args = [*gate, sample.text, limit], [*gate, sample.vector, limit]
    plans = {name: await plan_indexes(conn, sql, args, generic=generic) for name, sql, args, generic in (
        ("gated_text", TEXT_SQL, text_args, False), ("gated_vector", VECTOR_SQL, vector_args, False),
        ("gated_text_generic", TEXT_SQL, text_args, True), ("gated_vector_generic", VECTOR_SQL, vector_args, True),
        ("ungated_text", UNGATED_TEXT_SQL, [sample.text, limit], False),
        ("ungated_vector", UNGATED_VECTOR_SQL, [sample.vector, limit], False))}
    base = {**ctx, "samples": len(queries), "k": K, "limit": limit,
            "rows_per_read": round(hits[0] / len(queries), 1),
            "baseline_rows_per_read": round(hits[1] / len(queries), 1), "plans": plans,
            "baseline_is": "the same full-text + vector statements with no scope/status/ttl/version/"
                           "privacy/authority filter, same query, embedding and limit"}
    for q_name, qv, target in (("p50", 0.5, "<= 1.5"), ("p99", 0.99, "ratio <= 1.5 and value <= 15 ms")):
        v, b = pct(g_ms, qv), pct(u_ms, qv)
        emit(f"memory_read_{q_name}", v, "ms", b, v / b, target=target, **base)

    # The integrity check: the same reads decoded as the service does, checked and not, alternated.
    checked_ms: list[float] = []
    plain_ms: list[float] = []
    for i, q in enumerate(queries):
        for which in ((0, 1) if i % 2 == 0 else (1, 0)):
            t = time.perf_counter()
            await decoded(conn, q, limit, key_of if which == 0 else None)
            (checked_ms if which == 0 else plain_ms).append((time.perf_counter() - t) * 1000)
    on, off = pct(checked_ms, 0.5), pct(plain_ms, 0.5)
    emit("memory_read_integrity_p50", on, "ms", off, off / on, target=">= 0.95",
         **{**ctx, "samples": len(queries), "k": K, "limit": limit,
            "baseline_is": "the same gated statements, rows decoded, without the candidates' integrity "
                           "check (tag, scope, gates on the verified row); ratio off/on"})

    # End to end through the service, against the gated statements of the same reads.
    e2e_q = make_queries(sizes.e2e_samples, sizes, embedder, rng)
    for q in e2e_q[:10]:
        await e2e_read(client, q)
    e_ms: list[float] = []
    s_ms: list[float] = []
    for q in e2e_q:
        e_ms.append(await timed(e2e_read(client, q)))
        s_ms.append(await timed(gated(conn, q, limit)))
    e2e_ctx = {**ctx, "samples": len(e2e_q), "k": K, "caller": "operator",
               "value_is": "memory.read through the client: NATS hop, query embedding, gated statements, "
                           "score, merge, token budget, receipt INSERT",
               "baseline_is": "the gated full-text + vector statements of the same reads (asyncpg)"}
    for q_name, qv in (("p50", 0.5), ("p99", 0.99)):
        v, b = pct(e_ms, qv), pct(s_ms, qv)
        emit(f"memory_read_e2e_{q_name}", v, "ms", b, v / b,
             target="value <= 15 ms" if q_name == "p99" else None, **e2e_ctx)


async def e2e_read(client: Client, q: Query) -> None:
    reply = await client.memory_read(q.tenant, q.text, project_id=q.project, user_id=q.user, task_id=q.task,
                                     k=K)
    if not reply.ok:
        raise RuntimeError(f"memory.read failed: {reply.error}")


async def _ids(conn: asyncpg.Connection, sql: str, args: Sequence[Any], mode: str) -> list[str]:
    """Record ids of a vector statement: as planned, ``exact`` (no index scan: HNSW cannot
    run, the rows are filtered and sorted), or ``hnsw`` (no sort: the HNSW scan must run).

    Each mode runs a statement text of its own: asyncpg prepares each text once, and a
    prepared statement keeps its generic plan whatever the settings of a later run.
    """
    if mode == "planned":
        return [r[0] for r in await conn.fetch(sql, *args)]
    async with conn.transaction():
        await conn.execute("SET LOCAL enable_indexscan = off" if mode == "exact" else "SET LOCAL enable_sort = off")
        return [r[0] for r in await conn.fetch(f"{sql} -- {mode}", *args)]


async def bench_recall(conn: asyncpg.Connection, sizes: Sizes, embedder: WordLlamaEmbedder,
                       rng: random.Random, ctx: dict[str, Any]) -> None:
    """Recall@10 of the vector statement under the service's gates and under a tenant filter alone,
    as PostgreSQL plans it and with the HNSW scan forced, against the exact search."""
    queries = make_queries(sizes.recall_queries, sizes, embedder, rng)
    now = datetime.now(UTC)
    shapes = {
        "gates": (RECALL_GATED_SQL, lambda q, n: [*q.gate_args(now), q.vector, n]),
        "tenant": (RECALL_TENANT_SQL, lambda q, n: [q.tenant, q.vector, n]),
    }
    wide = RECALL_K * OVERFETCH
    for name, (sql, args_of) in shapes.items():
        for mode in ("planned", "hnsw"):
            recalls: list[float] = []
            in_wide: list[float] = []
            full = short_exact = 0
            for q in queries:
                exact = await _ids(conn, sql, args_of(q, RECALL_K), "exact")
                approx = await _ids(conn, sql, args_of(q, RECALL_K), mode)
                candidates = await _ids(conn, sql, args_of(q, wide), mode)
                short_exact += len(exact) < RECALL_K
                if not exact:
                    continue
                recalls.append(len(set(approx) & set(exact)) / len(exact))
                in_wide.append(len(set(candidates) & set(exact)) / len(exact))
                full += len(approx) >= len(exact)
            async with conn.transaction():
                if mode == "hnsw":
                    await conn.execute("SET LOCAL enable_sort = off")
                plan = await plan_indexes(conn, sql, args_of(queries[0], RECALL_K))
                generic = await plan_indexes(conn, sql, args_of(queries[0], RECALL_K), generic=True)
            mean = sum(recalls) / max(len(recalls), 1)
            emit("memory_vector_recall_at_10", mean, "recall", 1.0, mean, target=None,
                 baseline_is="exact search: the same statement with enable_indexscan = off (filtered, sorted)",
                 filter=name, scan="as planned" if mode == "planned" else "HNSW forced (enable_sort = off)",
                 plan=plan, generic_plan=generic, queries=len(queries),
                 full_k_share=round(full / max(len(recalls), 1), 3), exact_short_of_k=short_exact,
                 recall_in_candidates=round(sum(in_wide) / max(len(in_wide), 1), 3), candidates=wide,
                 iterative_scan=POOL_SETTINGS["hnsw.iterative_scan"], **ctx)

