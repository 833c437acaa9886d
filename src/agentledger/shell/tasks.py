"""Stopping a background task for sure.

``task.cancel(); await task`` can wait forever on Python 3.11: ``asyncio.wait_for`` (which
nats-py awaits every request and flush with) returns the result and drops the cancel when the
result and the cancel arrive together (fixed in 3.12), and the task goes on as if no cancel had
come, back into its loop's sleep, while its stopper waits for it to end. Seen here: a writer's
quota loop, cancelled while its poll answered, kept a test stack from stopping for five minutes.
``stop_task`` repeats the cancel until the task has ended.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

# How long a cancel is given before it is sent again.
RECANCEL_S = 0.5


async def stop_task(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` until it has ended, then return; what it ended with is not raised."""
    if task is None:
        return
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=RECANCEL_S)
    if not task.cancelled():
        with contextlib.suppress(Exception):
            task.exception()  # retrieved, so that asyncio does not report it as never retrieved
