"""The MAC primitives and the integrity key file: what every tamper check builds on."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from agentledger.core import integrity
from agentledger.errors import AgentLedgerError, IntegrityViolationError
from agentledger.security import integrity_keys

KEY = bytes(range(32))


def test_parts_cannot_be_re_split_and_types_do_not_collide() -> None:
    """Moving a byte from one part to the next, or an int for its string, changes the MAC."""
    base = integrity.mac(KEY, integrity.MEMORY_RECORD, ["ab", "c"])
    assert base != integrity.mac(KEY, integrity.MEMORY_RECORD, ["a", "bc"])
    assert integrity.mac(KEY, integrity.MEMORY_RECORD, [1]) != integrity.mac(KEY, integrity.MEMORY_RECORD, ["1"])
    assert integrity.mac(KEY, integrity.MEMORY_RECORD, [None]) != integrity.mac(KEY, integrity.MEMORY_RECORD, [""])
    assert integrity.mac(KEY, integrity.MEMORY_RECORD, [True]) != integrity.mac(KEY, integrity.MEMORY_RECORD, [1])


def test_a_tag_of_one_kind_is_not_valid_as_another_or_under_another_key() -> None:
    parts = ["t1", "task", 7, b"bytes"]
    value = integrity.tag(1, KEY, integrity.WORKING_MEMORY, parts)
    keys = {1: KEY}.get
    assert integrity.matches(value, keys, integrity.WORKING_MEMORY, parts)
    assert not integrity.matches(value, keys, integrity.CHECKPOINT, parts)
    assert not integrity.matches(value, {1: bytes(32)}.get, integrity.WORKING_MEMORY, parts)
    assert not integrity.matches(value, keys, integrity.WORKING_MEMORY, ["t1", "task", 8, b"bytes"])
    assert not integrity.matches(value.replace("1:", "2:", 1), keys, integrity.WORKING_MEMORY, parts)
    for broken in (None, "", "1:abc", "x:" + "0" * 64, value[:-1]):
        assert not integrity.matches(broken, keys, integrity.WORKING_MEMORY, parts)


def test_check_raises_a_typed_violation_naming_the_store() -> None:
    with pytest.raises(IntegrityViolationError) as info:
        integrity.check(None, {1: KEY}.get, integrity.RECEIPT, ["r"], where="receipt", what="receipt r1")
    assert info.value.code == "integrity_violation" and info.value.where == "receipt"
    assert "receipt r1 has no integrity tag" in str(info.value)


def test_the_key_file_is_private_rotates_and_keeps_old_epochs(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "x.integrity"
    with pytest.raises(AgentLedgerError, match="no integrity keys"):
        integrity_keys.load(path, create=False)
    first = integrity_keys.load(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and first.current == 1
    old = integrity.tag(1, first.mac_key, integrity.LEDGER_LINK, ["e"])
    assert integrity_keys.load(path).mac_key == first.mac_key  # read back, not made again
    assert integrity_keys.rotate(path) == 2
    second = integrity_keys.load(path)
    assert second.current == 2 and second.mac_key != first.mac_key
    assert integrity.matches(old, second.mac_key_of, integrity.LEDGER_LINK, ["e"])
    signature = second.signer().sign(b"heads")
    verifier = second.verifier(2)
    assert verifier is not None
    verifier.verify(signature, b"heads")  # raises if it does not verify
    assert second.verifier(3) is None


def test_a_damaged_key_file_is_refused_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "x.integrity"
    path.write_text("{not json")
    with pytest.raises(AgentLedgerError, match="not JSON"):
        integrity_keys.load(path)
    path.write_text('{"version": 1, "current": 2, "epochs": {}}')
    with pytest.raises(AgentLedgerError, match="current epoch 2 has no keys"):
        integrity_keys.load(path)
    path.write_text('{"version": 9, "current": 1, "epochs": {}}')
    with pytest.raises(AgentLedgerError, match="version 9 is not supported"):
        integrity_keys.load(path)


def test_the_mac_of_fixed_input_never_changes() -> None:
    """Stored tags must keep verifying across releases: a change of the byte layout (order,
    length prefixes, type marks) would refuse every row and event ever tagged."""
    got = integrity.mac(KEY, integrity.LEDGER_LINK, ["acme", "t1", 3, None, True, b"body"]).hex()
    assert got == "fa8400da428596cdf58c56a8e8cf6f154eb445995eea324fdb3bb5ee8feaa8a0"
