"""``agentledger bench``: throughput and latency against baselines measured in the same run.

Every figure is printed as one JSON line ``{"bench", "value", "unit", "baseline",
"ratio"}``. The benchmark starts its own embedded NATS (``sync_interval:
always``) and PostgreSQL in a temporary folder unless AGENTLEDGER_NATS_URL /
AGENTLEDGER_DATABASE_URL name servers, runs the ledger-writer as a separate
process as in production, and sends traffic to 127.0.0.1 only, bounded in
count.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from agentledger.bench import checkpoints, ledger
from agentledger.bench.common import bench_stack
from agentledger.config import Settings

# Benchmarks that need the servers (run inside one bench stack), by name.
BENCHES: dict[str, Callable[[Settings], Any]] = {
    "append": ledger.bench_append,
    "latency": ledger.bench_latency,
    "rebuild": ledger.bench_rebuild,
    "checkpoint_bytes": checkpoints.bench_checkpoint_bytes,
    "resume": checkpoints.bench_resume,
}


async def run_all(settings: Settings, only: list[str] | None = None) -> int:
    names = only or [*BENCHES, "reducer"]
    unknown = set(names) - {*BENCHES, "reducer"}
    if unknown:
        print(f"unknown benchmark(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    if "reducer" in names:
        ledger.bench_reducer()
    server_benches = [n for n in names if n in BENCHES]
    if server_benches:
        async with bench_stack(settings) as s:
            for name in server_benches:
                print(f"# {name} ...", file=sys.stderr, flush=True)
                await BENCHES[name](s)
    return 0
