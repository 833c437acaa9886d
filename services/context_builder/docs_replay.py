"""Replay of the document index: rebuild it from the ledger, or verify it against the ledger.

Both are the base's (``agentledger.projection.subject``) run with
``DocumentFold``, the fold the live projection runs. ``rebuild_documents``
builds the index beside the live tables and switches to them in one short
transaction, so searches keep being answered (from the old tables, then from the
new ones). ``verify_documents`` compares documents, versions and chunks (text,
full-text vector and embedding) with a fold of the ledger, in one snapshot.

``read_tenant`` and ``fold_tenant`` fold one tenant's subject in memory (what the
forget handler refolds after deleting a tenant's rows).
"""

from __future__ import annotations

from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.models.embedding import load_embedder
from agentledger.projection.stream import read_subject
from agentledger.projection.subject import rebuild_subject, verify_subject
from agentledger.services.context_builder.docs_projection import DocFold, DocumentFold, fold_documents
from agentledger.services.memory_policy.fold import Vectors


async def read_tenant(nc: Client, settings: Settings, tenant: str, upto: int,
                      skip: frozenset[int] = frozenset()) -> list[tuple[int, ev.EventBase]]:
    """The document events of one tenant with sequence at most ``upto``, in ledger order (without
    the sequences the live projection passed over, ``skip``)."""
    return await read_subject(nc, settings, tenant, ev.DOCUMENTS_TASK, upto, decode=DocumentFold.decode, skip=skip)


def fold_tenant(events: list[tuple[int, ev.EventBase]]) -> dict[str, DocFold]:
    """The tenant's documents folded from nothing (every one ``changed``: all of it is written)."""
    docs: dict[str, DocFold] = {}
    fold_documents(docs, events)
    return docs


async def rebuild_documents(settings: Settings) -> dict[str, int]:
    """Rebuild the document index from the ledger beside the live one and switch to it."""
    return await rebuild_subject(settings, DocumentFold(Vectors(load_embedder(settings))))


async def verify_documents(settings: Settings, wait_s: float = 60.0) -> list[str]:
    """Fold the ledger's document subjects and compare with the live tables; the differences."""
    return await verify_subject(settings, DocumentFold(Vectors(load_embedder(settings))), wait_s)
