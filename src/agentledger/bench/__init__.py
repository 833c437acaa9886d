"""``agentledger bench``: the system against ceilings measured in the same run.

Every figure is printed as one JSON line ``{"bench", "value", "unit",
"baseline", "ratio", "target", ...context}``; ``target`` is the goal the ratio
(or, without a baseline, the value) is held to, so a reader sees pass or fail.
The benchmark starts its own embedded NATS (operator mode, ``sync_interval:
always``) and PostgreSQL in a temporary folder unless AGENTLEDGER_NATS_URL /
AGENTLEDGER_DATABASE_URL name servers, runs the ledger-writer, the projector
and the checkpointer as separate processes as ``up`` does, and sends traffic
to 127.0.0.1 only, bounded in time and count. What each figure measures and
against what: docs/benchmarks.md.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from agentledger.bench import (
    agents_session,
    appends,
    checkpoints,
    consolidation,
    context,
    detector,
    detector_external,
    fairness,
    forget,
    forget_task,
    ledger,
    memory,
    memory_bulk,
    poisoning,
    projection,
    quotas,
    recall,
    scaleout,
    starts,
    sustained,
)
from agentledger.bench import langgraph as langgraph_bench
from agentledger.bench import witness as witness_bench
from agentledger.bench.common import PROFILES, Stack, bench_stack
from agentledger.config import Settings

# Benchmarks that need the servers (run inside one bench stack), by name, in run order.
BENCHES: dict[str, Callable[[Stack], Awaitable[None]]] = {
    "single": appends.bench_single,
    "batch": appends.bench_batch,
    "one_task": appends.bench_one_task,
    "pause": appends.bench_pause,
    "integrity": appends.bench_integrity,
    "sustained": sustained.bench_sustained,
    "history": projection.bench_history,
    "rebuild": ledger.bench_rebuild,
    "checkpoint_bytes": lambda st: checkpoints.bench_checkpoint_bytes(st.settings),
    "resume": lambda st: checkpoints.bench_resume(st.settings),
    "detector": detector.bench_detector,
    "memory": memory.bench_memory,
    "forget": forget.bench_forget,
    "forget_task": forget_task.bench_forget_task,
    "quotas": quotas.bench_quotas,
    "starts": starts.bench_starts,
    "recall": recall.bench_recall,
    "memory_bulk": memory_bulk.bench_memory_bulk,
    "agents_session": agents_session.bench_agents_session,
    "langgraph": langgraph_bench.bench_langgraph,
    "fairness": fairness.bench_fairness,
}
# Benchmarks that start stacks of their own (`agentledger up`, single node and cluster), or
# need none (reducer, context, consolidation, poisoning and witness run in-process).
NAMES = [*BENCHES, "reducer", "context", "consolidation", "poisoning", "witness", "detector_external",
         "scaleout"]
# Builds timed by the in-process context benchmark, per profile.
CONTEXT_BUILDS = {"full": 300, "smoke": 20}


async def run_all(settings: Settings, only: list[str] | None = None, profile: str = "full",
                  recall_file: str | Path | None = None, gitleaks: str | Path | None = None) -> int:
    """Run ``only`` (default all) at ``profile`` sizes; ``recall_file``: the recall bench scores
    the conversations of that LoCoMo-like JSON file instead of generated ones; ``gitleaks``: a
    checkout of that scanner, whose rule tests ``detector_external`` scores."""
    names = only or NAMES
    unknown = set(names) - set(NAMES)
    if unknown:
        print(f"unknown benchmark(s): {', '.join(sorted(unknown))}; known: {', '.join(NAMES)}",
              file=sys.stderr)
        return 2
    if profile not in PROFILES:
        print(f"unknown profile {profile!r}; known: {', '.join(PROFILES)}", file=sys.stderr)
        return 2
    sizes = PROFILES[profile]
    if "reducer" in names:
        ledger.bench_reducer(sizes.reducer_events)
    if "context" in names:
        context.bench_context(CONTEXT_BUILDS.get(profile, 20), repeats=3 if profile == "full" else 1)
    if "consolidation" in names:
        consolidation.bench_consolidation()
    if "poisoning" in names:
        poisoning.bench_poisoning()
    if "witness" in names:
        witness_bench.bench_witness()
    if "detector_external" in names:
        detector_external.bench_detector_external(gitleaks)
    benches = {**BENCHES, "recall": functools.partial(recall.bench_recall, corpus_file=recall_file),
               "memory_bulk": functools.partial(memory_bulk.bench_memory_bulk, corpus_file=recall_file)}
    server_benches = [n for n in benches if n in names]
    if server_benches:
        async with bench_stack(settings, sizes) as stack:
            for name in server_benches:
                print(f"# {name} ...", file=sys.stderr, flush=True)
                await benches[name](stack)
    if "scaleout" in names:
        print("# scaleout ...", file=sys.stderr, flush=True)
        await scaleout.bench_scaleout(settings, sizes.scaleout_agents, sizes.scaleout_events,
                                      sizes.scaleout_counts, sizes.repeats)
    return 0
