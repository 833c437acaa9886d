"""What publishing the witness of ledger heads costs with many tasks (``stores.witness``).

The writer publishes every few seconds the heads that moved. Measured in process on a witness
of ``tasks`` heads, with ``moved`` of them moving in each publish: the publish as the writer
makes it (one signed line appended and synced; a new snapshot when the lines outweigh the last
one: the mean over the run counts those in), against the same publish done by reading, merging and rewriting the whole
signed file (what every publish cost before the lines, and what the fold still costs now and
then), in the same run on the same witness.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from agentledger.bench.common import emit
from agentledger.config import Settings
from agentledger.core.ledger_chain import Head
from agentledger.stores import witness


def _heads(names: range, index: int) -> dict[str, Head]:
    return {witness.task_name("bench", f"t{i}"): Head(index, f"{index:08x}{i:056x}") for i in names}


def _settings(root: Path, name: str) -> Settings:
    return Settings(data_dir=root / "data", integrity_key_file=root / "k.integrity", kek_file=root / "k.key",
                    witness_file=root / f"{name}.witness")


def bench_witness(tasks: int = 100_000, moved: int = 200, publishes: int = 60) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        lined, rewritten = _settings(Path(tmp), "lines"), _settings(Path(tmp), "whole")
        witness._seen.clear()
        for s in (lined, rewritten):
            witness.publish(s, _heads(range(tasks), 1), last_seq=tasks)
        size = lined.witness_path.stat().st_size
        keys = witness.keys_of(lined)
        lines, whole, written = [], [], 0
        for p in range(publishes):
            start = (p * moved) % tasks
            batch = _heads(range(start, start + moved), 2 + p)
            before = lined.witness_path.stat().st_size
            t0 = time.perf_counter()
            witness.publish(lined, batch, last_seq=tasks + p + 1)
            lines.append(time.perf_counter() - t0)
            after = lined.witness_path.stat().st_size
            written += after - before if after >= before else after
            # The same publish as a whole rewrite: read and check everything, merge, sign, replace.
            witness._seen.pop(rewritten.witness_path, None)
            t0 = time.perf_counter()
            body = witness.read(rewritten, keys)
            assert body is not None
            merged = {**body.heads, **{n: (h.index, h.tag or "") for n, h in batch.items()}}
            witness._write(rewritten, keys, witness.Body(version=body.version, stream=body.stream,
                                                          last_seq=tasks + p + 1, written_at=body.written_at,
                                                          heads=merged))
            whole.append(time.perf_counter() - t0)
        lines.sort()
        whole.sort()
        mean_lines, median_whole = sum(lines) / len(lines), whole[len(whole) // 2]
        emit("witness_publish", mean_lines * 1000, "ms", median_whole * 1000, mean_lines / median_whole,
             target="a publish costs what moved, not the whole witness", tasks=tasks, moved=moved,
             witness_bytes=size, written_bytes_per_publish=round(written / publishes),
             median_ms=round(lines[len(lines) // 2] * 1000, 3), worst_ms=round(lines[-1] * 1000, 3))
