"""Waiting until Working Memory's projection covers a ledger sequence.

A service that must answer from what the ledger already holds (a checkpoint of the task's last
event, a context build after an append) waits for the watermark, backing off, and gives up with a
typed, retryable ``projection_behind`` rather than answering from an older state.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from agentledger.errors import UnavailableError


async def covering(watermark: Callable[[], Awaitable[int | None]], target: int, within_s: float, *,
                   first_delay_s: float = 0.002, max_delay_s: float = 0.05) -> None:
    """Return once ``watermark()`` reaches ``target``; ``projection_behind`` after ``within_s``."""
    deadline = time.monotonic() + within_s
    delay = first_delay_s
    while (mark := await watermark() or 0) < target:
        if time.monotonic() > deadline:
            raise UnavailableError(f"the projection is at seq {mark}, the task's ledger at {target}; "
                                   "is the projector running?", code="projection_behind")
        await asyncio.sleep(delay)
        delay = min(delay * 2, max_delay_s)
