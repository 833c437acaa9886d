"""The forgets a restore applies again: every request in the forget journal that the restored
database does not hold as completed, issued again through the tombstone-fanout.

A journaled request is covered when the restored ``forget_requests`` table holds it completed,
or holds a completed request of the same tenant and selector requested at the same time or
later (a request applied again by an earlier restore is one). What is not covered goes through
the saga again under a new request id (``re-`` and a digest of the original id and the backup,
so a restore run twice asks once); the receipt it seals names the original in its reason.

A key selector is journaled as the key's digest (``stores.forget_journal``): its words are found
again among the keys of the restored memory records. A digest no restored record's key gives is
reported as ``unmatched``: the backup holds no record of that key, so there is nothing to forget.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg
import msgspec
from blake3 import blake3

from agentledger.client import Client
from agentledger.contracts import events as ev
from agentledger.stores import forget_journal
from agentledger.stores.forget_journal import Entry, Selector

# Longest one re-applied forget may take to its receipt (a whole tenant on a busy host).
REAPPLY_TIMEOUT_S = 900.0

_requested = msgspec.json.Decoder(ev.ForgetRequested)


class Reapplied(msgspec.Struct, frozen=True):
    """One journaled forget issued again: the original id, the new one, its selector's kind."""

    request_id: str
    reapplied_as: str
    tenant: str
    kind: str
    digest: str


async def _completed(pool: asyncpg.Pool, marker_key: bytes) -> list[tuple[str, str, Selector, datetime]]:
    rows = await pool.fetch("SELECT tenant, request_id, request, requested_at FROM forget_requests"
                            " WHERE receipt IS NOT NULL")
    return [(r["tenant"], r["request_id"], forget_journal.journaled(_requested.decode(bytes(r["request"])).selector,
                                                                     marker_key), r["requested_at"])
            for r in rows]


def pending(entries: list[Entry], completed: list[tuple[str, str, Selector, datetime]]) -> list[Entry]:
    """The entries the restored database does not hold as done, one per tenant and selector."""
    done_ids = {(tenant, rid) for tenant, rid, _, _ in completed}
    out: dict[tuple[str, bytes], Entry] = {}
    for entry in entries:
        if (entry.tenant, entry.request_id) in done_ids:
            continue
        if any(tenant == entry.tenant and sel == entry.selector and at >= entry.requested_at
               for tenant, _, sel, at in completed):
            continue
        out.setdefault((entry.tenant, msgspec.json.encode(entry.selector)), entry)
    return list(out.values())


async def _selector(pool: asyncpg.Pool, entry: Entry, marker_key: bytes) -> dict[str, Any] | None:
    """The request selector of ``entry``; None for a key no restored record has."""
    sel = entry.selector
    body: dict[str, Any] = {"kind": sel.kind}
    for name in ("record_id", "subject", "task_id"):
        if getattr(sel, name) is not None:
            body[name] = getattr(sel, name)
    if sel.scope is not None:
        body["scope"] = msgspec.to_builtins(sel.scope)
    if sel.kind == "key":
        keys = [r[0] for r in await pool.fetch("SELECT DISTINCT key FROM memory_records WHERE tenant = $1",
                                                entry.tenant)]
        found = [k for k in keys if forget_journal.key_digest(k, marker_key) == sel.key_digest]
        if not found:
            return None
        body["key"] = found[0]
    return body


async def reapply(client: Client, pool: asyncpg.Pool, entries: list[Entry], *, backup_id: str,
                  marker_key: bytes) -> tuple[list[Reapplied], list[str]]:
    """Issue every pending entry again and wait for each receipt; (what was re-applied, the
    request ids whose key no restored record holds)."""
    done: list[Reapplied] = []
    unmatched: list[str] = []
    for entry in pending(entries, await _completed(pool, marker_key)):
        selector = await _selector(pool, entry, marker_key)
        if selector is None:
            unmatched.append(entry.request_id)
            continue
        new_id = "re-" + blake3(f"{entry.tenant}/{entry.request_id}/{backup_id}".encode()).hexdigest()[:32]
        reply = await client.forget(entry.tenant, selector, request_id=new_id,
                                    reason=f"restore of backup {backup_id} applies {entry.request_id} again",
                                    legal_basis=entry.legal_basis)
        progress = await client.forget_wait(entry.tenant, reply.request_id, timeout_s=REAPPLY_TIMEOUT_S)
        assert progress.receipt is not None
        done.append(Reapplied(request_id=entry.request_id, reapplied_as=new_id, tenant=entry.tenant,
                              kind=entry.selector.kind, digest=progress.receipt.digest))
    return done, unmatched
