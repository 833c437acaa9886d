"""Which projector instance folds which partition: a fair share each, decided without talk.

Every instance sees the same two facts, the projection's partition count and
how many projector instances answer ``$SRV.PING``, and takes partitions by
PostgreSQL advisory lock (one per partition), so two instances never fold one
partition at once and a dead instance's partitions are free the moment its
PostgreSQL session ends. Each instance aims at ``share`` partitions (the count
divided by the instances, rounded up): below it, it tries the free ones; above
it (an instance joined), it lets go of one per turn. Each instance prefers the
partitions in its own order (rendezvous hashing on its id), so instances that
start together try different ones first and an instance that comes back gets
the same ones again if they are free.
"""

from __future__ import annotations

from typing import NamedTuple

import blake3


def share(partitions: int, members: int) -> int:
    """The partitions one instance aims at: all of them divided among ``members``, rounded up."""
    return -(-partitions // max(1, members))


def preference(instance: str, partitions: int) -> list[int]:
    """The partitions in the order ``instance`` prefers them."""
    return sorted(range(partitions), key=lambda k: blake3.blake3(f"{instance}/{k}".encode()).digest(8))


class Plan(NamedTuple):
    """One turn's decision: partitions to try to take (in order, until the share is reached),
    or the one partition to let go of."""

    take: list[int]
    drop: int | None


def plan(instance: str, partitions: int, members: int, held: set[int]) -> Plan:
    """What ``instance``, holding ``held``, does this turn."""
    aim = share(partitions, members)
    order = preference(instance, partitions)
    if len(held) > aim:
        return Plan([], next(k for k in reversed(order) if k in held))
    if len(held) < aim:
        return Plan([k for k in order if k not in held], None)
    return Plan([], None)
