"""Golden replay: recorded event streams of one task and the projection they must give.

Each ``*.json`` file here is ``{"description", "events": [{"seq", "event"}], "expected",
"state_hash"}``: ``event`` is a ledger event as stored (personal content already
sealed), ``expected`` is ``view(state)`` after folding the events from an empty
task (with the transcript the fold appended), and ``state_hash`` the hash of
every part of that projection (``state.state_hash``). A reducer change that changes
a golden projection must re-record it in the same commit, with
``python -m agentledger.core.golden --write``, so the change is visible in review.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from agentledger.contracts.codec import decode_event
from agentledger.contracts.events import EventBase
from agentledger.core.reducer import fold
from agentledger.core.state import Changes, new_state, state_hash, view

GOLDEN_DIR = Path(__file__).resolve().parent
RECORD_COMMAND = "python -m agentledger.core.golden --write"


class _Entry(msgspec.Struct, forbid_unknown_fields=True):
    seq: int
    event: msgspec.Raw


class _GoldenFile(msgspec.Struct, forbid_unknown_fields=True):
    events: list[_Entry]
    description: str = ""
    expected: Any = None
    state_hash: str | None = None


def golden_files(directory: Path = GOLDEN_DIR) -> list[Path]:
    """Every golden stream file, in name order."""
    return sorted(directory.glob("*.json"))


def load_events(path: Path) -> list[tuple[EventBase, int]]:
    """The ``(event, seq)`` pairs of a golden file, decoded with the wire contracts."""
    golden = msgspec.json.decode(path.read_bytes(), type=_GoldenFile)
    return [(decode_event(e.event, f"$.events[{i}].event"), e.seq) for i, e in enumerate(golden.events)]


def replay_golden(path: Path) -> tuple[dict[str, Any], str]:
    """Fold a golden file's events from an empty task; return ``(view as JSON values, state hash)``."""
    events = load_events(path)
    if not events:
        raise ValueError(f"{path.name}: a golden stream needs at least one event")
    first = events[0][0]
    tasks = {(e.tenant, e.task_id) for e, _ in events}
    if len(tasks) != 1:
        raise ValueError(f"{path.name}: a golden stream holds one task, found {sorted(tasks)}")
    changes = Changes()
    state, _ = fold(new_state(first.tenant, first.task_id), events, changes=changes)
    # Through JSON, so the view compares equal to what the file holds.
    return (msgspec.json.decode(msgspec.json.encode(view(state, changes.turns))),
            state_hash(state, changes.turns))


def recorded(path: Path) -> tuple[Any, str | None]:
    """The ``(expected, state_hash)`` a golden file currently holds."""
    golden = msgspec.json.decode(path.read_bytes(), type=_GoldenFile)
    return golden.expected, golden.state_hash


def record(path: Path) -> bool:
    """Rewrite the expected view and hash of a golden file from a replay; True if they changed."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    expected, digest = replay_golden(path)
    changed = (doc.get("expected"), doc.get("state_hash")) != (expected, digest)
    out = {"description": doc.get("description", ""), "events": doc["events"],
           "expected": expected, "state_hash": digest}
    path.write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return changed
