"""A background task stops for sure, even when a cancel is lost on the way.

On Python 3.11 ``asyncio.wait_for`` drops a cancel that arrives together with its result (nats-py
awaits every request with it), and the task goes back into its loop. ``task.cancel(); await
task`` then waits forever: a test stack hung five minutes that way. ``stop_task`` repeats the
cancel until the task has ended.
"""

from __future__ import annotations

import asyncio

from agentledger.shell.tasks import stop_task


async def test_a_cancel_the_task_swallowed_is_sent_again() -> None:
    swallowed = 0

    async def loop() -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if swallowed == 0:  # as wait_for does when the result arrives with the cancel
                    swallowed += 1
                    continue
                raise

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    # The plain way would wait forever here: the first cancel is swallowed.
    done, _ = await asyncio.wait({asyncio.ensure_future(_plain_stop(task))}, timeout=1.5)
    assert not done and not task.done()
    await asyncio.wait_for(stop_task(task), timeout=10)
    assert task.cancelled() and swallowed == 1


async def _plain_stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_task_that_ended_or_failed_or_none_returns_at_once() -> None:
    async def fail() -> None:
        raise RuntimeError("ended badly")

    failed = asyncio.create_task(fail())
    await asyncio.sleep(0)
    await asyncio.wait_for(stop_task(failed), timeout=5)
    assert failed.done() and isinstance(failed.exception(), RuntimeError)
    await stop_task(None)
