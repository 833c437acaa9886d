"""Memory-policy figures: the gated read, vector recall under a filter, and the write path.

``bench_memory`` loads ``records`` memory records over ``tenants`` tenants
(``memory_corpus``: decided by the pure core, folded by the reducer and written with the
projection's own ``write_loaded`` — rows, groups, history, ``simple`` tsvector, WordLlama
embeddings — no ledger in between), starts the memory-policy service, then measures:

* what a starting process reads for its put-back reference, one entry per loaded record,
  against the raw delivery of the same entries (``memory_reach_start``, ``memory_reach``);
* the reads (``memory_reads``): the gated read against the same searches ungated
  (``memory_read_p50`` / ``_p99``), the same reads end to end through the service
  (``memory_read_e2e_p50`` / ``_p99``), and recall@10 of the vector statement under a filter
  (``memory_vector_recall_at_10``);
* what the integrity check of the returned records costs a real read: ``memory.read`` end to
  end through two instances of the service running at once, one with ``AGENTLEDGER_INTEGRITY``
  on and one off, the reads alternating between them (``memory_read_e2e_integrity_p50``);
* the writes (``memory_writes``): decisions per second and propose latency against the raw
  ledger append of the same events (``memory_decisions_per_s``,
  ``memory_propose_latency_p50`` / ``_p99``), with the projection's lag.

``AGENTLEDGER_BENCH_MEMORY_RECORDS`` / ``AGENTLEDGER_BENCH_MEMORY_TENANTS`` override
the loaded size (the 1M-record run: docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from datetime import UTC, datetime

import asyncpg
import msgspec

from agentledger.bench.common import ServiceProcess, Stack, emit, pct
from agentledger.bench.memory_corpus import Sizes, load_records, sizes_of
from agentledger.bench.memory_reach import bench_reach_start, publish_loaded
from agentledger.bench.memory_reads import (
    POOL_SETTINGS,
    Query,
    bench_reads,
    bench_recall,
    e2e_read,
    make_queries,
    timed,
)
from agentledger.bench.memory_writes import Writes, writes_bulk, writes_single
from agentledger.client import Client, connect
from agentledger.models.embedding import WordLlamaEmbedder
from agentledger.security import auth
from agentledger.security.integrity_keys import keys_of
from agentledger.services.memory_policy.fold import Vectors
from agentledger.services.memory_policy.store import MemoryStore

SERVICE = "agentledger-memory-policy"
# Starts of the on/off pair (the check on the other instance each time).
INTEGRITY_PAIRS = 4
# Reads per side: a 5% difference is within the noise of 20 samples of a few ms.
INTEGRITY_MIN_SAMPLES = 100


async def bench_memory(stack: Stack) -> None:
    """Load the records, then reads, recall and writes (see the module docstring)."""
    sizes = sizes_of(stack)
    rng = random.Random(20261201)  # noqa: S311 - reproducible bench data, not a secret
    embedder = WordLlamaEmbedder()
    url = stack.settings.database_url
    conn = await asyncpg.connect(url, server_settings=POOL_SETTINGS)
    poll = await asyncpg.connect(url)
    service: ServiceProcess | None = None
    client: Client | None = None
    try:
        rows, statuses, load_s = await load_records(conn, sizes, Vectors(embedder), rng, datetime.now(UTC),
                                                      keys=keys_of(stack.settings))
        print(f"# memory: {rows} records in {load_s:.1f} s ({statuses})", file=sys.stderr, flush=True)
        ctx = {"records": rows, "tenants": sizes.tenants, "statuses": statuses}
        await publish_loaded(stack, conn)
        service = await ServiceProcess.start(stack, "memory_policy", SERVICE)
        position = await MemoryStore().position(conn)
        assert position is not None
        await bench_reach_start(stack, position[1], rows, ctx)
        client = await connect(stack.settings, timeout=60)
        await bench_reads(conn, client, sizes, embedder=embedder, rng=rng, ctx=ctx)
        service = await bench_read_integrity(stack, service, client, sizes=sizes, embedder=embedder,
                                             rng=rng, ctx=ctx)
        await bench_recall(conn, sizes, embedder, rng, ctx)
        nc = await auth.connect(stack.settings, "memory-policy")  # appends as the service does
        try:
            w = Writes(stack, service, client, conn, poll, nc, sizes, rng, f"w{int(time.time())}")
            await writes_single(w)
            await writes_bulk(w)
        finally:
            await nc.close()
    finally:
        if client is not None:
            await client.close()
        if service is not None:
            service.stop()
        await poll.close()
        await conn.close()


async def bench_read_integrity(stack: Stack, service: ServiceProcess, client: Client, *, sizes: Sizes,
                               embedder: WordLlamaEmbedder, rng: random.Random,
                               ctx: dict[str, object]) -> ServiceProcess:
    """``memory.read`` p50 through the service with the record checks on, over the same reads
    with them off, both sides at once: the service runs twice over the same database, once
    with ``AGENTLEDGER_INTEGRITY`` on and once off, each under a subject prefix of its own, and
    the reads alternate between the two query by query (which side goes first alternating too),
    so a burst of other work on the host meets both sides alike. The pair is started
    ``INTEGRITY_PAIRS`` times, the check on the other instance each time (the one under the
    stack's prefix starts first and leads the memory projection; the other waits as a standby,
    which serves reads all the same). Each side's p50 is taken over all its samples. Returns the
    service under the stack's prefix, left running with the checks on."""
    queries = make_queries(max(sizes.e2e_samples, INTEGRITY_MIN_SAMPLES), sizes, embedder, rng)
    twin = msgspec.structs.replace(stack.settings, prefix=(stack.settings.prefix + "twin")[:32])
    samples: dict[bool, list[float]] = {True: [], False: []}
    p50s: dict[bool, list[float]] = {True: [], False: []}
    service.stop()
    for pair in range(INTEGRITY_PAIRS):
        main_on = pair % 2 == 0
        procs: list[ServiceProcess] = []
        clients: dict[bool, Client] = {}
        try:
            for settings, on in ((stack.settings, main_on), (twin, not main_on)):
                procs.append(await ServiceProcess.start(stack, "memory_policy", SERVICE, settings=settings,
                                                        AGENTLEDGER_INTEGRITY="true" if on else "false"))
                clients[on] = await connect(settings, timeout=60)
                await _answering(clients[on], queries[0])
            for q in queries:  # warm (fresh processes): the pools, the prepared statements, the embedders
                for on in (True, False):
                    await e2e_read(clients[on], q)
            pair_ms: dict[bool, list[float]] = {True: [], False: []}
            for i, q in enumerate(queries):
                for on in ((True, False) if i % 2 == 0 else (False, True)):
                    pair_ms[on].append(await timed(e2e_read(clients[on], q)))
            for on in (True, False):
                samples[on] += pair_ms[on]
                p50s[on].append(pct(pair_ms[on], 0.5))
        finally:
            for c in clients.values():
                await c.close()
            for proc in reversed(procs):  # the standby first: it never leads a projection of its own prefix
                proc.stop()
    on_p50, off_p50 = pct(samples[True], 0.5), pct(samples[False], 0.5)
    emit("memory_read_e2e_integrity_p50", on_p50, "ms", off_p50, off_p50 / on_p50,
         target=">= 0.95", **{**ctx, "samples": len(samples[True]), "pairs": INTEGRITY_PAIRS,
                              "on_p50s": [round(v, 3) for v in p50s[True]],
                              "off_p50s": [round(v, 3) for v in p50s[False]],
                              "baseline_is": "the same reads through a second instance of the service, started with "
                                             "AGENTLEDGER_INTEGRITY=false under another subject prefix and running "
                                             "at the same time, the reads alternating between the two; each side's "
                                             "p50 over all its samples; ratio off/on"})
    return await ServiceProcess.start(stack, "memory_policy", SERVICE)


async def _answering(client: Client, q: Query) -> None:
    """Return once the service behind ``client``'s prefix answers a read (a PING by name would
    be answered by the other instance of the pair)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            await e2e_read(client, q)
            return
        except Exception:  # not up yet
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)
