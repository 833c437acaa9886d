"""Start-up figures (``--only starts``): how soon a freshly spawned service process answers.

For each of the six services, a new process is spawned beside the bench stack (as a restart
under the supervisor would be) and timed from ``Popen`` to

* ``ping``: its own answer to ``$SRV.PING.<micro service>`` (told from the stack's running
  instances by the micro service id, which is new for the new process);
* ``ready``: its ready file (``AGENTLEDGER_READY_FILE``), the shell's "serving";
* ``warm``: its ready file no longer saying ``warming`` (``lifecycle``): every part that
  warms in the background (tokenizer, embedding model, secret detectors) is ready.

Each figure is taken idle and with both cores busy (two ``while 1: pass`` processes started
by the bench for the loaded run), ``repeats`` times; the median is printed. The targets are
issue 20's: the writer answers within 0.5 s idle, every service within 2 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from agentledger.bench.common import Stack, emit, median
from agentledger.runtime.state import settings_env
from agentledger.security import auth
from agentledger.shell import lifecycle

# (module, micro service name) of every service.
SERVICES = (
    ("ledger_writer", "agentledger-ledger-writer"),
    ("projector", "agentledger-projector"),
    ("checkpointer", "agentledger-checkpointer"),
    ("memory_policy", "agentledger-memory-policy"),
    ("context_builder", "agentledger-context-builder"),
    ("tombstone_fanout", "agentledger-tombstone-fanout"),
)
TIMEOUT_S = 120.0
PING_TARGET_S = {"ledger_writer": 0.5}
DEFAULT_PING_TARGET_S = 2.0


@contextlib.contextmanager
def busy_cores(n: int) -> Iterator[None]:
    """``n`` processes that spin (``while 1: pass``) until the block ends."""
    procs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


async def _ids(nc: object, micro: str, wait_s: float) -> list[str]:
    """The ids of every instance of ``micro`` that answers a PING within ``wait_s``."""
    inbox = nc.new_inbox()  # type: ignore[attr-defined]
    sub = await nc.subscribe(inbox)  # type: ignore[attr-defined]
    try:
        await nc.publish(f"$SRV.PING.{micro}", b"", reply=inbox)  # type: ignore[attr-defined]
        out: list[str] = []
        deadline = time.monotonic() + wait_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                msg = await sub.next_msg(timeout=left)
            except Exception:  # noqa: BLE001 - nats-py's timeout: no more answers
                break
            if msg.data:  # not the server's "no responders" status
                out.append(json.loads(msg.data)["id"])
        return out
    finally:
        await sub.unsubscribe()


async def time_start(stack: Stack, module: str, micro: str) -> dict[str, float]:
    """Spawn ``module`` once; seconds from the spawn to its PING answer, its ready file, warm."""
    nc = await auth.connect(stack.settings, auth.OPERATOR_ROLE)
    with tempfile.TemporaryDirectory(prefix="agentledger-starts-") as tmp:
        ready = Path(tmp) / f"{module}.ready"
        env = {**os.environ, **settings_env(stack.settings), "AGENTLEDGER_READY_FILE": str(ready)}
        try:
            known = set(await _ids(nc, micro, 0.3))
            t0 = time.monotonic()
            proc = subprocess.Popen([sys.executable, "-m", f"agentledger.services.{module}"], env=env)
            out: dict[str, float] = {}
            try:
                while len(out) < 3:
                    if proc.poll() is not None:
                        raise RuntimeError(f"{module} exited with {proc.returncode}")
                    if time.monotonic() - t0 > TIMEOUT_S:
                        raise RuntimeError(f"{module} did not start within {TIMEOUT_S} s: {out}")
                    if "ping" not in out and set(await _ids(nc, micro, 0.02)) - known:
                        out["ping"] = time.monotonic() - t0
                    if "ready" not in out and ready.exists():
                        out["ready"] = time.monotonic() - t0
                    if "warm" not in out and "ready" in out and not lifecycle.warming(ready):
                        out["warm"] = time.monotonic() - t0
                    await asyncio.sleep(0.005)
                return out
            finally:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        finally:
            await nc.close()


async def bench_starts(stack: Stack) -> None:
    """Every service's start figures, idle and with both cores busy."""
    for load, spinners in (("idle", 0), ("loaded", 2)):
        with busy_cores(spinners):
            for module, micro in SERVICES:
                runs = [await time_start(stack, module, micro) for _ in range(stack.profile.repeats)]
                target = PING_TARGET_S.get(module, DEFAULT_PING_TARGET_S)
                for what in ("ping", "ready", "warm"):
                    emit(f"start_{what}_{module}_{load}", median(r[what] for r in runs), "s", None, None,
                         target=f"<= {target}" if what == "ping" and load == "idle" else None,
                         runs=[round(r[what], 3) for r in runs])
