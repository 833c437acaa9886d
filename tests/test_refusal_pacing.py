"""How fast the writer answers a flooding tenant's refused appends (no server needed).

A tenant over its rate is refused ``rate_limited``, and each refusal waits before it is sent
(``quotas.refusal_delay``). A client that retries as soon as it is refused turns every refusal
into another request: what bounds the writer's work on a flood is how many refusals a second it
sends, whatever the number of loops. Simulated here with the writer's own delay and jitter.
"""

from __future__ import annotations

import heapq
import random

import pytest

from agentledger.services.ledger_writer.quotas import MAX_HOLD_S, MIN_HOLD_S, REFUSALS_PER_S, refusal_delay


def _refusals_per_s(loops: int, retry_after_s: float, seconds: float = 20.0) -> float:
    """Closed loops that resend the moment their refusal arrives: refusals sent a second, after warm-up."""
    rng = random.Random(7)
    answers: list[float] = []  # when each waiting refusal is sent
    sent = 0
    for _ in range(loops):  # every loop's first request, all at once
        heapq.heappush(answers, refusal_delay(retry_after_s, len(answers)) * (1 + 0.5 * rng.random()))
    warm = 5.0
    while answers[0] < seconds:
        now = heapq.heappop(answers)
        if now >= warm:
            sent += 1
        heapq.heappush(answers, now + refusal_delay(retry_after_s, len(answers)) * (1 + 0.5 * rng.random()))
    return sent / (seconds - warm)


@pytest.mark.parametrize("loops", [8, 64, 100])
def test_a_flood_of_closed_loops_gets_a_bounded_number_of_refusals_a_second(loops: int) -> None:
    """Protects the other tenants' latency from a flooder's retries: 8, 64 or 100 loops that each
    retry at once are sent at most about ``REFUSALS_PER_S`` refusals a second (64 loops got about
    500/s when each refusal waited only its own retry time)."""
    rate = _refusals_per_s(loops, retry_after_s=MIN_HOLD_S)  # the least a refusal names
    assert rate <= REFUSALS_PER_S * 1.05, rate
    # A few loops are not slowed beyond the minimum wait.
    assert rate >= min(REFUSALS_PER_S / 1.5, loops / (MIN_HOLD_S * 1.5)) * 0.9, rate


def test_the_wait_stays_inside_a_client_timeout_and_honours_the_retry_time() -> None:
    """Protects the client: a refusal never waits past ``MAX_HOLD_S`` (clients time out after
    10 s), however many wait; and a long retry time is waited out, not cut short."""
    assert refusal_delay(0.01, 10_000) == MAX_HOLD_S
    assert refusal_delay(1.5, 0) == 1.5
    assert refusal_delay(0.01, 0) == 0.01
    assert refusal_delay(0.01, 25) == pytest.approx(25 / REFUSALS_PER_S)
