"""How a LangGraph thread is laid out on the ledger, and how it is read back (pure, no I/O).

A thread is a task. Each checkpoint, each pending write and each directory entry is one
``variable_set`` event whose value is a small JSON record of references; the bytes LangGraph
serialised live inline (small, with their blake3) or in the artifact store (large, by
content hash). Variable names are hashes of the LangGraph keys, so any ``thread_id``,
``checkpoint_ns`` or channel name fits the ledger's 128-character names, and the value
carries the keys verbatim. A record set to ``null`` is a deleted one (prune, delete_for_runs).

``ThreadModel.build`` folds a task's variables, as the Working Memory projection returns
them, into what ``get_tuple`` and ``list`` answer from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import blake3
import msgspec

# What a directory task and a thread task are called; task ids are ledger tokens.
DIRECTORY_TASK = "lg-dir-{space}"
THREAD_TASK = "lg-{space}-{digest}-g{gen}"


# Records travel as msgpack (inline bytes stay raw), carried as integers of 6 bytes each (exact
# in JSON): the ledger-writer redacts any string that looks like a secret, and an artifact URI,
# a random thread id or base64 bytes look like one (high entropy). Integers are never
# rewritten, so a record reads back as written whatever the detectors learn next.
_WORD = 6
_msgpack = msgspec.msgpack.Encoder()


def pack(data: bytes) -> list[int]:
    return [int.from_bytes(data[i:i + _WORD], "big") for i in range(0, len(data), _WORD)]


def unpack(words: list[int], size: int) -> bytes:
    out = bytearray()
    for i, word in enumerate(words):
        out += int(word).to_bytes(min(_WORD, size - i * _WORD), "big")
    return bytes(out)


def wrap(record: dict[str, Any]) -> dict[str, Any]:
    """A record as the variable's value: its msgpack, packed."""
    data = _msgpack.encode(record)
    return {"lg": 2, "n": len(data), "d": pack(data)}


def unwrap(value: Any) -> dict[str, Any] | None:
    """The record a variable's value holds, or None (deleted, or not ours)."""
    if not isinstance(value, dict) or value.get("lg") != 2:
        return None
    try:
        record = msgspec.msgpack.decode(unpack(value["d"], int(value["n"])))
    except (KeyError, TypeError, ValueError, OverflowError, msgspec.DecodeError):
        return None
    return record if isinstance(record, dict) else None


def digest(*parts: str, size: int = 32) -> str:
    """A name-safe digest of ``parts`` (each length-prefixed, so ``("a|b", "c")`` != ``("a", "b|c")``)."""
    h = blake3.blake3()
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()[:size]


def directory_task(space: str) -> str:
    return DIRECTORY_TASK.format(space=space)


def thread_task(space: str, thread_id: str, gen: int) -> str:
    return THREAD_TASK.format(space=space, digest=digest(thread_id, size=24), gen=gen)


def directory_name(thread_id: str) -> str:
    return "t." + digest(thread_id)


def checkpoint_name(ns: str, checkpoint_id: str) -> str:
    return "c." + digest(ns, checkpoint_id)


def write_name(ns: str, checkpoint_id: str, task_id: str, idx: int) -> str:
    return "w." + digest(ns, checkpoint_id, task_id, str(idx))


BlobRef = dict[str, Any]  # {"t": type, "h": blake3, "i": bytes} or {"t": type, "h": ..., "u": uri}


@dataclass
class CheckpointRow:
    ns: str
    id: str
    parent: str | None
    checkpoint: BlobRef
    metadata: BlobRef
    run_id: str | None
    # channel -> [version, blob or None (the channel was empty at that version)]
    blobs: dict[str, list[Any]]
    seq: int


@dataclass
class WriteRow:
    ns: str
    checkpoint_id: str
    task_id: str
    idx: int
    channel: str
    value: BlobRef
    task_path: str
    seq: int


@dataclass
class ThreadModel:
    """One thread's live checkpoints and writes, as of the projection's ``seq``."""

    seq: int = 0
    checkpoints: dict[str, dict[str, CheckpointRow]] = field(default_factory=dict)  # ns -> id -> row
    writes: dict[tuple[str, str], dict[tuple[str, int], WriteRow]] = field(default_factory=dict)
    _index: dict[tuple[str, str, Any], BlobRef | None] | None = None

    @classmethod
    def build(cls, variables: Mapping[str, Any], seq: int) -> ThreadModel:
        model = cls(seq=seq)
        for name, var in variables.items():
            value = unwrap(var.get("value") if isinstance(var, dict) else None)
            if value is None:
                continue  # deleted (null) or not ours
            vseq = int(var.get("seq") or 0)
            if name.startswith("c.") and value.get("k") == "cp":
                row = CheckpointRow(ns=value["ns"], id=value["id"], parent=value.get("parent"),
                                    checkpoint=value["cp"], metadata=value["md"],
                                    run_id=value.get("run"), blobs=value.get("blobs", {}), seq=vseq)
                model.checkpoints.setdefault(row.ns, {})[row.id] = row
            elif name.startswith("w.") and value.get("k") == "w":
                w = WriteRow(ns=value["ns"], checkpoint_id=value["cp"], task_id=value["task"],
                             idx=int(value["idx"]), channel=value["ch"], value=value["v"],
                             task_path=value.get("path", ""), seq=vseq)
                model.writes.setdefault((w.ns, w.checkpoint_id), {})[(w.task_id, w.idx)] = w
        return model

    def latest(self, ns: str) -> CheckpointRow | None:
        rows = self.checkpoints.get(ns)
        return rows[max(rows)] if rows else None

    def blob_for(self, ns: str, channel: str, version: Any) -> tuple[bool, BlobRef | None]:
        """(found, blob) of ``channel`` at ``version``: the checkpoint that stored it says so."""
        if self._index is None:
            self._index = {}
            for row_ns, rows in self.checkpoints.items():
                for row in rows.values():
                    for ch, entry in row.blobs.items():
                        self._index[(row_ns, ch, _vkey(entry[0]))] = entry[1]
        key = (ns, channel, _vkey(version))
        return (True, self._index[key]) if key in self._index else (False, None)

    def ordered_writes(self, ns: str, checkpoint_id: str) -> list[WriteRow]:
        """A checkpoint's pending writes in ``writes_sort_key`` order (task_path, task_id, idx)."""
        rows = self.writes.get((ns, checkpoint_id), {})
        return sorted(rows.values(), key=lambda w: (w.task_path, w.task_id, w.idx))


def _vkey(version: Any) -> tuple[str, str]:
    """A channel version as a lookup key that keeps "1" and 1 apart."""
    return (type(version).__name__, str(version))


def delta_ref(base_version: Any, tail: BlobRef, depth: int) -> BlobRef:
    """A list channel's value as the value at ``base_version`` plus the items in ``tail``."""
    return {"delta": {"base": base_version, "tail": tail}, "depth": depth}


def checkpoint_record(*, ns: str, checkpoint_id: str, parent: str | None, checkpoint: BlobRef,
                      metadata: BlobRef, run_id: str | None, blobs: dict[str, list[Any]]) -> dict[str, Any]:
    record: dict[str, Any] = {"k": "cp", "ns": ns, "id": checkpoint_id, "parent": parent,
                              "cp": checkpoint, "md": metadata, "blobs": blobs}
    if run_id is not None:
        record["run"] = run_id
    return record


def write_record(*, ns: str, checkpoint_id: str, task_id: str, idx: int, channel: str,
                 value: BlobRef, task_path: str) -> dict[str, Any]:
    return {"k": "w", "ns": ns, "cp": checkpoint_id, "task": task_id, "idx": idx, "ch": channel,
            "v": value, "path": task_path}


def directory_record(thread_id: str, gen: int, *, deleted: bool = False) -> dict[str, Any]:
    return {"k": "thread", "thread": thread_id, "gen": gen, "deleted": deleted}
