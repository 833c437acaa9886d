"""No message stops the projections of the reserved subjects, and no request body answers ``internal``.

The memory projection, the document index and the forget log each fold one
reserved subject of every tenant: one message none of them can store used to
stop memory, documents and deletion for every tenant at once. Here hostile
messages are published straight onto ``_memory``, ``_documents`` and
``_forget`` (as only the writer's NATS user can), shaped like the real events
the services appended a moment before but carrying U+0000, nesting 10,000 deep,
or a value an injected fault makes PostgreSQL refuse. Each projection records
them in ``projection_rejections`` and moves on; another tenant's memory write,
document ingest and forget request then complete; a rebuild and
``replay --verify`` pass over the same messages and stay green.

The same bytes sent as requests get a typed error at every endpoint and in
the client and CLI, before anything is appended.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import msgspec
import pytest

from agentledger.cli import main as cli
from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.contracts.codec import encode_request
from agentledger.errors import AgentLedgerError, ContractError
from agentledger.services.context_builder import docs_replay
from agentledger.services.context_builder.documents import DURABLE as DOCUMENTS
from agentledger.services.memory_policy import replay as memory_replay
from agentledger.services.memory_policy.projection import DURABLE as MEMORY
from agentledger.services.tombstone_fanout.saga import DURABLE as FORGET
from ckpt_support import Stack, created, running
from projection_support import chained_publish, raw_publish
from raw_ledger import Ledger
from test_memory_service import proposal

NUL = "\x00"


@pytest.fixture
async def stack(settings: Settings) -> AsyncIterator[Stack]:
    async with running(settings, memory=True, context=True, tombstone=True) as s:
        yield s


async def republish(ledger: Ledger, seq: int, edit: Any, event_id: str) -> int:
    """The event stored at ``seq`` published again as a new message, changed by ``edit(doc)``, with
    a valid chain link (as a writer whose checks let it through would store it)."""
    stored = await ledger.js.get_msg(ledger.settings.stream, seq)
    doc = json.loads(stored.data)
    doc["event_id"] = event_id
    edit(doc)
    return await chained_publish(ledger, doc["tenant"], doc["task_id"], json.dumps(doc).encode(), event_id)


def deep(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


async def passed_over(stack: Stack) -> dict[tuple[str, int], str]:
    assert stack.db is not None
    return {(r[0], int(r[1])): r[2] for r in await stack.db.fetch(
        "SELECT projection, seq, code FROM projection_rejections")}


async def test_poisoned_reserved_messages_stop_no_tenant(settings: Settings, stack: Stack, ledger: Ledger) -> None:
    """Protects every tenant's memory, documents and deletion from one message: NUL in a memory
    record's value and key, in a document chunk and in a forget request's reason, a 10,000-deep
    memory event, and bytes that are no event at all, are recorded and passed over; then another
    tenant proposes, reads, ingests and forgets as usual, and a rebuild and ``replay --verify`` of
    both projections are green."""
    c = stack.c
    decided = (await c.memory_propose("acme", [proposal("p1", "the build uses uv", key="toolchain")])).decisions[0]
    ingested = await c.ingest_document("acme", "handbook", 1, "Deploys happen on Tuesdays after review.",
                                       source="handbook.md")
    forgot = await c.forget("acme", {"kind": "task", "task_id": "nothing-here"}, reason="cleanup")
    await c.forget_wait("acme", forgot.request_id)
    assert stack.db is not None
    forget_seq = await stack.db.fetchval("SELECT seq FROM forget_requests WHERE request_id = $1", forgot.request_id)

    def nul_value(doc: dict[str, Any]) -> None:
        record = doc["payload"]["record"]
        record["value"] = "uv" + NUL + " and pip"
        record["key"] = "tool" + NUL + "chain"
        doc["payload"]["proposal_id"] = record["record_id"] = "p-nul"

    def nul_chunk(doc: dict[str, Any]) -> None:
        doc["payload"]["doc_id"] = "poison"
        doc["payload"]["chunks"][0]["text"] = "Deploys" + NUL + " happen never."

    def nul_reason(doc: dict[str, Any]) -> None:
        doc["payload"]["request_id"] = "f-nul"
        doc["payload"]["reason"] = "clean" + NUL + "up"

    bad = {
        (MEMORY, "invalid_text"): await republish(ledger, decided.seq, nul_value, "poison-m1"),
        (DOCUMENTS, "invalid_text"): await republish(ledger, ingested.seq, nul_chunk, "poison-d1"),
        (FORGET, "invalid_text"): await republish(ledger, forget_seq, nul_reason, "poison-f1"),
        (MEMORY, "too_deep"): await chained_publish(
            ledger, "acme", ev.MEMORY_TASK,
            b'{"kind": "memory_proposed", "payload": {"value": ' + deep(10_000).encode() + b"}}", "poison-m2"),
        (MEMORY, "undecodable"): await chained_publish(ledger, "acme", ev.MEMORY_TASK, b'{"kind": "mem\xff\xfe', "m3"),
        (DOCUMENTS, "undecodable"): await chained_publish(ledger, "acme", ev.DOCUMENTS_TASK, b"[1, 2, 3]", "d2"),
        (FORGET, "undecodable"): await chained_publish(ledger, "acme", ev.FORGET_TASK, b"\x00\x01 not json", "f2"),
        # Put there without the key: refused for its chain before anything decodes it.
        (MEMORY, "integrity_violation"): await raw_publish(
            ledger, "acme", ev.MEMORY_TASK, b'{"kind": "memory_proposed"}', "m4"),
    }
    # The same tenant's memory goes on after them: the writer links past the message that
    # fails its chain to the head the fold kept.
    after = (await c.memory_propose("acme", [proposal("p9", "the build uses bazel", key="ci system")])).decisions[0]
    assert after.action == "write", after
    read = await c.memory_read("acme", "which ci system", key="ci system", project_id="p1")
    assert after.record_id in {i.record_id for i in read.items}

    # Another tenant, after the poison: every path that waits on these projections answers.
    other = (await c.memory_propose("globex", [proposal("g1", "globex ships on Fridays", key="ship day")])).decisions[0]
    assert other.action == "write", other
    read = await c.memory_read("globex", "when does globex ship", project_id="p1")
    assert [i.record_id for i in read.items] == [other.record_id]
    doc = await c.ingest_document("globex", "guide", 1, "Globex deploys on Fridays.", source="guide.md")
    assert doc.chunks == 1 and not doc.duplicate
    request = await c.forget("globex", {"kind": "task", "task_id": "t-gone"}, reason="requested")
    progress = await c.forget_wait("globex", request.request_id)
    assert progress.receipt is not None

    recorded = await passed_over(stack)
    for (projection, code), seq in bad.items():
        assert recorded.get((projection, seq)) == code, (projection, code, seq, recorded)
    assert await stack.db.fetchval("SELECT count(*) FROM forget_requests WHERE request_id = 'f-nul'") == 0
    assert await stack.db.fetchval("SELECT count(*) FROM documents WHERE doc_id = 'poison'") == 0

    # The same messages mean the same to a replay.
    assert await memory_replay.verify_memory(settings, wait_s=30) == []
    assert await docs_replay.verify_documents(settings, wait_s=30) == []
    await memory_replay.rebuild_memory(settings)
    await docs_replay.rebuild_documents(settings)
    assert await memory_replay.verify_memory(settings, wait_s=30) == []
    assert await docs_replay.verify_documents(settings, wait_s=30) == []
    read = await c.memory_read("globex", "when does globex ship", project_id="p1")
    assert [i.record_id for i in read.items] == [other.record_id]


async def test_a_batch_one_message_fails_is_split_and_the_message_recorded(
        settings: Settings, stack: Stack, ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    """Protects against what no check foresees: when PostgreSQL refuses one message's rows, the
    memory batch is bisected, the others commit, the failing one becomes a ``projection_error``
    row, and a rebuild and ``replay --verify`` pass over it too."""
    c = stack.c
    first = (await c.memory_propose("acme", [proposal("p1", "the build uses uv", key="toolchain")])).decisions[0]
    assert stack.memory is not None
    projection = stack.memory.projection
    real_apply = projection.apply
    poisoned: set[int] = set()

    async def apply(conn: asyncpg.Connection, fresh: list[tuple[int, Any]]) -> dict[str, int]:
        if any(seq in poisoned for seq, _ in fresh):
            raise asyncpg.exceptions.CharacterNotInRepertoireError("invalid byte sequence")
        return await real_apply(conn, fresh)

    monkeypatch.setattr(projection, "apply", apply)
    poison = await republish(ledger, first.seq, lambda d: d["payload"].update(proposal_id="p-x"), "poison-x")
    poisoned.add(poison)
    later = (await c.memory_propose("acme", [proposal("p2", "tests run with pytest", key="test runner")])).decisions[0]
    read = await c.memory_read("acme", "which test runner", key="test runner", project_id="p1")
    assert later.record_id in {i.record_id for i in read.items}
    assert (await passed_over(stack)).get((MEMORY, poison)) == "projection_error"
    assert stack.db is not None
    assert await stack.db.fetchval("SELECT count(*) FROM memory_history WHERE proposal_id = 'p-x'") == 0
    monkeypatch.undo()
    assert await memory_replay.verify_memory(settings, wait_s=30) == []
    await memory_replay.rebuild_memory(settings)
    assert await memory_replay.verify_memory(settings, wait_s=30) == []


async def _code(coro: Any) -> tuple[str, str | None]:
    with pytest.raises(AgentLedgerError) as info:
        await coro
    return info.value.code, info.value.path


async def test_every_endpoint_answers_nul_with_a_typed_error(stack: Stack) -> None:
    """Protects the callers: U+0000 in any string of a request is ``invalid_text`` naming the field, at
    the writer, memory-policy, context-builder, checkpointer and tombstone-fanout, sent raw (past the
    client's own check) and through the client; nothing is appended."""
    c = stack.c
    prefix = stack.settings.prefix
    before = await stack.last_seq()
    event = {"kind": "task_created", "event_id": "e1", "tenant": "acme", "task_id": "t1", "producer": "test",
             "occurred_at": "2026-12-01T10:00:00Z", "schema_version": 1,
             "payload": {"goal": {"text": "a" + NUL, "acceptance_criteria": [], "goal_hash": "0" * 64}}}
    raw_requests = {
        "writer.append": ({"events": [event]}, "$.events[0].payload.goal.text"),
        "memory.propose": ({"tenant": "acme", "proposals": [proposal("p1", "x" + NUL)]},
                           "$.proposals[0].value"),
        "memory.read": ({"tenant": "acme", "query": "where" + NUL}, "$.query"),
        "context.ingest": ({"tenant": "acme", "doc_id": "d", "version": 1, "text": "t" + NUL}, "$.text"),
        "context.build": ({"tenant": "acme", "task_id": "t1", "input_ordinal": 1, "window_tokens": 4096,
                           "memory_query": NUL}, "$.memory_query"),
        "forget.request": ({"tenant": "acme", "selector": {"kind": "task", "task_id": "t1"}, "reason": NUL},
                           "$.reason"),
        "checkpoint.save": ({"tenant": "acme", "task_id": "t" + NUL}, "$.task_id"),
    }
    for subject, (body, path) in raw_requests.items():
        msg = await c.nc.request(f"{prefix}.{subject}", msgspec.json.encode(body), timeout=30)
        reply = json.loads(msg.data)
        assert reply["ok"] is False, (subject, reply)
        assert (reply["error"]["code"], reply["error"]["path"]) == ("invalid_text", path), (subject, reply)
    # The client refuses before sending, with the same code.
    assert (await _code(c.memory_read("acme", "where" + NUL)))[0] == "invalid_text"
    assert (await _code(c.memory_propose("acme", [proposal("p1", "\ud800")])))[0] == "invalid_text"
    assert (await _code(c.append(event)))[0] == "invalid_text"
    assert await stack.last_seq() == before


def test_the_cli_gives_the_writers_errors_without_a_traceback(tmp_path: Any,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Protects the CLI user: a file holding a 5,000-deep value or U+0000 gets the writer's typed
    ``too_deep`` / ``invalid_text`` (exit 2), not a RecursionError; nothing needs a server."""
    deep_file = tmp_path / "deep.json"
    deep_file.write_text('{"kind": "variable_set", "payload": {"name": "x", "value": ' + deep(5000) + "}}")
    nul_file = tmp_path / "nul.json"
    nul_file.write_text(json.dumps([{"kind": "variable_set", "payload": {"name": "x", "value": "a" + NUL}}]))
    for path, code in ((deep_file, "too_deep"), (nul_file, "invalid_text")):
        with pytest.raises(SystemExit) as info:
            cli.main(["append", str(path)])
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith(f"agentledger: {code}:"), err
        assert "Traceback" not in err


def test_encode_request_refuses_what_the_services_refuse() -> None:
    """The client's encoder: a lone surrogate and NUL are ``invalid_text``, 5,000 levels ``too_deep``."""
    value: Any = 1
    for _ in range(5000):
        value = [value]
    for body, code in (({"q": "\ud800"}, "invalid_text"), ({"q": NUL}, "invalid_text"),
                       ({"q": value}, "too_deep")):
        with pytest.raises(ContractError) as info:
            encode_request(body)
        assert info.value.code == code
    assert encode_request({"q": "\\u0000 is written like this"}) == b'{"q":"\\\\u0000 is written like this"}'


# Every request subject a tenant may call, with a body that is otherwise plausible for it.
SUBJECTS: dict[str, dict[str, Any]] = {
    "writer.append": {"events": [{"kind": "variable_set", "event_id": "e1", "tenant": "acme", "task_id": "t1",
                                  "producer": "test", "occurred_at": "2026-12-01T10:00:00Z", "schema_version": 1,
                                  "payload": {"name": "x", "value": "v"}}]},
    "lease.acquire": {"tenant": "acme", "task_id": "t1", "holder": "h"},
    "lease.renew": {"tenant": "acme", "task_id": "t1", "holder": "h", "token": 1},
    "lease.release": {"tenant": "acme", "task_id": "t1", "holder": "h", "token": 1},
    "wm.get": {"tenant": "acme", "task_id": "t1"},
    "checkpoint.save": {"tenant": "acme", "task_id": "t1"},
    "resume": {"tenant": "acme", "task_id": "t1", "executor": "h"},
    "artifact.get": {"uri": "artifact://x/acme/" + "0" * 64},
    "artifact.stat": {"uri": "artifact://x/acme/" + "0" * 64},
    "memory.propose": {"tenant": "acme", "proposals": [proposal("p1", "v")]},
    "memory.read": {"tenant": "acme", "query": "q"},
    "memory.get": {"tenant": "acme", "key": "k", "scope": {"level": "project", "id": "p1"}},
    "memory.feedback": {"tenant": "acme", "record_id": "r", "action": "confirm", "feedback_id": "f"},
    "memory.receipts": {"tenant": "acme", "task_id": "t1"},
    "context.build": {"tenant": "acme", "task_id": "t1", "input_ordinal": 1, "window_tokens": 4096},
    "context.get": {"tenant": "acme", "generation_id": "g1"},
    "context.trace": {"tenant": "acme", "generation_id": "g1"},
    "context.commit": {"tenant": "acme", "generation_id": "g1", "answer_ordinal": 2},
    "context.clear": {"tenant": "acme", "task_id": "t1"},
    "context.ingest": {"tenant": "acme", "doc_id": "d", "version": 1, "text": "t", "source": "s"},
    "forget.request": {"tenant": "acme", "selector": {"kind": "task", "task_id": "t1"}},
    "forget.receipt": {"tenant": "acme", "request_id": "r1"},
}


def hostile_bodies(body: dict[str, Any]) -> dict[str, bytes]:
    """The same request with U+0000 in its tenant, a lone surrogate escape, invalid UTF-8, 10,000
    levels of nesting, and bytes that are not JSON at all."""
    encoded = msgspec.json.encode(body)
    return {
        "nul": encoded.replace(b'"acme"', b'"ac\\u0000me"', 1),
        "lone_surrogate": encoded.replace(b'"acme"', b'"ac\\ud800me"', 1),
        "invalid_utf8": encoded.replace(b'"acme"', b'"ac\xff\xfeme"', 1),
        "deep": encoded[:-1] + b',"extra":' + deep(10_000).encode() + b"}",
        "not_json": b"\x00\x01\x02 not json",
    }


async def test_hostile_bytes_on_every_subject_get_a_typed_refusal(stack: Stack) -> None:
    """Protects every caller from every other: NUL, a lone surrogate, invalid UTF-8, 10,000 levels and
    binary garbage sent to each request subject are answered with a typed, non-retryable refusal
    (never ``internal``, never silence), nothing is appended, and each service still answers after."""
    c = stack.c
    prefix = stack.settings.prefix
    before = await stack.last_seq()
    for subject, body in SUBJECTS.items():
        for name, data in hostile_bodies(body).items():
            msg = await c.nc.request(f"{prefix}.{subject}", data, timeout=30)
            reply = json.loads(msg.data)
            error = reply.get("error") or {}
            assert reply.get("ok") is False, (subject, name, reply)
            assert error.get("code") not in (None, "internal", "unavailable"), (subject, name, reply)
            assert error.get("retryable") is not True, (subject, name, reply)
    assert await stack.last_seq() == before
    assert (await c.memory_read("acme", "anything")).ok


async def test_a_10_mb_value_is_a_typed_refusal_everywhere(stack: Stack) -> None:
    """Protects the caller from an untyped ``MaxPayloadError``: a 10 MB value in a proposal, an event,
    a query or a document is refused with a typed error before or at the service, nothing is
    appended, and the services answer after."""
    c = stack.c
    before = await stack.last_seq()
    big = "x" * (10 << 20)
    event = created("t1")
    event["payload"]["goal"]["text"] = big
    for call in (c.memory_propose("acme", [proposal("p1", big)]), c.append(event),
                 c.memory_read("acme", big), c.ingest_document("acme", "d", 1, big, source="s")):
        code, _ = await _code(call)
        assert code in ("request_too_large", "invalid_value"), code
    assert await stack.last_seq() == before
    assert (await c.memory_read("acme", "anything")).ok
