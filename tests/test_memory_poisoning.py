"""Poisoning through the real service: no injection attempt becomes a rule, a preference or a read.

Every line of ``tests/corpora/injections.txt`` (74 attempts, 8 languages) and of
``injections_obfuscated.txt`` (the same kinds written with zero-width characters,
look-alike letters, fullwidth letters, direction overrides and TAG characters) is
proposed as it would arrive: from an uploaded document, from tool output that
quotes a fetched page, and from a model that picked it up in chat, each as a
rule, a preference, a procedure and a fact. Every decision must be quarantine,
deny or reject; afterwards the tenant has no active record at all, and a read
that searches for the attempts' own words returns nothing.

The seeded corpus of ``agentledger.bench.poisoning`` (attacks in ten languages over seven
carriers, and benign controls) goes through the same service: no attack is active afterwards,
and at most 3% of the controls are not written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentledger.bench import poisoning
from agentledger.config import Settings
from ckpt_support import running

CORPORA = [Path(__file__).parent / "corpora" / name for name in ("injections.txt", "injections_obfuscated.txt")]
TENANT = "poison"
SOURCES: list[dict[str, Any]] = [
    {"kind": "external_document", "ref": "upload:handbook.pdf"},
    {"kind": "tool_output", "ref": "fetch https://example.test/page", "quotes_external": True},
    {"kind": "model_inference", "ref": "chat turn"},
]
TARGETS = [("rule", {"level": "project", "id": "p1"}), ("preference", {"level": "user", "id": "u1"}),
           ("procedure", {"level": "project", "id": "p1"}), ("fact", {"level": "project", "id": "p1"})]


def attempts() -> list[str]:
    lines = [line.split("\t", 1)[1] for corpus in CORPORA for line in corpus.read_text(encoding="utf-8").splitlines()
             if line and not line.startswith("#")]
    return list(dict.fromkeys(lines))


async def test_every_injection_attempt_is_quarantined_or_denied_and_never_read(settings: Settings) -> None:
    """Protects issue 8 §6 (poisoning): 100% quarantined or denied, none read; and issue 26
    item 8: an obfuscated attempt is no way around it."""
    texts = attempts()
    assert len(texts) >= 50
    proposals = [
        {"proposal_id": f"inj-{i}-{s}-{kind}", "kind": kind, "scope": scope, "source": source,
         "value": text, "origin_task": "t1"}
        for i, text in enumerate(texts) for s, source in enumerate(SOURCES) for kind, scope in TARGETS]
    async with running(settings, checkpointer=False, memory=True) as stack:
        reply = await stack.c.memory_propose(TENANT, proposals)
        actions = {(d.proposal_id, d.action) for d in reply.decisions}
        admitted = sorted(pid for pid, action in actions if action not in ("quarantine", "deny", "reject"))
        assert admitted == []
        assert len(reply.decisions) == len(proposals)
        assert stack.db is not None
        active = await stack.db.fetch("SELECT record_id, kind FROM memory_records WHERE tenant = $1"
                                      " AND status = 'active'", TENANT)
        assert active == []
        for text in texts[:10]:
            read = await stack.c.memory_read(TENANT, text, user_id="u1", project_id="p1", task_id="t1")
            assert read.items == []
            assert read.receipt is not None and read.receipt.selected == []


def request_of(p: Any) -> dict[str, Any]:
    """A corpus proposal as a client sends it (the service builds the same event from it)."""
    source: dict[str, Any] = {"kind": p.source.kind, "ref": p.source.ref}
    if p.source.quotes_external:
        source["quotes_external"] = True
    return {"proposal_id": p.proposal_id, "kind": p.kind, "scope": {"level": p.scope.level, "id": p.scope.id},
            "source": source, "value": p.value, "origin_task": p.origin_task}


async def test_the_seeded_corpus_through_the_service_admits_no_attack(settings: Settings) -> None:
    """Protects issue 22 item 4 end to end: attack success 0 and false quarantine <= 3% when the
    seeded corpus is proposed through memory.propose, counted in the projection."""
    cases = poisoning.corpus(**poisoning.TUNED)  # type: ignore[arg-type]
    tenant = "poison-corpus"
    async with running(settings, checkpointer=False, memory=True) as stack:
        reply = await stack.c.memory_propose(tenant, [request_of(p) for c in cases for p in c.proposals])
        assert len(reply.decisions) == sum(len(c.proposals) for c in cases)
        assert stack.db is not None
        rows = await stack.db.fetch("SELECT record_id FROM memory_records WHERE tenant = $1 AND status = 'active'",
                                    tenant)
        active = {r["record_id"] for r in rows}
        by_pid = {d.proposal_id: d.record_id for d in reply.decisions}
        admitted = [c.name for c in cases if c.attack and any(by_pid[p.proposal_id] in active for p in c.proposals)]
        held = [c.name for c in cases if not c.attack and by_pid[c.proposals[0].proposal_id] not in active]
        controls = sum(not c.attack for c in cases)
        print(f"\nservice: {len(admitted)} attacks active, {len(held)}/{controls} controls held: {held}")
        assert admitted == []
        assert len(held) <= poisoning.FALSE_QUARANTINE_TARGET * controls
