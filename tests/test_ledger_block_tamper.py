"""The ledger's block files edited on disk while nats-server is stopped, each edited record's
own HighwayHash checksum recomputed, so the server itself finds nothing wrong.

This is the attacker of the issue who can write the mounted NATS store (``ledger_blocks``):
a message's body changed, a well-formed record forged at the end of the last block, a record
deleted from the middle. The server's stream summary is removed so it rebuilds its state from
the blocks on its start. Then every reader of the ledger must refuse the edit: ``agentledger
verify`` names it, ``resume`` answers ``integrity_violation``, and the projector's rebuild of
an empty projection records it, so ``wm.get`` refuses the task.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import msgspec
import pytest

from agentledger.cli.main import verify_command
from agentledger.config import Settings
from agentledger.core.ledger_chain import CHAIN, parse
from agentledger.errors import IntegrityViolationError
from agentledger.runtime.embedded import EmbeddedNats
from agentledger.security.auth import AuthStore
from agentledger.security.task_seal import SEALED
from agentledger.stores.ledger import msg_id
from ckpt_support import TENANT, created, running, variable
from helpers import assert_eventually
from ledger_blocks import Record, rewrite
from ledger_tamper import messages
from test_ledger_chain import _rejections

Edit = Callable[[list[Record]], list[Record]]


def _index(r: Record) -> int | None:
    value = r.header(CHAIN)
    parsed = parse(value) if value is not None else None
    return parsed[0] if parsed is not None else None


def _t1(r: Record) -> bool:
    return r.message and r.subject.endswith(b".t1")


def change_content(records: list[Record]) -> list[Record]:
    """t1's third event changed (its chain header left as it was). Its body is sealed under the
    task's key, which this attacker does not hold: the edit can only change its bytes."""
    out = []
    for r in records:
        edited = r
        if _t1(r) and _index(r) == 3:
            assert b'"v1"' not in r.body  # sealed at rest
            edited = Record(r.seq, r.ts, r.subject, r.headers, r.body[:-1] + bytes([r.body[-1] ^ 1]))
        out.append(edited)
    return out


def forge_at_end(records: list[Record]) -> list[Record]:
    """A well-formed event of t1 appended as the block's last record (the next sequence), its
    chain header linking to t1's real last event but its own tag made up."""
    last = [r for r in records if _t1(r)][-1]
    value = last.header(CHAIN)
    assert value is not None
    index, _, own = parse(value) or (0, None, "")
    # Written from the contract (the real bodies are sealed), not sealed: the attacker has no key.
    event = {**variable("t1", "owner", "mallory"), "event_id": "forged"}
    top = max(r.seq for r in records if r.message)
    forged = Record(top + 1, records[-1].ts + 1, last.subject, last.headers, msgspec.json.encode(event))
    forged = forged.with_header("Nats-Msg-Id", msg_id(TENANT, "t1", "forged"))
    forged = forged.without_header(SEALED)
    forged = forged.with_header(CHAIN, f"{index + 1};{own};1:{'ab' * 32}")
    return [*records, forged]


def delete_middle(records: list[Record]) -> list[Record]:
    return [r for r in records if not (_t1(r) and _index(r) == 3)]


# edit -> (what the refusal names, t1's chain indexes the restarted server serves, whether it
# serves a body saying "mallory")
EDITS: dict[str, tuple[Edit, str, list[int], bool]] = {
    "content_change": (change_content, "index 3 ", [1, 2, 3, 4, 5], False),
    "forged_record_appended": (forge_at_end, "index 6 ", [1, 2, 3, 4, 5, 6], True),
    "middle_record_deleted": (delete_middle, "index 4 ", [1, 2, 4, 5], False),
}


@pytest.fixture
async def own_server(tmp_path: Path, nats_auth: AuthStore | None, server_root: Path) -> AsyncIterator[EmbeddedNats]:
    """A NATS server of this test alone (it is stopped and its files edited)."""
    if nats_auth is None:
        pytest.skip("needs the embedded server in operator mode")
    server = EmbeddedNats(tmp_path / "own-nats", auth=nats_auth, server_root=server_root).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("kind", list(EDITS))
async def test_a_block_file_edit_is_refused_on_every_read(settings: Settings, own_server: EmbeddedNats,
                                                         kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    edit, names, indexes, mallory = EDITS[kind]
    s = msgspec.structs.replace(settings, nats_url=own_server.url)
    async with running(s, checkpointer=False, projector=False) as stack:
        await stack.append([created("t1"), *(variable("t1", "owner", f"v{i}") for i in range(4))])
        await stack.append([created("t2"), variable("t2", "owner", "bob")])
    own_server.stop()
    rewrite(own_server.dir / "jetstream", s.stream, edit)
    own_server.start()
    assert own_server.url == s.nats_url
    # The server took the edited files as its own (no checksum failure truncated them).
    served = [m for m in await messages(s) if m.subject.endswith(".t1")]
    assert [(parse(m.headers[CHAIN]) or (0,))[0] for m in served] == indexes
    assert any(b"mallory" in m.body for m in served) == mallory

    capsys.readouterr()
    assert await asyncio.to_thread(verify_command, s, TENANT, "t1") == 1
    out = capsys.readouterr().out
    assert "INTEGRITY VIOLATION" in out and names in out and "task 't1'" in out

    async with running(s) as stack:
        with pytest.raises(IntegrityViolationError) as info:
            await stack.c.resume(TENANT, "t1", "exec-1")
        assert names in info.value.message

        async def refused_by_the_rebuild() -> bool:
            return "integrity_violation" in [code for code, _ in await _rejections(s, "t1")]

        await assert_eventually(refused_by_the_rebuild)
        with pytest.raises(IntegrityViolationError):
            await stack.c.working_memory(TENANT, "t1")
        assert (await stack.c.working_memory(TENANT, "t2")).state["variables"]["owner"]["value"] == "bob"
