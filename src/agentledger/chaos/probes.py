"""Availability probes: is append answering, is Working Memory answering, every 100 ms.

Recovery times are only as good as the sampling, so two lanes are probed
independently and concurrently (a new probe every interval, whether or not the
previous one returned, each bounded by the probe timeout), the way Jepsen
samples a system under faults:

* append: one ``variable_set`` on the probe task, sent once and never retried
  (its outcome, acknowledged, refused or unknown, is recorded in the history
  like any other attempt, so the checker classifies probe events too);
* wm: ``wm.get`` of the probe task with ``min_seq`` = the last acknowledged
  probe append, so the lane is up only when the projection serves *and* has
  caught up with what was acknowledged.

``recovery`` turns the samples around a fault into "when was the lane
answering again, for good".
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from agentledger.chaos.history import is_definite
from agentledger.chaos.workload import CRITERIA, GOAL, TENANT, Executor
from agentledger.core.validate import goal_hash
from agentledger.errors import AgentLedgerError
from agentledger.stores.ledger import msg_id

LANES = ("append", "wm")
PROBE_TASK = "probe"


@dataclass(frozen=True)
class Sample:
    """One probe: its lane, when it started and returned (run clock), and how it went."""

    lane: str
    start: float
    end: float
    ok: bool
    error: str = ""


@dataclass(frozen=True)
class Recovery:
    """A lane around one fault: when it first failed and when it answered again for good."""

    first_failure: float | None
    back_at: float | None
    # Seconds from the fault's end until back (0.0 when the lane never failed; None: not back).
    seconds: float | None

    @property
    def outage_s(self) -> float | None:
        """From the first failing probe until back (0.0 when the lane never failed)."""
        if self.first_failure is None:
            return 0.0
        return None if self.back_at is None else round(self.back_at - self.first_failure, 2)


def recovery(samples: list[Sample], lane: str, start: float, end: float, until: float) -> Recovery:
    """How ``lane`` fared from a fault's ``start`` until ``until`` (the next fault or the end).

    Only probes that started at or after ``start`` and returned before ``until`` count (one in
    flight when the next fault hits belongs to neither). Back means the first success among
    the probes started after the last failing one: from then on the lane answered again.
    """
    seen = sorted((s for s in samples if s.lane == lane and start <= s.start and s.end < until),
                  key=lambda s: s.start)
    failures = [s for s in seen if not s.ok]
    if not failures:
        return Recovery(None, None, 0.0)
    last = failures[-1].start
    later = [s.end for s in seen if s.ok and s.start > last]
    if not later:
        return Recovery(failures[0].start, None, None)
    back = min(later)
    return Recovery(failures[0].start, back, round(max(0.0, back - end), 2))


class Prober:
    """Samples both lanes against the probe task until told to stop."""

    def __init__(self, executor: Executor, clock: Callable[[], float], interval_s: float) -> None:
        self._ex = executor
        self._clock = clock
        self._interval = interval_s
        self._last_seq = 0
        self.samples: list[Sample] = []

    async def setup(self) -> None:
        """Create the probe task (retried like any append)."""
        ex = self._ex
        await ex.append(PROBE_TASK, [ex.event(PROBE_TASK, "task_created", {
            "goal": {"text": GOAL, "acceptance_criteria": CRITERIA,
                     "goal_hash": goal_hash(GOAL, CRITERIA)}, "budget": {}, "title": "probe"})], None)

    async def _timed(self, lane: str, call: Callable[[], Awaitable[None]]) -> None:
        start = self._clock()
        error = ""
        try:
            await call()
        except AgentLedgerError as exc:
            error = exc.code
        except Exception as exc:  # noqa: BLE001 - any failure is an unavailable sample
            error = type(exc).__name__
        self.samples.append(Sample(lane, start, self._clock(), not error, error))

    async def _append(self) -> None:
        ex = self._ex
        event = ex.event(PROBE_TASK, "variable_set", {"name": "probe", "value": self._clock()})
        tried = ex.work.history.attempt(msg_id(TENANT, PROBE_TASK, event["event_id"]), PROBE_TASK,
                                        event["kind"], "probe")
        try:
            result = await ex.client.append(event)
        except AgentLedgerError as exc:
            if is_definite(exc):
                tried.refusals.append(exc.code)
            else:
                tried.unknowns += 1
            raise
        except BaseException:
            tried.unknowns += 1
            raise
        ex.work.history.acked(tried, result.seq, result.duplicate)
        self._last_seq = max(self._last_seq, result.seq)

    async def _wm(self) -> None:
        wait_ms = max(1, int(self._ex.client.timeout * 700))
        await self._ex.client.working_memory(TENANT, PROBE_TASK, min_seq=self._last_seq or None,
                                             wait_ms=wait_ms)

    def answering_since(self, t: float) -> bool:
        """Whether, in each lane, the latest probe started at or after ``t`` answered."""
        for lane in LANES:
            latest = max((s for s in self.samples if s.lane == lane and s.start >= t),
                         key=lambda s: s.start, default=None)
            if latest is None or not latest.ok:
                return False
        return True

    async def run(self, stop: asyncio.Event) -> None:
        """Start a probe per lane every interval until ``stop``; then wait for those in flight."""
        running: set[asyncio.Task[None]] = set()
        while not stop.is_set():
            running.add(asyncio.create_task(self._timed("append", self._append)))
            running.add(asyncio.create_task(self._timed("wm", self._wm)))
            running = {t for t in running if not t.done()}
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self._interval)
        await asyncio.gather(*running)
