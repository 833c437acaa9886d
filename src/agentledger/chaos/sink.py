"""The external system the agents' side effects land in: idempotent by key, and counted.

Exactly-once is only checkable if something outside the ledger remembers every
call. The sink plays that external system: a call with an idempotency key
applies once (a second call with the same key is acknowledged and changes
nothing, as a payment API with idempotency keys would), and it counts both
calls and applications per key. Every call is also appended to a JSON-lines
file in the run's output folder, so a failed run can be examined afterwards.

It also flakes on purpose: a seeded share of calls raise ``SinkUnknownError``
either before or after applying, so the caller does not know what happened
and must ask (``applied``) before it retries — the query-before-retry of
docs/checkpoints.md.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO


class SinkUnknownError(Exception):
    """The call's outcome is unknown to the caller (a timeout of the external system)."""


@dataclass
class SinkEntry:
    """What the sink knows about one idempotency key."""

    task_id: str
    step_id: str
    calls: int = 0
    applications: int = 0


class IdempotentSink:
    """Applies each idempotency key at most once and remembers every call."""

    def __init__(self, path: Path, rng: random.Random, flake_share: float) -> None:
        self._rng = rng
        self._flake_share = flake_share
        self.entries: dict[str, SinkEntry] = {}
        path.parent.mkdir(parents=True, exist_ok=True)
        self._log: TextIO = path.open("a", encoding="utf-8")

    def close(self) -> None:
        self._log.close()

    def call(self, key: str, task_id: str, step_id: str) -> str:
        """Apply the side effect for ``key`` (once); returns the external reference.

        Raises ``SinkUnknownError`` for a seeded share of calls, before or after
        the application, exactly like a timeout of a real external system.
        """
        flake = self._rng.random() < self._flake_share
        lost_before = flake and self._rng.random() < 0.5
        entry = self.entries.setdefault(key, SinkEntry(task_id, step_id))
        entry.calls += 1
        applied_now = False
        if not lost_before and entry.applications == 0:
            entry.applications = 1
            applied_now = True
        self._log.write(json.dumps({"key": key, "task": task_id, "step": step_id,
                                    "applied_now": applied_now, "flake": flake}) + "\n")
        self._log.flush()
        if flake:
            raise SinkUnknownError(f"the sink did not answer for {key}")
        return f"sink:{key}"

    def applied(self, key: str) -> bool:
        """Whether the side effect of ``key`` happened (the query an executor makes before a retry)."""
        entry = self.entries.get(key)
        return entry is not None and entry.applications > 0
