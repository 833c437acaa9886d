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
forward). ``up`` compares the ledger with it before any service starts (``behind``) and refuses
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
from pathlib import Path

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.contracts.events import DOCUMENTS_TASK, FORGET_TASK, MEMORY_TASK
from agentledger.core import ledger_chain
from agentledger.core.integrity import WITNESS
from agentledger.core.ledger_chain import Head
from agentledger.errors import IntegrityViolationError
from agentledger.projection.stream import read_ordered
from agentledger.security import auth
from agentledger.security.integrity_keys import IntegrityKeys, keys_of
from agentledger.security.private_files import write_private
from agentledger.stores.ledger import ledger_subject, subject_key

# How often a writer publishes what it committed.
WITNESS_INTERVAL_S = 5.0
_VERSION = 1
_SERVICE_TASKS = frozenset({MEMORY_TASK, DOCUMENTS_TASK, FORGET_TASK})
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


_encode = msgspec.json.Encoder(order="sorted").encode
_decode_file = msgspec.json.Decoder(_File).decode


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _signed(body: Body) -> bytes:
    return WITNESS + b"\x00" + _encode(body)


def read(settings: Settings, keys: IntegrityKeys | None = None) -> Body | None:
    """The witness of ``settings``, its signature checked; None when there is none yet. A
    witness that is not signed by one of this installation's keys is ``integrity_violation``."""
    path = settings.witness_path
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    keys = keys or keys_of(settings)
    try:
        record = _decode_file(data)
        verifier = keys.verifier(record.epoch)
        if verifier is None:
            raise ValueError(f"unknown key epoch {record.epoch}")
        verifier.verify(base64.b64decode(record.signature), _signed(record.body))
    except Exception as exc:  # noqa: BLE001 - undecodable, unknown epoch or a bad signature alike
        raise IntegrityViolationError(f"the ledger witness {path} is not one this installation signed "
                                      f"({type(exc).__name__}); it was changed outside the services",
                                      where="witness") from None
    return record.body


def _write(settings: Settings, keys: IntegrityKeys, body: Body) -> None:
    signature = keys.signer().sign(_signed(body))
    record = _File(body=body, epoch=keys.current, signature=base64.b64encode(signature).decode())
    text = msgspec.json.encode(record).decode()
    write_private(settings.witness_path, text)
    if settings.witness_copy_file is not None:
        write_view(settings.witness_copy_file, text.encode())


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
    forward, the sequence only up. Synchronous (a small file): call it off the event loop."""
    keys = keys_of(settings)
    with _locked(settings):
        old = read(settings, keys)
        merged = dict(old.heads) if old is not None else {}
        for name, head in heads.items():
            have = merged.get(name)
            if head.tag is not None and (have is None or head.index > have[0]):
                merged[name] = (head.index, head.tag)
        body = Body(version=_VERSION, stream=settings.stream,
                    last_seq=max(last_seq, old.last_seq if old is not None else 0), written_at=_now(),
                    heads=merged, accepted=list(old.accepted) if old is not None else [])
        if old is not None and body.heads == old.heads and body.last_seq == old.last_seq and (
                settings.witness_copy_file is None or settings.witness_copy_file.exists()):
            return
        _write(settings, keys, body)


async def last_head(nc: Client, settings: Settings, key_of: ledger_chain.KeyOf, tenant: str,
                     task_id: str) -> tuple[Head, int] | None:
    """(head, seq) of a task's last ledger message, its own tag checked; None: no message."""
    subject = ledger_subject(settings.prefix, tenant, task_id)
    try:
        reply = await nc.request(f"$JS.API.DIRECT.GET.{settings.stream}",
                                 msgspec.json.encode({"last_by_subj": subject}), timeout=5)
    except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
        raise IntegrityViolationError("the ledger did not answer while it was compared with its witness",
                                      where="witness", retryable=True) from exc
    headers = reply.headers or {}
    if headers.get("Nats-Subject") != subject or not headers.get("Nats-Sequence"):
        return None
    seq = int(headers["Nats-Sequence"])
    head = ledger_chain.own_head(key_of, tenant=tenant, task=task_id, seq=seq, body=reply.data,
                                 headers=headers)
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


async def behind(nc: Client, settings: Settings, body: Body) -> list[str]:
    """What the ledger lacks that the witness saw: each a line naming the task (or the stream)
    with the witnessed and the present index; empty when the ledger is at or past it."""
    lines: list[str] = []
    info = await nc.jetstream().stream_info(settings.stream)
    numbered = max(int(info.state.last_seq), int(info.state.first_seq) - 1)
    if numbered < body.last_seq:
        lines.append(f"the ledger stream numbers up to seq {numbered}, but the witness saw seq "
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
                found = await last_head(nc, settings, key_of, tenant, task_id)
            except IntegrityViolationError as exc:
                lines.append(f"task {name}: {exc.message}")
                return
        if found is None:
            missing.setdefault(tenant, []).append((task_id, witnessed[0]))
            return
        head, _ = found
        if ledger_chain.behind(head, Head(*witnessed)):
            lines.append(f"task {name}: the ledger ends at index {head.index}, the witness saw index "
                         f"{witnessed[0]} committed")

    await asyncio.gather(*(one(name, head) for name, head in body.heads.items()))
    for tenant, tasks in missing.items():
        whole, forgotten = await forgotten_tasks(nc, settings, tenant)
        lines.extend(f"task {tenant}/{task_id}: not in the ledger, the witness saw index {index} committed "
                     "(and no forget request names it)"
                     for task_id, index in tasks if not whole and task_id not in forgotten)
    return sorted(lines)


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


async def check_at_start(nc: Client, settings: Settings, *, accept_rollback: bool = False) -> list[str]:
    """``up``'s check before any service runs: raise ``IntegrityViolationError`` naming what is
    missing when the ledger is behind its witness (unless ``accept_rollback``, which records
    the loss in the witness and returns its lines). A first start writes the first witness."""
    keys = keys_of(settings)
    body = read(settings, keys)
    if body is None:
        heads, last = await current_heads(nc, settings)
        publish(settings, heads, last)
        return []
    lost = await behind(nc, settings, body)
    if not lost:
        return []
    if not accept_rollback:
        raise IntegrityViolationError(
            "the ledger is behind its witness, so it is not served:\n  " + "\n  ".join(lost) +
            f"\nThe witness ({settings.witness_path}) records what the writer had committed. Put "
            "the newer copy of the data folder back (or the NATS store that holds these events) "
            "and start again; only if that copy is gone for good, `agentledger up "
            "--accept-rollback` serves this ledger and records in the witness what was lost.",
            where="witness")
    heads, last = await current_heads(nc, settings)
    with _locked(settings):
        accepted = Accepted(at=_now(), last_seq_witnessed=body.last_seq, last_seq_present=last, lost=lost)
        _write(settings, keys, Body(version=_VERSION, stream=settings.stream, last_seq=last, written_at=_now(),
                                    heads={name: (h.index, h.tag) for name, h in heads.items() if h.tag},
                                    accepted=[*body.accepted, accepted]))
    return lost


async def check_up(settings: Settings, *, accept_rollback: bool = False) -> list[str]:
    """``check_at_start`` on a connection of its own (``up``, before any service runs)."""
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        return await check_at_start(nc, settings, accept_rollback=accept_rollback)
    finally:
        await nc.close()
