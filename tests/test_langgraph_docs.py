"""docs/langgraph.md runs: its Python snippet is this file's example, and the example works.

The example sits between the two marker comments below; the first test compares it with the
page's only ``python`` block character for character, the second runs it against the real
services.
"""

# --- example start ---
import operator
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from agentledger.adapters.langgraph import AgentledgerSaver
from agentledger.config import Settings


class State(TypedDict):
    steps: Annotated[list[str], operator.add]


def work(state: State) -> dict[str, Any]:
    return {"steps": ["work"]}


def run(settings: Settings) -> list[str]:
    builder = StateGraph(State)
    builder.add_node("work", work)
    builder.add_edge(START, "work")
    builder.add_edge("work", END)
    with AgentledgerSaver(settings, tenant="acme") as saver:  # the one changed line
        graph = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "docs-thread"}}
        graph.invoke({"steps": ["start"]}, config)
        return graph.get_state(config).values["steps"]
# --- example end ---

import asyncio  # noqa: E402 - after the example, which the page shows from its first line
import re  # noqa: E402
from pathlib import Path  # noqa: E402

from langgraph_support import langgraph_stack  # noqa: E402

DOC = Path(__file__).parent.parent / "docs" / "langgraph.md"


def _example() -> str:
    text = Path(__file__).read_text()
    return text.split("# --- example start ---\n", 1)[1].split("# --- example end ---\n", 1)[0]


def test_the_page_shows_this_files_example() -> None:
    """The page's python block is the example here, character for character."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks == [_example()]


async def test_the_example_runs(settings: Settings) -> None:
    """Run (in a thread, as a sync LangGraph program would) it checkpoints the thread on the
    ledger and reads the state back."""
    async with langgraph_stack(settings):
        assert await asyncio.to_thread(run, settings) == ["start", "work"]
