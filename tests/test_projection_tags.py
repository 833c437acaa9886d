"""The pure integrity tags of the projections (``core.projection_tags``, ``core.memory.tags``,
``core.checkpoint_tags``), without servers: each part a tag binds changes it."""

from __future__ import annotations

import pytest

from agentledger.core import checkpoint_tags, projection_tags
from agentledger.core.memory import tags as memory_tags
from agentledger.errors import IntegrityViolationError

KEY = bytes(range(32))
KEY_OF = {1: KEY}.get


def test_the_variables_digest_covers_every_name_and_byte_in_code_point_order() -> None:
    """Protects the task tag's digest: name order is by code point (as PostgreSQL's COLLATE "C"
    on UTF-8 sorts), and a renamed, edited, added or removed row changes it."""
    rows = {"b": b'{"value":1}', "a": b'{"value":2}', "\u00e9": b"{}", "Z": b"{}"}
    joined = projection_tags.variables_input(rows)
    assert joined.split(b"\x00")[::2] == [b"Z", b"a", b"b", "\u00e9".encode()]
    digest = projection_tags.variables_digest(joined)
    for changed in ({**rows, "a": b'{"value":3}'}, {**rows, "c": b"{}"},
                    {k: v for k, v in rows.items() if k != "b"}, {"bb": rows["b"], **{k: rows[k] for k in "aZ"}}):
        assert projection_tags.variables_digest(projection_tags.variables_input(changed)) != digest


def test_a_task_tag_binds_tenant_task_seq_core_and_digest() -> None:
    good = {"seq": 7, "core": b"{}", "digest": b"d" * 32}
    tag = projection_tags.task_tag(1, KEY, "acme", "t1", **good)
    projection_tags.check_task(KEY_OF, "acme", "t1", **good, tag=tag)
    for tenant, task, change in (("acme2", "t1", {}), ("acme", "t2", {}), ("acme", "t1", {"seq": 8}),
                                 ("acme", "t1", {"core": b"{ }"}), ("acme", "t1", {"digest": b"e" * 32})):
        with pytest.raises(IntegrityViolationError):
            projection_tags.check_task(KEY_OF, tenant, task, **{**good, **change}, tag=tag)
    with pytest.raises(IntegrityViolationError):  # an epoch this installation never made
        projection_tags.check_task({2: KEY}.get, "acme", "t1", **good, tag=tag)


def test_turns_must_be_the_contiguous_run_the_task_row_counts() -> None:
    turns = [b'{"ordinal":%d}' % i for i in (1, 2, 3)]
    tags = [projection_tags.turn_tag(1, KEY, "acme", "t1", ordinal=i + 1, turn=t) for i, t in enumerate(turns)]
    projection_tags.check_turns(KEY_OF, "acme", "t1", last=3, ordinals=[1, 2, 3], turns=turns, tags=tags, tail=None)
    projection_tags.check_turns(KEY_OF, "acme", "t1", last=3, ordinals=[2, 3], turns=turns[1:], tags=tags[1:],
                                tail=2)
    bad = [([1, 3], turns[::2], tags[::2], None), ([1, 2], turns[:2], tags[:2], None),
           ([1, 2, 3], [turns[0], turns[2], turns[2]], tags, None), ([3], turns[2:], tags[2:], 2)]
    for ordinals, got, got_tags, tail in bad:
        with pytest.raises(IntegrityViolationError):
            projection_tags.check_turns(KEY_OF, "acme", "t1", last=3, ordinals=ordinals, turns=got,
                                        tags=got_tags, tail=tail)


def test_record_receipt_and_checkpoint_tags_bind_their_place() -> None:
    tag = memory_tags.record_tag(1, KEY, "acme", b"row")
    assert memory_tags.record_matches(KEY_OF, "acme", b"row", tag)
    assert not memory_tags.record_matches(KEY_OF, "evil", b"row", tag)
    assert not memory_tags.record_matches(KEY_OF, "acme", b"row2", tag)
    assert not memory_tags.record_matches(KEY_OF, "acme", b"row", None)
    rtag = memory_tags.receipt_tag(1, KEY, "r1", "acme", b"{}")
    memory_tags.check_receipt(KEY_OF, "r1", "acme", b"{}", rtag)
    with pytest.raises(IntegrityViolationError):
        memory_tags.check_receipt(KEY_OF, "r2", "acme", b"{}", rtag)
    parts = {"seq": 5, "events": 3, "body": b"{}"}
    ctag = checkpoint_tags.checkpoint_tag(1, KEY, 9, "acme", "t1", **parts)
    checkpoint_tags.check_checkpoint(KEY_OF, 9, "acme", "t1", **parts, tag=ctag)
    for cid, task, change in ((10, "t1", {}), (9, "t2", {}), (9, "t1", {"seq": 4}), (9, "t1", {"events": 4})):
        with pytest.raises(IntegrityViolationError):
            checkpoint_tags.check_checkpoint(KEY_OF, cid, "acme", task, **{**parts, **change}, tag=ctag)
