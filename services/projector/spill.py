"""Folding the ledger stream into Working Memory in bounded memory: a rebuild's fold.

``read_stream`` reads the stream with an ordered push consumer
(``projection.stream.read_ordered``) and a callback that does the least Python
work it can per message: decode the event with msgspec, fold it into the
task's state in an in-memory ``Fold``. A rebuild folds into a ``SpillingFold``,
which writes what it holds to its schema with COPY (core rows, variable rows,
turn rows, the applied-event index and the rejections) whenever it passes the
rebuild memory budget, and at the end: its memory is bounded by the budget,
not by the stream, and is gone when the rebuild ends.
"""

from __future__ import annotations

from typing import Any

import asyncpg
from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.contracts.events import AnyEvent
from agentledger.core.ledger_chain import KeyOf
from agentledger.core.state import encode_variable
from agentledger.projection.stream import Progress, read_ordered
from agentledger.security.integrity_keys import IntegrityKeys
from agentledger.security.task_seal import task_keys_of
from agentledger.services.projector.cache import StateCache
from agentledger.services.projector.fold import Fold, Key, SubjectKeys, decode_message, fold_event, fold_message
from agentledger.services.projector.store import (
    Store,
    TaskRow,
    TurnRow,
    VariableRow,
    tag_rejections,
    task_row,
    turn_row,
)

# Bytes a folded event is counted for beyond its body: its entry in the fold's index of
# consumed ids and the dict slots around it (measured: ~100 bytes an event on a bench stream,
# whose bodies the fold keeps far less of than their size, so body + this is an upper bound).
EVENT_OVERHEAD = 100
# Messages of spilled tasks held before their states are read back and folded: one
# PostgreSQL round trip pays for this many (or for an eighth of the budget, if less).
DEFER_EVENTS = 2000


class SpillingFold(Fold):
    """A ``Fold`` into a projection schema that holds at most about ``budget`` bytes.

    Each message is counted (its body plus ``EVENT_OVERHEAD``; a state read
    back by the bytes of its rows, as the projector's ``StateCache`` counts
    them). Past the budget, ``spill`` writes everything folded so far to the
    schema (COPY, or upsert for tasks whose rows are there already) and
    forgets it. A task seen again after that is read back from its rows, as
    the live projector reads back an evicted state, and its later event ids are
    checked against the schema's ``applied_events`` index, so duplicates follow
    the reducer's one rule across spills. Its messages are deferred meanwhile
    and folded a batch at a time (``settle``), one round trip per batch; tasks
    that have not been spilled are folded as each message arrives, as ``Fold``
    does, so a stream that fits in the budget costs what it did.

    The budget is exceeded by at most one message, and by what one deferred
    batch's states weigh beyond the largest state read back before; ``peak_bytes``
    is the most the fold held (it holds the most just before it writes).
    """

    def __init__(self, conn: asyncpg.Connection, schema: str, budget: int, keys: IntegrityKeys,
                 key_of: KeyOf | None = None) -> None:
        super().__init__(key_of)
        self.conn = conn
        self.keys = keys  # the rows it writes are tagged, as the live projector's are
        self.store = Store(schema)
        self.budget = max(budget, 1)
        self.states: StateCache = StateCache()
        # Held tasks whose rows are in the schema (read back): their rows are upserted.
        self.stored: set[Key] = set()
        # Set by the first spill: from then on a task that is not held may have rows.
        self.spilled = False
        self.deferred: list[tuple[int, Key, bytes, dict[str, str] | None]] = []
        self.deferred_bytes = 0
        # Bytes counted for the messages folded or deferred since the last spill.
        self.used = 0
        self.peak_bytes = 0
        # Bytes of the largest state read back so far: what reading back one more may cost.
        self.largest_state = 0
        self.spills = 0
        self.reloads = 0
        self.tasks = 0
        self.rejected = 0

    async def add(self, key: Key | None, data: bytes, seq: int, headers: dict[str, str] | None,
                  subject: str) -> None:
        """Fold one ledger message (or defer it, if its task may have rows); spill past the budget."""
        size = len(data) + EVENT_OVERHEAD
        self.used += size
        # The chain is checked in stream order, deferred or not (a failure is a rejection row).
        linked = self.chained(key, data, seq, headers)
        if linked and self.spilled and key is not None and (key not in self.states or key in self.stored):
            self.deferred.append((seq, key, data, headers))
            self.deferred_bytes += size
            if len(self.deferred) >= DEFER_EVENTS or self.deferred_bytes * 8 >= self.budget:
                await self.settle()
        elif linked and fold_message(self, key, data, seq, headers, subject=subject, chained=True) and key:
            self.seqs[key] = seq
        if self.used + self.states.total_bytes > self.budget:
            await self.spill()

    async def settle(self) -> None:
        """Fold the deferred messages: read back the states of their tasks that have rows,
        ask the index which of their ids those tasks consumed before, apply in order."""
        if not self.deferred:
            return
        deferred, self.deferred = self.deferred, []
        batch_bytes, self.deferred_bytes = self.deferred_bytes, 0
        events: list[tuple[int, Key, AnyEvent]] = []
        if self.task_keys is not None:
            await self.task_keys.load((key[0], key[1], headers) for _, key, _, headers in deferred)
        for seq, key, data, headers in deferred:
            event = decode_message(key, data, seq, headers, rejections=self.rejections, keys=self.task_keys)
            if event is not None:
                events.append((seq, key, event))
        conn, states = self.conn, self.states
        missing = list({key for _, key, _ in events if key not in states})
        # Reading the states back must not take the fold past its budget: if they would not
        # fit (each sized as the largest read back so far), write what it holds first.
        if missing and (self.used + states.total_bytes + len(missing) * self.largest_state
                        > self.budget):
            await self._write()
            self.used = batch_bytes  # the batch is still held, and about to be folded
            missing = list({key for _, key, _ in events})
        async with conn.transaction():  # the core rows and the variable rows in one snapshot
            for loaded in await self.store.load_states(conn, missing):
                states.load(loaded)
                self.stored.add(loaded.key)
                self.seqs[loaded.key] = loaded.seq
                self.reloads += 1
                self.largest_state = max(self.largest_state,
                                         loaded.core_bytes + sum(loaded.variable_bytes.values()))
        unknown = list({(key[0], key[1], event.event_id) for _, key, event in events
                        if key in self.stored and event.event_id not in self.applied.get(key, ())})
        earlier = await self.store.first_seqs(conn, unknown)
        for seq, key, event in events:
            applied, changes = self.task(key)
            first = applied.get(event.event_id)
            if first is None:
                first = earlier.get((key[0], key[1], event.event_id))
                if first is None:
                    applied[event.event_id] = seq
            fold_event(states, key, event, seq, first_seq=first, changes=changes,
                       rejections=self.rejections)
            self.seqs[key] = seq

    async def spill(self) -> None:
        """Fold what is deferred, write everything held to the schema and forget it."""
        await self.settle()
        await self._write()

    async def _write(self) -> None:
        """Write the states held, their new rows and the rejections, in one transaction, and
        forget them (deferred messages stay deferred)."""
        self.peak_bytes = max(self.peak_bytes, self.used + self.states.total_bytes)
        fresh: list[TaskRow] = []
        stored: list[TaskRow] = []
        variables: list[VariableRow] = []
        turns: list[TurnRow] = []
        keys = self.keys
        for key, state in self.states.items():
            row = task_row(keys, key[0], key[1], self.seqs[key], state)
            if key in self.stored:
                stored.append(row)
                changes = self.changes[key]
                variables.extend((key[0], key[1], name, state.variables[name].seq,
                                  encode_variable(state.variables[name]))
                                 for name in changes.variables)
                turns.extend(turn_row(keys, key[0], key[1], t) for t in changes.turns)
            else:
                fresh.append(row)
        fresh_keys = {(r[0], r[1]) for r in fresh}
        store, conn = self.store, self.conn
        async with conn.transaction():
            await store.copy_tasks(conn, fresh)
            await store.copy_variables(conn, (
                (key[0], key[1], name, variable.seq, encode_variable(variable))
                for key in fresh_keys for name, variable in self.states[key].variables.items()))
            await store.copy_turns(conn, (
                turn_row(keys, key[0], key[1], t) for key in fresh_keys for t in self.changes[key].turns))
            await store.upsert_tasks(conn, stored)
            await store.write_parts(conn, variables, turns)
            await store.copy_applied(conn, (
                (key[0], key[1], event_id, seq)
                for key, applied in self.applied.items() for event_id, seq in applied.items()))
            await store.copy_rejections(conn, tag_rejections(keys, self.rejections))
        self.tasks += len(fresh)
        self.rejected += len(self.rejections)
        self.spills += 1
        self.spilled = True
        # Cleared in place: ``read_stream`` holds on to ``seqs``.
        self.states.clear()
        self.stored.clear()
        self.seqs.clear()
        self.applied.clear()
        self.changes.clear()
        self.rejections.clear()
        self.used = 0


async def read_stream(nc: Client, settings: Settings, upto: int | None = None, *,
                      fold: Fold | None = None, subject: str | None = None, start_seq: int = 1,
                      progress: Progress | None = None, idle_timeout: float = 30.0) -> Fold:
    """Fold the ledger from ``start_seq`` up to ``upto`` (default: the last sequence now).

    ``subject`` narrows the read to one task's subject. Passing ``fold``
    continues an earlier fold; a ``SpillingFold`` spills as it passes its
    budget (what it still holds or defers at the end is the caller's to
    ``spill``). Raises ``UnavailableError`` if no message arrives for
    ``idle_timeout`` seconds.
    """
    fold = fold if fold is not None else Fold()
    if fold.task_keys is None:
        fold.task_keys = task_keys_of(nc, settings)
    task_keys = fold.task_keys
    seqs = fold.seqs
    spill = fold if isinstance(fold, SpillingFold) else None
    keys = SubjectKeys(settings.prefix)

    def folded(msg: Any, seq: int, key: Key | None) -> Any:
        if spill is not None:
            return spill.add(key, msg.data, seq, msg.headers, msg.subject)
        if fold_message(fold, key, msg.data, seq, msg.headers, subject=msg.subject) and key:
            seqs[key] = seq
        return None

    async def loaded(msg: Any, seq: int, key: Key) -> None:
        await task_keys.load([(key[0], key[1], msg.headers)])
        outcome = folded(msg, seq, key)
        if outcome is not None:
            await outcome

    def handle(msg: Any, seq: int) -> Any:
        key = keys[msg.subject]
        if key is not None and not task_keys.holds(key[0], key[1], msg.headers):
            return loaded(msg, seq, key)
        return folded(msg, seq, key)

    count, last = await read_ordered(nc, settings, handle, subject=subject, start_seq=start_seq, upto=upto,
                                     progress=progress, idle_timeout=idle_timeout)
    fold.events += count
    fold.last_seq = max(fold.last_seq, last)
    return fold
