"""``AgentledgerSession``: the Agents SDK ``Session`` protocol on the agentledger ledger.

A session is a task of the connection's tenant (``task_id`` = ``session_id``); each item is a
turn of the task's transcript, appended through the ledger-writer (sealed under the
conversation's data subject, as every turn is), read back from the Working Memory
projection. Nothing is ever deleted to answer a call:

- ``add_items``: the items as turns in one atomic append, guarded by the task's last ledger
  sequence (``expected_last_seq``). Another writer in between (a second runner, another
  process) makes the writer refuse it, storing nothing; it is read again and appended after
  what came: whole batches, in order, none lost.
- ``pop_item``: one atomic append of ``history_cleared`` through the last turn plus the other
  turns of the epoch again, so the conversation moves to a new epoch without the popped item.
  The popped turn stays in the ledger; the context-builder, which honours epochs, never
  renders it again. (A pop is rare: it costs the epoch's turns again, in one message.)
- ``clear_session``: ``history_cleared`` (a new epoch). ``forget=True`` then asks the
  tombstone-fanout to forget the task (every copy: ledger, projections, generations) and waits
  for its deletion receipt (``last_forget_receipt``); the session then starts again from an
  empty ledger.
- ``get_items(limit)``: the newest ``limit`` items of the current epoch, oldest first. With a
  ``budget`` (here or on the session) the context-builder builds and freezes a budgeted,
  compacted history instead (``agentledger.adapters.openai_agents.budget``).

Every method takes the Runner's ``wrapper`` keyword; credentials on the run context choose the
agent the call acts as (``identity``).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from agentledger.adapters.openai_agents import items as items_mod
from agentledger.adapters.openai_agents.budget import BudgetedHistory, budgeted_history
from agentledger.adapters.openai_agents.identity import Connections, agent_name
from agentledger.client import Client
from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.contracts.events import DeletionReceipt
from agentledger.core.validate import goal_hash
from agentledger.errors import (
    AgentLedgerError,
    ConflictError,
    ContractError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
)

if TYPE_CHECKING:
    from agents.memory.session_settings import SessionSettings

# A write refused because another writer appended first is read again and retried; each
# refusal means someone else's write was stored, so this bounds only a pathological race.
WRITE_ATTEMPTS = 50
# A task in the ledger but not in its projection yet is asked for again, backing off to 0.25 s
# (about 5 s in all).
NOT_PROJECTED_ATTEMPTS = 25
PRODUCER = "openai-agents-session"
GOAL_CRITERIA = ["the conversation is kept, in order, as the ledger's turns"]
# A session id, tenant and subject become a task id and tokens of NATS subjects (events.Token).
_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True)
class _Head:
    """What a write needs to know of the task: its last sequence and its conversation."""

    seq: int
    exists: bool
    turns: int
    lineage_base: int
    transcript: list[dict[str, Any]]


def _check_token(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise ContractError(f"{path[2:]} is a string, not {type(value).__name__}", code="invalid_type",
                            path=path)
    if not _TOKEN.fullmatch(value):
        raise ContractError(f"{path[2:]} {value!r} must be 1-64 of [A-Za-z0-9_-]", code="invalid_token",
                            path=path)
    return value


class AgentledgerSession:
    """An Agents SDK session kept as a task's transcript in the agentledger ledger.

    ``client``: a connected ``agentledger.client.Client`` (the agent the session acts as
    unless a run's context carries other ``AgentCredentials``); ``tenant``: its tenant, which
    every service checks against the connection; ``subject``: the data subject (user) whose
    conversation this is, whose key seals the turns (an agent reads them only if bound to
    that user). ``budget`` (tokens): ``get_items`` returns the context-builder's budgeted
    history instead of every item; ``encoding`` / ``model`` / ``compaction`` go to its build.
    """

    def __init__(self, session_id: str, client: Client, *, tenant: str, subject: str,
                 session_settings: SessionSettings | None = None, budget: int | None = None,
                 encoding: str = "cl100k_base", model: str | None = None,
                 compaction: dict[str, Any] | None = None, settings: Settings | None = None) -> None:
        self.session_id = _check_token(session_id, "$.session_id")
        self.tenant = _check_token(tenant, "$.tenant")
        self.subject = _check_token(subject, "$.subject")
        self.session_settings = session_settings
        self.budget = _check_budget(budget, "$.budget")
        self.encoding = encoding
        self.model = model
        self.compaction = compaction
        self.last_forget_receipt: DeletionReceipt | None = None
        self.last_budgeted: BudgetedHistory | None = None
        self._connections = Connections(client, settings)
        # The highest ledger sequence this object wrote: its reads wait for the projection to
        # reach it (read your own writes).
        self._known_seq = 0

    async def __aenter__(self) -> AgentledgerSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connections made for credentials runs brought (not the session's client)."""
        await self._connections.close()

    # ---- the protocol -------------------------------------------------------------------------

    async def get_items(self, limit: int | None = None, *, budget: int | None = None,
                        wrapper: Any = None) -> list[Any]:
        """The newest ``limit`` items (all without it) of the current epoch, oldest first; with
        ``budget`` (or the session's), the context-builder's budgeted history of it."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise ContractError(f"limit is a non-negative integer or None, not {limit!r}",
                                code="invalid_value" if type(limit) is int else "invalid_type",
                                path="$.limit")
        budget = _check_budget(budget, "$.budget") if budget is not None else self.budget
        client = await self._connections.for_call(wrapper)
        if limit == 0:
            return []
        if budget is not None:
            head = await self._head(client)
            history = await budgeted_history(self, client, head.turns, head.lineage_base, head.transcript,
                                             budget=budget, limit=limit)
            self.last_budgeted = history
            return history.items
        head = await self._head(client, tail=limit)
        return [items_mod.decode_item(t["content"]) for t in head.transcript]

    async def add_items(self, items: list[Any], *, wrapper: Any = None) -> None:
        """Append the items as turns, atomically and in order, after whatever is there."""
        turns = items_mod.encode_items(items)
        if not turns:
            return
        client = await self._connections.for_call(wrapper)

        producer = agent_name(client) or PRODUCER

        def events(head: _Head) -> list[ev.EventBase]:
            created = [] if head.exists else [self._created(producer)]
            return created + [self._turn(producer, head.turns + i, role, content)
                              for i, (role, content) in enumerate(turns, start=1)]

        await self._write(client, events, tail=0)

    async def pop_item(self, *, wrapper: Any = None) -> Any | None:
        """Remove the newest item from the conversation (a new epoch without it) and return it;
        None if the current epoch has no item. The ledger keeps it."""
        client = await self._connections.for_call(wrapper)
        popped: list[dict[str, Any]] = []
        producer = agent_name(client) or PRODUCER

        def events(head: _Head) -> list[ev.EventBase]:
            popped[:] = head.transcript[-1:]
            if not popped:
                return []
            rest = head.transcript[:-1]
            return [self._cleared(producer, head.turns, "openai-agents pop_item"),
                    *(self._turn(producer, head.turns + i, t["role"], t["content"])
                      for i, t in enumerate(rest, start=1))]

        await self._write(client, events, tail=None)
        return items_mod.decode_item(popped[0]["content"]) if popped else None

    async def clear_session(self, *, forget: bool = False, reason: str = "",
                            wrapper: Any = None) -> None:
        """Move the conversation to a new epoch; ``forget=True`` then forgets the task with a
        deletion receipt (kept in ``last_forget_receipt``) and starts again from nothing."""
        if not isinstance(forget, bool):
            raise ContractError(f"forget is a bool, not {type(forget).__name__}", code="invalid_type",
                                path="$.forget")
        if not isinstance(reason, str):
            raise ContractError(f"reason is a string, not {type(reason).__name__}", code="invalid_type",
                                path="$.reason")
        client = await self._connections.for_call(wrapper)
        producer = agent_name(client) or PRODUCER

        def events(head: _Head) -> list[ev.EventBase]:
            if head.turns == head.lineage_base:
                return []  # nothing in this epoch: no new one
            return [self._cleared(producer, head.turns, reason or "openai-agents clear_session")]

        await self._write(client, events, tail=0)
        if forget:
            reply = await client.forget(self.tenant, {"kind": "task", "task_id": self.session_id},
                                        reason=reason or "openai-agents clear_session(forget=True)")
            progress = reply if reply.receipt is not None else await client.forget_wait(
                self.tenant, reply.request_id)
            self.last_forget_receipt = progress.receipt
            self._known_seq = 0  # the task's ledger is gone: it starts again at its first append

    # ---- the ledger -----------------------------------------------------------------------------

    async def _head(self, client: Client, *, min_seq: int | None = None, tail: int | None = None) -> _Head:
        """The task as projected at ``min_seq`` (default: what this object last wrote) or later;
        ``tail``: only the newest that many turns of the transcript (None: every turn)."""
        want = max(self._known_seq, min_seq or 0)
        delay = 0.01
        for attempt in range(NOT_PROJECTED_ATTEMPTS):
            try:
                reply = await client.working_memory(self.tenant, self.session_id, reveal_personal=True,
                                                    min_seq=want or None, transcript_tail=tail)
                break
            except NotFoundError:
                # Nothing of it in the ledger (a new session, or one forgotten): it starts empty.
                return _Head(seq=0, exists=False, turns=0, lineage_base=0, transcript=[])
            except UnavailableError as exc:
                # In the ledger, not projected yet (another process just wrote it): soon.
                if exc.path != "$.task_id" or attempt == NOT_PROJECTED_ATTEMPTS - 1:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.25)
        state = reply.state
        conversation = state.get("conversation") or {}
        base = int(conversation.get("lineage_base", 0))
        transcript = []
        for turn in state.get("transcript") or []:
            if turn["ordinal"] <= base or turn.get("erased"):
                continue  # cleared (an older epoch), or forgotten with its data subject
            if turn.get("withheld") or "content" not in turn:
                raise PermissionDeniedError(
                    f"turn {turn['ordinal']} of session {self.session_id!r} holds personal content of "
                    "a user this agent is not bound to", code="subject_not_bound", path="$.session_id")
            transcript.append(turn)
        return _Head(seq=reply.seq, exists=state.get("status", "new") != "new",
                     turns=int(state.get("turns_total", 0)), lineage_base=base, transcript=transcript)

    async def _write(self, client: Client, build: Callable[[_Head], list[ev.EventBase]], *,
                     tail: int | None) -> None:
        """Append what ``build`` makes of the task as it is, guarded by its last sequence; on a
        refusal (someone appended first) read it again and build again."""
        head = await self._head(client, tail=tail)
        for _ in range(WRITE_ATTEMPTS):
            batch = build(head)
            if not batch:
                return
            try:
                results = await client.append_batch(batch, expected_last_seq=head.seq)
            except ConflictError as exc:
                if exc.code != "conflict" or exc.current_seq is None:
                    raise
                head = await self._head(client, min_seq=exc.current_seq, tail=tail)
                continue
            self._known_seq = max(self._known_seq, results[-1].seq)
            return
        raise AgentLedgerError(f"session {self.session_id!r}: {WRITE_ATTEMPTS} writes in a row were "
                               "overtaken by other writers", code="contended", retryable=True)

    def _envelope(self, producer: str) -> dict[str, Any]:
        return {"event_id": "ags-" + uuid.uuid4().hex, "tenant": self.tenant, "task_id": self.session_id,
                "producer": producer, "occurred_at": datetime.now(UTC), "schema_version": 1}

    def _created(self, producer: str) -> ev.EventBase:
        text = f"Conversation of Agents SDK session {self.session_id}"
        goal = ev.Goal(text=text, acceptance_criteria=GOAL_CRITERIA,
                       goal_hash=goal_hash(text, GOAL_CRITERIA))
        return ev.TaskCreatedEvent(**self._envelope(producer), payload=ev.TaskCreated(goal=goal, title=text))

    def _turn(self, producer: str, ordinal: int, role: str, content: str) -> ev.EventBase:
        return ev.TurnAppendedEvent(**self._envelope(producer), data_subject=self.subject,
                                    payload=ev.TurnAppended(role=role, ordinal=ordinal,  # type: ignore[arg-type]
                                                            content=content))

    def _cleared(self, producer: str, through: int, reason: str) -> ev.EventBase:
        return ev.HistoryClearedEvent(**self._envelope(producer),
                                      payload=ev.HistoryCleared(through_ordinal=through, reason=reason[:16384]))


def _check_budget(budget: object, path: str) -> int | None:
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, int):
        raise ContractError(f"budget is a number of tokens, not {type(budget).__name__}",
                            code="invalid_type", path=path)
    if budget < 16:
        raise ContractError(f"budget is at least 16 tokens, not {budget}", code="invalid_value", path=path)
    return budget
