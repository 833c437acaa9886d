"""``AgentledgerSaver``: a LangGraph checkpointer whose checkpoints are ledger events.

    saver = AgentledgerSaver(settings, tenant="acme")
    graph = builder.compile(checkpointer=saver)

Why it is built this way:

* A thread is a task; every checkpoint and pending write is a ``variable_set`` event
  appended under the task's lease (layout.py), so the JetStream ledger is the record and
  reads come from the Working Memory projection (read-your-writes through ``min_seq``).
* The writer of a thread holds the task's lease. A second saver writing the same thread is
  refused by the ledger-writer and gets ``ThreadFencedError``: one thread, one history, never
  a fork. ``wait_for_lease_s`` lets a resuming worker wait for a dead one's lease to lapse.
* Each ``put_writes`` item is its own variable (named by checkpoint, task and index), so the
  writes of parallel tasks never overwrite each other; a ``put`` first waits for every
  ``put_writes`` of its thread still in flight, so writes land before the next checkpoint.
* Only the channels in ``new_versions`` are stored at a step (the rest are references to the
  checkpoint that stored them), large values by content hash in the artifact store.
* ``delete_thread`` and ``prune(strategy="delete")`` forget the task through the
  tombstone-fanout and wait for its receipt; a directory task lists the saver's threads for
  ``list(None)`` and ``delete_for_runs``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from agentledger.adapters.langgraph import layout
from agentledger.adapters.langgraph.blobs import Blobs, check_size
from agentledger.adapters.langgraph.checks import thread_keys, writes_checked
from agentledger.adapters.langgraph.errors import ThreadFencedError
from agentledger.adapters.langgraph.loop import LoopThread
from agentledger.client import Client, connect
from agentledger.config import Settings
from agentledger.contracts.api import LeaseBody
from agentledger.core.validate import goal_hash
from agentledger.errors import (
    AgentLedgerError,
    EventIdConflictError,
    IntegrityViolationError,
    NotFoundError,
    UnavailableError,
)

# Lease codes that mean "this saver no longer holds the thread".
_FENCED = frozenset({"lease_held", "lease_lost", "lease_expired", "lease_secret_invalid",
                     "stale_fencing_token", "fencing_token_required", "holder_mismatch"})
GOAL_CRITERIA = ["the graph reaches END"]
# Events per append when a thread is copied or rewritten in bulk (well under max_batch_events).
BATCH = 64
PRODUCER = "agentledger-langgraph"
# A list channel (add_messages) is stored as "the previous value plus these items". No periodic
# whole copy: it would make storage quadratic again, and reading the list is linear in its
# length anyway. A whole value is stored when a writer takes the thread (it knows no previous
# list) and when prune or delete_for_runs removes a survivor's bases.
# How long a read waits for a task that is on the ledger but not projected yet.
READ_WAIT_S = 10.0


class _Writer:
    """What the lease holder of one thread knows: its task, its lease, what it stored."""

    def __init__(self, task: str, lease: LeaseBody, acquired_at: float) -> None:
        self.task = task
        self.lease = lease
        self.acquired_at = acquired_at
        self.lock = asyncio.Lock()
        self.inflight: set[asyncio.Task[Any]] = set()
        self.last_seq = lease.token
        # (ns, channel) -> (version, list value, delta depth) of the last list this writer stored.
        self.lists: dict[tuple[str, str], tuple[Any, list[Any], int]] = {}


class AgentledgerSaver(BaseCheckpointSaver[str]):
    """A LangGraph ``BaseCheckpointSaver`` on the agentledger ledger (see the module docstring).

    ``tenant``: the tenant the connection acts for (the services check it against the
    connection's identity). ``holder``: the lease holder name; a tenant agent holds leases
    only as itself, so pass the agent's name (default: a name unique to this saver, which an
    operator connection may use). ``space`` separates independent sets of threads in one
    tenant. ``lease_ttl_s``: how long the thread stays this saver's without a write (each
    write renews it past half its life). ``wait_for_lease_s``: how long a write waits for
    another holder's lease to lapse before ``ThreadFencedError`` (0: refuse at once).
    """

    def __init__(self, settings: Settings, *, tenant: str, holder: str | None = None,
                 space: str = "default", lease_ttl_s: float = 30.0, wait_for_lease_s: float = 0.0,
                 serde: SerializerProtocol | None = None, timeout: float = 30.0) -> None:
        super().__init__(serde=serde)
        if not space or not all(c.isalnum() or c in "-_" for c in space) or len(space) > 16:
            raise AgentLedgerError("space must be 1-16 letters, digits, '-' or '_'",
                                   code="invalid_value", path="$.space")
        self.tenant = tenant
        self.holder = holder or f"lg-{uuid.uuid4().hex[:16]}"
        self.space = space
        self.lease_ttl_s = lease_ttl_s
        self.wait_for_lease_s = wait_for_lease_s
        self._loop = LoopThread(f"agentledger-saver-{self.holder}")
        try:
            self.client: Client = self._loop.run(connect(settings, timeout=timeout))
        except BaseException:
            self._loop.close()
            raise
        self.blobs = Blobs(self.client, tenant, settings.max_artifact_bytes)
        self._writers: dict[str, _Writer] = {}
        self._directory: dict[str, dict[str, Any]] = {}
        self._directory_ready = False
        self._closed = False
        self._high_seq = 0
        self._holding: dict[str, asyncio.Lock] = {}

    # ---- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Release the leases this saver holds and close its connection (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.run(self._aclose())
        finally:
            self._loop.close()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._loop.arun(self._aclose())
        finally:
            self._loop.close()

    async def _aclose(self) -> None:
        for writer in list(self._writers.values()):
            with contextlib.suppress(AgentLedgerError):  # lost already, or forgotten: nothing to release
                await self.client.release_lease(self.tenant, writer.task, writer.lease)
        self._writers.clear()
        await self.client.close()

    def __enter__(self) -> AgentledgerSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> AgentledgerSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ---- sync twins ------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._loop.run(self._get_tuple(config))

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        yield from self._loop.run(self._list(config, filter, before, limit))

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        return self._loop.run(self._put(config, checkpoint, metadata, new_versions))

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        self._loop.run(self._put_writes_tracked(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._loop.run(self._delete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._loop.run(self._delete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._loop.run(self._copy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._loop.run(self._prune(thread_ids, strategy))

    # ---- async twins -----------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._loop.arun(self._get_tuple(config))

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None,
                    limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        for item in await self._loop.arun(self._list(config, filter, before, limit)):
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return await self._loop.arun(self._put(config, checkpoint, metadata, new_versions))

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        await self._loop.arun(self._put_writes_tracked(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._loop.arun(self._delete_thread(thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._loop.arun(self._delete_for_runs(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._loop.arun(self._copy_thread(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._loop.arun(self._prune(thread_ids, strategy))

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Zero-padded ``<step>.<random>`` strings, as LangGraph's own savers use: they sort."""
        if current is None:
            step = 0
        elif isinstance(current, int):
            step = current
        else:
            step = int(str(current).split(".")[0])
        return f"{step + 1:032}.{uuid.uuid4().int % 10**16:016}"

    # ---- the directory of threads ----------------------------------------------------------

    async def _append(self, task: str, events: list[dict[str, Any]], *,
                      lease: LeaseBody | None = None) -> int:
        results = await self.client.append_batch(events, lease=lease)
        seq = max(r.seq for r in results)
        self._high_seq = max(self._high_seq, seq)
        return seq

    def _event(self, task: str, kind: str, payload: dict[str, Any], event_id: str | None = None) -> dict[str, Any]:
        return {"kind": kind, "event_id": event_id or f"lg-{uuid.uuid4().hex}", "tenant": self.tenant,
                "task_id": task, "producer": PRODUCER, "occurred_at": _now(), "schema_version": 1,
                "payload": payload}

    def _variable(self, task: str, name: str, record: dict[str, Any] | None,
                  event_id: str | None = None) -> dict[str, Any]:
        value = None if record is None else layout.wrap(record)
        return self._event(task, "variable_set", {"name": name, "value": value}, event_id)

    async def _create_task(self, task: str, title: str) -> None:
        text = f"LangGraph {title}"
        goal = {"text": text, "acceptance_criteria": GOAL_CRITERIA,
                "goal_hash": goal_hash(text, GOAL_CRITERIA)}
        # A fixed event id: two savers creating the same task at once are one creation (the
        # other's is the same id with another timestamp: already there, which is all we need).
        with contextlib.suppress(EventIdConflictError):
            await self._append(task, [self._event(task, "task_created", {"goal": goal, "title": title[:200]},
                                                  event_id=f"lgc-{layout.digest(self.tenant, task)}")])

    async def _state(self, task: str, min_seq: int | None = None) -> tuple[int, dict[str, Any]] | None:
        """(seq, variables) of a task as the projection has it, or None for no such task.

        The read waits for everything this saver appended (sequences are the stream's, so the
        highest one covers every task): a saver always reads its own writes. A task another
        process created that the projection has not folded yet is waited for too, briefly.
        """
        wanted = max(min_seq or 0, self._high_seq) or None
        deadline = time.monotonic() + READ_WAIT_S
        while True:
            try:
                reply = await self.client.working_memory(self.tenant, task, min_seq=wanted)
                break
            except NotFoundError:
                return None
            except UnavailableError:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.02)
        state = reply.state or {}
        return reply.seq, state.get("variables", {})

    async def _read_directory(self) -> dict[str, dict[str, Any]]:
        task = layout.directory_task(self.space)
        got = await self._state(task)
        if got is None:
            return {}
        entries = {}
        for var in got[1].values():
            value = layout.unwrap(var.get("value") if isinstance(var, dict) else None)
            if value is not None and value.get("k") == "thread":
                entries[value["thread"]] = value
        self._directory = entries
        return entries

    async def _entry(self, thread_id: str, *, fresh: bool = False) -> dict[str, Any] | None:
        if fresh or thread_id not in self._directory:
            await self._read_directory()
        return self._directory.get(thread_id)

    async def _register(self, thread_id: str, gen: int) -> None:
        task = layout.directory_task(self.space)
        if not self._directory_ready:
            await self._create_task(task, f"thread directory {self.space}")
            self._directory_ready = True
        record = layout.directory_record(thread_id, gen)
        # Another saver may have registered this generation of the thread first: the same record.
        with contextlib.suppress(EventIdConflictError):
            await self._append(task, [self._variable(task, layout.directory_name(thread_id), record,
                                                     event_id=f"lgd-{layout.digest(thread_id, str(gen))}")])
        self._directory[thread_id] = record

    # ---- holding a thread ------------------------------------------------------------------

    def _fenced(self, thread_id: str, exc: AgentLedgerError) -> ThreadFencedError:
        return ThreadFencedError(f"thread {thread_id!r} is held by another writer ({exc.code}: "
                                 f"{exc.message}); nothing was stored", thread_id=thread_id)

    async def _writer(self, thread_id: str, *, create: bool = True) -> _Writer | None:
        """This saver's hold on the thread: registered, created and leased on first write.

        One at a time per thread: LangGraph writes a step's tasks from several threads at once,
        and two grants to the same holder would leave the first one's token stale.
        """
        lock = self._holding.setdefault(thread_id, asyncio.Lock())
        async with lock:
            return await self._hold(thread_id, create=create)

    async def _hold(self, thread_id: str, *, create: bool) -> _Writer | None:
        writer = self._writers.get(thread_id)
        if writer is not None:
            await self._keep(thread_id, writer)
            return writer
        entry = await self._entry(thread_id, fresh=True)
        if entry is None or entry.get("deleted"):
            if not create:
                return None
            gen = 0 if entry is None else int(entry["gen"]) + 1
            await self._register(thread_id, gen)
        else:
            gen = int(entry["gen"])
        task = layout.thread_task(self.space, thread_id, gen)
        if await self._state(task) is None:
            await self._create_task(task, f"thread {layout.digest(thread_id, size=12)}")
        lease = await self._acquire(thread_id, task)
        writer = _Writer(task, lease, time.monotonic())
        self._writers[thread_id] = writer
        return writer

    async def _acquire(self, thread_id: str, task: str) -> LeaseBody:
        deadline = time.monotonic() + self.wait_for_lease_s
        pause = 0.05
        while True:
            try:
                return await self.client.acquire_lease(self.tenant, task, self.holder, self.lease_ttl_s)
            except AgentLedgerError as exc:
                if exc.code not in _FENCED or time.monotonic() >= deadline:
                    if exc.code in _FENCED:
                        raise self._fenced(thread_id, exc) from exc
                    raise
            await asyncio.sleep(pause)  # another holder's lease: poll until it lapses or the wait ends
            pause = min(pause * 2, 0.5)

    async def _keep(self, thread_id: str, writer: _Writer) -> None:
        """Renew the lease past half its life; once lapsed, take it back only if nobody else had it."""
        age = time.monotonic() - writer.acquired_at
        if age < self.lease_ttl_s / 2:
            return
        try:
            writer.lease = await self.client.renew_lease(self.tenant, writer.task, writer.lease,
                                                         self.lease_ttl_s)
            writer.acquired_at = time.monotonic()
            return
        except AgentLedgerError as exc:
            if exc.code not in _FENCED:
                raise
        # Lapsed. The projection names the last grant: ours means no other writer came between.
        got = await self.client.working_memory(self.tenant, writer.task, min_seq=writer.last_seq)
        last = (got.state or {}).get("lease") or {}
        if last.get("holder") != self.holder or last.get("token") != writer.lease.token:
            self._writers.pop(thread_id, None)
            raise ThreadFencedError(f"thread {thread_id!r} was taken by another writer while this "
                                    "saver's lease had lapsed; nothing was stored", thread_id=thread_id)
        writer.lease = await self._acquire(thread_id, writer.task)
        writer.acquired_at = time.monotonic()
        writer.last_seq = writer.lease.token

    async def _write(self, thread_id: str, writer: _Writer, events: list[dict[str, Any]]) -> int:
        try:
            seq = await self._append(writer.task, events, lease=writer.lease)
        except AgentLedgerError as exc:
            if exc.code in _FENCED:
                self._writers.pop(thread_id, None)
                raise self._fenced(thread_id, exc) from exc
            raise
        writer.last_seq = max(writer.last_seq, seq)
        return seq

    # ---- reading ---------------------------------------------------------------------------

    async def _model(self, thread_id: str) -> tuple[str, layout.ThreadModel] | None:
        writer = self._writers.get(thread_id)
        if writer is not None:
            got = await self._state(writer.task, min_seq=writer.last_seq)
            task = writer.task
        else:
            entry = await self._entry(thread_id)
            if entry is None or entry.get("deleted"):
                return None
            task = layout.thread_task(self.space, thread_id, int(entry["gen"]))
            got = await self._state(task)
        if got is None:
            return None
        return task, layout.ThreadModel.build(got[1], got[0])

    async def _value(self, model: layout.ThreadModel, ns: str, channel: str, version: Any,
                     where: str) -> tuple[bool, Any]:
        """(found, value) of a channel at a version, a delta resolved through its bases."""
        tails: list[Any] = []
        while True:
            found, ref = model.blob_for(ns, channel, version)
            if not found or ref is None:
                if tails:
                    raise IntegrityViolationError(f"the base {version!r} of a stored {channel!r} value is "
                                                  "missing", where="checkpoint", path=where)
                return False, None
            if "delta" not in ref:
                break
            tails.append(self.serde.loads_typed(await self.blobs.load(ref["delta"]["tail"], where)))
            version = ref["delta"]["base"]
        value = self.serde.loads_typed(await self.blobs.load(ref, where))
        for tail in reversed(tails):
            value = [*value, *tail]
        return True, value

    async def _tuple(self, thread_id: str, model: layout.ThreadModel,
                     row: layout.CheckpointRow) -> CheckpointTuple:
        where = f"$.thread[{thread_id!r}].checkpoint[{row.id!r}]"
        checkpoint = self.serde.loads_typed(await self.blobs.load(row.checkpoint, where))
        metadata = self.serde.loads_typed(await self.blobs.load(row.metadata, where + ".metadata"))
        values: dict[str, Any] = {}
        for channel, version in checkpoint["channel_versions"].items():
            found, value = await self._value(model, row.ns, channel, version,
                                             f"{where}.channel_values[{channel!r}]")
            if found:
                values[channel] = value
        pending = [(w.task_id, w.channel,
                    self.serde.loads_typed(await self.blobs.load(w.value, f"{where}.writes")))
                   for w in model.ordered_writes(row.ns, row.id)]
        configurable = {"thread_id": thread_id, "checkpoint_ns": row.ns, "checkpoint_id": row.id}
        parent = ({"configurable": {**configurable, "checkpoint_id": row.parent}}
                  if row.parent else None)
        return CheckpointTuple(config={"configurable": configurable},
                               checkpoint={**checkpoint, "channel_values": values},
                               metadata=metadata, parent_config=parent, pending_writes=pending)

    async def _get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id, ns, checkpoint_id = thread_keys(config)
        got = await self._model(thread_id)
        if got is None:
            return None
        model = got[1]
        row = model.checkpoints.get(ns, {}).get(checkpoint_id) if checkpoint_id else model.latest(ns)
        return None if row is None else await self._tuple(thread_id, model, row)

    async def _list(self, config: RunnableConfig | None, filter: dict[str, Any] | None,  # noqa: PLR0912
                    before: RunnableConfig | None, limit: int | None) -> list[CheckpointTuple]:
        if config is not None:
            thread_id, ns, checkpoint_id = thread_keys(config, ns_default=None)
            threads = [thread_id]
        else:
            ns, checkpoint_id = None, None
            threads = [t for t, e in (await self._read_directory()).items() if not e.get("deleted")]
        before_id = get_checkpoint_id(before) if before else None
        candidates: list[tuple[str, str, str, layout.ThreadModel, layout.CheckpointRow]] = []
        for thread_id in threads:
            got = await self._model(thread_id)
            if got is None:
                continue
            model = got[1]
            for row_ns, rows in model.checkpoints.items():
                if ns is not None and row_ns != ns:
                    continue
                for row in rows.values():
                    if checkpoint_id and row.id != checkpoint_id:
                        continue
                    if before_id and row.id >= before_id:
                        continue
                    candidates.append((row.id, thread_id, row_ns, model, row))
        candidates.sort(key=lambda c: (c[0], c[1], c[2]), reverse=True)
        out: list[CheckpointTuple] = []
        for _, thread_id, _, model, row in candidates:
            if limit is not None and len(out) >= limit:
                break
            if filter:
                metadata = self.serde.loads_typed(await self.blobs.load(row.metadata, "$.metadata"))
                if not all(metadata.get(k) == v for k, v in filter.items()):
                    continue
            out.append(await self._tuple(thread_id, model, row))
        return out

    # ---- writing ---------------------------------------------------------------------------

    async def _put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        thread_id, ns, parent = thread_keys(config, ns_required=True)
        c = dict(checkpoint)
        checkpoint_id = c.get("id")
        if not isinstance(checkpoint_id, str) or not checkpoint_id or "\x00" in checkpoint_id:
            raise AgentLedgerError("a checkpoint needs a non-empty string id without NUL",
                                   code="invalid_value", path="$.checkpoint.id")
        values: dict[str, Any] = c.pop("channel_values", {}) or {}
        # Serialise everything first and check every size, so a refused put stores nothing. A
        # list that extends the one this writer stored last for the channel is stored as its
        # new items only: storage grows with what changed, not with the whole state per step.
        known = self._writers.get(thread_id)
        typed_values: dict[str, tuple[str, bytes]] = {}
        deltas: dict[str, tuple[Any, int]] = {}
        for k in new_versions:
            if k not in values:
                continue
            value = values[k]
            prev = known.lists.get((ns, k)) if known is not None else None
            if (prev is not None and isinstance(value, list)
                    and len(value) >= len(prev[1]) and value[:len(prev[1])] == prev[1]):
                typed_values[k] = self.serde.dumps_typed(value[len(prev[1]):])
                deltas[k] = (prev[0], prev[2] + 1)
            else:
                typed_values[k] = self.serde.dumps_typed(value)
        typed_cp = self.serde.dumps_typed(c)
        typed_md = self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))
        for k, (_, data) in typed_values.items():
            check_size(data, self.blobs.limit, f"$.checkpoint.channel_values[{k!r}]")
        check_size(typed_cp[1], self.blobs.limit, "$.checkpoint")
        check_size(typed_md[1], self.blobs.limit, "$.metadata")
        writer = await self._writer(thread_id)
        assert writer is not None
        if writer is not known:
            deltas.clear()  # a new hold knows no previous list: whole values
            typed_values = {k: self.serde.dumps_typed(values[k]) for k in new_versions if k in values}
        async with writer.lock:
            # Writes of the previous step still in flight land before this checkpoint.
            if writer.inflight:
                await asyncio.gather(*list(writer.inflight), return_exceptions=True)
            refs = await asyncio.gather(*(self.blobs.store(typed_values[k]) for k in typed_values))
            stored: dict[str, Any] = {}
            for k, ref in zip(typed_values, refs, strict=True):
                stored[k] = layout.delta_ref(deltas[k][0], ref, deltas[k][1]) if k in deltas else ref
            blobs = {k: [v, stored.get(k)] for k, v in new_versions.items()}
            run_id = (metadata or {}).get("run_id") or config.get("metadata", {}).get("run_id")
            record = layout.checkpoint_record(
                ns=ns, checkpoint_id=checkpoint_id, parent=parent,
                checkpoint=await self.blobs.store(typed_cp), metadata=await self.blobs.store(typed_md),
                run_id=str(run_id) if run_id is not None else None, blobs=blobs)
            await self._write(thread_id, writer, [self._variable(
                writer.task, layout.checkpoint_name(ns, checkpoint_id), record)])
            for k in typed_values:
                if isinstance(values[k], list):
                    writer.lists[(ns, k)] = (new_versions[k], list(values[k]), deltas.get(k, (None, 0))[1])
                else:
                    writer.lists.pop((ns, k), None)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                                 "checkpoint_id": checkpoint_id}}

    async def _put_writes_tracked(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                                  task_id: str, task_path: str) -> None:
        thread_id, _, _ = thread_keys(config)
        job = asyncio.ensure_future(self._put_writes(config, writes, task_id, task_path))
        writer = self._writers.get(thread_id)
        if writer is not None:
            writer.inflight.add(job)
            job.add_done_callback(writer.inflight.discard)
        await job

    async def _put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                          task_id: str, task_path: str) -> None:
        thread_id, ns, checkpoint_id = thread_keys(config, ns_required=False)
        items = writes_checked(writes, task_id, task_path, checkpoint_id)
        if not items:
            return
        typed = [(channel, self.serde.dumps_typed(value)) for channel, value in items]
        for i, (_, (_, data)) in enumerate(typed):
            check_size(data, self.blobs.limit, f"$.writes[{i}][1]")
        writer = await self._writer(thread_id)
        assert writer is not None and checkpoint_id is not None
        refs = await asyncio.gather(*(self.blobs.store(t) for _, t in typed))
        events = []
        for i, ((channel, _), ref) in enumerate(zip(typed, refs, strict=True)):
            idx = WRITES_IDX_MAP.get(channel, i)
            record = layout.write_record(ns=ns, checkpoint_id=checkpoint_id, task_id=task_id, idx=idx,
                                         channel=channel, value=ref, task_path=task_path)
            name = layout.write_name(ns, checkpoint_id, task_id, idx)
            # A regular write is stored once (the first wins, a retry is a duplicate); a special
            # one (error, interrupt) replaces the previous, as LangGraph's savers do.
            event_id = (f"lgw-{layout.digest(writer.task, name)}" if idx >= 0 else None)
            events.append(self._variable(writer.task, name, record, event_id=event_id))
        try:
            await self._write(thread_id, writer, events)
        except AgentLedgerError as exc:
            if exc.code not in {"event_id_conflict", "partial_duplicate"}:
                raise
            for event in events:  # some were stored before: the others one by one
                try:
                    await self._write(thread_id, writer, [event])
                except AgentLedgerError as one:
                    if one.code != "event_id_conflict":
                        raise

    # ---- deleting, copying, pruning --------------------------------------------------------

    async def _delete_thread(self, thread_id: str) -> None:
        if not isinstance(thread_id, str) or not thread_id or "\x00" in thread_id:
            raise AgentLedgerError("thread_id must be a non-empty string without NUL",
                                   code="invalid_value", path="$.thread_id")
        entry = await self._entry(thread_id, fresh=True)
        if entry is None or entry.get("deleted"):
            return
        gen = int(entry["gen"])
        task = layout.thread_task(self.space, thread_id, gen)
        if await self._state(task) is not None:
            writer = await self._writer(thread_id)  # only the holder may forget a leased task
            assert writer is not None
            reply = await self.client.forget(self.tenant, {"kind": "task", "task_id": task},
                                             reason="langgraph delete_thread",
                                             request_id=f"lg-{layout.digest(task, size=40)}")
            await self.client.forget_wait(self.tenant, reply.request_id)
        self._writers.pop(thread_id, None)
        dtask = layout.directory_task(self.space)
        record = layout.directory_record(thread_id, gen, deleted=True)
        await self._append(dtask, [self._variable(dtask, layout.directory_name(thread_id), record)])
        self._directory[thread_id] = record

    async def _drop(self, thread_id: str, doomed: set[tuple[str, str]]) -> None:  # noqa: PLR0912
        """Delete some checkpoints (and their writes) of one thread; survivors keep their values."""
        got = await self._model(thread_id)
        if got is None or not doomed:
            return
        model = got[1]
        writer = await self._writer(thread_id, create=False)
        if writer is None:
            return
        events: list[dict[str, Any]] = []
        for ns, rows in model.checkpoints.items():
            for row in rows.values():
                if (ns, row.id) in doomed:
                    continue
                # A survivor whose channel values were stored by a doomed checkpoint takes the
                # references over before that one goes.
                checkpoint = self.serde.loads_typed(await self.blobs.load(row.checkpoint, "$.checkpoint"))
                blobs = dict(row.blobs)
                changed = False
                for channel, version in checkpoint["channel_versions"].items():
                    found, ref = model.blob_for(ns, channel, version)
                    if not found:
                        continue
                    if ref is not None and "delta" in ref:
                        # Its bases may be among the doomed: the survivor keeps a whole value.
                        _, value = await self._value(model, ns, channel, version, "$.checkpoint")
                        ref = await self.blobs.store(self.serde.dumps_typed(value))
                    elif channel in blobs and blobs[channel][0] == version:
                        continue
                    blobs[channel] = [version, ref]
                    changed = True
                if changed:
                    record = layout.checkpoint_record(ns=ns, checkpoint_id=row.id, parent=row.parent,
                                                      checkpoint=row.checkpoint, metadata=row.metadata,
                                                      run_id=row.run_id, blobs=blobs)
                    events.append(self._variable(writer.task, layout.checkpoint_name(ns, row.id), record))
        for ns, checkpoint_id in sorted(doomed):
            events.append(self._variable(writer.task, layout.checkpoint_name(ns, checkpoint_id), None))
            for w in model.ordered_writes(ns, checkpoint_id):
                events.append(self._variable(writer.task, layout.write_name(ns, checkpoint_id, w.task_id, w.idx),
                                             None))
        for start in range(0, len(events), BATCH):
            await self._write(thread_id, writer, events[start:start + BATCH])

    async def _delete_for_runs(self, run_ids: Sequence[str]) -> None:
        wanted = {str(r) for r in run_ids}
        if not wanted:
            return
        for thread_id, entry in (await self._read_directory()).items():
            if entry.get("deleted"):
                continue
            got = await self._model(thread_id)
            if got is None:
                continue
            doomed = {(ns, row.id) for ns, rows in got[1].checkpoints.items() for row in rows.values()
                      if row.run_id in wanted}
            await self._drop(thread_id, doomed)

    async def _prune(self, thread_ids: Sequence[str], strategy: str) -> None:
        if strategy not in ("keep_latest", "delete"):
            raise AgentLedgerError(f"unknown prune strategy {strategy!r} (keep_latest or delete)",
                                   code="invalid_value", path="$.strategy")
        for thread_id in thread_ids:
            if strategy == "delete":
                await self._delete_thread(thread_id)
                continue
            got = await self._model(thread_id)
            if got is None:
                continue
            doomed = {(ns, cid) for ns, rows in got[1].checkpoints.items() for cid in rows
                      if cid != max(rows)}
            await self._drop(thread_id, doomed)

    async def _copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        got = await self._model(source_thread_id)
        if got is None:
            return
        model = got[1]
        writer = await self._writer(target_thread_id)
        assert writer is not None
        events: list[dict[str, Any]] = []
        for ns, rows in model.checkpoints.items():
            for cid in sorted(rows):
                row = rows[cid]
                record = layout.checkpoint_record(ns=ns, checkpoint_id=row.id, parent=row.parent,
                                                  checkpoint=row.checkpoint, metadata=row.metadata,
                                                  run_id=row.run_id, blobs=row.blobs)
                events.append(self._variable(writer.task, layout.checkpoint_name(ns, row.id), record))
                for w in model.ordered_writes(ns, row.id):
                    wrec = layout.write_record(ns=ns, checkpoint_id=row.id, task_id=w.task_id, idx=w.idx,
                                               channel=w.channel, value=w.value, task_path=w.task_path)
                    events.append(self._variable(writer.task, layout.write_name(ns, row.id, w.task_id, w.idx),
                                                 wrec))
        async with writer.lock:
            for start in range(0, len(events), BATCH):
                await self._write(target_thread_id, writer, events[start:start + BATCH])


def _now() -> str:
    from datetime import UTC, datetime  # noqa: PLC0415
    return datetime.now(UTC).isoformat()
