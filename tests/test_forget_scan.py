"""verify-forgotten's scans: every copy of forgotten content is found until it is really gone.

Real servers: a private embedded nats-server and PostgreSQL per module (their data folders are
what the raw scan reads, and the crash test SIGKILLs its own pair; the machine's shared servers
are never touched), and the session's operator-mode server for the logical scan as the
operator. Needles are unique per test, so nothing another test stored can match.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import msgspec
import nats
import pytest
from nats.js import api

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.core.forget import make_receipt
from agentledger.erasure.erase import erase_seqs, erase_subject
from agentledger.erasure.scan import (
    LogicalReport,
    RawReport,
    compact_postgres,
    logical_scan,
    needle_forms,
    raw_scan,
    render,
    vector_needle,
    verify,
    verify_forgotten,
)
from agentledger.models.embedding import WordLlamaEmbedder
from agentledger.runtime.embedded import EmbeddedNats, pid_alive
from agentledger.runtime.postgres import EmbeddedPostgres, database_url
from agentledger.security import auth
from agentledger.stores.artifacts import ArtifactStore
from agentledger.stores.ledger import MSG_ID, ensure_stream, ledger_subject

TENANT = "acme"
KV_BUCKET = "FSCAN"
ART_BUCKET = "FSCANART"


def token(label: str) -> str:
    """A unique word the full-text parser keeps whole (it has digits), in lower case."""
    return f"{label}{uuid.uuid4().hex}7"


def body_of(content: str) -> str:
    return f"the user said {content} twice"


def embedding_needle(content: str) -> bytes:
    """What the CLI can do: embed the forgotten text again (a fresh embedder, as another process
    would) and search the vector's stored bytes."""
    return vector_needle(WordLlamaEmbedder().embed_sync([body_of(content)])[0])


# --- a private pair of servers --------------------------------------------------------------

class Stack:
    """An embedded nats-server (open, no accounts) and PostgreSQL sharing one data folder."""

    def __init__(self, data_dir: Path, server_root: Path) -> None:
        self.data_dir, self.server_root = data_dir, server_root
        self.nats: EmbeddedNats | None = None
        self.pg: EmbeddedPostgres | None = None
        self.service_dsn = self.super_dsn = ""

    def start(self) -> Stack:
        self.nats = EmbeddedNats(self.data_dir, server_root=self.server_root).start()
        self.pg = EmbeddedPostgres(self.data_dir, server_root=self.server_root).start()
        self.service_dsn = self.pg.provision("agentledger")  # the services' role: not a superuser
        self.super_dsn = database_url(self.pg.url, "agentledger")
        return self

    @property
    def settings(self) -> Settings:
        assert self.nats is not None
        return Settings(nats_url=self.nats.url, database_url=self.service_dsn, data_dir=self.data_dir,
                        prefix="fscan", server_root=self.server_root)

    @property
    def store(self) -> Path:
        assert self.nats is not None
        return self.nats.dir / "jetstream"

    @property
    def pgdata(self) -> Path:
        assert self.pg is not None
        return self.pg.pgdata

    def kill(self) -> None:
        """SIGKILL nats-server and every PostgreSQL process of this pair at once: a crash."""
        assert self.nats is not None and self.pg is not None
        nats_pid, pg_pid = self.nats.pid, self.pg.pid
        assert nats_pid is not None and pg_pid is not None
        victims = [nats_pid, *_process_tree(pg_pid)]
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_gone(victims)
        self.nats = self.pg = None

    def stop(self) -> None:
        if self.nats is not None:
            self.nats.stop()
        if self.pg is not None:
            self.pg.stop()
        self.nats = self.pg = None


def wait_gone(pids: list[int]) -> None:
    """Wait until ``pids`` are gone, not just dead: a zombie postmaster (reaped by init within about
    a second here) still answers kill(pid, 0), and a new postmaster refuses its lock file."""
    deadline = time.monotonic() + 30
    while any(pid_alive(pid) or Path(f"/proc/{pid}").exists() for pid in pids):
        assert time.monotonic() < deadline, f"killed processes {pids} did not exit"
        time.sleep(0.05)


def _process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (the postmaster's backends, checkpointer, walwriter...)."""
    parents: dict[int, list[int]] = {}
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append(int(stat_file.parent.name))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo += parents.get(current, [])
    return out


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, server_root: Path) -> Iterator[Stack]:
    servers = Stack(tmp_path_factory.mktemp("fscan"), server_root).start()
    try:
        yield servers
    finally:
        servers.stop()


@pytest.fixture
def crash_stack(tmp_path: Path, server_root: Path) -> Iterator[Stack]:
    servers = Stack(tmp_path / "crash", server_root).start()
    try:
        yield servers
    finally:
        servers.stop()


# --- what the tests write -------------------------------------------------------------------

async def kv_bucket(js: nats.js.JetStreamContext, bucket: str) -> nats.js.kv.KeyValue:
    """A KV bucket whose stream allows message deletes (as the keyring's does), so values can be erased."""
    with contextlib.suppress(nats.js.errors.BadRequestError):
        await js.add_stream(api.StreamConfig(
            name=f"KV_{bucket}", subjects=[f"$KV.{bucket}.>"], allow_rollup_hdrs=True, deny_delete=False,
            discard=api.DiscardPolicy.NEW, max_msgs_per_subject=1, storage=api.StorageType.FILE))
    return await js.key_value(bucket)


def event(task: str, content: str) -> bytes:
    return msgspec.json.encode({"kind": "turn_appended", "event_id": uuid.uuid4().hex, "tenant": TENANT,
                                "task_id": task, "payload": {"role": "user", "content": content}})


class Written:
    """Where one test put its needles, so it can erase exactly those."""

    def __init__(self) -> None:
        self.seqs: list[int] = []
        self.kv_key = ""
        self.artifact = ""
        self.row_id = 0


NOTES_DDL = """
CREATE TABLE IF NOT EXISTS notes (
    id bigint PRIMARY KEY, body text NOT NULL, blob bytea, tsv tsvector, emb vector(256));
CREATE INDEX IF NOT EXISTS notes_body ON notes (body);
CREATE INDEX IF NOT EXISTS notes_tsv ON notes USING gin (tsv);
CREATE INDEX IF NOT EXISTS notes_emb ON notes USING hnsw (emb vector_l2_ops);
CREATE TABLE IF NOT EXISTS tags (tag text NOT NULL);
"""


async def write_everywhere(s: Stack, content: str, subject_id: str) -> Written:
    """The content in a ledger message (and the subject id in its subject), a KV value, an object,
    a row (text, bytea JSON, tsvector under GIN, its embedding under HNSW, as memory records
    hold them) and a column's statistics."""
    out = Written()
    settings = s.settings
    nc = await nats.connect(settings.nats_url)
    try:
        js = nc.jetstream()
        await ensure_stream(settings, nc)
        task = f"task-{subject_id}"
        for i in range(3):
            ack = await js.publish(ledger_subject(settings.prefix, TENANT, task),
                                   event(task, f"my name is {content} ({i})"),
                                   headers={MSG_ID: uuid.uuid4().hex})
            out.seqs.append(int(ack.seq))
        await js.publish(ledger_subject(settings.prefix, TENANT, "other"), event("other", "unrelated"),
                         headers={MSG_ID: uuid.uuid4().hex})
        kv = await kv_bucket(js, KV_BUCKET)
        out.kv_key = f"{TENANT}.{uuid.uuid4().hex[:8]}"
        await kv.put(out.kv_key, msgspec.json.encode({"note": content}))
        store = ArtifactStore(nc, ART_BUCKET)
        blob = os.urandom(200_000) + f"transcript: {content}".encode() + os.urandom(100_000)
        out.artifact = (await store.put(blob, tenant=TENANT, schema="transcript", producer="test")).uri
    finally:
        await nc.close()
    conn = await asyncpg.connect(s.service_dsn)
    try:
        await conn.execute(NOTES_DDL)
        base = random.randrange(1, 1 << 40)
        await conn.executemany(
            "INSERT INTO notes VALUES ($1, $2, convert_to($2, 'UTF8'), to_tsvector('simple', $2), $3::text::vector)",
            [(base + i, f"ordinary note {i}", str([random.random() for _ in range(256)])) for i in range(200)])
        out.row_id = base + 1000
        body = body_of(content)
        await conn.execute(
            "INSERT INTO notes VALUES ($1, $2, $3, to_tsvector('simple', $2), $4::text::vector)",
            out.row_id, body, msgspec.json.encode({"value": body}),
            str(WordLlamaEmbedder().embed_sync([body])[0]))
        # A value common enough to be in the column's most-common-values after ANALYZE.
        await conn.executemany("INSERT INTO tags VALUES ($1)", [(content,)] * 40 + [("x",)] * 40)
        await conn.execute("ANALYZE notes; ANALYZE tags")
    finally:
        await conn.close()
    return out


async def erase_everywhere(s: Stack, written: Written, content: str) -> None:
    """What the fan-out does: secure-erase the JetStream copies, delete the rows."""
    settings = s.settings
    nc = await nats.connect(settings.nats_url)
    try:
        js = nc.jetstream()
        assert await erase_seqs(js, settings.stream, written.seqs) == len(written.seqs)
        assert await erase_subject(js, f"KV_{KV_BUCKET}", f"$KV.{KV_BUCKET}.{written.kv_key}") == 1
        assert await ArtifactStore(nc, ART_BUCKET).erase(written.artifact)
    finally:
        await nc.close()
    conn = await asyncpg.connect(s.service_dsn)
    try:
        await conn.execute("DELETE FROM notes WHERE id = $1", written.row_id)
        await conn.execute("DELETE FROM tags WHERE tag = $1", content)
    finally:
        await conn.close()


def places(report: LogicalReport | RawReport, needle: int) -> set[str]:
    return {f"{f.store} {f.location}" for f in report.findings if f.needle == needle}


def under(report: RawReport, root: Path, needle: int | None = None) -> list[str]:
    return [f.location for f in report.findings
            if f.location.startswith(str(root)) and (needle is None or f.needle == needle)]


def assert_no_needle_text(report: object, needles: list[bytes]) -> None:
    """A report is not a copy of the personal data it looks for."""
    text = render(report).encode() + msgspec.json.encode(report)  # type: ignore[arg-type]
    for needle in needles:
        assert needle not in text


# --- tests ------------------------------------------------------------------------------------

def test_needle_forms_cover_the_encodings_stores_use() -> None:
    """JSON-escaped (both ways), PostgreSQL array and record quoting, lower case and hex; no empty needle."""
    forms = {(f.needle, f.name): f.data for f in needle_forms(['Zoë "Q" 1'.encode(), b"abc"])}
    assert forms[(0, "raw")] == 'Zoë "Q" 1'.encode()
    assert forms[(0, "json")] == 'Zoë \\"Q\\" 1'.encode()
    assert forms[(0, "json-ascii")] == b'Zo\\u00eb \\"Q\\" 1'
    assert forms[(0, "record")] == 'Zoë ""Q"" 1'.encode()
    assert forms[(0, "lower")] == 'zoë "q" 1'.encode()
    assert forms[(0, "hex")] == 'Zoë "Q" 1'.encode().hex().encode()
    assert (0, "array") not in forms  # the same bytes as its json form
    assert set(forms) >= {(1, "raw")} and (1, "hex") not in forms and (1, "json") not in forms
    with pytest.raises(ValueError, match="needle 1 is empty"):
        needle_forms([b"x", b""])


def test_raw_scan_finds_a_needle_across_chunk_boundaries_and_masks_names(tmp_path: Path) -> None:
    """Chunks overlap by the longest form minus one: a needle split by any boundary is found, at its
    offset; symlinks are not followed; a path naming a needle is printed with <needle N>."""
    needle = token("raw").encode()
    other = token("absent").encode()
    (tmp_path / "deep" / "er").mkdir(parents=True)
    for offset in range(40):
        (tmp_path / "deep" / "er" / f"f{offset}").write_bytes(b"\0" * offset + needle + b"\0" * 50)
    (tmp_path / f"named-{needle.decode()}").write_bytes(b"--" + needle)
    (tmp_path / "link").symlink_to(tmp_path / "deep" / "er" / "f0")
    report = raw_scan([tmp_path], [needle, other], chunk=16)
    found = {f.location for f in report.findings if f.needle == 0 and f.form == "raw"}
    assert found == {f"{tmp_path}/deep/er/f{o} at byte {o}" for o in range(40)} | {
        f"{tmp_path}/named-<needle 0> at byte 2"}
    assert not [f for f in report.findings if f.needle == 1]
    assert report.roots[0].files == 41
    assert report.roots[0].bytes == sum(o + len(needle) + 50 for o in range(40)) + 2 + len(needle)
    assert not report.clean and "raw: NOT CLEAN" in render(report)
    assert_no_needle_text(report, [needle, other])
    assert raw_scan([tmp_path], [other]).clean


async def test_each_copy_is_found_until_erased_and_compacted(stack: Stack) -> None:
    """Issue 10 §4/§5: the logical scan finds the content in the ledger, a KV value, an object, a
    text, bytea-JSON and tsvector column and the column statistics, and says where; erased and
    deleted, it is logically clean at once (statistics after ANALYZE). The raw scan finds the
    PostgreSQL copies (dead tuples, WAL, pg_statistic; the text's embedding by its stored bytes)
    until compact_postgres, and is clean after it, HNSW index included; JetStream is raw-clean
    right after the secure erase."""
    content, subject_id = token("fgt"), token("subj")
    vector_bytes = embedding_needle(content)
    needles = [content.encode(), subject_id.encode()]
    written = await write_everywhere(stack, content, subject_id)
    settings = stack.settings

    report = await logical_scan(settings, needles, log_files=[])
    assert report.errors == []
    found = places(report, 0)
    stream = settings.stream
    assert {f"jetstream {stream} seq {seq} (subject fscan.ledger.acme.task-<needle 1>) data"
            for seq in written.seqs} <= found
    assert any(p.startswith(f"jetstream KV_{KV_BUCKET} ") and p.endswith(" data") for p in found)
    assert any(p.startswith(f"jetstream OBJ_{ART_BUCKET} ") and p.endswith(" data") for p in found)
    for column in ("body", "blob", "tsv"):
        assert any(p.startswith("postgres public.notes row ctid ") and p.endswith(f" column {column}")
                   for p in found), column
    assert any(p.startswith("postgres public.tags ") for p in found)
    assert "statistics pg_stats public.tags.tag" in found
    # The bytea JSON column is read as bytes: found in its raw form, not as hex text.
    assert {f.form for f in report.findings if f.location.endswith("column blob")} == {"raw"}
    # The id in the subject is found there, and masked out of every location.
    assert {f"jetstream {stream} seq {seq} (subject fscan.ledger.acme.task-<needle 1>) subject"
            for seq in written.seqs} <= places(report, 1)
    # What was checked: each stream with its counts, each table with rows and indexes.
    kinds = {s.name: s for s in report.streams}
    assert kinds[stream].kind == "stream" and kinds[stream].scanned == kinds[stream].messages >= 4
    assert kinds[f"KV_{KV_BUCKET}"].kind == "kv" and kinds[f"OBJ_{ART_BUCKET}"].kind == "object"
    notes = next(t for t in report.tables if t.name == "notes")
    assert notes.rows == 201 and notes.bytea_columns == ["blob"]
    assert {"notes_tsv (gin)", "notes_emb (hnsw)", "notes_body (btree)"} <= set(notes.indexes)
    assert report.statistics > 0
    assert_no_needle_text(report, needles)
    printed = render(report)
    assert f"stream {stream}:" in printed and "table   public.notes: 201 rows" in printed
    assert "NOT CLEAN" in printed

    before = raw_scan([stack.store, stack.pgdata], [*needles, vector_bytes])
    assert under(before, stack.store, 0) and under(before, stack.pgdata, 0) and under(before, stack.pgdata, 2)

    await erase_everywhere(stack, written, content)

    stale = await logical_scan(settings, needles, log_files=[])
    # Rows are gone at once; ANALYZE's sample of the deleted rows (most common values, histogram
    # bounds, tsvector elements: every column of a small table) is not, until the next ANALYZE.
    assert {f.store for f in stale.findings} == {"statistics"}
    assert {"statistics pg_stats public.tags.tag", "statistics pg_stats public.notes.body",
            "statistics pg_stats public.notes.tsv"} <= {f"{f.store} {f.location}" for f in stale.findings}
    after = await logical_scan(settings, needles, log_files=[], analyze=True)
    assert after.clean, render(after)
    assert "logical: CLEAN" in render(after)

    raw = raw_scan([stack.store, stack.pgdata], [*needles, vector_bytes])
    assert under(raw, stack.store) == [], render(raw)  # secure erase: nothing left in the block files
    dead = under(raw, stack.pgdata)
    assert dead, "the deleted row's bytes should still be in the data folder before compaction"
    assert any("/base/" in p or "/pg_wal/" in p for p in dead)

    compaction = await compact_postgres(stack.super_dsn)
    assert compaction.complete, render(compaction)
    assert {"public.notes", "public.tags"} <= set(compaction.tables)
    assert compaction.wal_recycle_was in ("on", "off") and compaction.rounds >= 1
    assert all(s[:24] > max(compaction.wal_before) for s in compaction.wal_after)
    clean = raw_scan([stack.store, stack.pgdata], [*needles, vector_bytes])
    assert clean.clean, render(clean)
    assert clean.roots[0].files > 0 and clean.roots[1].bytes > 0
    # The kept rows survived the rewrite.
    conn = await asyncpg.connect(stack.service_dsn)
    try:
        assert await conn.fetchval("SELECT count(*) FROM notes WHERE body LIKE 'ordinary note %'") >= 200
    finally:
        await conn.close()


async def test_a_purge_leaves_the_bytes_that_a_secure_erase_removes(stack: Stack) -> None:
    """Why purge is not forgetting: a subject purge, a KV delete and an object store delete all
    pass the logical scan, and the raw scan still finds every one of them in the block files;
    the message-delete API (agentledger.erasure.erase) leaves nothing."""
    erased, purged, kv_deleted, obj_deleted = (token(x) for x in ("erased", "purged", "kvdel", "objdel"))
    needles = [n.encode() for n in (erased, purged, kv_deleted, obj_deleted)]
    nc = await nats.connect(stack.settings.nats_url)
    try:
        js = nc.jetstream()
        await js.add_stream(api.StreamConfig(name="PURGETEST", subjects=["purgetest.>"]))
        for i in range(5):
            await js.publish("purgetest.erase", f"{erased} {i}".encode())
            await js.publish("purgetest.purge", f"{purged} {i}".encode())
            await js.publish("purgetest.keep", f"kept {i}".encode())
        kv = await kv_bucket(js, "PURGEKV")
        await kv.put("k", kv_deleted.encode())
        await kv.put("live", b"still here")
        obs = await js.create_object_store("PURGEOBJ")
        await obs.put("o", f"object {obj_deleted}".encode())
        await obs.put("live", b"still here")
        assert all(under(raw_scan([stack.store], needles), stack.store, i) for i in range(4))

        assert await erase_subject(js, "PURGETEST", "purgetest.erase") == 5
        await js.purge_stream("PURGETEST", subject="purgetest.purge")
        await kv.delete("k")
        await obs.delete("o")
    finally:
        await nc.close()
    logical = await logical_scan(stack.settings, needles, log_files=[])
    assert logical.findings == [] and logical.errors == []
    raw = raw_scan([stack.store], needles)
    assert under(raw, stack.store, 0) == []
    for i in (1, 2, 3):
        assert any("PURGE" in p for p in under(raw, stack.store, i)), (i, render(raw))


async def test_crash_after_erasing_brings_nothing_back(crash_stack: Stack) -> None:
    """Issue 10 §5: SIGKILL nats-server and PostgreSQL right after the erase, restart them on the
    same data folders: nothing erased reappears (logically or in the JetStream files), what was
    kept is all there, and compaction then cleans PostgreSQL's folder. A second crash right after
    the compaction brings nothing back either (crash recovery replays only WAL written after it)."""
    s = crash_stack
    content, subject_id, kept = token("crash"), token("crashsubj"), token("kept")
    needles = [content.encode(), subject_id.encode()]
    raw_needles = [*needles, embedding_needle(content)]
    written = await write_everywhere(s, content, subject_id)
    nc = await nats.connect(s.settings.nats_url)
    try:
        await nc.jetstream().publish(ledger_subject("fscan", TENANT, "keep"), event("keep", kept),
                                     headers={MSG_ID: uuid.uuid4().hex})
    finally:
        await nc.close()

    await erase_everywhere(s, written, content)
    s.kill()
    s.start()
    assert s.pg is not None
    assert "not properly shut down; automatic recovery in progress" in s.pg.log_file.read_text()

    report = await logical_scan(s.settings, needles, log_files=[], analyze=True)
    assert report.clean, render(report)
    canary = await logical_scan(s.settings, [kept.encode()], log_files=[])
    assert len(canary.findings) == 1 and canary.findings[0].location.endswith(" data")
    raw = raw_scan([s.store, s.pgdata], raw_needles)
    assert under(raw, s.store) == [], render(raw)
    assert under(raw, s.pgdata), "the deleted row is in the WAL replayed by crash recovery"

    compaction = await compact_postgres(s.super_dsn)
    assert compaction.complete, render(compaction)
    s.kill()
    s.start()
    verified = await verify_forgotten(s.settings, needles, raw_roots=[s.store, s.pgdata], log_files=[])
    assert verified.clean, render(verified)
    assert raw_scan([s.store, s.pgdata], raw_needles).clean
    assert "verify-forgotten: CLEAN" in render(verified)


async def test_verify_a_subject_receipt_lists_what_is_by_design_and_fails_on_a_kept_key(stack: Stack) -> None:
    """verify(settings, receipt, content): the subject's token in the forget request's own event
    and row and in the clear part of values sealed under its key is expected; the content and a
    key entry still in the keys bucket are findings. Once both are erased: clean, compaction
    complete and the raw scan of the embedded folders (content only) clean."""
    content, subject = token("said"), token("subj")
    settings = stack.settings
    keys_bucket = "FSCANKEYS"
    sealed = ev.Sealed(subject=subject, key_id="k" + uuid.uuid4().hex[:8], nonce="bm9uY2U",
                       ciphertext="Y2lwaGVy")
    request = ev.ForgetRequested(request_id="r" + uuid.uuid4().hex[:12], requested_by="operator/test",
                                 selector=ev.ForgetSelector(kind="subject", subject=subject))
    nc = await nats.connect(settings.nats_url)
    try:
        js = nc.jetstream()
        await ensure_stream(settings, nc)

        async def append(task: str, body: dict[str, object]) -> int:
            ack = await js.publish(ledger_subject(settings.prefix, TENANT, task), msgspec.json.encode(body),
                                   headers={MSG_ID: uuid.uuid4().hex})
            return int(ack.seq)

        await append("t-sealed", {"kind": "turn_appended", "data_subject": subject, "tenant": TENANT,
                                  "payload": {"content": sealed}})
        await append(ev.FORGET_TASK, {"kind": "forget_requested", "payload": request})
        said = await append("t-plain", {"kind": "note", "payload": {"text": f"I am {content}"}})
        keys = await kv_bucket(js, keys_bucket)
        await keys.put(f"{TENANT}.{subject}", b'{"wrapped":"d3JhcHBlZA"}')
    finally:
        await nc.close()
    conn = await asyncpg.connect(stack.service_dsn)
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS forget_requests (request_id text, subject text, "
                           "request bytea)")
        await conn.execute("INSERT INTO forget_requests VALUES ($1, $2, $3)", request.request_id, subject,
                           msgspec.json.encode(request))
    finally:
        await conn.close()
    now = datetime.now(UTC)
    receipt = make_receipt(request, tenant=TENANT, requested_at=now, completed_at=now, indexes=[])

    first = await verify(settings, receipt, [content.encode()], log_files=[])
    assert first.needles == ["content", "selector.subject"] and not first.clean
    strict = {(f.needle, f.store, f.location) for f in first.logical.findings}
    assert strict == {(0, "jetstream", f"{settings.stream} seq {said} (subject fscan.ledger.acme.t-plain) data"),
                      (1, "jetstream", f"KV_{keys_bucket} seq 1 (subject $KV.{keys_bucket}.acme.<needle 1>) "
                                       "subject")}
    reasons = {(f.store, f.location.split(" row ")[0], f.expected) for f in first.logical.expected}
    assert ("jetstream", f"{settings.stream} seq {said - 2} (subject fscan.ledger.acme.t-sealed) data",
            "sealed under the subject's destroyed key") in reasons
    assert ("jetstream", f"{settings.stream} seq {said - 1} (subject fscan.ledger.acme._forget) data",
            "the forget request's own events") in reasons
    assert ("postgres", "public.forget_requests", "the forget request's own rows") in reasons
    printed = render(first)
    assert f"Forget request {request.request_id}: needles 0 = content, 1 = selector.subject" in printed
    assert "expected, by design (not counted)" in printed and "verify-forgotten: NOT CLEAN" in printed
    assert_no_needle_text(first, [content.encode(), subject.encode()])

    nc = await nats.connect(settings.nats_url)
    try:
        js = nc.jetstream()
        assert await erase_seqs(js, settings.stream, [said]) == 1
        assert await erase_subject(js, f"KV_{keys_bucket}", f"$KV.{keys_bucket}.{TENANT}.{subject}") == 1
    finally:
        await nc.close()
    done = await verify(settings, receipt, [content.encode()], raw=True, log_files=[])
    assert done.clean, render(done)
    assert done.compaction is not None and done.compaction.complete
    assert done.raw is not None and done.raw.needles == 1 and len(done.raw.roots) >= 2
    assert len(done.logical.expected) >= 3


BIG = 32_000  # 300 messages of this size fill more than one 8 MB block


async def _layout(js: nats.js.JetStreamContext, name: str, needle: bytes, canary: bytes) -> tuple[list[int], int]:
    """Publish one layout into stream L_<name>; return (sequences to erase, messages kept)."""
    await js.add_stream(api.StreamConfig(name=f"L_{name}", subjects=[f"l.{name}.>"]))

    async def put(payload: bytes) -> int:
        return int((await js.publish(f"l.{name}.x", payload)).seq)

    if name == "last":
        kept = [await put(canary + b" %d" % i) for i in range(4)]
        return [await put(needle)], len(kept)
    if name == "first":
        erase = [await put(needle)]
        return erase, len([await put(canary + b" %d" % i) for i in range(9)])
    if name == "middle":
        kept = [await put(canary + b" a%d" % i) for i in range(10)]
        erase = [await put(needle)]
        kept += [await put(canary + b" b%d" % i) for i in range(10)]
        return erase, len(kept)
    if name == "every":
        return [await put(needle + b" %d" % i) for i in range(10)], 0
    if name == "whole_block":
        erase = [await put(needle + b"-" * BIG) for _ in range(300)]
        return erase, len([await put(canary + b"-" * BIG) for _ in range(100)])
    assert name == "tail_of_two_blocks"
    kept = [await put(canary + b"-" * BIG) for _ in range(300)]
    return [await put(needle + b" %d" % i) for i in range(5)], len(kept)


LAYOUTS = ("last", "first", "middle", "every", "whole_block", "tail_of_two_blocks")


async def test_a_killed_nats_server_brings_no_erased_message_back(tmp_path: Path, server_root: Path) -> None:
    """nats-server has had a bug where deleted messages reappeared after an unclean restart: erase
    in six layouts (the last message, the first, one in the middle, every message, a whole block,
    the tail of a two-block stream), SIGKILL the server at once, restart it on the same store.
    Every erased sequence stays gone, the stream states are the same, the logical and raw scans
    stay clean, and every kept message is still there."""
    needles = {name: token(name.replace("_", "")).encode() for name in LAYOUTS}
    canaries = {name: token("kept").encode() for name in LAYOUTS}
    server = EmbeddedNats(tmp_path, server_root=server_root).start()
    store = server.dir / "jetstream"
    settings = Settings(nats_url=server.url, data_dir=tmp_path, prefix="fscan")
    try:
        nc = await nats.connect(server.url)
        try:
            js = nc.jetstream()
            plans = {name: await _layout(js, name, needles[name], canaries[name]) for name in LAYOUTS}
            for name, (erase, _) in plans.items():
                assert await erase_seqs(js, f"L_{name}", erase) == len(erase)
            states = {name: (await js.stream_info(f"L_{name}")).state for name in LAYOUTS}
            pid = server.pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)  # right after the last erase was acknowledged
        finally:
            with contextlib.suppress(Exception):
                await nc.close()
        wait_gone([pid])
        server = EmbeddedNats(tmp_path, server_root=server_root).start()

        nc = await nats.connect(server.url)
        try:
            js = nc.jetstream()
            for name, (erase, kept) in plans.items():
                state = (await js.stream_info(f"L_{name}")).state
                before = states[name]
                assert (state.messages, state.first_seq, state.last_seq) == (
                    before.messages, before.first_seq, before.last_seq) == (kept, before.first_seq,
                                                                            before.last_seq), name
                for seq in erase:
                    with pytest.raises(nats.js.errors.NotFoundError):
                        await js.get_msg(f"L_{name}", seq)
        finally:
            await nc.close()
        report = await logical_scan(settings, list(needles.values()), log_files=[], postgres=False)
        assert report.clean, render(report)
        assert {s.name: s.scanned for s in report.streams} == {f"L_{n}": plans[n][1] for n in LAYOUTS}
        raw = raw_scan([store], list(needles.values()))
        assert raw.clean, render(raw)
        survivors = await logical_scan(settings, list(canaries.values()), log_files=[], postgres=False)
        per_layout = [sum(1 for f in survivors.findings if f.needle == i) for i in range(len(LAYOUTS))]
        assert per_layout == [plans[n][1] for n in LAYOUTS]
    finally:
        server.stop()


async def test_logical_scan_as_the_operator_reads_the_ledger_buckets_and_tables(settings: Settings) -> None:
    """On the session's operator-mode server, the operator's connection (the default) lists and
    reads every stream of the services' account; the services' role reads every table."""
    content = token("op")
    writer = await auth.connect(settings, auth.WRITER)
    try:
        await ensure_stream(settings)
        ack = await writer.jetstream().publish(ledger_subject(settings.prefix, TENANT, "t1"),
                                               event("t1", content), headers={MSG_ID: uuid.uuid4().hex})
    finally:
        await writer.close()
    operator = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        kv = await kv_bucket(operator.jetstream(), f"{settings.prefix.upper()}_SCAN")
        await kv.put("k", content.encode())
    finally:
        await operator.close()
    conn = await asyncpg.connect(settings.database_url)
    try:
        await conn.execute("CREATE TABLE scan_me (id int, doc jsonb)")
        await conn.execute("INSERT INTO scan_me VALUES (1, $1::jsonb)",
                           msgspec.json.encode({"quote": f'she said "{content}"'}).decode())
    finally:
        await conn.close()

    report = await logical_scan(settings, [content.encode()], log_files=[])
    assert report.errors == []
    found = places(report, 0)
    assert f"jetstream {settings.stream} seq {ack.seq} (subject {settings.prefix}.ledger.acme.t1) data" in found
    assert f"jetstream KV_{settings.prefix.upper()}_SCAN seq 1 (subject $KV.{settings.prefix.upper()}_SCAN.k) data" \
        in found
    assert any(p.startswith("postgres public.scan_me ") and p.endswith("column doc") for p in found)
    assert settings.stream in {s.name for s in report.streams}
