"""One lifecycle for every service process: wait for the servers, start, serve, drain, exit.

A service is an object with async ``start()`` (returns once it is ready: its
subscriptions are live), async ``stop()`` (drains in-flight work; calling it
twice is harmless), ``wait_failed()`` and ``alive()`` -- every agentledger service
is one through ``agentledger.shell.service.Shell``. ``serve`` builds one from a
factory and runs it until SIGTERM/SIGINT, until one of its background tasks
fails, or until it stays not alive for ``STUCK_EXIT_S``; it always stops it on the
way out.

Three things keep a supervised service honest:

* **Waiting, not crash-looping.** A start that fails because NATS or PostgreSQL
  is not there (yet) is retried in-process every ``WAIT_RETRY_S`` at most, with one
  log line per change of reason, so a service is serving again within a fraction
  of a second of its server's return instead of sitting out a restart backoff.
* **Serving before warm.** The ready file appears once the service serves (its
  endpoints answer); it says ``warming`` while parts load in the background
  (``Parts.warm``) and is emptied once they are ready (``warming(path)`` reads it).
* **A heartbeat the supervisor can see.** Once ready, the ready file's mtime is
  refreshed every ``HEARTBEAT_S`` while ``alive()`` says the service can make
  progress. A process whose event loop is frozen (SIGSTOP, a blocking call) stops
  refreshing it, and the supervisor kills and restarts it.
* **Exiting when stuck.** A process that sees itself unable to progress (its NATS
  read loop ended, its work loop has not turned for a long time) exits non-zero,
  so the supervisor restarts it at once.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

import asyncpg
import nats.errors
import nats.js.errors
import structlog

from agentledger import logs
from agentledger.config import Settings, from_env
from agentledger.errors import UnavailableError
from agentledger.security.auth import AuthError

log = structlog.get_logger()

HEARTBEAT_S = 1.0
# A service not alive for this long exits non-zero (the supervisor restarts it).
STUCK_EXIT_S = 5.0
WAIT_RETRY_S = 1.0
# What the ready file says while a part of the service still warms in the background.
WARMING = "warming"

# Errors that mean a server (NATS, PostgreSQL) is away, not that the work is bad: a start
# failing with one is retried in-process, and the projector's loop waits them out uncounted.
SERVER_AWAY_ERRORS: tuple[type[BaseException], ...] = (
    UnavailableError, OSError, TimeoutError, asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError, asyncpg.InterfaceError, asyncpg.AdminShutdownError,
    asyncpg.TooManyConnectionsError, nats.errors.NoServersError, nats.errors.TimeoutError,
    nats.errors.NoRespondersError, nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError, nats.js.errors.ServiceUnavailableError)


class ServiceStuckError(RuntimeError):
    """The service reported itself unable to make progress for too long."""


class Service(Protocol):
    name: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def wait_failed(self) -> None:
        """Return (or raise) only when a background task of the service died."""
        ...

    def alive(self) -> bool:
        """Whether the service can make progress by itself (cheap; called every second)."""
        ...


async def serve(factory: Callable[[], Service], ready_file: Path | None = None) -> None:
    """Build a service with ``factory`` and run it until a signal, a failure, or being stuck.

    Once it is ready, ``ready_file`` is touched and then kept fresh as the
    heartbeat: the supervisor reads it to know that a restart succeeded (and
    to forget the failures before it) and that the process still runs.
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    service = await _start_when_possible(factory, stop)
    if service is None:
        return
    log.info("service.ready", name=service.name)
    warmed = getattr(service, "warmed", None)
    if ready_file is not None:
        _say(ready_file, WARMING if warmed is not None else "")
    waiters = [asyncio.create_task(stop.wait()), asyncio.create_task(service.wait_failed()),
               asyncio.create_task(_heartbeat(service, ready_file))]
    if warmed is not None:
        waiters.append(asyncio.create_task(_warm(service.name, warmed, ready_file)))
    try:
        done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()  # re-raise a background failure after the drain below
    finally:
        for task in waiters:
            task.cancel()
        log.info("service.stopping", name=service.name)
        await service.stop()


async def _start_when_possible(factory: Callable[[], Service], stop: asyncio.Event) -> Service | None:
    """A started service; while its servers are away, wait and retry (None: told to stop meanwhile).

    Credentials the server refuses (``AuthError``) and every other error are not
    waited out: the process exits and says why.
    """
    reason = None
    while not stop.is_set():
        service = factory()
        try:
            await service.start()
        except AuthError:
            raise
        except SERVER_AWAY_ERRORS as exc:
            with_reason = f"{type(exc).__name__}: {str(exc)[:200]}"
            if with_reason != reason:
                log.warning("service.waiting_for_servers", name=service.name, reason=with_reason)
                reason = with_reason
            await service.stop()
            try:
                await asyncio.wait_for(stop.wait(), WAIT_RETRY_S)
            except TimeoutError:
                continue
            return None
        if reason is not None:
            log.info("service.servers_back", name=service.name)
        return service
    return None


async def _warm(name: str, warmed: Callable[[], Awaitable[None]], ready_file: Path | None) -> None:
    """Once the service's warming parts are ready, say so in the ready file; then wait forever
    (a waiter of ``serve`` that ends only by being cancelled)."""
    await warmed()
    log.info("service.warm", name=name)
    if ready_file is not None:
        _say(ready_file, "")
    await asyncio.Event().wait()


async def _heartbeat(service: Service, ready_file: Path | None) -> None:
    """Refresh ``ready_file`` while the service is alive; raise once it has not been for a while."""
    stuck_since: float | None = None
    while True:
        await asyncio.sleep(HEARTBEAT_S)
        now = time.monotonic()
        if service.alive():
            stuck_since = None
            if ready_file is not None:
                _touch(ready_file)
            continue
        if stuck_since is None:
            stuck_since = now
            log.warning("service.not_alive", name=service.name)
        elif now - stuck_since >= STUCK_EXIT_S:
            log.error("service.stuck", name=service.name, seconds=round(now - stuck_since, 1))
            raise ServiceStuckError(f"{service.name} could not make progress for {STUCK_EXIT_S} s")


def warming(ready_file: Path) -> bool:
    """Whether the service of ``ready_file`` serves but still warms a part (what it says)."""
    try:
        return ready_file.read_text().startswith(WARMING)
    except OSError:
        return False


def _say(path: Path, what: str) -> None:
    """Write the ready file: ``WARMING`` while a part warms, empty once the service is warm."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(what)


def _touch(path: Path) -> None:
    """Create the file or refresh its mtime (a few microseconds of local file system work)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()


def main(factory: Callable[[Settings], Service], name: str) -> None:
    """Process entry point: settings from the environment, JSON logs, serve."""
    settings = from_env()
    logs.configure(settings.log_level, service=name)
    asyncio.run(serve(lambda: factory(settings), settings.ready_file))
