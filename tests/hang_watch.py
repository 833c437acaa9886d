"""What a test that is about to hit pytest-timeout was waiting for.

pytest-timeout dumps every thread's stack when it ends a test; for an asyncio test that only
shows the event loop idling in ``select``. A hang under load (a test that idled until the
300 s timeout once in a loaded run, and passed every time alone) needs the other half: which
coroutines were suspended, and on what. A watcher thread dumps every pending asyncio task's
stack ``MARGIN_S`` before the test's timeout; the dump goes to the test's captured stderr, so it
is printed with the failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
import threading
import time

import pytest

# Dumped this long before the timeout ends the test (the loop idles meanwhile, so the frames
# the dump reads do not move).
MARGIN_S = 15.0


class HangWatch:
    """One thread for the session; ``begin``/``end`` around each test."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._test: tuple[str, float] | None = None  # (node id, when to dump)
        threading.Thread(target=self._watch, name="hang-watch", daemon=True).start()

    def begin(self, item: pytest.Item) -> None:
        marker = item.get_closest_marker("timeout")
        timeout = float(marker.args[0]) if marker and marker.args else float(item.config.getini("timeout") or 0)
        with self._lock:
            self._test = (item.nodeid, time.monotonic() + timeout - MARGIN_S) if timeout > MARGIN_S else None

    def end(self) -> None:
        with self._lock:
            self._test = None

    def _watch(self) -> None:
        while True:
            time.sleep(1.0)
            with self._lock:
                due = self._test is not None and time.monotonic() >= self._test[1]
                test = self._test[0] if self._test is not None else ""
                if due:
                    self._test = None
            if due:
                dump(test)


def dump(test: str) -> None:
    """Every pending asyncio task's stack, to stderr."""
    out = sys.stderr
    tasks = [t for t in gc.get_objects() if isinstance(t, asyncio.Task) and not t.done()]
    print(f"\n=== hang-watch: {test} is about to time out; {len(tasks)} pending asyncio tasks ===", file=out)
    for task in tasks:
        print(f"--- {task.get_name()}: {task.get_coro()!r}", file=out)
        with contextlib.suppress(Exception):  # a frame may move under us: the rest still print
            task.print_stack(limit=12, file=out)
    out.flush()
