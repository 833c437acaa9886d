"""One lifecycle for every service process: start, serve until told, drain, exit.

A service is an object with async ``start()`` (returns once it is ready: its
subscriptions are live) and async ``stop()`` (drains in-flight work; calling it
twice is harmless). ``serve`` runs one until SIGTERM/SIGINT or until one of its
background tasks fails, and always stops it on the way out.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import structlog

from agentledger import logs
from agentledger.config import Settings, from_env

log = structlog.get_logger()


class Service(Protocol):
    name: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def wait_failed(self) -> None:
        """Return (or raise) only when a background task of the service died."""
        ...


async def serve(service: Service, ready_file: Path | None = None) -> None:
    """Run ``service`` until a signal arrives or a background task fails.

    Once it is ready, ``ready_file`` is touched: the supervisor reads it to
    know that a restart succeeded (and to forget the failures before it).
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await service.start()
    log.info("service.ready", name=service.name)
    if ready_file is not None:
        _mark_ready(ready_file)
    waiters = [asyncio.create_task(stop.wait()), asyncio.create_task(service.wait_failed())]
    try:
        done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()  # re-raise a background failure after the drain below
    finally:
        for task in waiters:
            task.cancel()
        log.info("service.stopping", name=service.name)
        await service.stop()


def _mark_ready(path: Path) -> None:
    """Create the ready file (a few microseconds of local file system work, once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()


def main(factory: Callable[[Settings], Service], name: str) -> None:
    """Process entry point: settings from the environment, JSON logs, serve."""
    settings = from_env()
    logs.configure(settings.log_level, service=name)
    asyncio.run(serve(factory(settings), settings.ready_file))
