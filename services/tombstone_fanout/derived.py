"""Derived plaintext copies of a data subject's values, found by the values themselves.

A data subject's personal values are sealed under its key, and the ``keys`` step makes every
sealed copy unreadable. Copies made *from* them in plaintext are not: a document someone
ingested that quotes the subject's address, a read receipt whose query quoted it, another
task's context generation built over that document. No lineage names the subject there. So
before the key is destroyed, this step opens the subject's sealed values with it and uses
them as **needles**: each whole value (at least ``WHOLE_MIN`` characters) and each personal
span the detector finds in it (an address, a phone number, an e-mail, an id: at least
``SPAN_MIN``), searched as written and as a JSON string body holds them. What holds one:

* a document version (any of its ``_documents`` messages), and every version declared about
  the subject at ingest (``data_subjects``: that lineage needs no needle): all its messages
  securely erased, and the tenant's document index rebuilt from what its ledger still holds
  (as the ``documents`` step does for a tenant), so the index and a replay agree;
* a read receipt: redacted of its request's query and key; deleted when it still holds one;
* a context generation (its frozen input or its output artifact): its row deleted and both
  artifacts securely erased.

The plan keeps ids, sequences and URIs only (never a needle): it is stored before the apply,
and the apply does not need the key, so a run resumed after the key is gone does the same.
Counts go to the receipt as ``derived``. What a plan reaches is also written to the forget journal
beside the keys (``stores.forget_journal.Copies``: ids and document versions), and a later
forget of the subject reaches what earlier ones found: after a restore of an older backup, the
copies it holds again are found by those ids, the subject's key there no longer opening.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable
from typing import Any

import msgspec
import structlog

from agentledger.contracts import events as ev
from agentledger.contracts.codec import decode_event
from agentledger.contracts.memory_api import ReadReceipt
from agentledger.core import integrity
from agentledger.core.detect.personal import find_personal
from agentledger.core.memory.tags import receipt_tag
from agentledger.erasure.erase import scan_subject
from agentledger.security.integrity_keys import keys_of
from agentledger.security.sealing import unseal
from agentledger.security.task_seal import TaskKeys, bodies
from agentledger.services.context_builder.forget import DocumentsHandler
from agentledger.services.tombstone_fanout.registry import ForgetContext
from agentledger.stores import forget_journal
from agentledger.stores.artifacts import artifact_refs
from agentledger.stores.ledger import ledger_subject

# A whole value shorter than this is no needle (a short phrase would match ordinary text and
# forget what never came from the subject); nor a shorter personal span.
WHOLE_MIN = 32
SPAN_MIN = 6
# Generation artifacts read at once.
READ_IN_FLIGHT = 8
_DOC_TABLES = ("documents", "document_versions", "document_chunks")
_receipt = msgspec.json.Decoder(ReadReceipt)
log = structlog.get_logger()


def needles_of(text: str) -> set[str]:
    """The needles one opened value gives: itself, and the personal spans inside it."""
    out = {text.strip()} if len(text.strip()) >= WHOLE_MIN else set()
    out |= {text[f.start:f.end] for f in find_personal(text) if f.end - f.start >= SPAN_MIN}
    return out


def forms(needles: Iterable[str]) -> list[bytes]:
    """Each needle as raw UTF-8 and as the body of a JSON string (ASCII-escaped or not)."""
    out: set[bytes] = set()
    for n in needles:
        out |= {n.encode(), json.dumps(n, ensure_ascii=False)[1:-1].encode(), json.dumps(n)[1:-1].encode()}
    return sorted(out)


def holds(data: bytes, patterns: list[bytes]) -> bool:
    return any(p in data for p in patterns)


def _sealed_in(value: Any, subject: str) -> Iterable[ev.Sealed]:
    """Every sealed value of ``subject`` inside an event's payload (as built-ins)."""
    if isinstance(value, dict):
        if value.get("subject") == subject and "ciphertext" in value and "nonce" in value:
            yield msgspec.convert(value, ev.Sealed)
            return
        for v in value.values():
            yield from _sealed_in(v, subject)
    elif isinstance(value, list):
        for v in value:
            yield from _sealed_in(v, subject)


def _text(plain: bytes) -> str:
    """An opened value as text: a JSON value's strings joined, else the bytes decoded."""
    text = plain.decode(errors="replace")
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, str):
        return value
    return " ".join(_strings(value))


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


async def subject_needles(ctx: ForgetContext, subject: str) -> tuple[set[str], list[str]]:
    """The needles of every value of ``subject`` sealed in the tenant's ledger that still opens,
    and the artifacts the events about ``subject`` cite (the ``artifacts`` step erases them):
    one scan of the tenant's ledger for both."""
    mark = b'"subject":"' + subject.encode() + b'"'
    about = b'"data_subject":"' + subject.encode() + b'"'
    needles: set[str] = set()
    uris: set[str] = set()
    scan = scan_subject(ctx.nc.jetstream(), ctx.settings.stream, f"{ctx.settings.prefix}.ledger.{ctx.tenant}.*")
    async for _, body in bodies(scan, TaskKeys(ctx.keyring), ctx.settings.prefix):
        if mark not in body and about not in body:
            continue
        try:
            event = decode_event(body)
        except Exception:  # noqa: BLE001, S112 - undecodable bytes seal nothing readable
            continue
        if event.data_subject == subject:
            uris.update(ref.uri for _, _, ref in artifact_refs([event]))
        for sealed in _sealed_in(msgspec.to_builtins(event.payload), subject):
            plain = await unseal(sealed, ctx.tenant, event.task_id, ctx.keyring)
            if plain is not None:
                needles |= needles_of(_text(plain))
    return needles, sorted(uris)


class DerivedHandler:
    """Plaintext copies of a data subject's values; see the module docstring."""

    index = "derived"
    # Claimed by their own steps; listed for the statistics step, which analyzes those a plan
    # says it changes (its ``tables``).
    tables: tuple[str, ...] = (*_DOC_TABLES, "memory_receipts", "context_generations")
    stores: tuple[str, ...] = ()

    async def plan(self, ctx: ForgetContext) -> Any | None:
        sel = ctx.selector
        if sel.kind != "subject":
            return None
        assert sel.subject is not None
        started = time.perf_counter()
        needles, cited = await subject_needles(ctx, sel.subject)
        patterns = forms(needles)
        opened = time.perf_counter()
        earlier = await asyncio.to_thread(forget_journal.copies_of, ctx.settings, ctx.tenant, sel.subject)
        plan: dict[str, Any] = {"needles": len(needles), "receipts_redacted": [], "receipts": [],
                                "generations": [], "uris": [], "artifacts": cited}
        plan["document_seqs"], versions = await self._documents_of(
            ctx, sel.subject, patterns, {(d, v) for c in earlier for d, v in c.documents})
        plan["document_versions"] = len(versions)
        if patterns:
            for receipt_id, raw in await ctx.pool.fetch(
                    "SELECT receipt_id, receipt FROM memory_receipts WHERE tenant = $1 ORDER BY receipt_id",
                    ctx.tenant):
                if not holds(bytes(raw), patterns):
                    continue
                redacted = msgspec.json.encode(redact_query(_receipt.decode(bytes(raw))))
                plan["receipts" if holds(redacted, patterns) else "receipts_redacted"].append(receipt_id)
        searched = time.perf_counter()
        plan["generations"], plan["uris"] = await self._generations(ctx, patterns) if patterns else ([], [])
        await self._with_earlier(ctx, plan, earlier)
        plan["tables"] = self._reached(plan)
        if versions or plan["receipts"] or plan["receipts_redacted"] or plan["generations"]:
            await asyncio.to_thread(forget_journal.record, ctx.settings, forget_journal.Copies(
                version=1, request_id=ctx.request.request_id, tenant=ctx.tenant, subject=sel.subject,
                documents=sorted(versions), receipts_redacted=plan["receipts_redacted"],
                receipts=plan["receipts"], generations=plan["generations"]))
        # Where a subject forget's time goes (the needles themselves are never logged).
        log.info("forget.derived_planned", needles=len(needles), open_s=round(opened - started, 3),
                 documents_receipts_s=round(searched - opened, 3),
                 generations_s=round(time.perf_counter() - searched, 3))
        return plan

    @staticmethod
    async def _with_earlier(ctx: ForgetContext, plan: dict[str, Any], earlier: list[forget_journal.Copies]) -> None:
        """Add to ``plan`` the receipts and generations earlier forgets of the subject found by
        its values (``forget_journal.Copies``) that the stores hold again: a restored backup,
        whose copy of the subject's key may no longer open to find them by needles."""
        have = set(plan["receipts"]) | set(plan["receipts_redacted"])
        for kind in ("receipts", "receipts_redacted"):
            ids = sorted({i for c in earlier for i in getattr(c, kind)} - have)
            if ids:
                plan[kind] = sorted({*plan[kind], *(r[0] for r in await ctx.pool.fetch(
                    "SELECT receipt_id FROM memory_receipts WHERE tenant = $1 AND receipt_id = ANY($2::text[])",
                    ctx.tenant, ids))})
                have |= set(plan[kind])
        ids = sorted({g for c in earlier for g in c.generations} - set(plan["generations"]))
        if ids:
            rows = await ctx.pool.fetch("SELECT generation_id, frozen_uri, artifact_uri FROM context_generations"
                                        " WHERE tenant = $1 AND generation_id = ANY($2::text[])", ctx.tenant, ids)
            plan["generations"] = sorted({*plan["generations"], *(r["generation_id"] for r in rows)})
            uris = {u for r in rows for u in (r["frozen_uri"], r["artifact_uri"]) if u}
            plan["uris"] = sorted({*plan["uris"], *uris})

    @staticmethod
    def _reached(plan: dict[str, Any]) -> list[str]:
        """The tables the plan changes: the statistics step analyzes only those."""
        return sorted({*(_DOC_TABLES if plan["document_seqs"] else ()),
                       *(("memory_receipts",) if plan["receipts"] or plan["receipts_redacted"] else ()),
                       *(("context_generations",) if plan["generations"] else ())})

    async def _documents_of(self, ctx: ForgetContext, subject: str, patterns: list[bytes],
                            known: set[tuple[str, int]]) -> tuple[list[int], set[tuple[str, int]]]:
        """The ``_documents`` messages of every document version declared about ``subject``,
        holding a needle in any of its parts, or ``known`` (found so by an earlier forget): all
        its parts, a version goes whole; and those versions."""
        docs = ledger_subject(ctx.settings.prefix, ctx.tenant, ev.DOCUMENTS_TASK)
        parts: dict[tuple[str, int], list[int]] = {}
        hit: set[tuple[str, int]] = set()
        async for m in scan_subject(ctx.nc.jetstream(), ctx.settings.stream, docs):
            try:
                event = decode_event(m.data or b"")
            except Exception:  # noqa: BLE001, S112 - not a document version; the documents index passed it over
                continue
            p = ev.payload_of(event)
            if not isinstance(p, ev.DocumentIngested):
                continue
            version = (p.doc_id, p.version)
            parts.setdefault(version, []).append(m.metadata.sequence.stream)
            if subject in p.data_subjects or version in known or holds(m.data or b"", patterns):
                hit.add(version)
        return sorted(s for v in hit for s in parts[v]), hit

    async def _generations(self, ctx: ForgetContext, patterns: list[bytes]) -> tuple[list[str], list[str]]:
        # Those the ``generations`` step reaches anyway (the subject's, or of unknown subjects) are
        # not read here: only the generations of other subjects' conversations can be copies.
        rows = await ctx.pool.fetch("SELECT generation_id, frozen_uri, artifact_uri FROM context_generations"
                                    " WHERE tenant = $1 AND subjects IS NOT NULL AND NOT ($2 = ANY(subjects))"
                                    " ORDER BY generation_id", ctx.tenant, ctx.selector.subject)
        gate = asyncio.Semaphore(READ_IN_FLIGHT)

        async def holding(row: Any) -> bool:
            async with gate:
                for uri in (row["frozen_uri"], row["artifact_uri"]):
                    if not uri:
                        continue
                    try:
                        data = await ctx.artifacts.get(uri, tenant=ctx.tenant)
                    except Exception:  # noqa: BLE001, S112 - an artifact gone holds nothing
                        continue
                    if holds(data, patterns):
                        return True
            return False

        found = [r for r, hit in zip(rows, await asyncio.gather(*(holding(r) for r in rows)), strict=True) if hit]
        uris = sorted({u for r in found for u in (r["frozen_uri"], r["artifact_uri"]) if u})
        return [r["generation_id"] for r in found], uris

    async def apply(self, ctx: ForgetContext, plan: Any) -> dict[str, int]:
        if plan["document_seqs"]:
            # Erased, and the index made what the ledger still holds (the ``documents`` step's rebuild).
            await DocumentsHandler.rebuild(ctx, plan["document_seqs"])
        keys = keys_of(ctx.settings)
        doomed = list(plan["receipts"])
        async with ctx.pool.acquire() as conn, conn.transaction():
            for receipt_id in plan["receipts_redacted"]:
                found = await conn.fetchrow("SELECT receipt, mac FROM memory_receipts WHERE tenant = $1"
                                            " AND receipt_id = $2", ctx.tenant, receipt_id)
                if found is None:
                    continue
                raw = bytes(found[0])
                if not integrity.matches(found[1], keys.mac_key_of, integrity.RECEIPT,
                                         (receipt_id, ctx.tenant, raw)):
                    doomed.append(receipt_id)  # edited outside the services: never re-tagged, it goes
                    continue
                data = msgspec.json.encode(redact_query(_receipt.decode(raw)))
                await conn.execute("UPDATE memory_receipts SET receipt = $3, mac = $4 WHERE tenant = $1"
                                   " AND receipt_id = $2", ctx.tenant, receipt_id, data,
                                   receipt_tag(keys.current, keys.mac_key, receipt_id, ctx.tenant, data))
            await conn.execute("DELETE FROM memory_receipts WHERE tenant = $1 AND receipt_id = ANY($2::text[])",
                               ctx.tenant, doomed)
        gate = asyncio.Semaphore(READ_IN_FLIGHT)

        async def erase(uri: str) -> None:
            async with gate:
                await ctx.erase_artifact(uri)

        await asyncio.gather(*(erase(u) for u in plan["uris"]))
        await ctx.pool.execute("DELETE FROM context_generations WHERE tenant = $1 AND generation_id = ANY($2::text[])",
                               ctx.tenant, plan["generations"])
        return {"needles": int(plan["needles"]), "document_versions": int(plan["document_versions"]),
                "receipts_redacted": len(plan["receipts_redacted"]), "receipts": len(plan["receipts"]),
                "generations": len(plan["generations"])}


def redact_query(receipt: ReadReceipt) -> ReadReceipt:
    """``receipt`` without its request's query and key (the words a needle was found in)."""
    request = {k: v for k, v in receipt.request.items() if k not in ("query", "key")}
    return msgspec.structs.replace(receipt, request=request)
