"""A private event loop in a daemon thread, on which the adapter's NATS client lives.

LangGraph calls a saver both synchronously (``graph.invoke``, from any thread) and
asynchronously (``graph.ainvoke``, on the caller's loop). A nats-py connection belongs to
the loop it was opened on, so the adapter keeps one loop of its own and every method, sync
or async, runs its coroutine there: the sync twin waits on the future, the async twin awaits
it on the caller's loop. One code path serves both, and neither blocks the caller's loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """Runs coroutines on a loop owned by a daemon thread; ``close`` stops it (idempotent)."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self.loop.is_closed() or not self.loop.is_running():
            coro.close()
            raise RuntimeError("the adapter is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` to its end from a thread that is not this loop's (a sync method)."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a sync adapter method was called on the adapter's own loop")
        return self.submit(coro).result()

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` from any other loop (an async method)."""
        return await asyncio.wrap_future(self.submit(coro))

    def close(self) -> None:
        if self.loop.is_closed():
            return
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
        if not self.loop.is_running():
            self.loop.close()
