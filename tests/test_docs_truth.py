"""What a client written from the docs alone found untrue (issue 21 item 5), each checked against a
running stack (real NATS and PostgreSQL) or against the docs' own worked examples.

* ``memory show`` finds a record by the words a person uses for its key (docs/memory.md).
* Forget replies carry ``ok`` like every other reply (docs/deletion.md).
* docs/context.md's window-1700 walk-through compacts with the settings it shows, and does not
  with the default ``recent_exact_tokens``, as it says.
* A commit with nothing staged answers the code the docs name (``nothing_staged``).
* A proposal's ``data_subject`` must be a user the agent is bound to (docs/memory.md).
* A forget receipt's digest is recomputed from docs/deletion.md's recipe alone, without the
  code's helper: on the worked example and on a live receipt.
* ``tenant list`` marks revoked agents, also those of a revoked tenant (docs/security.md).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from blake3 import blake3

from agentledger.cli import main as cli
from agentledger.client import Client, connect
from agentledger.config import Settings
from agentledger.contracts.context_api import Generation
from agentledger.core.validate import goal_hash
from agentledger.demo.context import role, text
from agentledger.errors import AgentLedgerError
from agentledger.runtime.state import settings_env
from agentledger.security import auth, bindings
from ckpt_support import Stack, event, running
from helpers import assert_eventually
from test_memory_service import proposal

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TENANT = "acme"


def doc_block(page: str, marker: str) -> str:
    """The fenced block right after ``<!-- marker -->`` in ``docs/page``."""
    found = re.search(rf"<!-- {marker} -->\n```\w*\n(.*?)\n```", (DOCS / page).read_text(), flags=re.S)
    assert found, f"docs/{page} has no block marked {marker}"
    return found.group(1)


def run_cli(settings: Settings, *argv: str) -> int:
    """``agentledger ARGV`` in this process against ``settings``; its exit code."""
    with pytest.MonkeyPatch.context() as mp:
        for name, value in settings_env(settings).items():
            mp.setenv(name, value)
        with pytest.raises(SystemExit) as done:
            cli.main(list(argv))
    return int(done.value.code or 0)


@pytest.fixture
async def stack(settings: Settings) -> AsyncIterator[Stack]:
    async with running(settings, checkpointer=False, memory=True, context=True) as s:
        yield s


# ---- 1. memory show: the key as a person says it --------------------------------------------

async def test_memory_show_finds_the_record_by_the_words_a_person_uses(
        settings: Settings, stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/memory.md's own example: ``memory propose ... --value "answer in Chinese"`` (no key)
    is stored under ``response_language``; ``memory show acme "answer language"`` shows it, as
    do the client and ``memory history``. An explicit key is found by its human form and by its
    words in any order."""
    reply = await stack.c.memory_propose(TENANT, [
        proposal("lang", "answer in Chinese", kind="preference", level="user", scope_id="u1",
                 source="user_confirmed"),
        proposal("target", "the deploy target is prod-eu", key="deploy target")])
    lang, target = reply.decisions
    assert (lang.action, lang.key) == ("write", "response_language"), lang
    assert (target.action, target.key) == ("write", "deploy_target"), target
    for said in ("answer language", "response_language", "Response Language"):
        got = await stack.c.memory_get(TENANT, said, "user", "u1")
        assert [r.record_id for r in got.records] == [lang.record_id], said
    history = await stack.c.memory_history(TENANT, "answer language", "user", "u1")
    assert lang.record_id in {h.record_id for h in history.history}
    for said in ("Deploy Target", "target deploy"):
        got = await stack.c.memory_get(TENANT, said, "project", "p1")
        assert [r.record_id for r in got.records] == [target.record_id], said
    # A key that names nothing in the scope is still an empty answer, not another key's records.
    assert not (await stack.c.memory_get(TENANT, "answer language", "project", "p1")).records

    capsys.readouterr()
    code = await asyncio.to_thread(run_cli, settings, "memory", "show", TENANT, "answer language",
                                   "--scope", "user:u1")
    out = capsys.readouterr()
    assert code == 0
    assert lang.record_id in out.out and "answer in Chinese" in out.out
    code = await asyncio.to_thread(run_cli, settings, "memory", "show", TENANT, "no such thing",
                                   "--scope", "user:u1")
    out = capsys.readouterr()
    assert (code, out.out) == (0, "")
    assert "no memory under key 'no such thing' in scope user:u1" in out.err


# ---- 5. a proposal's data_subject ------------------------------------------------------------

async def test_a_proposals_data_subject_must_be_a_user_the_agent_is_bound_to(
        admin: Settings, stack: Stack) -> None:
    """A tenant agent bound to u1 may not name u2 as a proposal's data subject, even at u1's
    scope: ``scope_not_allowed`` at ``$.proposals[i].data_subject``, nothing decided; u1 itself
    is fine. docs/memory.md says so, with the code and the path."""
    await auth.tenant_add(admin, TENANT)
    await bindings.bind_agent(admin, TENANT, "bot", ["u1"], [])
    creds = await auth.agent_add(admin, TENANT, "bot")
    async with await connect(msgspec.structs.replace(admin, nats_creds=creds), timeout=30) as agent:
        async def bound() -> bool:
            try:
                await agent.memory_get(TENANT, "anything", "user", "u1")
            except AgentLedgerError:
                return False
            return True
        await assert_eventually(bound)  # the service's mirror of the bindings caught up

        mine = proposal("ok-1", "prefers metric units", kind="preference", level="user", scope_id="u1",
                        source="user_confirmed", data_subject="u1")
        other = proposal("bad-1", "prefers imperial units", kind="preference", level="user",
                         scope_id="u1", source="user_confirmed", data_subject="u2")
        with pytest.raises(AgentLedgerError) as info:
            await agent.memory_propose(TENANT, [mine, other])
        assert (info.value.code, info.value.path) == ("scope_not_allowed", "$.proposals[1].data_subject")
        assert not (await agent.memory_get(TENANT, "units", "user", "u1")).records  # nothing decided
        [decided] = (await agent.memory_propose(TENANT, [mine])).decisions
        assert decided.action == "write", decided
    page = (DOCS / "memory.md").read_text()
    assert "`scope_not_allowed` at\n`$.proposals[i].data_subject`" in page


# ---- 3 and 4. the compaction walk-through, and what a commit answers ---------------------------

GOAL = "Write the post-mortem of the stuck message list"
ANSWERS = {32: "Noted, I will keep these constraints.",
           50: "Root cause: the old cursor is committed again by the resume task."}


def _turns(task: str, first: int, last: int) -> list[dict[str, Any]]:
    """The demo's post-mortem conversation (agentledger.demo.context), turns ``first``..``last``."""
    out = []
    for i in range(first, last + 1):
        r, t = ("assistant", ANSWERS[i]) if i in ANSWERS else (role(i), text(i))
        body = event("turn_appended", {"role": r, "ordinal": i, "content": t}, task, tenant=TENANT)
        out.append(body | {"data_subject": "demo-user"})
    return out


async def _conversation(stack: Stack, task: str, last: int) -> None:
    await stack.append([event("task_created", {"goal": {"text": GOAL, "acceptance_criteria": [],
                                                        "goal_hash": goal_hash(GOAL, [])}}, task, tenant=TENANT)])
    await stack.append(_turns(task, 1, last))


def documented_builds() -> dict[int, dict[str, Any]]:
    """docs/context.md's build requests, by input turn."""
    builds = {}
    for line in doc_block("context.md", "compaction-example").splitlines():
        turn, _, body = line.partition(": ")
        builds[int(turn.removeprefix("turn "))] = json.loads(body)
    return builds


async def _build(c: Client, task: str, ordinal: int, request: dict[str, Any]) -> Generation:
    return await c.build_context(TENANT, task, ordinal, **request)


async def test_the_documented_compaction_example_compacts(stack: Stack) -> None:
    """The walk-through in docs/context.md, run with exactly the requests it shows: turn 31
    compacts 1…30 (committed: CP-30 active), turn 49 compacts 31…42 from CP-30 and keeps 43…48
    verbatim (committed: active, coverage 1…42)."""
    builds = documented_builds()
    assert set(builds) == {31, 49}
    assert all(b["window_tokens"] == 1700 and b["reserve_tokens"] == 100 for b in builds.values())
    task = "postmortem"
    await _conversation(stack, task, 31)
    g31 = await _build(stack.c, task, 31, builds[31])
    plan = g31.compaction
    assert plan is not None and plan.outcome == "compacted", plan
    assert plan.compacted is not None and (plan.compacted.first, plan.compacted.through) == (1, 30)
    await stack.append(_turns(task, 32, 32))
    c31 = await stack.c.commit_generation(TENANT, g31.generation_id, 32)
    assert c31.activated, c31
    assert c31.checkpoint is not None
    await stack.append(_turns(task, 33, 49))
    g49 = await _build(stack.c, task, 49, builds[49])
    plan = g49.compaction
    assert plan is not None and plan.outcome == "compacted", plan
    assert plan.measured_tokens > plan.high_watermark_tokens == 800
    assert plan.base_checkpoint == c31.checkpoint.checkpoint_id
    assert plan.compacted is not None and (plan.compacted.first, plan.compacted.through) == (31, 42)
    assert plan.recent_exact is not None and (plan.recent_exact.first, plan.recent_exact.through) == (43, 48)
    assert g49.selected == "primary"
    await stack.append(_turns(task, 50, 50))
    c49 = await stack.c.commit_generation(TENANT, g49.generation_id, 50)
    assert c49.activated and c49.checkpoint is not None, c49
    assert (c49.checkpoint.coverage.first, c49.checkpoint.coverage.through) == (1, 42)


async def test_with_the_default_recent_budget_the_example_never_compacts(stack: Stack) -> None:
    """What docs/context.md says of the default ``recent_exact_tokens``: the same conversation
    and window, without it, is ``not_needed`` / ``nothing_to_compact`` at turn 31 and at turn 49,
    and committing such a generation answers ``nothing_staged``, the reason the docs name (and
    ``not_staged``, which no commit answers, is named nowhere)."""
    task = "postmortem-default"
    await _conversation(stack, task, 49)
    for ordinal in (31, 49):
        request = {**documented_builds()[ordinal]}
        request["compaction"] = {"high_watermark": request["compaction"]["high_watermark"]}
        gen = await _build(stack.c, task, ordinal, request)
        plan = gen.compaction
        assert plan is not None and plan.measured_tokens > plan.high_watermark_tokens, plan
        assert (plan.outcome, plan.reason) == ("not_needed", "nothing_to_compact"), plan
    await stack.append(_turns(task, 50, 50))
    commit = await stack.c.commit_generation(TENANT, gen.generation_id, 50)
    assert (commit.activated, commit.reason) == (False, "nothing_staged")
    page = (DOCS / "context.md").read_text()
    assert "`nothing_staged`" in page and "`nothing_to_compact`" in page
    assert not [p.name for p in (ROOT / "README.md", *DOCS.glob("*.md")) if "not_staged`" in p.read_text()]


# ---- 2 and 6. forget replies carry ok; the receipt digest from the docs' recipe -----------------

def documented_digest(receipt: dict[str, Any]) -> str:
    """docs/deletion.md, "How the digest is computed", step by step, without agentledger's code:
    the receipt as received (member order kept), ``digest`` set to 64 zeros, compact JSON with
    non-ASCII characters as themselves, UTF-8, blake3 hex."""
    body = {**receipt, "digest": "0" * 64}
    return blake3(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()).hexdigest()


def test_the_receipt_digest_example_is_reproducible_from_the_recipe() -> None:
    """The worked example's bytes are the golden receipt put through the recipe, and hash to the
    digest the docs show, which is the golden receipt's own."""
    golden = json.loads((ROOT / "contracts" / "examples" / "forget_completed.json").read_text())["payload"]["receipt"]
    canonical = doc_block("deletion.md", "receipt-digest-example")
    page = (DOCS / "deletion.md").read_text()
    shown = re.search(r"and its digest is `([0-9a-f]{64})`", page)
    assert shown
    assert json.dumps({**golden, "digest": "0" * 64}, ensure_ascii=False, separators=(",", ":")) == canonical
    assert f"these {len(canonical.encode())} bytes" in page
    assert blake3(canonical.encode()).hexdigest() == shown.group(1) == golden["digest"]
    assert documented_digest(golden) == golden["digest"]


async def _raw(c: Client, action: str, body: dict[str, Any]) -> dict[str, Any]:
    msg = await c.nc.request(f"{c.settings.prefix}.forget.{action}", json.dumps(body).encode(), timeout=60)
    reply: dict[str, Any] = json.loads(msg.data)
    return reply


async def test_forget_replies_carry_ok_and_live_receipts_follow_the_documented_digest(settings: Settings) -> None:
    """Raw replies of ``forget.request`` and ``forget.receipt`` (no client decoding) say ``"ok":
    true``; a refusal says ``"ok": false``. The sealed receipt, taken from the raw reply as
    JSON, hashes to its digest by the documented recipe."""
    stack = await Stack(settings).start(checkpointer=True, memory=True, context=True, tombstone=True)
    try:
        await stack.c.memory_propose(TENANT, [
            proposal("m1", "prefers answers in French", kind="preference", level="user", scope_id="s-1",
                     source="user_confirmed", personal=True, data_subject="s-1"),
            proposal("m2", "the deploy target is prod-eu", key="deploy target")])
        accepted = await _raw(stack.c, "request", {"tenant": TENANT, "request_id": "fg-docs-1",
                                                   "selector": {"kind": "subject", "subject": "s-1"},
                                                   "reason": "erasure request — Art. 17"})
        assert accepted.get("ok") is True, accepted
        assert accepted["request_id"] == "fg-docs-1" and "error" not in accepted
        refused = await _raw(stack.c, "request", {"tenant": TENANT, "selector": {"kind": "subject"}})
        assert refused["ok"] is False and refused["error"]["code"] == "missing_field", refused

        progress = await _raw(stack.c, "receipt", {"tenant": TENANT, "request_id": "fg-docs-1"})
        assert progress.get("ok") is True, progress
        await stack.c.forget_wait(TENANT, "fg-docs-1", timeout_s=120)
        keyed = await _raw(stack.c, "request", {"tenant": TENANT, "request_id": "fg-docs-2", "selector": {
            "kind": "key", "key": "deploy target", "scope": {"level": "project", "tenant": TENANT, "id": "p1"}}})
        assert keyed.get("ok") is True, keyed
        await stack.c.forget_wait(TENANT, "fg-docs-2", timeout_s=120)
        for request_id in ("fg-docs-1", "fg-docs-2"):
            progress = await _raw(stack.c, "receipt", {"tenant": TENANT, "request_id": request_id})
            receipt = progress["requests"][0]["receipt"]
            assert len(receipt["indexes"]) > 1 and any(i.get("counts") for i in receipt["indexes"])
            assert documented_digest(receipt) == receipt["digest"], request_id
        again = await _raw(stack.c, "request", {"tenant": TENANT, "request_id": "fg-docs-1",
                                                "selector": {"kind": "subject", "subject": "s-1"}})
        assert again.get("ok") is True and again["duplicate"] is True and again["status"] == "completed"
        assert documented_digest(again["receipt"]) == again["receipt"]["digest"]
    finally:
        await stack.stop()


# ---- 7. tenant list marks revoked agents -------------------------------------------------------

def test_tenant_list_marks_revoked_agents(admin: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    """``tenant list`` marks an agent revoked after ``agent revoke``, and every agent of a revoked
    tenant (whose account refuses all of them) too; an agent still valid is not marked."""
    for argv in (("tenant", "add", "acme"), ("agent", "add", "acme", "a1"), ("agent", "add", "acme", "a2"),
                 ("agent", "revoke", "acme", "a1")):
        assert run_cli(admin, *argv) == 0
    capsys.readouterr()
    assert run_cli(admin, "tenant", "list") == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("acme "))
    assert line.endswith("agents: a1 (revoked), a2"), line
    assert run_cli(admin, "tenant", "revoke", "acme") == 0
    capsys.readouterr()
    assert run_cli(admin, "tenant", "list") == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("acme "))
    assert " revoked " in line and line.endswith("agents: a1 (revoked), a2 (revoked)"), line
