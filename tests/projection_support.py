"""What the projection tests share: a projector run once, raw ledger messages, snapshots of
tables, and a gate that holds a rebuild inside its fold (``ckpt_support.running`` runs stacks;
the ``projector`` fixture is in ``projection_fixtures``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import asyncpg
import pytest
from nats.js.errors import NotFoundError

from agentledger.config import Settings
from agentledger.core import ledger_chain
from agentledger.core.ledger_chain import CHAIN, GENESIS
from agentledger.security.integrity_keys import keys_of
from agentledger.services.memory_policy.fold import Vectors
from agentledger.services.projector.service import Projector
from agentledger.stores.ledger import MSG_ID, ledger_subject, msg_id
from raw_ledger import Ledger


async def project_once(settings: Settings, ledger: Ledger, p: Projector | None = None,
                       wait_s: float = 30.0) -> None:
    """Start a projector (``p``, or a new one), let it fold everything the ledger holds, stop it."""
    from test_projector import caught_up  # noqa: PLC0415 - test_projector imports this module

    p = p or Projector(settings)
    await p.start()
    try:
        await caught_up(settings, ledger, wait_s)
    finally:
        await p.stop()


async def raw_publish(ledger: Ledger, tenant: str, task: str, body: bytes, event_id: str) -> int:
    """Store ``body`` on a task's ledger subject as it is (the writer's user may); its sequence."""
    ack = await ledger.js.publish(ledger_subject(ledger.settings.prefix, tenant, task), body,
                                  headers={MSG_ID: msg_id(tenant, task, event_id)})
    return int(ack.seq)


async def chained_publish(ledger: Ledger, tenant: str, task: str, body: bytes, event_id: str) -> int:
    """Store ``body`` on a task's ledger subject with a valid chain link after the subject's last
    message (signed with the real key, as a writer whose checks let it through would); its
    sequence. The last message must carry a valid tag (or there is none)."""
    settings = ledger.settings
    subject = ledger_subject(settings.prefix, tenant, task)
    keys = keys_of(settings)
    try:
        last = await ledger.js.get_last_msg(settings.stream, subject)
    except NotFoundError:
        head, expected = GENESIS, 0
    else:
        head = ledger_chain.own_head(keys.mac_key_of, tenant=tenant, task=task, seq=int(last.seq or 0),
                                     body=last.data or b"", headers=last.headers or {}) or GENESIS
        expected = int(last.seq or 0)
    headers = {MSG_ID: msg_id(tenant, task, event_id)}
    headers[CHAIN] = ledger_chain.link(keys.current, keys.mac_key, head, tenant=tenant, task=task, body=body,
                                       headers=headers)[0]
    headers["Nats-Expected-Last-Subject-Sequence"] = str(expected)
    ack = await ledger.js.publish(subject, body, headers=headers)
    return int(ack.seq)


async def table_rows(db: asyncpg.Pool | asyncpg.Connection, tables: Sequence[str],
                     schema: str = "public") -> dict[str, list[tuple[str, ...]]]:
    """Every row of ``tables``, as text, sorted: equal snapshots hold equal rows."""
    out = {}
    for table in tables:
        rows = await db.fetch(f"SELECT * FROM {schema}.{table}")
        out[table] = sorted(tuple(str(v) for v in r.values()) for r in rows)
    return out


class EmbeddingGate:
    """Holds every embedding call (``Vectors.of``) while closed, so a rebuild waits inside its fold
    at a point the test chooses; ``entered`` is set by the first call held."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered = asyncio.Event()
        self._opened = asyncio.Event()
        real = Vectors.of

        async def of(vectors: Vectors, texts: Sequence[str]) -> list[list[float]]:
            if not self._opened.is_set():
                self.entered.set()
                await self._opened.wait()
            return await real(vectors, texts)

        monkeypatch.setattr(Vectors, "of", of)

    async def held(self, timeout: float = 30.0) -> None:  # noqa: ASYNC109 - a budget for the wait
        await asyncio.wait_for(self.entered.wait(), timeout)

    def open(self) -> None:
        self._opened.set()
