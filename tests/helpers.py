"""Test helpers shared by every test module (import as ``from helpers import ...``).

``assert_eventually`` replaces bare sleeps: it polls a condition until it
holds, so tests wait exactly as long as the system needs and never assert on
wall-clock time.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def assert_eventually(predicate: Callable[[], T | Awaitable[T]],
                            timeout: float = 10.0,  # noqa: ASYNC109 - a poll budget, not a cancel scope
                            interval: float = 0.02, message: str = "") -> T:
    """Poll ``predicate`` (sync or async) until it returns something truthy; return that.

    An ``AssertionError`` raised by the predicate counts as "not yet", so the
    predicate may use plain asserts; on timeout the last one is chained to the error raised.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        failure: AssertionError | None = None
        result: object = None
        try:
            outcome = predicate()
            value = await outcome if inspect.isawaitable(outcome) else outcome
            if value:
                return value
            result = value
        except AssertionError as exc:
            failure = exc
        if loop.time() > deadline:
            detail = f": {failure}" if failure else f" (last value {result!r})"
            raise AssertionError(
                f"condition not met within {timeout} s{detail} {message}".rstrip()) from failure
        await asyncio.sleep(interval)
