"""Poisoning through the real service: no injection attempt becomes a rule, a preference or a read.

Every line of ``tests/corpora/injections.txt`` (74 attempts, 8 languages) and of
``injections_obfuscated.txt`` (the same kinds written with zero-width characters,
look-alike letters, fullwidth letters, direction overrides and TAG characters) is
proposed as it would arrive: from an uploaded document, from tool output that
quotes a fetched page, and from a model that picked it up in chat, each as a
rule, a preference, a procedure and a fact. Every decision must be quarantine,
deny or reject; afterwards the tenant has no active record at all, and a read
that searches for the attempts' own words returns nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
