"""The forget journal: every accepted forget request, kept outside the data folder, so that a
restore of an older backup can apply again what was forgotten after the backup was taken.

A backup is a copy of the ledger and the projections at one moment. A forget requested later
reaches the live stores, never that copy: restored as it is, the copy would bring back what the
forget removed. The ledger's own record of the request (``forget_requested`` on the tenant's
``_forget`` subject) is in the data folder, which is exactly what a restore replaces. So the
tombstone-fanout also appends each request it accepts, before it appends it to the ledger and
before it answers, to this journal (a request whose append then fails stays in it: a restore
applies it too, since the caller asked for it): one JSON line a request, in a file beside the keys
(``Settings.forget_journal_path``: default the integrity key file with suffix ``.forgets``;
mode 0600; when root ran ``up``, in the fan-out's home, ``with_journal``), which a restore of
the data folder does not touch (``backup.restore`` reads it).

It keeps what a selector names except a memory key's words: a key selector is kept as the
key's keyed digest (``key_digest``, under the marker key beside the key-encryption key), and
the restore finds the key again among the restored records' keys. Subjects, tasks and records
are named by the pseudonymous ids the ledger uses anyway.

A second kind of line, ``Copies``, is written by a subject forget's ``derived`` step
(``tombstone_fanout.derived``): the plaintext copies it found by the subject's values (document
versions, read receipts, generations), by id only, never a needle. A restored backup holds those
copies again, and its re-applied forget cannot find them the same way once the subject's key no
longer opens there (destroyed, or under a retired epoch); it reaches them by these ids.

A line that cannot be read is ``integrity_violation``, never skipped: skipping it could bring a
forgotten thing back.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import msgspec

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.core.memory.keys import tombstone_key
from agentledger.errors import IntegrityViolationError

_VERSION = 1
# The scope the digest of a key selector's key is made under (a key forget can span scopes).
KEY_SCOPE = "forget-journal"


class Selector(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A forget selector as journaled: as the request named it, a key by its digest only."""

    kind: str
    record_id: str | None = None
    key_digest: str | None = None
    scope: ev.Scope | None = None
    subject: str | None = None
    task_id: str | None = None


class Entry(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, tag="request"):
    """One accepted forget request."""

    version: int
    request_id: str
    tenant: str
    selector: Selector
    requested_by: str
    requested_at: datetime
    reason: str = ""
    legal_basis: str = ""


class Copies(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, tag="derived"):
    """The plaintext copies of a data subject's values a forget's ``derived`` step reached."""

    version: int
    request_id: str
    tenant: str
    subject: str
    documents: list[tuple[str, int]] = []
    receipts_redacted: list[str] = []
    receipts: list[str] = []
    generations: list[str] = []


_decode = msgspec.json.Decoder(Entry | Copies).decode


def key_digest(key: str, marker_key: bytes) -> str:
    """The digest a key selector's key is journaled under."""
    return tombstone_key(KEY_SCOPE, key, marker_key)


def journaled(selector: ev.ForgetSelector, marker_key: bytes) -> Selector:
    return Selector(kind=selector.kind, record_id=selector.record_id,
                    key_digest=key_digest(selector.key, marker_key) if selector.key is not None else None,
                    scope=selector.scope, subject=selector.subject, task_id=selector.task_id)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[int]:
    """The journal open for appending, under an exclusive lock (instances append together)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def record(settings: Settings, entry: Entry | Copies) -> None:
    """Append ``entry`` and flush it to disk. Synchronous (a small write): call it off the loop."""
    line = msgspec.json.encode(entry) + b"\n"
    with _locked(settings.forget_journal_path) as fd:
        os.write(fd, line)
        os.fsync(fd)


def read(settings: Settings) -> list[Entry | Copies]:
    """Every line, oldest first; none when there is no journal yet."""
    path = settings.forget_journal_path
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    entries = []
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entries.append(_decode(line))
        except msgspec.MsgspecError as exc:
            raise IntegrityViolationError(f"line {number} of the forget journal {path} cannot be read "
                                          f"({exc}); a restore would not know what to forget again",
                                          where="forget_journal") from None
    return entries


def requests(settings: Settings) -> list[Entry]:
    """Every journaled forget request, oldest first."""
    return [e for e in read(settings) if isinstance(e, Entry)]


def copies_of(settings: Settings, tenant: str, subject: str) -> list[Copies]:
    """What earlier forgets of ``subject`` found as its plaintext copies."""
    return [e for e in read(settings) if isinstance(e, Copies) and e.tenant == tenant and e.subject == subject]
