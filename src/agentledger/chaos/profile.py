"""Chaos profiles: how much load, which faults, and how long a run may take.

A run must be reproducible and bounded, so everything that shapes it comes
from a named profile and a seed: the number of agents and how many tasks each
may run, the shape of the random plans, how often an executor crashes or the
sink flakes, how many faults (single and paired) the schedule holds, and a hard
time budget for every phase. ``short`` is what ``make test`` runs (about a
minute of wall time, a few agents, tens of tasks); ``full`` is ``make chaos``
(a few minutes, every fault kind on every target); ``cluster`` is the second
half of ``make chaos``: the same harness on ``up --cluster 3 --instances 2
--partitions 3``, whose targets are each of the three NATS nodes and each
of the two instances of every service. All traffic stays on
127.0.0.1: the harness runs its own embedded stack.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    """The knobs of one chaos run; every duration is in seconds."""

    name: str
    # Task-running agents (each runs its tasks one after another) and resuming executors.
    agents: int
    tasks_per_agent: int
    resumers: int
    # Steps per random plan (inclusive bounds) and the share of them with a side effect.
    steps: tuple[int, int]
    side_effect_share: float
    # Share of step attempts that fail (before any side effect) and are retried.
    step_fail_share: float
    # Share of tasks whose executor "crashes" mid-task: resumed by another executor while the
    # crashed one keeps writing with its old lease (a zombie).
    crash_share: float
    # Share of sink calls whose outcome the caller does not learn (half of them applied).
    sink_flake_share: float
    # Pause between an executor's steps, so tasks stay in flight across the faults.
    think_s: tuple[float, float]
    lease_ttl_s: float
    # How long an executor retries one append with unknown outcome before it gives the task up.
    append_deadline_s: float
    # Faults: single-target faults first cover every target, then random ones; pairs hit two.
    single_faults: int
    pair_faults: int
    pause_s: tuple[float, float]
    gap_s: tuple[float, float]
    # Longest wait for the stack to be back after a fault before the next one is injected.
    recovery_wait_s: float
    # Hard bounds: the fault phase, the drain of the workload after it, the final health check.
    fault_phase_s: float
    drain_s: float
    health_s: float
    probe_interval_s: float = 0.1
    probe_timeout_s: float = 1.0
    # The stack: NATS nodes (1: a single server), processes of the ledger-writer and of the
    # projector, and projector partitions.
    cluster: int = 1
    instances: int = 1
    partitions: int = 1

    def rng(self, seed: int, stream: str) -> random.Random:
        """An independent, seeded random source per purpose, so adding one never shifts another."""
        return random.Random(f"{seed}:{self.name}:{stream}")  # noqa: S311 - reproducible, not secret


SHORT = Profile(
    name="short", agents=3, tasks_per_agent=40, resumers=1, steps=(3, 6), side_effect_share=0.4,
    step_fail_share=0.08, crash_share=0.25, sink_flake_share=0.1, think_s=(0.1, 0.35),
    lease_ttl_s=5.0, append_deadline_s=15.0, single_faults=8, pair_faults=3, pause_s=(0.5, 2.0),
    gap_s=(1.0, 2.0), recovery_wait_s=12.0, fault_phase_s=75.0, drain_s=30.0, health_s=30.0)

FULL = Profile(
    name="full", agents=6, tasks_per_agent=150, resumers=2, steps=(3, 8), side_effect_share=0.4,
    step_fail_share=0.08, crash_share=0.2, sink_flake_share=0.1, think_s=(0.1, 0.4),
    lease_ttl_s=5.0, append_deadline_s=20.0, single_faults=20, pair_faults=10, pause_s=(0.5, 3.0),
    gap_s=(1.5, 3.0), recovery_wait_s=15.0, fault_phase_s=300.0, drain_s=45.0, health_s=45.0)

# Sixteen targets (three nodes, PostgreSQL, two instances of each of the six services): every
# one is hit alone by each fault kind, then pairs, on a 3-node cluster.
CLUSTER = Profile(
    name="cluster", agents=4, tasks_per_agent=120, resumers=1, steps=(3, 6), side_effect_share=0.4,
    step_fail_share=0.08, crash_share=0.2, sink_flake_share=0.1, think_s=(0.1, 0.4),
    lease_ttl_s=5.0, append_deadline_s=30.0, single_faults=32, pair_faults=8, pause_s=(0.5, 3.0),
    gap_s=(1.5, 3.0), recovery_wait_s=25.0, fault_phase_s=300.0, drain_s=60.0, health_s=60.0,
    cluster=3, instances=2, partitions=3)

PROFILES: dict[str, Profile] = {p.name: p for p in (SHORT, FULL, CLUSTER)}
