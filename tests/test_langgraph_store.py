"""AgentledgerStore against the real memory-policy service, as tenant agents with bindings.

Agent ``a1`` is bound to user ``u1``, agent ``a2`` to user ``u2``. A namespace names a scope;
one the agent is not bound to is refused (not empty); ``%`` and ``_`` in a label never widen a
match; put reports the policy's decision; search is the gated read and carries its receipt
id; delete is a forget. A real graph shares memory across two threads of one user and is
refused across users.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import msgspec
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from typing_extensions import TypedDict

from agentledger.adapters.langgraph.store import AgentledgerStore, LedgerSearchItem
from agentledger.config import Settings
from agentledger.errors import AgentLedgerError, ContractError
from agentledger.security import auth, bindings
from ckpt_support import Stack
from helpers import assert_eventually

TENANT = "acme"


@dataclass
class World:
    stack: Stack
    s1: AgentledgerStore  # agent a1, bound to user u1
    s2: AgentledgerStore  # agent a2, bound to user u2


@pytest.fixture
async def world(admin: Settings) -> AsyncIterator[World]:
    stack = await Stack(admin).start(checkpointer=False, memory=True, tombstone=True)
    await auth.tenant_add(admin, TENANT)
    await bindings.bind_agent(admin, TENANT, "a1", ["u1"], [])
    await bindings.bind_agent(admin, TENANT, "a2", ["u2"], [])
    stores = []
    for agent in ("a1", "a2"):
        creds = await auth.agent_add(admin, TENANT, agent)
        stores.append(AgentledgerStore(msgspec.structs.replace(admin, nats_creds=creds), tenant=TENANT))
    try:
        yield World(stack, *stores)
    finally:
        for s in stores:
            await s.aclose()
        await stack.stop()


async def refused(call: Any) -> AgentLedgerError:
    with pytest.raises(AgentLedgerError) as info:
        await call()
    return info.value


async def test_put_get_search_delete_round_trip(world: World) -> None:
    """put is a decided proposal, get returns the value, search returns it with the id of a
    receipt the service keeps, delete forgets it (get and search no longer see it)."""
    ns = ("user", "u1", "prefs")
    decision = await world.s1.aput(ns, "language", {"text": "Answers should be in French"})
    assert decision is not None and decision.action == "write" and decision.record_id
    item = await assert_eventually(lambda: world.s1.aget(ns, "language"), timeout=30)
    assert (item.namespace, item.key, item.value) == (ns, "language", {"text": "Answers should be in French"})
    hits = await assert_eventually(lambda: world.s1.asearch(("user", "u1"), query="French answers"), timeout=30)
    assert [(h.namespace, h.key) for h in hits] == [(ns, "language")]
    assert isinstance(hits[0], LedgerSearchItem) and hits[0].receipt_id
    receipts = await world.s1.client.memory_receipts(TENANT, record_id=hits[0].record_id)
    assert hits[0].receipt_id in {r.receipt_id for r in receipts.receipts}
    await world.s1.adelete(ns, "language")
    assert await world.s1.aget(ns, "language") is None
    assert await world.s1.asearch(("user", "u1"), query="French answers") == []


async def test_a_namespace_of_an_unbound_user_is_refused_not_empty(world: World) -> None:
    """a2 (bound to u2) reading or writing u1's namespace gets the policy's typed refusal;
    u1's memory stays as a1 stored it."""
    ns = ("user", "u1", "notes")
    await world.s1.aput(ns, "deploy", {"text": "deploys go through the blue cluster"})
    for call in (lambda: world.s2.aput(ns, "deploy", {"text": "overwritten"}),
                 lambda: world.s2.aget(ns, "deploy"),
                 lambda: world.s2.asearch(("user", "u1"), query="blue cluster")):
        error = await refused(call)
        assert error.code in {"scope_not_allowed", "permission_denied"}, error
    item = await assert_eventually(lambda: world.s1.aget(ns, "deploy"), timeout=30)
    assert item.value == {"text": "deploys go through the blue cluster"}


async def test_percent_and_underscore_never_widen_a_match(world: World) -> None:
    """Labels a%, a_c and abc: a search under each prefix returns only its own item."""
    labels = ["a%", "a_c", "abc", "a.c".replace(".", "·")]
    for label in labels:
        await world.s1.aput(("user", "u1", label), "k", {"text": f"the marmalade note of {label}"})
    for label in labels:
        async def only_own(label: str = label) -> bool:
            hits = await world.s1.asearch(("user", "u1", label), query="marmalade note")
            return [h.namespace for h in hits] == [("user", "u1", label)]
        await assert_eventually(only_own, timeout=30, message=label)


async def test_bad_input_is_a_typed_error_and_stores_nothing(world: World) -> None:
    """An unscoped root, a bad user id, a 10 MB value, NUL in a value or a key, a non-dict
    value and a per-item ttl are refused with the field's path; no proposal reaches the ledger."""
    before = await world.stack.last_seq()
    cases = [
        (lambda: world.s1.aput(("docs", "x"), "k", {"a": 1}), "$.namespace[0]"),
        (lambda: world.s1.aput(("user", "u 1"), "k", {"a": 1}), "$.namespace[1]"),
        (lambda: world.s1.aput(("user", "u1"), "k", {"a": "x" * (10 * 1024 * 1024)}), "$.value"),
        (lambda: world.s1.aput(("user", "u1"), "k", {"a": "x\x00y"}), "$.value.a"),
        (lambda: world.s1.aput(("user", "u1"), "k\x00", {"a": 1}), "$.key"),
        (lambda: world.s1.aput(("user", "u1"), "k", ["not", "a", "dict"]), "$.value"),  # type: ignore[arg-type]
        (lambda: world.s1.aput(("user", "u1"), "k", {"a": 1}, ttl=5), "$.ttl"),
        (lambda: world.s1.asearch(("project",), query="x"), "$.namespace_prefix[1]"),
    ]
    for call, path in cases:
        error = await refused(call)
        assert isinstance(error, ContractError) and error.path == path, (path, error)
    assert await world.stack.last_seq() == before


class Turn(TypedDict):
    user: str
    text: str
    recalled: list[str]


async def remember(state: Turn, *, store: BaseStore) -> dict[str, Any]:
    if state["text"]:
        await store.aput(("user", state["user"], "facts"), "fact", {"text": state["text"]})
    return {}


async def recall(state: Turn, *, store: BaseStore) -> dict[str, Any]:
    hits = await store.asearch(("user", state["user"]), query="favourite colour")
    return {"recalled": [h.value["text"] for h in hits]}


def graph(store: AgentledgerStore) -> Any:
    builder = StateGraph(Turn)
    builder.add_node("remember", remember)
    builder.add_node("recall", recall)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "recall")
    builder.add_edge("recall", END)
    return builder.compile(checkpointer=InMemorySaver(), store=store)


async def test_a_graph_shares_memory_across_threads_of_one_user_and_not_across_users(world: World) -> None:
    """Thread 1 of user u1 remembers a fact; thread 2 of u1 recalls it; the same graph run by
    a2 for u1 is refused, and a2's own user u2 recalls nothing of u1's."""
    g1 = graph(world.s1)
    await g1.ainvoke({"user": "u1", "text": "My favourite colour is teal", "recalled": []},
                     {"configurable": {"thread_id": "thread-1"}})

    async def recalled() -> bool:
        out = await g1.ainvoke({"user": "u1", "text": "", "recalled": []}, {"configurable": {"thread_id": "thread-2"}})
        return out["recalled"] == ["My favourite colour is teal"]

    await assert_eventually(recalled, timeout=30)
    g2 = graph(world.s2)
    with pytest.raises(AgentLedgerError) as info:
        await g2.ainvoke({"user": "u1", "text": "", "recalled": []}, {"configurable": {"thread_id": "thread-3"}})
    assert info.value.code in {"scope_not_allowed", "permission_denied"}
    out = await g2.ainvoke({"user": "u2", "text": "", "recalled": []}, {"configurable": {"thread_id": "thread-4"}})
    assert out["recalled"] == []
