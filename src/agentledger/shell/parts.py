"""What a running service holds, released in reverse order when it stops.

``Parts`` is a ``contextlib.AsyncExitStack`` with what the shell watches while the
service runs: each part is entered once, as it is opened, and its release goes on the
stack then, so stopping is the stack unwinding, last opened first released, whether
the service ran for days or failed half-way through its start. A part can also say
that the service is not alive without it (``alive``), or that its failure ends the
process (a projection's ``failed``, a vital task ending).

A release that fails is logged and the unwinding goes on: one part that cannot be
released must not keep the others open.

Heavy parts that take long to load and that only requests need (a tokenizer, an embedding
model, the secret detectors) are not opened before the endpoints answer: ``warm(what,
load)`` names them, and ``Warming`` loads them in a worker thread once the endpoints
answer (the event loop keeps answering meanwhile). A request that needs them waits for
them, but only within ``WARM_WAIT_S`` of the start of the warm-up; after that it gets a
retryable ``unavailable`` naming the part ("warming: tokenizer") until the part is ready.
A part that fails to load ends the process, as a failed start would have. One that every
early request needs and that needs nothing the start opens (the writer's detectors: every
append waits for them) can begin loading at once (``warm(..., now=True)``), in the worker
thread beside the rest of the start, which mostly waits for the servers' answers.
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

from agentledger.errors import UnavailableError
from agentledger.shell.tasks import stop_task

log = structlog.get_logger()

# How long after its warm-up began a request waits for a warming part rather than being
# answered ``unavailable`` (a part loads in well under a second on an idle machine).
WARM_WAIT_S = 10.0


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
        self.warming = Warming(log_name)
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
        self.on_stop(partial(stop_task, task))
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

    def warm(self, what: str, load: Callable[[], object], *, now: bool = False) -> None:
        """Load ``load()`` in a worker thread once the endpoints answer, or from now on
        (``now``; see the module docstring); ``what`` names it in the ``unavailable`` reply
        ("tokenizer")."""
        self.warming.add(what, load, now=now)

    def start_warming(self) -> None:
        """Begin the warm-up (the shell calls it once the endpoints answer)."""
        self.task(self.warming.run(self._fail), name=f"{self._log_name}-warm-up")

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


class Warming:
    """The parts of a service that load after its endpoints answer; see the module docstring."""

    def __init__(self, log_name: str) -> None:
        self._log_name = log_name
        self._loads: list[tuple[str, Callable[[], object]]] = []
        # The loads begun at once (``now``), by part.
        self._begun: dict[str, asyncio.Future[object]] = {}
        self._pending: list[str] = []
        self._began: float | None = None
        self._done = asyncio.Event()

    def add(self, what: str, load: Callable[[], object], *, now: bool = False) -> None:
        self._loads.append((what, load))
        self._pending.append(what)
        if now:
            self._begun[what] = asyncio.ensure_future(asyncio.to_thread(load))

    @property
    def pending(self) -> str | None:
        """The first part not loaded yet (None: every part is ready)."""
        return self._pending[0] if self._pending else None

    async def wait(self) -> None:
        """Return once every part is ready; ``UnavailableError`` ("warming: <part>") if that
        does not happen within ``WARM_WAIT_S`` of the warm-up's start."""
        if not self._pending:
            return
        loop = asyncio.get_running_loop()
        began = self._began if self._began is not None else loop.time()
        left = began + WARM_WAIT_S - loop.time()
        if left > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._done.wait(), left)
        what = self.pending
        if what is not None:
            raise UnavailableError(f"warming: {what}; retry")

    async def ready(self) -> None:
        """Return once every part is ready, however long that takes."""
        await self._done.wait()

    async def run(self, fail: Callable[[BaseException], None]) -> None:
        loop = asyncio.get_running_loop()
        self._began = loop.time()
        try:
            for what, load in self._loads:
                started = loop.time()
                begun = self._begun.pop(what, None)
                await (begun if begun is not None else asyncio.to_thread(load))
                self._pending.remove(what)
                log.info(f"{self._log_name}.warm", part=what, s=round(loop.time() - started, 3))
        except Exception as exc:  # noqa: BLE001 - a part that cannot load ends the process
            log.error(f"{self._log_name}.warm_failed", part=self.pending, error=type(exc).__name__,
                      detail=str(exc)[:300])
            fail(exc)
            return
        self._done.set()
