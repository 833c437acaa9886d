"""``AgentledgerStore``: LangGraph's long-term memory store on the memory-policy service.

    store = AgentledgerStore(settings, tenant="acme")
    graph = builder.compile(checkpointer=saver, store=store)
    store.put(("user", "u1", "prefs"), "language", {"text": "answers in French"})

Why it is built this way:

* A namespace names a memory scope (namespaces.py); whether this connection may use it is the
  policy's decision from the agent's bindings, so a namespace of a user the agent is not
  bound to is refused with the service's typed error, never answered with an empty result.
* ``put`` is a proposal: the policy classifies, redacts, deduplicates and decides. The decision
  comes back from ``put``; one that stores nothing usable (deny, reject, quarantine) raises
  ``ProposalRefusedError`` carrying it, so a graph never believes a refused memory was kept.
* ``search`` is the policy's gated read (scope, TTL, trust gates before full text and vector
  ranking); every item it returns carries the read receipt's id.
* ``delete`` (and ``put(value=None)``) is a forget through the tombstone-fanout, waited for
  until its receipt is sealed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import msgspec
from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from agentledger.adapters.langgraph import namespaces as nsmod
from agentledger.adapters.langgraph.loop import LoopThread
from agentledger.client import Client, connect
from agentledger.config import Settings
from agentledger.contracts.memory_api import DecisionItem, MemoryItem
from agentledger.errors import ContractError, PermissionDeniedError

# Decisions after which the value is not recalled as the caller's memory.
REFUSED = frozenset({"deny", "reject", "quarantine"})
# A read returns at most this many items (the service's ``k`` bound).
MAX_READ = 100
MAX_VALUE_BYTES = 64 * 1024
_encoder = msgspec.json.Encoder()


class ProposalRefusedError(PermissionDeniedError):
    """The memory policy did not keep the value as asked (denied, rejected or quarantined).

    ``decision`` is the policy's decision, with its reason and the rules that fired.
    """

    code = "memory_refused"

    def __init__(self, decision: DecisionItem, path: str = "$.value") -> None:
        super().__init__(f"the memory policy decided {decision.action!r}: {decision.reason}", path=path)
        self.decision = decision


class LedgerSearchItem(SearchItem):
    """A search hit with the id of the read receipt that explains it."""

    __slots__ = ("receipt_id", "record_id")

    def __init__(self, *, receipt_id: str, record_id: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.receipt_id = receipt_id
        self.record_id = record_id


def _check_value(value: Any, path: str = "$.value") -> None:
    if not isinstance(value, dict):
        raise ContractError(f"a store value is a dict, got {type(value).__name__}", code="invalid_type", path=path)

    def walk(v: Any, p: str) -> None:
        if isinstance(v, str) and "\x00" in v:
            raise ContractError("text must not contain NUL", code="invalid_value", path=p)
        if isinstance(v, dict):
            for k, inner in v.items():
                if not isinstance(k, str) or "\x00" in k:
                    raise ContractError("keys are strings without NUL", code="invalid_value", path=p)
                walk(inner, f"{p}.{k}")
        elif isinstance(v, list | tuple):
            for i, inner in enumerate(v):
                walk(inner, f"{p}[{i}]")

    walk(value, path)
    try:
        size = len(_encoder.encode(value))
    except (TypeError, msgspec.EncodeError) as exc:
        raise ContractError(f"the value is not JSON: {exc}", code="invalid_type", path=path) from exc
    if size > MAX_VALUE_BYTES:
        raise ContractError(f"the value is {size} bytes of JSON; a memory holds at most {MAX_VALUE_BYTES} "
                            "(keep large content in an artifact and store its reference)",
                            code="value_too_large", path=path)


def _key(key: Any, path: str = "$.key") -> str:
    if not isinstance(key, str) or not key or "\x00" in key or len(key) > 1024:
        raise ContractError("a key is a 1-1024 character string without NUL", code="invalid_value", path=path)
    return key


class AgentledgerStore(BaseStore):
    """A LangGraph ``BaseStore`` over the memory-policy service (see the module docstring).

    ``kind`` and ``source``: what the proposals say they are (a memory kind and a source
    kind of the policy); the policy weighs authority by source.
    """

    supports_ttl = False

    def __init__(self, settings: Settings, *, tenant: str, kind: str = "fact",
                 source: str = "runtime_evidence", timeout: float = 30.0) -> None:
        self.tenant = tenant
        self.kind = kind
        self.source = source
        self.last_decisions: list[DecisionItem] = []
        self._loop = LoopThread("agentledger-store")
        try:
            self.client: Client = self._loop.run(connect(settings, timeout=timeout))
        except BaseException:
            self._loop.close()
            raise
        self._closed = False

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self._loop.run(self.client.close())
            finally:
                self._loop.close()

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                await self._loop.arun(self.client.close())
            finally:
                self._loop.close()

    # ---- BaseStore ---------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self._loop.run(self._batch(list(ops)))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await self._loop.arun(self._batch(list(ops)))

    def put(self, namespace: tuple[str, ...], key: str, value: dict[str, Any],  # type: ignore[override]
            index: Any = None, *, ttl: Any = None) -> DecisionItem | None:
        """As BaseStore.put; returns the policy's decision (None for a delete)."""
        self._no_ttl(ttl)
        return self._loop.run(self._put(PutOp(tuple(namespace), key, value, index)))

    async def aput(self, namespace: tuple[str, ...], key: str, value: dict[str, Any],  # type: ignore[override]
                   index: Any = None, *, ttl: Any = None) -> DecisionItem | None:
        self._no_ttl(ttl)
        return await self._loop.arun(self._put(PutOp(tuple(namespace), key, value, index)))

    @staticmethod
    def _no_ttl(ttl: Any) -> None:
        if ttl is not None and not type(ttl).__name__ == "NotProvided":
            raise ContractError("this store keeps the policy's TTL per memory kind; a per-item ttl is not "
                                "supported yet", code="unsupported", path="$.ttl")

    async def _batch(self, ops: list[Op]) -> list[Result]:
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(await self._get(op))
            elif isinstance(op, SearchOp):
                results.append(await self._search(op))
            elif isinstance(op, PutOp):
                await self._put(op)
                results.append(None)
            elif isinstance(op, ListNamespacesOp):
                results.append(await self._list_namespaces(op))
            else:
                raise ContractError(f"unknown store operation {type(op).__name__}", code="invalid_type", path="$.op")
        return results

    # ---- operations --------------------------------------------------------------------------

    async def _records(self, namespace: tuple[str, ...], key: str) -> list[tuple[MemoryItem, dict[str, Any]]]:
        scope = nsmod.scope_of(namespace)
        reply = await self.client.memory_get(self.tenant, nsmod.memory_key(namespace, key), scope.level, scope.id)
        out = []
        for record in reply.records:
            got = nsmod.item_of(record.value)
            if got is not None and got[0] == namespace and got[1] == key:
                out.append((record, got[2]))
        return out

    async def _get(self, op: GetOp) -> Item | None:
        namespace = nsmod.checked_namespace(op.namespace)
        key = _key(op.key)
        for record, value in await self._records(namespace, key):
            if record.status == "active":
                return Item(value=value, key=key, namespace=namespace, created_at=record.observed_at,
                            updated_at=record.observed_at)
        return None

    async def _put(self, op: PutOp) -> DecisionItem | None:
        namespace = nsmod.checked_namespace(op.namespace)
        key = _key(op.key)
        scope = nsmod.scope_of(namespace)
        if op.value is None:
            await self._delete(namespace, key)
            return None
        _check_value(op.value)
        proposal = {"proposal_id": f"lgs-{uuid.uuid4().hex}", "kind": self.kind,
                    "scope": {"level": scope.level, **({"id": scope.id} if scope.id else {})},
                    "source": {"kind": self.source}, "key": nsmod.memory_key(namespace, key),
                    "value": nsmod.record_value(namespace, key, op.value),
                    "observed_at": datetime.now(UTC).isoformat()}
        [decision] = (await self.client.memory_propose(self.tenant, [proposal])).decisions
        self.last_decisions = [decision]
        if decision.action in REFUSED:
            raise ProposalRefusedError(decision)
        return decision

    async def _delete(self, namespace: tuple[str, ...], key: str) -> None:
        for record, _ in await self._records(namespace, key):
            if record.status == "forgotten":
                continue
            reply = await self.client.forget(self.tenant, {"kind": "record", "record_id": record.record_id},
                                             reason="langgraph store delete")
            await self.client.forget_wait(self.tenant, reply.request_id)

    async def _read(self, prefix: tuple[str, ...], query: str | None, k: int) -> tuple[str, list[MemoryItem]]:
        scope = nsmod.scope_of(prefix, "$.namespace_prefix")
        words = nsmod.prefix_token(prefix)
        text = f"{query} {words}" if query else words
        reply = await self.client.memory_read(self.tenant, text, k=max(1, min(MAX_READ, k)),
                                              budget_tokens=200_000, **scope.read_options())
        receipt = reply.receipt.receipt_id if reply.receipt is not None else ""
        return receipt, list(reply.items)

    async def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = nsmod.checked_namespace(op.namespace_prefix, "$.namespace_prefix")
        if op.limit < 0 or op.offset < 0:
            raise ContractError("limit and offset are not negative", code="invalid_value", path="$.limit")
        receipt, items = await self._read(prefix, op.query, op.offset + op.limit)
        hits: list[SearchItem] = []
        for item in items:
            got = nsmod.item_of(item.value)
            if got is None or not nsmod.matches(got[0], prefix):
                continue
            if op.filter and not all(got[2].get(k) == v for k, v in op.filter.items()):
                continue
            hits.append(LedgerSearchItem(receipt_id=receipt, record_id=item.record_id, namespace=got[0],
                                         key=got[1], value=got[2], created_at=item.observed_at,
                                         updated_at=item.observed_at, score=item.score))
        return hits[op.offset:op.offset + op.limit]

    async def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        prefixes = [c for c in (op.match_conditions or ()) if c.match_type == "prefix"]
        if not prefixes:
            raise ContractError("list_namespaces needs a prefix that names the scope, e.g. ('user', id)",
                                code="unscoped_namespace", path="$.prefix")
        prefix = nsmod.checked_namespace(prefixes[0].path, "$.prefix")
        if "*" in prefix:
            raise ContractError("wildcards in the prefix are not supported", code="invalid_value", path="$.prefix")
        _, items = await self._read(prefix, None, MAX_READ)
        found: set[tuple[str, ...]] = set()
        for item in items:
            got = nsmod.item_of(item.value)
            if got is None or not nsmod.matches(got[0], prefix):
                continue
            ns = got[0][:op.max_depth] if op.max_depth is not None else got[0]
            suffixes = [c.path for c in (op.match_conditions or ()) if c.match_type == "suffix"]
            if all(tuple(ns[-len(s):]) == tuple(s) for s in suffixes if s):
                found.add(ns)
        return sorted(found)[op.offset:op.offset + op.limit]
