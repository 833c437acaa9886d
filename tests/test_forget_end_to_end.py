"""Forgetting a data subject on the whole stack as ``agentledger up`` runs it (embedded NATS and
PostgreSQL, every service a process under the supervisor), then a crash of both servers.

Alice's turns, a personal variable, a personal memory record and the read receipt that served
it, a compaction summary, context generations, a checkpoint and an artifact are written; Bob's
alongside. Alice is forgotten: the receipt completes with every index, every read path answers
nothing of hers, ``replay --verify`` of every projection stays green, the logical scan of every
stream, bucket, object store, table and log is clean at once and the raw scan of both data
folders after the documented compaction. Then nats-server and PostgreSQL are SIGKILLed, the
supervisor brings them back on the same addresses, and both scans are clean again while Bob's
data is all there.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentledger.client import Client, connect
from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.erasure import scan as forget_scan
from agentledger.errors import AgentLedgerError
from agentledger.runtime import commands
from agentledger.runtime.embedded import pid_alive
from agentledger.runtime.state import read_runtime, resolve_urls
from agentledger.services.context_builder.docs_replay import verify_documents
from agentledger.services.memory_policy.replay import verify_memory
from agentledger.services.projector.rebuild import verify
from ckpt_support import created, event
from test_memory_service import proposal

TENANT = "acme"
ALICE = {"turn": "Alice Moreau lives at 12 Rue Oberkampf and her badge is QX-88213",
         "memory": "Alice is allergic to penicillin since 2011",
         "variable": "Alice Moreau, 4 Impasse des Lilas",
         "artifact": "passport scan of Alice Moreau number K44719023"}
BOB_ARTIFACT = "delivery note for Bob Lindqvist number D-5520931"


def turn(task: str, ordinal: int, text: str, subject: str) -> dict[str, Any]:
    body = event("turn_appended", {"role": "user" if ordinal % 2 else "assistant", "ordinal": ordinal,
                                   "content": text}, task, tenant=TENANT)
    return body | {"data_subject": subject}


async def write_alice_and_bob(c: Client) -> tuple[str, list[str]]:
    """Everything the issue lists, about Alice; Bob's task, artifact and memory beside it.
    The id of Alice's memory record, and of the generations built over her conversation."""
    chat = [turn("chat-a", i, f"{ALICE['turn']} (turn {i}); we went through log excerpt {i} together"
                 if i % 3 == 1 else f"turn {i}: nothing new in log excerpt {i}", "s-alice") for i in range(1, 13)]
    home = event("variable_set", {"name": "home", "value": ALICE["variable"], "personal": True}, "chat-a",
                 tenant=TENANT) | {"data_subject": "s-alice"}
    await c.append_batch([created("chat-a"), *chat, home])
    await c.append_batch([created("chat-b"), turn("chat-b", 1, "Bob asks about his delivery", "s-bob")])
    for who, content, task in (("s-alice", ALICE["artifact"], "chat-a"), ("s-bob", BOB_ARTIFACT, "chat-b")):
        ref = await c.put_artifact(content.encode(), schema="text/plain", producer="test", tenant=TENANT)
        await c.append_batch([event("artifact_registered", {"artifact": msgspec.to_builtins(ref)}, task,
                                    tenant=TENANT) | {"data_subject": who}])
    decided = await c.memory_propose(TENANT, [
        proposal("m-alice", ALICE["memory"], kind="fact", level="user", scope_id="u-alice",
                 source="user_confirmed", key="health.allergy", personal=True, data_subject="s-alice"),
        proposal("m-bob", "Bob prefers deliveries after 6 pm", kind="preference", level="user",
                 scope_id="u-bob", source="user_confirmed", key="preference.delivery_time")])
    record = decided.decisions[0].record_id
    assert record is not None and decided.decisions[0].action == "write", decided.decisions[0]
    # Personal records are in no text or vector index: they are read by their key.
    read = await c.memory_read(TENANT, "allergy", key="health.allergy", user_id="u-alice", task_id="chat-a",
                               max_sensitivity="personal")
    assert [i.value for i in read.items] == [ALICE["memory"]]
    compacted = await c.build_context(TENANT, "chat-a", 11, window_tokens=700, reserve_tokens=64,
                                      compaction={"high_watermark": 0.5, "recent_exact_tokens": 1})
    assert (await c.commit_generation(TENANT, compacted.generation_id, 12)).activated
    with_memory = await c.build_context(TENANT, "chat-a", 11, window_tokens=8000, reserve_tokens=64,
                                        user_id="u-alice", memory_query="penicillin allergy")
    await c.save_checkpoint(TENANT, "chat-a")
    return record, [compacted.generation_id, with_memory.generation_id]


async def phase_forget(settings: Settings) -> ev.DeletionReceipt:
    async with await connect(settings, timeout=60) as c:
        record, generations = await write_alice_and_bob(c)
        reply = await c.forget(TENANT, {"kind": "subject", "subject": "s-alice"}, reason="erasure request",
                               legal_basis="GDPR Art. 17")
        done = await c.forget_wait(TENANT, reply.request_id, timeout_s=120)
        receipt = done.receipt
        assert receipt is not None
        statuses = {i.index: i.status for i in receipt.indexes}
        for index in ("keys", "memory", "read_receipts", "generations", "compaction", "working_memory",
                      "checkpoints", "artifacts", "caches"):
            assert statuses[index] == "done", (index, receipt.indexes)
        # Every read path: nothing of Alice's.
        view = (await c.working_memory(TENANT, "chat-a", reveal_personal=True)).state
        assert all(t.get("erased") and t.get("content") is None for t in view["transcript"])
        assert view["variables"]["home"].get("erased") is True
        read = await c.memory_read(TENANT, "allergy", key="health.allergy", user_id="u-alice",
                                   max_sensitivity="personal")
        assert read.items == []
        shown = await c.memory_get(TENANT, "health.allergy", "user", "u-alice")
        assert [(r.record_id, r.status, r.value) for r in shown.records] == [(record, "forgotten", None)]
        for generation in generations:
            with pytest.raises(AgentLedgerError) as info:
                await c.get_generation(TENANT, generation)
            assert info.value.code == "not_found"
        with pytest.raises(AgentLedgerError):
            await c.get_artifact(_alice_artifact_uri(view))
        assert [p.request_id for p in await c.forget_receipts(TENANT, subject="s-alice")] == [reply.request_id]
        # Bob: untouched.
        bob = (await c.working_memory(TENANT, "chat-b", reveal_personal=True)).state
        assert bob["transcript"][0]["content"] == "Bob asks about his delivery"
        # A new build of Alice's conversation compacts from what remains: nothing of hers.
        fresh = await c.build_context(TENANT, "chat-a", 11, window_tokens=700, reserve_tokens=64,
                                      compaction={"high_watermark": 0.5, "recent_exact_tokens": 1})
        assert ALICE["turn"] not in msgspec.json.encode(fresh).decode()
    assert (await verify(settings)).ok
    assert await verify_memory(settings) == []
    assert await verify_documents(settings) == []
    return receipt


def _alice_artifact_uri(view: dict[str, Any]) -> str:
    """The artifact registered about Alice: its event stays (only her key and content go)."""
    [uri] = [a["uri"] for a in view["artifacts"]]
    return str(uri)


async def scan(settings: Settings, receipt: ev.DeletionReceipt) -> None:
    report = await forget_scan.verify(settings, receipt, [v.encode() for v in ALICE.values()], raw=True)
    assert report.clean, forget_scan.render(report)
    # The scans look where content is: Bob's artifact is found, by both.
    control = await forget_scan.verify_forgotten(settings, [BOB_ARTIFACT.encode()],
                                                 raw_roots=forget_scan.default_raw_roots(settings))
    assert control.logical.findings and control.raw is not None and control.raw.findings


def crash_servers(settings: Settings) -> None:
    """SIGKILL nats-server and PostgreSQL; wait until the supervisor has both back."""
    info = read_runtime(settings.runtime_file)
    assert info.nats_pid is not None and info.postgres_pid is not None
    os.kill(info.nats_pid, signal.SIGKILL)
    os.kill(info.postgres_pid, signal.SIGKILL)
    deadline = time.monotonic() + 90
    while True:
        now = read_runtime(settings.runtime_file)
        if (now.nats_pid not in (None, info.nats_pid) and now.postgres_pid not in (None, info.postgres_pid)
                and pid_alive(now.nats_pid) and pid_alive(now.postgres_pid)):
            assert (now.nats_url, now.database_url) == (info.nats_url, info.database_url)
            return
        assert time.monotonic() < deadline, "the servers did not come back"
        time.sleep(0.1)


@pytest.mark.timeout(420)
def test_forget_a_data_subject_everywhere_and_nothing_comes_back_after_a_crash(
        tmp_path: Path, server_root: Path) -> None:
    settings = Settings(data_dir=tmp_path, prefix="forgettest", server_root=server_root)
    try:
        commands.up(settings)
        resolved = resolve_urls(settings)
        receipt = asyncio.run(phase_forget(resolved))
        asyncio.run(scan(resolved, receipt))
        crash_servers(settings)
        asyncio.run(scan(resolve_urls(settings), receipt))
    finally:
        if settings.runtime_file.exists():
            commands.down(settings)
