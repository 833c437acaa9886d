"""The ledger's own audit: every chain checked link by link, and the heads against the witness.

``agentledger verify`` (and ``replay --verify``) read the ledger of one task, one tenant or
everything in order and check each message as the readers do (``core.ledger_chain``): the
first failure of each task is reported with its tenant, task, index and sequence, and what
follows it in that task is not trusted (not reported again). Then, with a witness
(``stores.witness``), each witnessed task in scope must reach its witnessed head, and with the
witnessed tag at the witnessed index: a task cut back, a whole store rolled back, or a chain
that went another way after the witnessed point is reported too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.contracts.events import DOCUMENTS_TASK, FORGET_TASK, GAP_TASK, GAP_TENANT, MEMORY_TASK
from agentledger.core import ledger_chain
from agentledger.core.ledger_chain import GENESIS, Head
from agentledger.errors import IntegrityViolationError
from agentledger.projection.stream import read_ordered
from agentledger.security.integrity_keys import keys_of
from agentledger.stores import witness as witness_store
from agentledger.stores.ledger import ledger_subject, ledger_wildcard, subject_key

_SERVICE_TASKS = frozenset({MEMORY_TASK, DOCUMENTS_TASK, FORGET_TASK})


@dataclass
class LedgerAudit:
    """What an audit found: ``problems`` (one line each, naming tenant, task, index), counts."""

    scope: str
    events: int = 0
    tasks: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        head = (f"{'OK' if self.ok else 'INTEGRITY VIOLATION'}: ledger of {self.scope}: {self.events} "
                f"event(s) of {self.tasks} task(s) checked link by link"
                + ("" if self.ok else f"; {len(self.problems)} problem(s)"))
        return "\n".join([head, *(f"  {line}" for line in self.problems)])


def _subject(settings: Settings, tenant: str | None, task_id: str | None) -> str:
    if tenant is None:
        return ledger_wildcard(settings.prefix)
    if task_id is None:
        return f"{settings.prefix}.ledger.{tenant}.*"
    return ledger_subject(settings.prefix, tenant, task_id)


async def audit(nc: Client, settings: Settings, *, tenant: str | None = None,
                task_id: str | None = None) -> LedgerAudit:
    """Check the ledger of ``task_id`` of ``tenant``, of ``tenant``, or (neither) all of it."""
    scope = ("everything" if tenant is None else f"tenant {tenant!r}" if task_id is None
             else f"task {task_id!r} of tenant {tenant!r}")
    report = LedgerAudit(scope=scope)
    key_of = keys_of(settings).mac_key_of
    body = witness_store.read(settings)
    # Per task witnessed: the index to look for and the tag found there.
    witnessed = {name: head for name, head in (body.heads.items() if body is not None else ())}
    seen_at: dict[str, str | None] = {}
    heads: dict[tuple[str, str], Head] = {}
    broken: set[tuple[str, str]] = set()

    def handle(msg: Any, seq: int) -> None:
        report.events += 1
        key = subject_key(settings.prefix, msg.subject)
        if key is None:
            report.problems.append(f"seq {seq}: subject {msg.subject[:200]!r} is not a ledger task subject")
            return
        if key == (GAP_TENANT, GAP_TASK):
            return  # a sequence a cut ledger would have handed out again, taken (``witness.fill_numbering``)
        if key in broken:
            return
        try:
            head = ledger_chain.check(heads.get(key, GENESIS), key_of, tenant=key[0], task=key[1], seq=seq,
                                      body=msg.data, headers=msg.headers, erasable=key[1] in _SERVICE_TASKS)
        except IntegrityViolationError as exc:
            broken.add(key)
            report.problems.append(exc.message)
            return
        heads[key] = head
        name = witness_store.task_name(*key)
        mark = witnessed.get(name)
        if mark is not None and head.index == mark[0]:
            seen_at[name] = head.tag

    await read_ordered(nc, settings, handle, subject=_subject(settings, tenant, task_id))
    report.tasks = len(heads) + len(broken - heads.keys())
    if body is not None:
        in_scope = {name: mark for name, mark in witnessed.items()
                    if (tenant is None or name.partition("/")[0] == tenant)
                    and (task_id is None or name.partition("/")[2] == task_id)}
        lost = set(await witness_store.behind(nc, settings, msgspec.structs.replace(body, heads=in_scope)))
        if tenant is not None:  # the stream's own numbering is everything's business
            lost = {line for line in lost if line.startswith("task ")}
        for name, mark in in_scope.items():
            tenant_of, _, task_of = name.partition("/")
            if task_of in _SERVICE_TASKS or (tenant_of, task_of) in broken:
                continue
            if name in seen_at and seen_at[name] != mark[1]:
                lost.add(f"task {name}: the ledger's event at index {mark[0]} is not the one the "
                         "witness saw committed: the store was rolled back and written on since")
        report.problems.extend(sorted(lost))
    return report
