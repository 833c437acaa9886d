"""The forget journal and the choice of what a restore applies again (no servers needed)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agentledger.backup.reapply import pending
from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.errors import IntegrityViolationError
from agentledger.stores import forget_journal
from agentledger.stores.forget_journal import Entry

MARKER = b"m" * 32
T0 = datetime(2026, 12, 4, 3, 0, tzinfo=UTC)


def _entry(request_id: str, selector: ev.ForgetSelector, at: datetime, tenant: str = "acme") -> Entry:
    return Entry(version=1, request_id=request_id, tenant=tenant, requested_by="operator", requested_at=at,
                 selector=forget_journal.journaled(selector, MARKER))


def test_the_journal_keeps_every_request_in_order_and_a_key_only_as_its_digest(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", forget_journal_file=tmp_path / "keys" / "x.forgets")
    key = ev.ForgetSelector(kind="key", key="preference.favourite_colour")
    subject = ev.ForgetSelector(kind="subject", subject="s-alice")
    forget_journal.record(settings, _entry("fg-1", key, T0))
    forget_journal.record(settings, _entry("fg-2", subject, T0 + timedelta(seconds=1)))
    read = forget_journal.read(settings)
    assert [e.request_id for e in read] == ["fg-1", "fg-2"]
    assert read[0].selector.key_digest == forget_journal.key_digest("preference.favourite_colour", MARKER)
    assert b"favourite_colour" not in settings.forget_journal_path.read_bytes()
    assert settings.forget_journal_path.stat().st_mode & 0o777 == 0o600
    assert read[1].selector.subject == "s-alice"


def test_a_journal_line_that_cannot_be_read_stops_the_restore(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", forget_journal_file=tmp_path / "x.forgets")
    forget_journal.record(settings, _entry("fg-1", ev.ForgetSelector(kind="task", task_id="t1"), T0))
    with settings.forget_journal_path.open("ab") as f:
        f.write(b'{"version":1,"request_id":"fg-2","tenant":"ac\n')
    with pytest.raises(IntegrityViolationError, match="line 2"):
        forget_journal.read(settings)


def test_a_restore_applies_again_only_what_the_restored_database_lacks() -> None:
    task = ev.ForgetSelector(kind="task", task_id="t1")
    subject = ev.ForgetSelector(kind="subject", subject="s-alice")
    entries = [_entry("fg-1", task, T0), _entry("fg-2", subject, T0 + timedelta(minutes=1)),
               _entry("fg-3", subject, T0 + timedelta(minutes=2)), _entry("fg-4", task, T0, tenant="other")]
    # Nothing of it in the restored database: one request per tenant and selector.
    assert [e.request_id for e in pending(entries, [])] == ["fg-1", "fg-2", "fg-4"]
    done = [("acme", "fg-1", forget_journal.journaled(task, MARKER), T0),
            # The same selector completed later (an earlier restore's re-application) covers fg-2.
            ("acme", "re-x", forget_journal.journaled(subject, MARKER), T0 + timedelta(minutes=1, seconds=5))]
    assert [e.request_id for e in pending(entries, done)] == ["fg-3", "fg-4"]
