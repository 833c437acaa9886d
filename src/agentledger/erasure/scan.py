"""Proof that forgotten content is gone: ``agentledger verify-forgotten RECEIPT`` (issue 10 §4).

``verify(settings, receipt, needles, raw=)``: the *needles* are the forgotten content the operator
supplies (bytes), to which it adds the receipt's ids (``receipt_ids``: a task, a data subject or a
tenant). Content must be found nowhere; an id may remain where it is by design — the forget
request's own events and rows (``bookkeeping``), the clear ``subject`` of values sealed under a
destroyed key (``sealed_contexts``) — and those findings are listed as *expected*, apart, not
counted. ``verify_forgotten`` and the three steps take plain needles.

The proof is three steps, each a module of this package:

* ``logical_scan``: everything the stores answer with (every JetStream message, every PostgreSQL
  row and column statistic, every log file), clean at once after a forget;
* ``compaction.compact_postgres``: makes PostgreSQL rewrite what a DELETE left in its pages,
  indexes, statistics and WAL (the measured procedure, and what it cannot reach, are in that
  module's docstring);
* ``raw_scan``: every byte the servers keep on disk (what JetStream's erase and purge leave
  there, measured, is in that module's docstring).

``needles`` says in which forms a needle is searched; ``reports`` what every report says and how
it is printed (``render``). The entry points callers use are importable from here (``__all__``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.erasure.compaction import compact_postgres
from agentledger.erasure.logical_scan import logical_scan
from agentledger.erasure.needles import Expected, needle_forms, vector_needle
from agentledger.erasure.raw_scan import raw_scan
from agentledger.erasure.reports import LogicalReport, RawReport, VerifyReport, now, render
from agentledger.runtime.embedded import nats_homes
from agentledger.runtime.postgres import EmbeddedPostgres, database_url
from agentledger.stores.ledger import ledger_subject

# The entry points of the scan, here and in the modules it uses (where callers import them).
__all__ = [
    "LogicalReport", "RawReport", "VerifyReport", "bookkeeping", "compact_postgres", "default_raw_roots",
    "embedded_superuser_dsn", "logical_scan", "needle_forms", "raw_scan", "receipt_ids", "render",
    "sealed_contexts", "vector_needle", "verify", "verify_forgotten",
]

# Shorter receipt ids are not searched (``receipt_ids``).
MIN_ID_BYTES = 4


# --- where the embedded servers keep things ---------------------------------------------------

def default_raw_roots(settings: Settings) -> list[Path]:
    """What the raw scan reads for the embedded servers of ``settings.data_dir``: the JetStream
    store of every NATS node (the single server, or each node of ``up --cluster``, whose raft
    logs hold recent payloads for minutes), PostgreSQL's data folder, and the servers' logs."""
    data_dir = Path(settings.data_dir)
    pg_home = EmbeddedPostgres(data_dir, server_root=settings.server_root)
    roots = [p for n in nats_homes(data_dir, settings.server_root) for p in (n.dir / "jetstream", n.log_file)]
    roots += [pg_home.pgdata, pg_home.log_file]
    return [p for p in roots if p.exists()]


def embedded_superuser_dsn(settings: Settings) -> str | None:
    """The embedded PostgreSQL's superuser URL for the services' database (what
    ``compact_postgres`` needs); None when there is no embedded server for this data folder."""
    server = EmbeddedPostgres(Path(settings.data_dir), server_root=settings.server_root)
    if server.port is None or not server.superuser_passfile.exists():
        return None
    database = urlsplit(settings.database_url).path.lstrip("/") if settings.database_url else ""
    return database_url(server.url, database or "agentledger")


# --- all of it --------------------------------------------------------------------------------

async def verify_forgotten(settings: Settings, needles: Sequence[bytes], *,
                           raw_roots: Sequence[Path] | None = None, compact_dsn: str | None = None,
                           log_files: Sequence[Path] | None = None, nc: Client | None = None,
                           analyze: bool = False) -> VerifyReport:
    """The logical scan; then, with ``compact_dsn``, ``compact_postgres``; then, with
    ``raw_roots`` (``default_raw_roots(settings)`` for the embedded servers), the raw scan."""
    logical = await logical_scan(settings, needles, log_files=log_files, nc=nc, analyze=analyze)
    compaction = await compact_postgres(compact_dsn) if compact_dsn else None
    raw = await asyncio.to_thread(raw_scan, list(raw_roots), needles) if raw_roots is not None else None
    return VerifyReport(logical=logical, compaction=compaction, raw=raw)


def receipt_ids(receipt: ev.DeletionReceipt) -> list[tuple[str, bytes]]:
    """The ids of a receipt worth searching for, as (receipt field, bytes).

    A task, a data subject or a tenant must be gone from everything but the forget request's
    own records. A record id or a canonical key is not searched: the memory tombstone keeps
    both by design (``memory_forgotten``, the tombstone row); the operator's content needles
    are what shows those records are gone. The request id lives only in the request's records.
    An id shorter than MIN_ID_BYTES is not searched either: it would match inside other words.
    """
    selector = receipt.selector
    ids: list[tuple[str, str | None]] = []
    if selector.kind == "task":
        ids.append(("selector.task_id", selector.task_id))
    elif selector.kind == "subject":
        ids.append(("selector.subject", selector.subject))
    elif selector.kind == "tenant":
        ids.append(("tenant", receipt.tenant))
    return [(name, value.encode()) for name, value in ids if value and len(value.encode()) >= MIN_ID_BYTES]


def sealed_contexts(subject: str) -> tuple[str, list[bytes]]:
    """Where a data subject's token is by design once its key is destroyed: the clear ``subject`` of
    every value sealed under that key (ledger JSON and bytea as msgspec writes it, jsonb as
    PostgreSQL prints it) and an event's ``data_subject``. The key itself must be gone: its KV
    entry (``$KV.<keys>.<tenant>.<subject>``) is not a context, so a kept key is a finding."""
    token = json.dumps(subject)
    return ("sealed under the subject's destroyed key", [
        f'"subject":{token},"key_id":'.encode(), f'"subject": {token}, "ciphertext":'.encode(),
        f'"data_subject":{token}'.encode(), f'"data_subject": {token}'.encode()])


def bookkeeping(settings: Settings, tenant: str, first_id: int) -> Expected:
    """Findings of an id (needle index >= ``first_id``) in the forget requests' own records: the
    tenant's ``_forget`` ledger subject (requests and receipts, kept even when the tenant goes)
    and the fan-out's ``forget_*`` tables."""
    forget_subject = f"(subject {ledger_subject(settings.prefix, tenant, ev.FORGET_TASK)})"

    def check(store: str, location: str, needle: int) -> str | None:
        if needle < first_id:
            return None
        if store == "jetstream" and forget_subject in location:
            return "the forget request's own events"
        words = location.split(" ")
        if store == "postgres":  # "<schema>.<table> row ctid ..."
            table = words[0]
        elif store == "statistics" and len(words) > 1:  # "<view> <schema>.<table>.<column>"
            table = words[1]
        else:
            return None
        parts = table.split(".")
        if len(parts) > 1 and parts[1].startswith("forget_"):
            return "the forget request's own rows"
        return None

    return check


async def verify(settings: Settings, receipt: ev.DeletionReceipt, needles: Sequence[bytes], *,
                 raw: bool = False, log_files: Sequence[Path] | None = None,
                 nc: Client | None = None) -> VerifyReport:
    """``agentledger verify-forgotten RECEIPT``: search for the operator's ``needles`` (the
    forgotten content) and the receipt's ids (``receipt_ids``) everywhere.

    Content must be found nowhere. An id may be in the forget request's own records
    (``bookkeeping``) and, for a data subject, in the clear part of values sealed under its
    destroyed key (``sealed_contexts``): those findings are listed as expected. With ``raw``,
    PostgreSQL is compacted (the embedded server's superuser, ``embedded_superuser_dsn``) and
    the embedded servers' folders are searched for the content (not the ids: the request's
    own records hold them on disk too).
    """
    content = [bytes(n) for n in needles if n]
    ids = receipt_ids(receipt)
    all_needles = content + [value for _, value in ids]
    report = VerifyReport(logical=LogicalReport(started_at=now(), needles=0, forms=0),
                          request_id=receipt.request_id,
                          needles=["content"] * len(content) + [name for name, _ in ids])
    if not all_needles:
        report.errors.append("nothing to search for: give the forgotten content (--needle); a record or "
                             "key selector's ids stay in the memory tombstone by design")
        return report
    contexts = {len(content) + i: sealed_contexts(value.decode())
                for i, (name, value) in enumerate(ids) if name == "selector.subject"}
    report.logical = await logical_scan(settings, all_needles, log_files=log_files, nc=nc, contexts=contexts,
                                        expected=bookkeeping(settings, receipt.tenant, len(content)))
    if raw:
        dsn = embedded_superuser_dsn(settings)
        roots = default_raw_roots(settings)
        if dsn is None:
            report.errors.append("no embedded PostgreSQL for this data folder: compact it with "
                                 "compact_postgres(<superuser URL>) and scan its data folder yourself")
        else:
            report.compaction = await compact_postgres(dsn)
        if not content:
            report.errors.append("the raw scan needs the forgotten content (--needle)")
        elif not roots:
            report.errors.append(f"no embedded server folders under {settings.data_dir}")
        else:
            report.raw = await asyncio.to_thread(raw_scan, roots, content)
    return report

