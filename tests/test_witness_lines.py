"""The witness file's shape: a signed snapshot, then one signed line per publish of what moved.

A publish must cost what changed, not every task the ledger ever had: with many tasks the
snapshot stays as it is and only a short line is appended (and synced), until the lines
outweigh the snapshot and one new snapshot folds them in. Every line is checked on read: an
edited line, a line moved in from another witness or put out of its place is
``integrity_violation``; a last line cut off by a crash is not part of the witness, and the
next publish cuts it away. The checkpointer's view grows with the same lines. A witness written
before the lines existed (one snapshot, no newline) is read, and the next publish replaces it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec
import pytest

from agentledger.config import Settings
from agentledger.core.ledger_chain import Head
from agentledger.errors import IntegrityViolationError
from agentledger.security.integrity_keys import keys_of
from agentledger.stores import witness


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    witness._seen.clear()
    keys = tmp_path / "keys"
    (tmp_path / "view").mkdir()  # the supervisor makes the view's folder
    return Settings(data_dir=tmp_path / "data", integrity_key_file=keys / "k.integrity", kek_file=keys / "k.key",
                    witness_file=keys / "k.witness", witness_copy_file=tmp_path / "view" / "k.witness")


def _heads(names: range, index: int) -> dict[str, Head]:
    return {witness.task_name("acme", f"t{i}"): Head(index, f"{index:02x}{i:062x}") for i in names}


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n")[:-1]


def _fresh(settings: Settings) -> witness.Body | None:
    """Read as another process would: from nothing."""
    witness._seen.clear()
    return witness.read(settings)


def test_a_publish_appends_only_what_moved(settings: Settings) -> None:
    witness.publish(settings, _heads(range(2000), 3), last_seq=2000)
    path = settings.witness_path
    snapshot = path.read_bytes()
    inode = os.stat(path).st_ino
    for step in range(5):
        witness.publish(settings, _heads(range(step * 3, step * 3 + 3), 9), last_seq=2001 + step)
    lines = _lines(path)
    assert path.read_bytes().startswith(snapshot) and os.stat(path).st_ino == inode, "the snapshot is not rewritten"
    assert len(lines) == 6
    assert all(len(line) < 1200 for line in lines[1:]), "a line holds what moved, not every head"
    assert [json.loads(line)["delta"]["n"] for line in lines[1:]] == [1, 2, 3, 4, 5]
    # Nothing new: nothing written.
    witness.publish(settings, _heads(range(3), 9), last_seq=2005)
    assert len(_lines(path)) == 6
    body = _fresh(settings)
    assert body is not None and body.last_seq == 2005 and len(body.heads) == 2000
    assert body.heads["acme/t14"][0] == 9 and body.heads["acme/t15"][0] == 3
    # A head never moves back.
    witness.publish(settings, _heads(range(1), 2), last_seq=1)
    assert (_fresh(settings) or body).heads["acme/t0"][0] == 9
    # The checkpointer's view holds the same lines, and a reader that kept what it read sees the
    # next line alone.
    assert (settings.witness_copy_file or path).read_bytes() == path.read_bytes()
    assert witness.witnessed_head(settings, "acme/t20") == (3, f"03{20:062x}")
    witness.publish(settings, _heads(range(20, 21), 11), last_seq=2006)
    assert witness.witnessed_head(settings, "acme/t20") == (11, f"0b{20:062x}")


def test_lines_are_folded_into_a_new_snapshot_once_they_outweigh_it(settings: Settings) -> None:
    witness.publish(settings, _heads(range(10), 1), last_seq=10)
    path = settings.witness_path
    # What another process read before the fold: whatever inode the new file gets, it is read anew.
    stale = witness._seen[path]
    stale = msgspec.structs.replace(stale, heads=dict(stale.heads))
    for step in range(400):
        witness.publish(settings, _heads(range(10), 2 + step), last_seq=11 + step)
    witness._seen[path] = stale
    assert witness.witnessed_head(settings, "acme/t9") == (401, f"191{9:062x}")
    lines = _lines(settings.witness_path)
    assert json.loads(lines[0])["body"]["last_seq"] > 10, "folded into a new snapshot"
    assert settings.witness_path.stat().st_size < 2 * witness.COMPACT_MIN_BYTES + 4096
    assert "body" in json.loads(lines[0])
    body = _fresh(settings)
    assert body is not None and body.last_seq == 410 and body.heads["acme/t9"][0] == 401


def test_an_edited_moved_or_misplaced_line_is_refused(settings: Settings, tmp_path: Path) -> None:
    witness.publish(settings, _heads(range(50), 1), last_seq=50)
    witness.publish(settings, _heads(range(2), 2), last_seq=51)
    witness.publish(settings, _heads(range(2), 3), last_seq=52)
    path = settings.witness_path
    good = path.read_bytes()
    snapshot, first, second = _lines(path)

    def refused(data: bytes) -> str:
        path.write_bytes(data)
        witness._seen.clear()
        with pytest.raises(IntegrityViolationError) as info:
            witness.read(settings)
        return info.value.message

    assert "not one this installation signed" in refused(good.replace(b'"last_seq":52', b'"last_seq":99'))
    assert "not one this installation signed" in refused(b"\n".join([snapshot, second, first, b""]))
    # A line signed by this installation but for another snapshot.
    other = msgspec.structs.replace(settings, witness_file=tmp_path / "other.witness", witness_copy_file=None)
    witness.publish(other, _heads(range(3), 1), last_seq=3)
    witness.publish(other, _heads(range(2), 2), last_seq=4)
    foreign = _lines(other.witness_path)[1]
    assert "not one this installation signed" in refused(b"\n".join([snapshot, foreign, b""]))
    # Signed by another installation's key.
    stranger = Settings(data_dir=tmp_path / "s", integrity_key_file=tmp_path / "s.integrity",
                        kek_file=tmp_path / "s.key", witness_file=tmp_path / "s.witness")
    assert keys_of(stranger).current == keys_of(settings).current
    witness.publish(stranger, _heads(range(3), 1), last_seq=3)
    assert "not one this installation signed" in refused(stranger.witness_path.read_bytes())


def test_a_line_cut_off_by_a_crash_is_not_read_and_the_next_publish_cuts_it(settings: Settings) -> None:
    witness.publish(settings, _heads(range(5), 1), last_seq=5)
    witness.publish(settings, _heads(range(2), 2), last_seq=6)
    path = settings.witness_path
    whole = path.read_bytes()
    with path.open("ab") as f:
        f.write(b'{"delta":{"base":"')
    body = _fresh(settings)
    assert body is not None and body.last_seq == 6
    witness.publish(settings, _heads(range(1), 3), last_seq=7)
    assert path.read_bytes().startswith(whole) and len(_lines(path)) == 3
    body = _fresh(settings)
    assert body is not None and body.heads["acme/t0"][0] == 3 and body.last_seq == 7


def test_a_witness_of_before_the_lines_is_read_and_replaced(settings: Settings) -> None:
    witness.publish(settings, _heads(range(4), 1), last_seq=4)
    path = settings.witness_path
    path.write_bytes(_lines(path)[0])  # one snapshot, no newline: as written before
    body = _fresh(settings)
    assert body is not None and body.heads["acme/t3"][0] == 1
    witness.publish(settings, _heads(range(1), 2), last_seq=5)
    lines = _lines(path)
    assert len(lines) == 1 and "body" in json.loads(lines[0])
    body = _fresh(settings)
    assert body is not None and body.heads["acme/t0"][0] == 2 and body.last_seq == 5
