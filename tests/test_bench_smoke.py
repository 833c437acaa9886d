"""`agentledger bench --profile smoke`: the figures' code runs and prints well-formed lines.

Tiny sizes on a private stack the bench starts itself; nothing here asserts a time
or a ratio (the machine decides those), only that every figure is there, has its
fields and measured something.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentledger.bench.common import created_event, variable_event
from agentledger.contracts.codec import decode_event
from agentledger.core.reducer import fold
from agentledger.core.state import new_state

SERVER_BENCHES = ["single", "batch", "one_task", "pause", "integrity", "sustained", "history", "rebuild",
                  "detector", "memory", "forget", "quotas", "memory_bulk", "agents_session"]
EXPECTED = {
    "reducer", "rebuild", "pause_gain", "sustained_rate", "sustained_appends",
    "one_task_vs_many_tasks", "projection_wal_per_event", "projection_pg_cpu_per_event",
    "wm_get_p50", "wm_get_vs_hop_p50", "wm_get_integrity_p50",
    "integrity_append_throughput", "integrity_append_latency_p50", "integrity_cpu_per_event",
    "integrity_append_raw_ceiling",
    "detector_us_per_kb",
    "detector_append_throughput",
    "detector_strict_recall",
    "detector_lookalike_fp",
    "detector_personal_recall",
    "detector_false_redactions",
    "memory_reach_start", "memory_read_p50", "memory_read_p99", "memory_read_integrity_p50",
    "memory_read_e2e_integrity_p50", "memory_read_e2e_p50", "memory_read_e2e_p99",
    "memory_vector_recall_at_10", "memory_decisions_per_s", "memory_propose_latency_p50",
    "memory_propose_latency_p99", "memory_bulk_proposals_per_s",
    "memory_bulk_read_p50", "memory_bulk_read_p99", "memory_bulk_build_p50", "memory_bulk_build_p99",
    "forget_subject_p50", "forget_subject_p99",
    "agents_session_add_p50", "agents_session_add_p99", "agents_session_get_p50", "agents_session_get_p99",
    "quota_quiet_append_p50", "quota_quiet_append_p99", "quota_quiet_wm_get_p99",
    "context_build_p50", "context_build_p99", "context_compaction_500_turns",
    "context_tokens_50_turns", "context_tokens_200_turns", "context_tokens_500_turns",
    *(f"scaleout_{config}_{figure}" for config in ("single", "cluster3_x2")
      for figure in ("throughput", "append_p99", "lag_p99")),
    *(f"{shape}_{figure}" for shape in ("single", "batch", "one_task")
      for figure in ("throughput", "vs_ceiling", "latency_p50", "latency_p99", "cpu_per_event")),
}
FIELDS = {"bench", "value", "unit", "baseline", "ratio", "target"}


@pytest.mark.timeout(420)
def test_bench_smoke_profile_prints_every_figure() -> None:
    # The bench starts its own servers; URLs of other servers in the environment would
    # send it elsewhere.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLEDGER_")}
    argv = [str(Path(sys.executable).parent / "agentledger"), "bench", "--profile", "smoke",
            "--only", "reducer", "--only", "context", "--only", "scaleout",
            *(a for name in SERVER_BENCHES for a in ("--only", name))]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=400, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert {line["bench"] for line in lines} == EXPECTED
    for line in lines:
        assert set(line) >= FIELDS, line
        if line["bench"] == "sustained_appends":
            # The highest sustained rate: 0 when none was, on a busy machine.
            assert line["value"] >= 0 and line["baseline"] is None, line
        elif line["unit"] == "share":
            # A detector's quality on its corpus: a share, with the held-out part's beside it.
            assert 0 <= line["value"] <= 1 and 0 <= line["held_out"] <= 1 and line["target"], line
        elif line["bench"] == "context_compaction_500_turns":
            assert line["value"] > 0 and line["valid"] is True, line
        elif line["unit"] == "cpu-ms/event":
            # CPU is read in clock ticks: a tiny window may see none in one process.
            assert line["value"] >= 0 and line["baseline"] >= 0, line
            assert "postgres" in line["cpu_by_process"], line
        else:
            assert line["value"] > 0 and line["baseline"] > 0 and line["ratio"] > 0, line


def test_the_append_figures_measure_accepted_events() -> None:
    """Protects what the append figures measure: the events the agents append are accepted by
    the reducer on the tasks the bench opens (refused ones take the rejection path, another
    cost), and a task never opened would refuse them."""
    opened = [created_event("bench", "t"), *(variable_event("bench", "t", f"e{i}", i) for i in range(40))]
    events = [(decode_event(json.dumps(e).encode()), seq) for seq, e in enumerate(opened, 1)]
    _, trace = fold(new_state("bench", "t"), events)
    assert [t.outcome for t in trace] == ["applied"] * len(opened)
    _, unopened = fold(new_state("bench", "t"), events[1:])
    assert {t.outcome for t in unopened} == {"rejected"}
