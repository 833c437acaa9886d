"""``AgentledgerSession`` under the Agents SDK's own ``Runner``: real NATS, real PostgreSQL, the
writer, projector, memory-policy and context-builder in process; ``ScriptedModel`` stands in
for the model provider only (no network).

Each test acts as a real tenant agent (credentials of its own, bound to the user whose
conversation it is), since identity comes from the connection.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

from agents import Agent, RunContextWrapper, Runner, function_tool
from agents.memory import Session
from agents.testing import ScriptedModel, assistant_message, function_call

from agentledger.adapters.openai_agents import AgentCredentials, AgentledgerSession, history_tokens
from agentledger.client import Client, connect
from agentledger.config import Settings
from agentledger.errors import AgentLedgerError, ContractError, NotFoundError
from agentledger.security import auth, bindings
from ckpt_support import Stack, running, service_env

TENANT = "acme"
USER = "u1"


@pytest.fixture
async def stack(admin: Settings) -> AsyncIterator[Stack]:
    async with running(admin, checkpointer=False, memory=True, context=True) as s:
        await auth.tenant_add(admin, TENANT)
        yield s


async def agent(settings: Settings, name: str, tenant: str = TENANT, users: tuple[str, ...] = (USER,)) -> Client:
    """A client connected as agent ``name`` of ``tenant``, bound to ``users``."""
    creds = await auth.agent_add(settings, tenant, name)
    await bindings.bind_agent(settings, tenant, name, list(users), [])
    return await connect(msgspec.structs.replace(settings, nats_creds=creds), timeout=30)


@pytest.fixture
async def a1(stack: Stack, admin: Settings) -> AsyncIterator[Client]:
    client = await agent(admin, "a1")
    yield client
    await client.close()


def texts(items: list[Any]) -> list[str]:
    """The text of each message item (other items by type)."""
    out = []
    for item in items:
        content = item.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out.append("".join(part.get("text", "") for part in content))
        else:
            out.append(item["type"])
    return out


async def test_it_is_an_sdk_session_and_remembers_across_runs(a1: Client) -> None:
    """The SDK's Runner drives it as a Session: the second run's model input holds the first
    run's question and answer, and the session holds all four items in order."""
    session = AgentledgerSession("chat-1", a1, tenant=TENANT, subject=USER)
    assert isinstance(session, Session)
    model = ScriptedModel([[assistant_message("Hello Ada.")], [assistant_message("Your name is Ada.")]])
    bot = Agent(name="helper", model=model, instructions="Be brief.")
    first = await Runner.run(bot, "Hi, I am Ada.", session=session)
    assert first.final_output == "Hello Ada."
    second = await Runner.run(bot, "What is my name?", session=session)
    assert second.final_output == "Your name is Ada."
    model.assert_complete()
    assert texts(model.last_call.input) == ["Hi, I am Ada.", "Hello Ada.", "What is my name?"]
    items = await session.get_items()
    assert texts(items) == ["Hi, I am Ada.", "Hello Ada.", "What is my name?", "Your name is Ada."]
    assert await session.get_items(limit=2) == items[-2:]


async def view(stack: Stack, task: str, tenant: str = TENANT) -> dict[str, Any]:
    """The task's Working Memory as the operator sees it (every turn opened), up to date."""
    await stack.projected()
    return (await stack.c.working_memory(tenant, task, reveal_personal=True)).state


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"{city}: 21 C and sunny"


async def test_a_tool_call_is_kept_as_the_turns_it_is(stack: Stack, a1: Client) -> None:
    """A run that calls a tool stores the question, the call, the tool's output and the answer
    as four turns (user, assistant, tool, assistant), and the next run's model sees all four."""
    session = AgentledgerSession("weather", a1, tenant=TENANT, subject=USER)
    model = ScriptedModel([[function_call("get_weather", {"city": "Oslo"}, call_id="call-1")],
                           [assistant_message("It is 21 C and sunny in Oslo.")],
                           [assistant_message("You asked about Oslo.")]])
    bot = Agent(name="forecaster", model=model, tools=[get_weather])
    result = await Runner.run(bot, "What is the weather in Oslo?", session=session)
    assert result.final_output == "It is 21 C and sunny in Oslo."
    items = await session.get_items()
    assert [i.get("type", "message") for i in items] == ["message", "function_call", "function_call_output",
                                                         "message"]
    assert items[1]["call_id"] == items[2]["call_id"] == "call-1"
    assert items[2]["output"] == "Oslo: 21 C and sunny"
    state = await view(stack, "weather")
    assert [t["role"] for t in state["transcript"]] == ["user", "assistant", "tool", "assistant"]
    assert state["rejections_total"] == 0
    await Runner.run(bot, "Which city did I ask about?", session=session)
    model.assert_complete()
    assert model.last_call.input[:4] == items


async def test_two_runners_on_one_session_lose_nothing(stack: Stack, a1: Client, admin: Settings) -> None:
    """Two runners (two agents' connections, two session objects) run six turns each on one
    session at the same time: every item is stored once, each runner's in its own order, as
    contiguous turns the reducer applied (no ordinal refused)."""
    a2 = await agent(admin, "a2")
    try:
        sessions = [AgentledgerSession("shared", c, tenant=TENANT, subject=USER) for c in (a1, a2)]
        runs = 6

        async def runner(n: int) -> None:
            model = ScriptedModel([[assistant_message(f"answer {n}.{i}")] for i in range(runs)])
            bot = Agent(name=f"bot{n}", model=model)
            for i in range(runs):
                await Runner.run(bot, f"question {n}.{i}", session=sessions[n])
            model.assert_complete()

        await asyncio.gather(runner(0), runner(1))
        state = await view(stack, "shared")  # projected up to the ledger's end
        said = texts([_item(t) for t in state["transcript"]])
        assert sorted(said) == sorted(f"{kind} {n}.{i}" for kind in ("question", "answer")
                                      for n in range(2) for i in range(runs))
        for n in range(2):
            mine = [s for s in said if s.endswith(tuple(f" {n}.{i}" for i in range(runs)))]
            assert mine == [f"{kind} {n}.{i}" for i in range(runs) for kind in ("question", "answer")]
        assert [t["ordinal"] for t in state["transcript"]] == list(range(1, 4 * runs + 1))
        assert state["rejections_total"] == 0
        for session in sessions:
            assert texts(await session.get_items()) == said
    finally:
        await a2.close()


async def test_limit_returns_the_newest_in_order(a1: Client) -> None:
    """get_items(limit=N) is the newest N items, oldest first, for every N up to beyond the end."""
    session = AgentledgerSession("limits", a1, tenant=TENANT, subject=USER)
    items = [{"role": "user" if i % 2 else "assistant", "content": f"m{i}"} for i in range(7)]
    await session.add_items(items[:3])
    await session.add_items(items[3:])
    assert await session.get_items() == items
    for n in range(1, 10):
        assert await session.get_items(limit=n) == items[-n:], n
    assert await session.get_items(limit=0) == []


async def test_pop_is_an_event_and_history_keeps_the_popped_item(stack: Stack, a1: Client) -> None:
    """pop_item returns the newest item and the session no longer has it; the ledger still holds
    it (a new epoch began without it), and a second session object sees the same."""
    session = AgentledgerSession("pops", a1, tenant=TENANT, subject=USER)
    items = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "second"},
             {"role": "user", "content": "a typo I regret"}]
    await session.add_items(items)
    assert await session.pop_item() == items[2]
    assert await session.get_items() == items[:2]
    await session.add_items([{"role": "user", "content": "what I meant"}])
    assert texts(await session.get_items()) == ["first", "second", "what I meant"]
    state = await view(stack, "pops")
    assert state["conversation"]["epoch"] == 1
    assert "a typo I regret" in [i["content"] for i in map(_item, state["transcript"])]
    other = AgentledgerSession("pops", a1, tenant=TENANT, subject=USER)
    assert texts(await other.get_items()) == ["first", "second", "what I meant"]
    assert await other.pop_item() == {"role": "user", "content": "what I meant"}
    assert await other.pop_item() == items[1]
    assert await other.pop_item() == items[0]
    assert await other.pop_item() is None
    assert await other.get_items() == []


def _item(turn: dict[str, Any]) -> dict[str, Any]:
    return msgspec.json.decode(turn["content"])


async def test_clear_moves_to_a_new_epoch_and_keeps_the_ledger(stack: Stack, a1: Client) -> None:
    """clear_session empties the session (a new epoch); the old turns stay in the ledger; items
    added afterwards are the whole session."""
    session = AgentledgerSession("clears", a1, tenant=TENANT, subject=USER)
    await session.add_items([{"role": "user", "content": "old one"}, {"role": "assistant", "content": "old two"}])
    await session.clear_session()
    assert await session.get_items() == []
    await session.clear_session()  # nothing to clear: no new epoch
    await session.add_items([{"role": "user", "content": "new"}])
    assert texts(await session.get_items()) == ["new"]
    state = await view(stack, "clears")
    assert state["conversation"] == {"epoch": 1, "lineage_base": 2}
    assert [_item(t)["content"] for t in state["transcript"]] == ["old one", "old two", "new"]


# ---- bad input ------------------------------------------------------------------------------------

OK = {"role": "user", "content": "fine"}
BAD_ITEMS = [
    ("hello", "invalid_type", "$.items"),
    ({"role": "user"}, "invalid_type", "$.items"),
    ([1], "invalid_type", "$.items[0]"),
    ([OK, {"role": "user", "content": object()}], "invalid_type", "$.items[1]"),
    ([OK, {1: "x"}], "invalid_type", "$.items[1]"),
    ([OK, {"role": "user", "content": "x" * 10_000_000}], "item_too_large", "$.items[1]"),
    ([OK, {"role": "user", "content": "a\x00b"}], "invalid_text", "$.items[1].content"),
    ([OK, {"role": "user", "content": "\ud800"}], "invalid_text", "$.items[1]"),
]


@pytest.mark.parametrize(("items", "code", "path"), BAD_ITEMS)
async def test_bad_items_are_refused_naming_the_item_and_nothing_is_stored(
        stack: Stack, a1: Client, items: Any, code: str, path: str) -> None:
    """Wrong types, a 10 MB value, NUL, a lone surrogate: a typed error naming the item, and
    the batch's good items are not stored either."""
    session = AgentledgerSession("bad", a1, tenant=TENANT, subject=USER)
    await session.add_items([{"role": "user", "content": "before"}])
    with pytest.raises(AgentLedgerError) as caught:
        await session.add_items(items)
    assert (caught.value.code, caught.value.path) == (code, path)
    assert texts(await session.get_items()) == ["before"]
    assert (await view(stack, "bad"))["turns_total"] == 1


@pytest.mark.parametrize(("call", "code", "path"), [
    ({"limit": -1}, "invalid_value", "$.limit"),
    ({"limit": "3"}, "invalid_type", "$.limit"),
    ({"limit": True}, "invalid_type", "$.limit"),
    ({"budget": 5}, "invalid_value", "$.budget"),
    ({"budget": "2000"}, "invalid_type", "$.budget"),
])
async def test_bad_get_arguments_are_typed_errors(a1: Client, call: dict[str, Any], code: str, path: str) -> None:
    """A limit or budget that is no count of items / tokens is refused by name."""
    session = AgentledgerSession("args", a1, tenant=TENANT, subject=USER)
    with pytest.raises(ContractError) as caught:
        await session.get_items(**call)
    assert (caught.value.code, caught.value.path) == (code, path)


@pytest.mark.parametrize(("field", "value", "code"), [
    ("session_id", "a.b", "invalid_token"), ("session_id", "", "invalid_token"),
    ("session_id", 7, "invalid_type"), ("tenant", "acme/x", "invalid_token"),
    ("subject", "u\x001", "invalid_token"), ("subject", "x" * 65, "invalid_token"),
])
async def test_bad_ids_are_refused_when_the_session_is_made(a1: Client, field: str, value: Any, code: str) -> None:
    """A session id, tenant or subject that cannot be a task id or token is refused at once."""
    args: dict[str, Any] = {"session_id": "ok", "tenant": TENANT, "subject": USER, field: value}
    with pytest.raises(ContractError) as caught:
        AgentledgerSession(args.pop("session_id"), a1, **args)
    assert (caught.value.code, caught.value.path) == (code, f"$.{field}")


async def test_another_tenants_session_and_credentials_are_refused(stack: Stack, a1: Client,
                                                                    admin: Settings) -> None:
    """Naming another tenant gets tenant_mismatch and stores nothing; a run whose context
    carries another tenant's agent credentials acts as that agent and is refused the same way;
    an agent not bound to the conversation's user reads it subject_not_bound; nothing reaches
    either tenant."""
    await auth.tenant_add(admin, "rival")
    rival_creds = await auth.agent_add(admin, "rival", "r1")
    mine = AgentledgerSession("victim", a1, tenant=TENANT, subject=USER)
    await mine.add_items([{"role": "user", "content": "acme's secret plan"}])
    spoof = AgentledgerSession("victim", a1, tenant="rival", subject=USER)
    with pytest.raises(AgentLedgerError) as caught:
        await spoof.add_items([OK])
    assert caught.value.code == "tenant_mismatch"
    with pytest.raises(AgentLedgerError) as caught:
        await spoof.get_items()
    assert caught.value.code == "tenant_mismatch"
    wrapper = RunContextWrapper(context={"agentledger": AgentCredentials(creds=rival_creds)})
    for call in (mine.get_items(wrapper=wrapper), mine.add_items([OK], wrapper=wrapper),
                 mine.pop_item(wrapper=wrapper), mine.clear_session(wrapper=wrapper)):
        with pytest.raises(AgentLedgerError) as caught:
            await call
        assert caught.value.code == "tenant_mismatch", call
    bad = RunContextWrapper(context={"agentledger": "rival/r1"})
    with pytest.raises(ContractError) as caught:
        await mine.get_items(wrapper=bad)
    assert (caught.value.code, caught.value.path) == ("invalid_type", "$.wrapper.context.agentledger")
    a3 = await agent(admin, "a3", users=("u2",))
    try:
        with pytest.raises(AgentLedgerError) as caught:
            await AgentledgerSession("victim", a3, tenant=TENANT, subject="u2").get_items()
        assert caught.value.code == "subject_not_bound"
    finally:
        await a3.close()
    assert texts(await mine.get_items()) == ["acme's secret plan"]
    with pytest.raises(NotFoundError):
        await stack.c.working_memory("rival", "victim")
    assert (await view(stack, "victim"))["turns_total"] == 1


async def test_a_runs_credentials_choose_the_agent(stack: Stack, a1: Client, admin: Settings) -> None:
    """Credentials on the run context make the Runner's session calls act as that agent: a run
    as an agent bound to the user works; the same read as an agent bound to nobody is refused
    (its view of the turns is withheld), while the session's own agent still reads them."""
    bound = await auth.agent_add(admin, TENANT, "a4")
    await bindings.bind_agent(admin, TENANT, "a4", [USER], [])
    unbound = await auth.agent_add(admin, TENANT, "a5")
    async with AgentledgerSession("ctx", a1, tenant=TENANT, subject=USER) as session:
        model = ScriptedModel([[assistant_message("done")]])
        await Runner.run(Agent(name="b", model=model), "go", session=session,
                         context={"agentledger": AgentCredentials(creds=bound)})
        assert texts(await session.get_items()) == ["go", "done"]
        as_a5 = RunContextWrapper(context={"agentledger": AgentCredentials(creds=unbound)})
        with pytest.raises(AgentLedgerError) as caught:
            await session.get_items(wrapper=as_a5)
        assert caught.value.code == "subject_not_bound"
        assert texts(await session.get_items()) == ["go", "done"]


# ---- a process killed mid-conversation --------------------------------------------------------

CHILD = """
import asyncio, os, sys
os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
from pathlib import Path
from agents import Agent, Runner
from agents.testing import ScriptedModel, assistant_message
from agentledger import config
from agentledger.adapters.openai_agents import AgentledgerSession
from agentledger.client import connect

async def main() -> None:
    settings = config.from_env(nats_creds=Path(sys.argv[1]))
    client = await connect(settings, timeout=30)
    session = AgentledgerSession("survivor", client, tenant="acme", subject="u1")
    model = ScriptedModel([[assistant_message(f"answer {i}")] for i in range(10_000)])
    bot = Agent(name="worker", model=model)
    i = 0
    while True:
        await Runner.run(bot, f"question {i}", session=session)
        print(f"done {i}", flush=True)
        i += 1

asyncio.run(main())
"""


async def test_a_killed_process_s_session_is_continued_by_another(stack: Stack, a1: Client,
                                                                  admin: Settings) -> None:
    """A process running turns on a session is SIGKILLed mid-run; this process opens the same
    session and continues: every turn the killed one finished is there, in order, whole (a
    batch is atomic: a question without its answer at most), and the next run's model sees them."""
    creds = await auth.agent_add(admin, TENANT, "worker")
    await bindings.bind_agent(admin, TENANT, "worker", [USER], [])
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", CHILD, str(creds),
                                                env=service_env(admin), stdout=asyncio.subprocess.PIPE)
    try:
        assert proc.stdout is not None
        finished = -1
        while finished < 3:
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            assert line, "the child process ended"
            finished = int(line.split()[1])
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    await stack.projected()
    session = AgentledgerSession("survivor", a1, tenant=TENANT, subject=USER)
    said = texts(await session.get_items())
    pairs = len(said) // 2
    assert pairs > finished
    assert said[:2 * pairs] == [f"{kind} {i}" for i in range(pairs) for kind in ("question", "answer")]
    assert said[2 * pairs:] in ([], [f"question {pairs}"])
    model = ScriptedModel([[assistant_message("picked up where it stopped")]])
    await Runner.run(Agent(name="heir", model=model), "go on", session=session)
    assert texts(model.last_call.input) == [*said, "go on"]
    assert texts(await session.get_items())[-2:] == ["go on", "picked up where it stopped"]
    assert (await view(stack, "survivor"))["rejections_total"] == 0


# ---- forget, budget ------------------------------------------------------------------------------

@pytest.fixture
async def full_stack(admin: Settings) -> AsyncIterator[Stack]:
    async with running(admin, checkpointer=False, memory=True, context=True, tombstone=True) as s:
        await auth.tenant_add(admin, TENANT)
        yield s


async def test_clear_with_forget_returns_a_receipt_and_starts_again(full_stack: Stack, admin: Settings) -> None:
    """clear_session(forget=True) forgets the old conversation through the forget API: a
    sealed deletion receipt for the task, the old turns gone from the ledger's projection, and
    the session going on from an empty ledger."""
    client = await agent(admin, "a1")
    try:
        session = AgentledgerSession("forgetme", client, tenant=TENANT, subject=USER)
        await session.add_items([{"role": "user", "content": "my passport number is X123"}])
        await session.clear_session(forget=True)
        receipt = session.last_forget_receipt
        assert receipt is not None and receipt.selector.task_id == "forgetme"
        assert receipt.requested_by == f"{TENANT}/a1"
        assert {i.index for i in receipt.indexes} >= {"ledger", "working_memory"}
        assert await session.get_items() == []
        await session.add_items([{"role": "user", "content": "hello again"}])
        state = await view(full_stack, "forgetme")
        assert [_item(t)["content"] for t in state["transcript"]] == ["hello again"]
    finally:
        await client.close()


async def test_budget_returns_the_builders_history_within_budget(stack: Stack, a1: Client) -> None:
    """With budget=, get_items is the context-builder's budgeted history: its tokens (tiktoken,
    the requested encoding) within the budget, the newest turn verbatim, and the trace saying
    which turns were left out (compacted or over budget)."""
    session = AgentledgerSession("long", a1, tenant=TENANT, subject=USER, encoding="o200k_base",
                                 compaction={"high_watermark": 0.5, "recent_exact_tokens": 150})
    items = [{"role": "user" if i % 2 == 0 else "assistant",
              "content": f"Turn {i}: we decided the release ships on day {i} with ERR_{i} fixed."}
             for i in range(40)]
    await session.add_items(items)
    budget = 600
    got = await session.get_items(budget=budget)
    history = session.last_budgeted
    assert history is not None and history.items == got
    assert history_tokens(got, "o200k_base") == history.tokens <= budget
    assert got[-1] == items[-1]
    kept = [i for i in got if i in items]
    assert kept == items[len(items) - len(kept):]  # whole recent turns, a contiguous suffix
    assert len(kept) < len(items)
    left = {line.unit_id for line in history.left_out}
    covered = set() if history.compacted is None else {
        f"turn:{o}" for o in range(history.compacted.first, history.compacted.through + 1)}
    assert {f"turn:{o}" for o in range(1, len(items) - len(kept) + 1)} <= left | covered
    assert all(line.reason for line in history.left_out)
    assert await session.get_items() == items  # without a budget: every item


def test_the_docs_snippet_is_this_files_first_test() -> None:
    """docs/agents-sdk.md shows the code of the first test here, character for character."""
    doc = (Path(__file__).parent.parent / "docs" / "agents-sdk.md").read_text()
    snippet = doc.split("<!-- session-example -->\n```python\n", 1)[1].split("```", 1)[0]
    assert snippet == inspect.getsource(test_it_is_an_sdk_session_and_remembers_across_runs)
