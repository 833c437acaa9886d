"""The chain's rules, pure: what links, and what each kind of edit fails with (no servers)."""

from __future__ import annotations

import secrets

import pytest

from agentledger.core import ledger_chain
from agentledger.core.ledger_chain import CHAIN, GENESIS, RESYNC, Head
from agentledger.errors import IntegrityViolationError

KEY = secrets.token_bytes(32)


def key_of(epoch: int) -> bytes | None:
    return KEY if epoch == 1 else None


def chain(n: int, task: str = "t1") -> list[tuple[bytes, dict[str, str]]]:
    """``n`` messages of one task as the writer frames them."""
    head = GENESIS
    out = []
    for i in range(n):
        body = f'{{"event_id":"e{i}"}}'.encode()
        headers = {"Nats-Msg-Id": f"acme/{task}/e{i}", "Agentledger-Digest": f"{i:064x}"}
        value, head = ledger_chain.link(1, KEY, head, tenant="acme", task=task, body=body, headers=headers)
        out.append((body, {**headers, CHAIN: value}))
    return out


def fold(messages: list[tuple[bytes, dict[str, str]]], *, task: str = "t1", head: Head = GENESIS,
         erasable: bool = False) -> Head:
    for seq, (body, headers) in enumerate(messages, 1):
        head = ledger_chain.check(head, key_of, tenant="acme", task=task, seq=seq, body=body,
                                  headers=headers, erasable=erasable)
    return head


def test_a_chain_links_index_by_index() -> None:
    head = fold(chain(4))
    assert head.index == 4 and head.tag is not None and head.tag.startswith("1:")


@pytest.mark.parametrize(("edit", "names"), [
    (lambda ms: [(ms[0][0], ms[0][1]), (b'{"event_id":"x"}', ms[1][1]), *ms[2:]], "index 2 (seq 2)"),
    (lambda ms: [ms[0], (ms[1][0], {**ms[1][1], "Agentledger-Digest": "0" * 64}), *ms[2:]],
     "index 2 (seq 2)"),
    (lambda ms: [ms[0], ms[2], ms[3]], "events 2 to 2 are missing"),
    (lambda ms: [ms[0], ms[2], ms[1], ms[3]], "events 2 to 2 are missing"),
    (lambda ms: [*ms, ms[1]], "reordered or an event was replayed"),
    (lambda ms: [*ms, (b"{}", {"Nats-Msg-Id": "acme/t1/f"})], "carries no chain tag"),
], ids=["body", "metadata", "middle_deletion", "reordering", "old_event_put_back", "unchained_insertion"])
def test_each_edit_fails_naming_task_and_place(edit: object, names: str) -> None:
    assert callable(edit)
    with pytest.raises(IntegrityViolationError) as info:
        fold(edit(chain(4)))
    assert names in info.value.message and "task 't1'" in info.value.message
    assert info.value.code == "integrity_violation" and info.value.where == "ledger"


def test_a_message_moved_to_another_task_fails_its_tag() -> None:
    with pytest.raises(IntegrityViolationError, match="fails its integrity tag"):
        fold(chain(2), task="t2")


def test_a_tag_of_an_unknown_epoch_fails() -> None:
    body, headers = chain(1)[0]
    index, _prev, tag = ledger_chain.parse(headers[CHAIN]) or (0, None, "")
    forged = {**headers, CHAIN: f"{index};-;2:{tag.partition(':')[2]}"}
    with pytest.raises(IntegrityViolationError):
        fold([(body, forged)])


def test_legacy_unchained_tasks_stay_readable_and_a_chain_may_start_after_them() -> None:
    legacy = [(b"{}", {"Nats-Msg-Id": "acme/t1/old"})]
    assert fold(legacy) == GENESIS
    assert fold([*legacy, *chain(2)]).index == 2


def test_service_ledgers_accept_erased_gaps_but_not_reordering() -> None:
    ms = chain(5, task="_memory")
    assert fold([ms[0], ms[3], ms[4]], task="_memory", erasable=True).index == 5
    with pytest.raises(IntegrityViolationError):
        fold([ms[0], ms[3], ms[2]], task="_memory", erasable=True)


def test_an_unknowable_head_resynchronises_on_the_next_tag() -> None:
    ms = chain(5)
    assert fold(ms[3:], head=RESYNC).index == 5
    with pytest.raises(IntegrityViolationError):
        fold([ms[3], ms[3]], head=RESYNC)


def test_behind_compares_with_a_witnessed_head() -> None:
    head = fold(chain(3))
    assert ledger_chain.behind(Head(2, "1:" + "0" * 64), head) is True
    assert ledger_chain.behind(Head(3, "1:" + "0" * 64), head) is True
    assert ledger_chain.behind(head, head) is False
