"""A real LangGraph graph on AgentledgerSaver, SIGKILLed mid-run in a worker process and resumed.

The graph: ``plan``, then two parallel branches (``charge``, a tool with a side effect keyed by
an idempotency key, and ``research``), then ``review`` (an interrupt a human answers), then
``finish``. The first worker is killed while ``research`` is still running and after
``charge`` finished and its writes were saved; a second worker resumes from the saver,
answers the interrupt and reaches the same final state as an uninterrupted run, with the side
effect applied once and the tool executed once. Two workers started on one thread: one runs,
the other exits with ThreadFencedError.

Run as ``python tests/test_langgraph_resume.py <mode> <thread> <dir>``, this file is the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import operator
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, Any

from typing_extensions import TypedDict

FENCED_EXIT = 3


class State(TypedDict):
    log: Annotated[list[str], operator.add]
    effect: str
    approved: str


def build(folder: Path, block: bool) -> Any:
    """The graph; ``block``: research waits forever once charge has run (the kill point)."""
    from langgraph.graph import END, START, StateGraph  # noqa: PLC0415 - the worker's imports
    from langgraph.types import interrupt  # noqa: PLC0415

    def plan(state: State) -> dict[str, Any]:
        return {"log": ["plan"]}

    def charge(state: State) -> dict[str, Any]:
        # Every execution is counted; the "payment provider" applies a key once, whatever the count.
        with (folder / "executions.log").open("a") as f:
            f.write("charge\n")
        applied = folder / "applied-order-42"
        if not applied.exists():
            with (folder / "effects.log").open("a") as f:
                f.write("order-42\n")
            applied.touch()
        return {"log": ["charge"], "effect": "charged order-42"}

    def research(state: State) -> dict[str, Any]:
        if block:
            while not (folder / "executions.log").exists():
                time.sleep(0.01)
            (folder / "research-reached").touch()
            threading.Event().wait()  # killed here
        return {"log": ["research"]}

    def review(state: State) -> dict[str, Any]:
        answer = interrupt({"question": "approve the charge?", "effect": state["effect"]})
        return {"approved": answer, "log": ["review"]}

    def finish(state: State) -> dict[str, Any]:
        return {"log": ["finish"]}

    builder = StateGraph(State)
    for name, fn in (("plan", plan), ("charge", charge), ("research", research), ("review", review),
                     ("finish", finish)):
        builder.add_node(name, fn)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "charge")
    builder.add_edge("plan", "research")
    builder.add_edge(["charge", "research"], "review")
    builder.add_edge("review", "finish")
    builder.add_edge("finish", END)
    return builder


def worker(mode: str, thread: str, folder: Path) -> int:
    from langgraph.types import Command  # noqa: PLC0415

    from agentledger.adapters.langgraph import AgentledgerSaver, ThreadFencedError  # noqa: PLC0415
    from agentledger.config import from_env  # noqa: PLC0415

    settings = from_env()
    ttl = 30.0 if mode == "hold" else 2.0
    saver = AgentledgerSaver(settings, tenant="acme", holder=f"worker-{os.getpid()}", lease_ttl_s=ttl,
                             wait_for_lease_s=60.0 if mode == "resume" else 0.0)
    graph = build(folder, block=mode in ("start", "hold")).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": thread}}
    try:
        if mode in ("start", "hold", "whole"):
            graph.invoke({"log": [], "effect": "", "approved": ""}, config, durability="sync")
        if mode in ("resume", "whole"):
            if mode == "resume":
                graph.invoke(None, config, durability="sync")  # up to the interrupt
            final = graph.invoke(Command(resume="approved"), config, durability="sync")
            print(json.dumps(final, sort_keys=True))
    except ThreadFencedError as exc:
        print(str(exc), file=sys.stderr)
        print(json.dumps({"fenced": exc.code}), flush=True)
        return FENCED_EXIT
    finally:
        saver.close()
    return 0


if __name__ == "__main__":
    sys.exit(worker(sys.argv[1], sys.argv[2], Path(sys.argv[3])))


# ---- the tests (imported by pytest only) ---------------------------------------------------

import pytest  # noqa: E402

from agentledger.config import Settings  # noqa: E402
from agentledger.runtime.state import settings_env  # noqa: E402
from helpers import assert_eventually  # noqa: E402
from langgraph_support import langgraph_stack, saver  # noqa: E402


async def spawn(settings: Settings, mode: str, thread: str, folder: Path) -> asyncio.subprocess.Process:
    folder.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - a temporary folder, at once
    env = {**os.environ, **settings_env(settings),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    return await asyncio.create_subprocess_exec(sys.executable, __file__, mode, thread, str(folder), env=env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def finished(proc: asyncio.subprocess.Process) -> tuple[int, str, str]:
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_a_graph_killed_mid_run_resumes_to_the_same_final_state(settings: Settings, tmp_path: Path) -> None:
    """Worker 1 is SIGKILLed inside the parallel superstep after charge's writes are saved;
    worker 2 resumes (waiting out the dead lease), answers the interrupt, and ends where an
    uninterrupted run ends; the side effect was applied once and the tool ran once."""
    async with langgraph_stack(settings), saver(settings) as reader:
        whole = await finished(await spawn(settings, "whole", "t-whole", tmp_path / "whole"))
        assert whole[0] == 0, whole[2][-3000:] + whole[1]
        expected = json.loads(whole[1].strip().splitlines()[-1])

        folder = tmp_path / "killed"
        first = await spawn(settings, "start", "t-killed", folder)
        await assert_eventually((folder / "research-reached").exists, timeout=120,
                                message="worker 1 never reached research")

        async def charge_saved() -> bool:
            got = await reader.aget_tuple({"configurable": {"thread_id": "t-killed", "checkpoint_ns": ""}})
            return got is not None and any(ch == "effect" for _, ch, _ in got.pending_writes or [])

        await assert_eventually(charge_saved, timeout=60, message="charge's writes never reached the saver")
        first.send_signal(signal.SIGKILL)
        code, _, _ = await finished(first)
        assert code == -signal.SIGKILL

        second = await finished(await spawn(settings, "resume", "t-killed", folder))
        assert second[0] == 0, second[2][-3000:]
        assert json.loads(second[1].strip().splitlines()[-1]) == expected
        assert expected["log"] == ["plan", "charge", "research", "review", "finish"]
        assert (folder / "effects.log").read_text().splitlines() == ["order-42"]
        assert (folder / "executions.log").read_text().splitlines() == ["charge"]


async def test_two_workers_on_one_thread_one_runs_the_other_is_fenced(settings: Settings, tmp_path: Path) -> None:
    """Both start the same thread at once: exactly one holds it (and runs until killed), the
    other exits with ThreadFencedError having stored nothing."""
    async with langgraph_stack(settings):
        procs = [await spawn(settings, "hold", "t-two", tmp_path / f"w{i}") for i in range(2)]

        async def one_exited() -> asyncio.subprocess.Process | None:
            done = [p for p in procs if p.returncode is not None]
            for p in procs:
                if p.returncode is None:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(asyncio.shield(p.wait()), timeout=0.05)
            done = [p for p in procs if p.returncode is not None]
            return done[0] if done else None

        loser = await assert_eventually(one_exited, timeout=120, message="neither worker was fenced")
        code, out, err = await finished(loser)
        assert code == FENCED_EXIT, err[-3000:]
        assert json.loads(out.strip().splitlines()[-1]) == {"fenced": "thread_fenced"}
        winner = next(p for p in procs if p is not loser)
        assert winner.returncode is None
        winner.send_signal(signal.SIGKILL)
        await finished(winner)


pytestmark = pytest.mark.timeout(600)
