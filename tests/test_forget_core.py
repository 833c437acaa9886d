"""The I/O-free rules of forgetting: selectors, who may ask, and the receipt digest."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentledger.contracts import events as ev
from agentledger.core.forget import (
    check_may_forget,
    check_selector,
    make_receipt,
    selector_key_digest,
    stored_selector,
    verify_receipt,
)
from agentledger.core.memory.keys import normalise_key
from agentledger.errors import ContractError, PermissionDeniedError

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("selector", "code", "path"), [
    ({"kind": "record"}, "missing_field", "$.selector.record_id"),
    ({"kind": "subject", "subject": "s1", "task_id": "t1"}, "unknown_field", "$.selector.task_id"),
    ({"kind": "task", "task_id": "_memory"}, "reserved_task", "$.selector.task_id"),
    ({"kind": "tenant", "subject": "s1"}, "unknown_field", "$.selector.subject"),
    ({"kind": "key", "key": "preference.language", "scope": {"level": "user", "tenant": "other", "id": "u1"}},
     "invalid_value", "$.selector.scope.tenant"),
    ({"kind": "record", "record_id": "r1", "scope": {"level": "tenant", "tenant": "acme"}},
     "unknown_field", "$.selector.scope"),
    ({"kind": "key", "key": "k", "key_digests": ["forgotten:" + "0" * 32]}, "unknown_field",
     "$.selector.key_digests"),
])
def test_a_selector_names_exactly_what_its_kind_needs(selector: dict[str, object], code: str, path: str) -> None:
    with pytest.raises(ContractError) as info:
        check_selector(msgspec.convert(selector, ev.ForgetSelector), "acme")
    assert (info.value.code, info.value.path) == (code, path)


def test_well_formed_selectors_pass() -> None:
    for selector in ({"kind": "record", "record_id": "r1"}, {"kind": "key", "key": "k"},
                     {"kind": "key", "key": "k", "scope": {"level": "user", "tenant": "acme", "id": "u1"}},
                     {"kind": "subject", "subject": "s1"}, {"kind": "task", "task_id": "t1"},
                     {"kind": "tenant"}):
        check_selector(msgspec.convert(selector, ev.ForgetSelector), "acme")


@given(st.text(min_size=1, max_size=40))
def test_a_stored_key_selector_holds_digests_not_words(key: str) -> None:
    """What the service keeps of a key selector: no words, a digest of the key and of its
    canonical form (what the memory step matches), the same again when stored twice."""
    secret = b"m" * 32
    request = ev.ForgetSelector(kind="key", key=key, scope=ev.Scope(level="project", tenant="acme", id="p1"))
    stored = stored_selector(request, secret)
    assert stored.key is None and stored.scope == request.scope
    assert stored.key_digests == list(dict.fromkeys(
        selector_key_digest(k, secret) for k in (key, normalise_key(key))))
    assert stored_selector(stored, secret) == stored
    assert stored_selector(ev.ForgetSelector(kind="subject", subject="s1"), secret).subject == "s1"
    assert stored_selector(request, b"n" * 32).key_digests != stored.key_digests  # keyed


def test_only_an_operator_forgets_a_whole_tenant() -> None:
    tenant = ev.ForgetSelector(kind="tenant")
    with pytest.raises(PermissionDeniedError):
        check_may_forget(tenant, operator=False)
    check_may_forget(tenant, operator=True)
    check_may_forget(ev.ForgetSelector(kind="subject", subject="s1"), operator=False, bound_users=frozenset({"s1"}))


def test_an_agent_forgets_only_its_subjects_and_tasks_nobody_else_leases() -> None:
    """Protects one user's data and one agent's running task from the other agents of their tenant."""
    subject = ev.ForgetSelector(kind="subject", subject="s1")
    task = ev.ForgetSelector(kind="task", task_id="t1")
    with pytest.raises(PermissionDeniedError) as info:
        check_may_forget(subject, operator=False, bound_users=frozenset({"s2"}))
    assert (info.value.code, info.value.path) == ("subject_not_bound", "$.selector.subject")
    with pytest.raises(PermissionDeniedError) as info:
        check_may_forget(task, operator=False, agent="bob", lease_holder="alice")
    assert (info.value.code, info.value.path) == ("task_leased", "$.selector.task_id")
    check_may_forget(task, operator=False, agent="alice", lease_holder="alice")
    check_may_forget(task, operator=False, agent="bob")
    check_may_forget(subject, operator=True)
    check_may_forget(task, operator=True, lease_holder="alice")


def _receipt(counts: dict[str, int]) -> ev.DeletionReceipt:
    request = ev.ForgetRequested(request_id="fg-1", selector=ev.ForgetSelector(kind="subject", subject="s1"),
                                 requested_by="acme/bot")
    indexes = [ev.IndexReceipt(index="keys", status="done", completed_at=T0 + timedelta(seconds=1),
                               counts=counts),
               ev.IndexReceipt(index="ledger", status="not_applicable", completed_at=T0)]
    return make_receipt(request, tenant="acme", requested_at=T0, completed_at=T0 + timedelta(seconds=2),
                        indexes=indexes)


@given(st.dictionaries(st.sampled_from(["subjects", "rows", "messages"]), st.integers(0, 10**6), min_size=1))
def test_the_digest_seals_every_field(counts: dict[str, int]) -> None:
    """The same receipt always hashes the same; changing any count, index or time breaks it."""
    receipt = _receipt(counts)
    assert verify_receipt(receipt) and receipt == _receipt(dict(counts))
    assert receipt.subject == "s1"
    bumped = {k: v + 1 for k, v in counts.items()}
    tampered = [
        msgspec.structs.replace(receipt, indexes=[msgspec.structs.replace(receipt.indexes[0], counts=bumped),
                                                  receipt.indexes[1]]),
        msgspec.structs.replace(receipt, completed_at=receipt.completed_at + timedelta(microseconds=1)),
        msgspec.structs.replace(receipt, indexes=receipt.indexes[:1]),
        msgspec.structs.replace(receipt, tenant="other"),
    ]
    assert not any(verify_receipt(t) for t in tampered)


def test_a_key_or_record_only_within_the_agents_bindings() -> None:
    """Issue 49, item 5: a key in a user's or project's scope only when the agent is bound to it;
    a key named without a scope never (it reaches every scope); a record by its scope."""
    def key(level: str, ident: str | None) -> ev.ForgetSelector:
        return ev.ForgetSelector(kind="key", key="k", scope=ev.Scope(level=level, tenant="acme", id=ident))

    users, projects = frozenset({"u1"}), frozenset({"p1"})
    for allowed in (key("user", "u1"), key("project", "p1"), key("tenant", None), key("task", "t1")):
        check_may_forget(allowed, operator=False, bound_users=users, bound_projects=projects)
    for refused in (key("user", "u2"), key("project", "p2")):
        with pytest.raises(PermissionDeniedError) as info:
            check_may_forget(refused, operator=False, bound_users=users, bound_projects=projects)
        assert info.value.code == "scope_not_allowed"
    with pytest.raises(PermissionDeniedError) as info:
        check_may_forget(ev.ForgetSelector(kind="key", key="k"), operator=False, bound_users=users)
    assert info.value.code == "scope_required"
    record = ev.ForgetSelector(kind="record", record_id="r1")
    with pytest.raises(PermissionDeniedError):
        check_may_forget(record, operator=False, bound_users=users,
                         record_scope=ev.Scope(level="user", tenant="acme", id="u2"))
    check_may_forget(record, operator=False, bound_users=users, record_scope=ev.Scope(level="user", tenant="acme",
                                                                                       id="u1"))
    check_may_forget(ev.ForgetSelector(kind="key", key="k"), operator=True)
