"""Busy loops beside the stack: the chaos run on a loaded host (``agentledger chaos --hog N``).

A developer laptop or a shared node is rarely idle, and recovery that only holds on a quiet
host is not recovery. ``--hog N`` runs N processes that spin on the CPU for the whole run (at
the same priority as the stack), so with N = the number of cores every service, server and
the harness itself competes for time, as on the evaluation host that found recovery slow.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

SPIN = "while True: pass"


def cores() -> int:
    """What ``--hog cores`` means here: one busy process per core the run may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@contextlib.contextmanager
def busy(count: int) -> Iterator[list[int]]:
    """Run ``count`` spinning processes until the block ends (killed whatever happens)."""
    procs = [subprocess.Popen([sys.executable, "-c", SPIN], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for _ in range(count)]
    try:
        yield [p.pid for p in procs]
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()
