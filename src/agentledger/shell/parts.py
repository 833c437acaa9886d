"""What a running service holds, released in reverse order when it stops.

``Parts`` is a ``contextlib.AsyncExitStack`` with what the shell watches while the
service runs: each part is entered once, as it is opened, and its release goes on the
stack then, so stopping is the stack unwinding, last opened first released, whether
the service ran for days or failed half-way through its start. A part can also say
that the service is not alive without it (``alive``), or that its failure ends the
process (a projection's ``failed``, a vital task ending).

A release that fails is logged and the unwinding goes on: one part that cannot be
released must not keep the others open.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any, Protocol, TypeVar

import structlog
from nats.aio.client import Client
from nats.aio.subscription import Subscription

log = structlog.get_logger()


class Part(Protocol):
    """Something a service starts and stops: a registry, a lease table, a saga worker.

    ``stop`` must cope with a start that failed half-way (it is called then too).
    """

    def start(self) -> Awaitable[None] | None: ...

    async def stop(self) -> None: ...


class LivePart(Part, Protocol):
    def alive(self) -> bool: ...


class Projection(LivePart, Protocol):
    """A projection loop: started, stopped, alive while it turns; ``failed`` when it gave up."""

    failed: asyncio.Future[None]


P = TypeVar("P", bound=Part)
L = TypeVar("L", bound=LivePart)
PR = TypeVar("PR", bound=Projection)


class Parts:
    """The exit stack of one service start; see the module docstring.

    ``fail(exc)`` is how a vital task's end reaches the service (it ends the process);
    ``log_name`` is the namespace of the ``release_failed`` log line.
    """

    def __init__(self, log_name: str, fail: Callable[[BaseException], None]) -> None:
        self._stack = contextlib.AsyncExitStack()
        self._log_name = log_name
        self._fail = fail
        self._checks: list[Callable[[], bool]] = []
        self.watched: list[asyncio.Future[None]] = []
        self._closing = False

    # ---- entering --------------------------------------------------------------------

    def on_stop(self, release: Callable[[], Awaitable[object]]) -> None:
        """Run ``release`` when the service stops, before everything entered earlier."""
        self._stack.push_async_callback(self._release, release)

    async def part(self, part: P) -> P:
        """Start ``part`` (``start()``, awaited if it is a coroutine) and stop it on the way out.

        Its stop is on the stack before its start runs, so a start that fails half-way
        releases what it took.
        """
        self.on_stop(part.stop)
        started = part.start()
        if inspect.isawaitable(started):
            await started
        return part

    async def live_part(self, part: L) -> L:
        """``part`` whose ``alive()`` the service's liveness includes."""
        await self.part(part)
        self._checks.append(part.alive)
        return part

    async def projection(self, projection: PR) -> PR:
        """A projection: a live part whose ``failed`` ends the process."""
        await self.live_part(projection)
        self.watched.append(projection.failed)
        return projection

    def task(self, coro: Coroutine[Any, Any, None], *, name: str, vital: bool = False) -> asyncio.Task[None]:
        """Run ``coro`` in the background, cancelled (and awaited) when the service stops.

        A ``vital`` task is one the service cannot go on without: the service is not alive
        once it ended, and its end (a return or an exception, unless the service is
        stopping) ends the process.
        """
        task = asyncio.create_task(coro, name=name)
        self.on_stop(partial(_cancel, task))
        if vital:
            self._checks.append(lambda: not task.done())
            task.add_done_callback(self._ended)
        return task

    async def subscribe(self, nc: Client, subject: str, cb: Callable[[Any], Awaitable[None]],
                        **options: Any) -> Subscription:
        """A core NATS subscription, unsubscribed when the service stops."""
        sub = await nc.subscribe(subject, cb=cb, **options)
        self.on_stop(sub.unsubscribe)
        return sub

    def liveness(self, check: Callable[[], bool]) -> None:
        """Count ``check()`` in the service's liveness (cheap; called every second)."""
        self._checks.append(check)

    # ---- while running -------------------------------------------------------------------

    def alive(self) -> bool:
        return all(check() for check in self._checks)

    async def close(self) -> None:
        """Release everything entered, last entered first."""
        self._closing = True
        await self._stack.aclose()

    async def _release(self, release: Callable[[], Awaitable[object]]) -> None:
        try:
            await release()
        except Exception as exc:  # noqa: BLE001 - the rest must still be released
            log.warning(f"{self._log_name}.release_failed", what=getattr(release, "__qualname__", repr(release)),
                        error=type(exc).__name__, detail=str(exc)[:300])

    def _ended(self, task: asyncio.Task[None]) -> None:
        if self._closing or task.cancelled():
            return
        exc = task.exception()
        self._fail(exc if exc is not None else RuntimeError(f"the task {task.get_name()} ended"))


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
