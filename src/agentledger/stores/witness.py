"""The witness of ledger heads: a signed record, kept outside the data folder, of how far the
ledger had reached, so that a ledger cut back or rolled back is noticed.

A chain (``core.ledger_chain``) proves that what the ledger holds was written by the writer in
that order; it cannot prove that nothing was cut off its end, nor that the whole store is not
an older copy (a restored snapshot of the data folder is a valid chain, just a shorter one).
The witness can: it holds, per task, the head (last index and tag) the writer saw committed,
and the highest stream sequence, signed with the writer's Ed25519 key (``integrity_keys``),
in a file beside the keys (``Settings.witness_path``: default the integrity key file with
suffix ``.witness``; 0600, replaced atomically), which the data folder's holder cannot write
and a restore of the data folder does not touch. With ``Settings.witness_copy_file`` every
write also replaces a read-only view of it (``write_view``): for the checkpointer, when the
services run as users of their own and the original is the writer's alone.

The writer publishes it every ``WITNESS_INTERVAL_S`` and when it stops (``publish``: merged
under a file lock with what other writer processes published, a head only ever moving
forward). The file is a signed snapshot of every head on its first line, then one signed line
per publish with only the heads that moved (``Delta``, bound to that snapshot and numbered), so
a publish costs what changed, not every task the ledger ever had; once the lines since the
snapshot outweigh it, the next publish writes one snapshot again (so each head is rewritten a
bounded number of times on average). Readers keep what they read and read only what was
appended since (``read``). ``up`` compares the ledger with it before any service starts (``behind``) and refuses
to serve a ledger behind it. ``accept_rollback`` is the explicit way past that: it records in
the witness what was lost (each task's witnessed and present index, the sequences) and when,
and moves the heads to what the ledger holds, so the acceptance is itself on record.

Forgetting is not a rollback: a task (or tenant) with a ``forget_requested`` event on its
tenant's ``_forget`` ledger (chained like any other) may be gone, and the service ledgers
(``_memory``, ``_documents``, ``_forget``), which lose single messages to forget requests,
are held to the stream's sequence only.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import blake3
import msgspec
import nats.js.errors
from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.contracts.events import DOCUMENTS_TASK, FORGET_TASK, GAP_TASK, GAP_TENANT, MEMORY_TASK
from agentledger.core import ledger_chain
from agentledger.core.integrity import WITNESS
from agentledger.core.ledger_chain import Head
from agentledger.errors import IntegrityViolationError, UnavailableError
from agentledger.projection.stream import read_ordered
from agentledger.security import auth
from agentledger.security.integrity_keys import IntegrityKeys, keys_of
from agentledger.security.private_files import write_private
from agentledger.stores import fences
from agentledger.stores.ledger import get_message, ledger_subject, subject_key

# How often a writer publishes what it committed.
WITNESS_INTERVAL_S = 5.0
_VERSION = 1
_SERVICE_TASKS = frozenset({MEMORY_TASK, DOCUMENTS_TASK, FORGET_TASK, GAP_TASK})
# Direct gets ``behind`` keeps in flight.
_IN_FLIGHT = 64


class Accepted(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An operator's ``up --accept-rollback``: when, and what the ledger had lost."""

    at: str
    last_seq_witnessed: int
    last_seq_present: int
    lost: list[str]


class Body(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What is signed: the stream, its highest sequence, each task's head (index, tag)."""

    version: int
    stream: str
    last_seq: int
    written_at: str
    heads: dict[str, tuple[int, str]] = {}
    accepted: list[Accepted] = []


class _File(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    body: Body
    epoch: int
    signature: str


class Delta(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One publish after the snapshot: the heads that moved and the highest sequence. ``base``
    is the digest of the snapshot line it extends and ``n`` its place after it (1, 2, …), so a
    line cannot be moved to another witness or another place in this one."""

    version: int
    base: str
    n: int
    last_seq: int
    written_at: str
    heads: dict[str, tuple[int, str]] = {}


class _DeltaLine(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    delta: Delta
    epoch: int
    signature: str


_encode = msgspec.json.Encoder(order="sorted").encode
_decode_file = msgspec.json.Decoder(_File).decode
_decode_delta = msgspec.json.Decoder(_DeltaLine).decode
# The lines since the snapshot are folded into a new one once they outweigh it (and this).
COMPACT_MIN_BYTES = 64 * 1024


class _Seen(msgspec.Struct):
    """What a process last read of one witness file: up to ``offset`` (whole lines), the
    snapshot with every line after it applied (``heads`` is this record's own, changed in
    place, so that applying a line costs what it holds), the file's identity and sizes."""

    ino: int
    offset: int
    # The end of the snapshot line (its signature): a file replaced since, whatever inode it got,
    # ends its first line otherwise.
    mark: bytes
    base: str
    n: int
    snapshot_bytes: int
    # The snapshot's fields but its heads (``heads`` holds those, once).
    snapshot: Body
    heads: dict[str, tuple[int, str]]
    last_seq: int
    written_at: str

    def body(self) -> Body:
        """A copy of the witness as one ``Body`` (every head: for the audit and ``up``)."""
        return msgspec.structs.replace(self.snapshot, heads=dict(self.heads), last_seq=self.last_seq,
                                       written_at=self.written_at)

    def move(self, heads: dict[str, tuple[int, str]], last_seq: int, written_at: str) -> None:
        """Heads forward (never back), the sequence up."""
        for name, head in heads.items():
            have = self.heads.get(name)
            if have is None or head[0] > have[0]:
                self.heads[name] = head
        self.last_seq = max(self.last_seq, last_seq)
        self.written_at = written_at


def _seen_of(ino: int, line: bytes, body: Body) -> _Seen:
    return _Seen(ino=ino, offset=len(line) + 1, mark=line[-_MARK:], base=_digest(line), n=0,
                 snapshot_bytes=len(line), snapshot=msgspec.structs.replace(body, heads={}),
                 heads=dict(body.heads), last_seq=body.last_seq,
                 written_at=body.written_at)


_seen: dict[Path, _Seen] = {}
_MARK = 96


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _signed(body: Body) -> bytes:
    return WITNESS + b"\x00" + _encode(body)


def _signed_delta(delta: Delta) -> bytes:
    return WITNESS + b"\x00delta\x00" + _encode(delta)


def _verify(keys: IntegrityKeys, epoch: int, signature: str, signed: bytes) -> None:
    verifier = keys.verifier(epoch)
    if verifier is None:
        raise ValueError(f"unknown key epoch {epoch}")
    verifier.verify(base64.b64decode(signature), signed)


def _apply(seen: _Seen, lines: list[bytes], keys: IntegrityKeys) -> None:
    """Apply delta ``lines`` (each checked: signature, snapshot, place) to ``seen``."""
    for line in lines:
        record = _decode_delta(line)
        _verify(keys, record.epoch, record.signature, _signed_delta(record.delta))
        delta = record.delta
        if delta.base != seen.base or delta.n != seen.n + 1:
            raise ValueError(f"line {delta.n} after {seen.n} of another snapshot or out of place")
        seen.move(delta.heads, delta.last_seq, delta.written_at)
        seen.n = delta.n
        seen.offset += len(line) + 1


def _load(path: Path, keys: IntegrityKeys) -> _Seen | None:
    """The witness at ``path`` as this process last read it plus the lines appended since, or
    read whole when it was replaced (a new snapshot) or never read. Only whole lines count: a
    last line without its newline is a publish a crash cut off (the next publish cuts it away)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        _seen.pop(path, None)
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        seen = _seen.get(path)
        if (seen is not None and seen.ino == st.st_ino and st.st_size >= seen.offset
                and os.pread(f.fileno(), len(seen.mark), seen.snapshot_bytes - len(seen.mark)) == seen.mark):
            f.seek(seen.offset)
            _apply(seen, f.read().split(b"\n")[:-1], keys)
            return seen
        data = f.read()
    first, newline, rest = data.partition(b"\n")
    record = _decode_file(first)
    _verify(keys, record.epoch, record.signature, _signed(record.body))
    seen = _seen_of(st.st_ino, first, record.body)
    seen.offset = len(first) + len(newline)
    _apply(seen, rest.split(b"\n")[:-1], keys)
    _seen[path] = seen
    return seen


def _digest(line: bytes) -> str:
    return blake3.blake3(line).hexdigest()


def _current(settings: Settings, keys: IntegrityKeys | None = None) -> _Seen | None:
    path = settings.witness_path
    keys = keys or keys_of(settings)
    try:
        return _load(path, keys)
    except Exception as exc:  # noqa: BLE001 - undecodable, unknown epoch or a bad signature alike
        _seen.pop(path, None)
        raise IntegrityViolationError(f"the ledger witness {path} is not one this installation signed "
                                      f"({type(exc).__name__}); it was changed outside the services",
                                      where="witness") from None


def read(settings: Settings, keys: IntegrityKeys | None = None) -> Body | None:
    """The witness of ``settings``, every line's signature checked; None when there is none
    yet. A witness with a line not signed by one of this installation's keys, or out of its
    place, is ``integrity_violation``."""
    seen = _current(settings, keys)
    return seen.body() if seen is not None else None


def witnessed_head(settings: Settings, name: str) -> tuple[int, str] | None:
    """The head the witness holds for one task (``task_name``), reading only what was appended
    since this process last looked; ``integrity_violation`` as ``read``."""
    seen = _current(settings)
    return seen.heads.get(name) if seen is not None else None


def _write(settings: Settings, keys: IntegrityKeys, body: Body) -> None:
    """Replace the witness with one snapshot of ``body``."""
    signature = keys.signer().sign(_signed(body))
    record = _File(body=body, epoch=keys.current, signature=base64.b64encode(signature).decode())
    line = msgspec.json.encode(record)
    write_private(settings.witness_path, line.decode() + "\n")
    _seen[settings.witness_path] = _seen_of(os.stat(settings.witness_path).st_ino, line, body)
    if settings.witness_copy_file is not None:
        write_view(settings.witness_copy_file, line + b"\n")


def _append(settings: Settings, keys: IntegrityKeys, seen: _Seen, heads: dict[str, tuple[int, str]],
            last_seq: int) -> None:
    """Append one delta line (synced) after what ``seen`` holds, and to the read-only view."""
    delta = Delta(version=_VERSION, base=seen.base, n=seen.n + 1, last_seq=last_seq, written_at=_now(),
                  heads=heads)
    signature = keys.signer().sign(_signed_delta(delta))
    line = msgspec.json.encode(_DeltaLine(delta=delta, epoch=keys.current,
                                          signature=base64.b64encode(signature).decode())) + b"\n"
    path = settings.witness_path
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    try:
        if os.fstat(fd).st_size != seen.offset:  # a torn line of a crashed publish: cut it off first
            os.ftruncate(fd, seen.offset)
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
    seen.move(heads, last_seq, delta.written_at)
    seen.n, seen.offset = delta.n, seen.offset + len(line)
    if settings.witness_copy_file is not None:
        append_view(settings.witness_copy_file, path, line, seen.offset)


# Mode of the witness's read-only view: the writer replaces it, its folder's group reads it.
VIEW_MODE = 0o640


def write_view(path: Path, data: bytes) -> None:
    """Replace the witness's read-only view at ``path`` (``Settings.witness_copy_file``) whole:
    a reader sees the old copy or the new one. Its group is the folder's (the supervisor makes
    the folder set-group-ID, with the checkpointer's group), so the checkpointer reads it and
    verifies the writer's signature as it would on the writer's own file; nobody else reads it
    and only the writer, the folder's owner, can replace it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), VIEW_MODE)
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def append_view(view: Path, witness_path: Path, line: bytes, size: int) -> None:
    """Append ``line`` to the view as it was appended to the witness (now ``size`` bytes); a
    view that is not the witness's copy up to that line is replaced by one."""
    try:
        fd = os.open(view, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    except FileNotFoundError:
        write_view(view, witness_path.read_bytes()[:size])
        return
    try:
        if os.fstat(fd).st_size + len(line) == size:
            os.write(fd, line)
            return
    finally:
        os.close(fd)
    write_view(view, witness_path.read_bytes()[:size])


@contextlib.contextmanager
def _locked(settings: Settings) -> Iterator[None]:
    """Held across a read-merge-write, so two writer processes never lose each other's heads."""
    lock = settings.witness_path.with_name(settings.witness_path.name + "-lock")
    lock.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def task_name(tenant: str, task_id: str) -> str:
    return f"{tenant}/{task_id}"


def publish(settings: Settings, heads: dict[str, Head], last_seq: int) -> None:
    """Merge ``heads`` (by ``task_name``) and ``last_seq`` into the witness: a head moves only
    forward, the sequence only up. One line of what moved, or a new snapshot once the lines
    outweigh the last one. Synchronous (a file write and an fsync): call it off the event loop."""
    keys = keys_of(settings)
    with _locked(settings):
        seen = _current(settings, keys)
        if seen is None:
            _write(settings, keys, Body(version=_VERSION, stream=settings.stream, last_seq=last_seq,
                                        written_at=_now(), heads={name: (h.index, h.tag) for name, h in heads.items()
                                                                  if h.tag is not None}))
            return
        have = seen.heads
        moved = {name: (h.index, h.tag) for name, h in heads.items()
                 if h.tag is not None and (name not in have or h.index > have[name][0])}
        view = settings.witness_copy_file
        if not moved and last_seq <= seen.last_seq and (view is None or view.exists()):
            return
        # A new snapshot once the lines outweigh the last one, for a witness of before the lines
        # (no newline after its snapshot), or a view to make anew.
        if (seen.offset - seen.snapshot_bytes > max(COMPACT_MIN_BYTES, seen.snapshot_bytes)
                or seen.offset == seen.snapshot_bytes or (view is not None and not view.exists())):
            seen.move(moved, last_seq, _now())
            _write(settings, keys, seen.body())
        else:
            _append(settings, keys, seen, moved, max(last_seq, seen.last_seq))


async def last_head(nc: Client, settings: Settings, key_of: ledger_chain.KeyOf, tenant: str,
                    task_id: str, *, witnessed: Head) -> tuple[Head, int] | None:
    """(head, seq) of a task's last ledger message, its own tag checked; None: no message.

    One direct get (``get_message``): an answer behind ``witnessed`` (a replica that lags holds
    an older last message, or none) is asked again of the stream's leader before it counts."""
    subject = ledger_subject(settings.prefix, tenant, task_id)

    def settled(headers: dict[str, str], body: bytes) -> bool:
        found = _head_of(key_of, tenant, task_id, subject, headers=headers, body=body)
        return found is not None and not ledger_chain.behind(found[0], witnessed)

    try:
        headers, body = await get_message(nc, settings, last_of=subject, settled=settled)
    except UnavailableError as exc:
        raise _unanswered() from exc
    return _head_of(key_of, tenant, task_id, subject, headers=headers, body=body)


def _unanswered() -> IntegrityViolationError:
    return IntegrityViolationError("the ledger did not answer while it was compared with its witness",
                                   where="witness", retryable=True)


def _head_of(key_of: ledger_chain.KeyOf, tenant: str, task_id: str, subject: str, *,
             headers: dict[str, str], body: bytes) -> tuple[Head, int] | None:
    if headers.get("Nats-Subject") != subject or not headers.get("Nats-Sequence"):
        return None
    seq = int(headers["Nats-Sequence"])
    head = ledger_chain.own_head(key_of, tenant=tenant, task=task_id, seq=seq, body=body, headers=headers)
    return (head or ledger_chain.GENESIS), seq


async def forgotten_tasks(nc: Client, settings: Settings, tenant: str) -> tuple[bool, set[str]]:
    """(whole tenant forgotten, tasks forgotten) from the tenant's ``_forget`` ledger."""
    whole = False
    tasks: set[str] = set()
    decoder = msgspec.json.Decoder()

    def handle(msg: object, seq: int) -> None:
        nonlocal whole
        data = getattr(msg, "data", b"")
        try:
            event = decoder.decode(data)
        except msgspec.DecodeError:
            return
        if not isinstance(event, dict) or event.get("kind") != "forget_requested":
            return
        selector = (event.get("payload") or {}).get("selector") or {}
        if selector.get("kind") == "tenant":
            whole = True
        elif selector.get("kind") == "task" and selector.get("task_id"):
            tasks.add(selector["task_id"])

    with contextlib.suppress(nats.js.errors.NotFoundError):
        await read_ordered(nc, settings, handle, subject=ledger_subject(settings.prefix, tenant, FORGET_TASK))
    return whole, tasks


@dataclass
class Losses:
    """What the ledger lacks that the witness saw: ``tasks``, a line per task behind (``tenant/
    task`` → the witnessed and present index); ``stream``, the line when the stream numbers
    below what was witnessed (``numbered`` now, ``witnessed`` then)."""

    numbered: int
    witnessed: int
    tasks: dict[str, str] = field(default_factory=dict)
    stream: str | None = None

    @property
    def lines(self) -> list[str]:
        return sorted([*self.tasks.values(), *([self.stream] if self.stream else [])])


async def behind(nc: Client, settings: Settings, body: Body) -> list[str]:
    """What the ledger lacks that the witness saw: each a line naming the task (or the stream)
    with the witnessed and the present index; empty when the ledger is at or past it."""
    return (await losses(nc, settings, body)).lines


async def losses(nc: Client, settings: Settings, body: Body) -> Losses:
    """``behind``'s findings, per task and for the stream."""
    info = await nc.jetstream().stream_info(settings.stream)
    numbered = max(int(info.state.last_seq), int(info.state.first_seq) - 1)
    found = Losses(numbered=numbered, witnessed=body.last_seq)
    if numbered < body.last_seq:
        found.stream = (f"the ledger stream numbers up to seq {numbered}, but the witness saw seq "
                        f"{body.last_seq} committed: the store was rolled back or cut back")
    key_of = keys_of(settings).mac_key_of
    gate = asyncio.Semaphore(_IN_FLIGHT)
    missing: dict[str, list[tuple[str, int]]] = {}

    async def one(name: str, witnessed: tuple[int, str]) -> None:
        tenant, _, task_id = name.partition("/")
        if task_id in _SERVICE_TASKS:
            return
        async with gate:
            try:
                got = await last_head(nc, settings, key_of, tenant, task_id, witnessed=Head(*witnessed))
            except IntegrityViolationError as exc:
                found.tasks[name] = f"task {name}: {exc.message}"
                return
        if got is None:
            missing.setdefault(tenant, []).append((task_id, witnessed[0]))
            return
        head, _ = got
        if ledger_chain.behind(head, Head(*witnessed)):
            found.tasks[name] = (f"task {name}: the ledger ends at index {head.index}, the witness saw index "
                                 f"{witnessed[0]} committed")

    await asyncio.gather(*(one(name, head) for name, head in body.heads.items()))
    for tenant, tasks in missing.items():
        whole, forgotten = await forgotten_tasks(nc, settings, tenant)
        for task_id, index in tasks:
            if not whole and task_id not in forgotten:
                found.tasks[f"{tenant}/{task_id}"] = (
                    f"task {tenant}/{task_id}: not in the ledger, the witness saw index {index} committed "
                    "(and no forget request names it)")
    return found


async def fill_numbering(settings: Settings, numbered: int, witnessed: int) -> int:
    """Take the sequences a cut ledger would hand out again (``numbered`` + 1 to ``witnessed``)
    with empty messages on the numbering's filler subject, as the writer (only it may publish
    to the ledger): a sequence an ack, a watermark or a fencing token already holds is never
    given to another event. Returns how many were published."""
    gap = witnessed - numbered
    if gap <= 0:
        return 0
    nc = await auth.connect(settings, auth.WRITER)
    try:
        js = nc.jetstream()
        subject = ledger_subject(settings.prefix, GAP_TENANT, GAP_TASK)
        for _ in range(gap):
            await js.publish(subject, b"", stream=settings.stream,
                             headers={"Agentledger-Gap": f"taken: the witness saw seq {witnessed}"})
    finally:
        await nc.close()
    return gap


async def current_heads(nc: Client, settings: Settings) -> tuple[dict[str, Head], int]:
    """Every task's chain head in the ledger now (one ordered read of the stream) and the
    stream's highest sequence: what a first witness, or an accepted rollback, starts from."""
    key_of = keys_of(settings).mac_key_of
    heads: dict[str, Head] = {}

    def handle(msg: object, seq: int) -> None:
        key = subject_key(settings.prefix, getattr(msg, "subject", ""))
        if key is None:
            return
        with contextlib.suppress(IntegrityViolationError):  # the audit reports those
            head = ledger_chain.own_head(key_of, tenant=key[0], task=key[1], seq=seq,
                                         body=getattr(msg, "data", b""), headers=getattr(msg, "headers", None))
            if head is not None:
                heads[task_name(*key)] = head

    await read_ordered(nc, settings, handle)
    info = await nc.jetstream().stream_info(settings.stream)
    return heads, max(int(info.state.last_seq), int(info.state.first_seq) - 1)


@dataclass
class StartCheck:
    """``up``'s finding: ``accepted``, the lines an accepted rollback lost (recorded in the
    witness); ``fenced``, the tasks held (``tenant/task`` → why) while the rest is served;
    ``stream``, a loss of the stream no task explains (reported, nothing fenced); ``filled``,
    the sequences taken so that none is handed out twice."""

    accepted: list[str] = field(default_factory=list)
    fenced: dict[str, str] = field(default_factory=dict)
    stream: str | None = None
    filled: int = 0


async def check_at_start(nc: Client, settings: Settings, *, accept_rollback: bool = False) -> StartCheck:
    """``up``'s check before any service runs. A ledger behind its witness is contained, not
    refused: each task the witness names is fenced (``stores.fences``; every other task is
    served), and the sequences a cut stream would hand out again are taken
    (``fill_numbering``). With ``accept_rollback`` the loss is recorded in the witness, the
    heads move to what the ledger holds and nothing stays fenced. A first start writes the
    first witness."""
    keys = keys_of(settings)
    body = read(settings, keys)
    if body is None:
        heads, last = await current_heads(nc, settings)
        publish(settings, heads, last)
        await fences.write(nc, settings, {})
        return StartCheck()
    found = await losses(nc, settings, body)
    filled = await fill_numbering(settings, found.numbered, found.witnessed)
    if not accept_rollback:
        await fences.write(nc, settings, found.tasks)
        return StartCheck(fenced=found.tasks, stream=found.stream if not found.tasks else None, filled=filled)
    await fences.write(nc, settings, {})
    lost = found.lines
    if not lost:
        return StartCheck(filled=filled)
    heads, last = await current_heads(nc, settings)
    with _locked(settings):
        accepted = Accepted(at=_now(), last_seq_witnessed=body.last_seq, last_seq_present=last, lost=lost)
        _write(settings, keys, Body(version=_VERSION, stream=settings.stream, last_seq=last, written_at=_now(),
                                    heads={name: (h.index, h.tag) for name, h in heads.items() if h.tag},
                                    accepted=[*body.accepted, accepted]))
    return StartCheck(accepted=lost, filled=filled)


async def check_up(settings: Settings, *, accept_rollback: bool = False) -> StartCheck:
    """``check_at_start`` on a connection of its own (``up``, before any service runs)."""
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        return await check_at_start(nc, settings, accept_rollback=accept_rollback)
    finally:
        await nc.close()
