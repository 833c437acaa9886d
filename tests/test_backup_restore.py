"""``agentledger backup`` and ``restore`` on the stack as ``agentledger up`` runs it.

The backup test of issue 23: a backup is taken, a data subject (Alice) is forgotten, the
key-encryption key is rotated and the old epoch retired, and the old backup is restored into a
fresh stack (new data folder, new NATS and PostgreSQL homes; the keys, the witness and the forget
journal beside them stay). No sealed value of Alice's opens through the API or from the files: the
re-applied forget erased the plaintext copies the backup held (a context generation over her
conversation; a document quoting her address, found at the forget by her value and journaled by
id, since the backup's copy of her key no longer opens), the raw bytes of the data folder and of
both servers' homes hold none of her values after the documented compaction (our own scan, not
verify-forgotten), and her data key is gone; the content not sealed is all there and readable.
With the data keys of a backup made after the rotation (``--keys-from``), Bob's sealed values open
again and Alice's do not. A second test forgets a task after the backup and shows the restore
applying it again before any tenant is served.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentledger.backup import restore as restoring
from agentledger.backup import take
from agentledger.cli.keys import retire, rotate
from agentledger.cli.main import main
from agentledger.client import connect
from agentledger.config import Settings
from agentledger.erasure.compaction import compact_postgres
from agentledger.erasure.scan import embedded_superuser_dsn
from agentledger.errors import AgentLedgerError, ContractError
from agentledger.runtime import commands
from agentledger.runtime.hosting import instance_id
from agentledger.runtime.state import resolve_urls
from agentledger.security import auth
from agentledger.security.sealing import Keyring, kek_of
from agentledger.services.projector.rebuild import verify
from agentledger.stores import forget_journal
from ckpt_support import TENANT, created, event
from helpers import assert_eventually
from test_forget_end_to_end import turn

ALICE = ("Alice Moreau lives at 12 Rue Oberkampf and her badge is QX-88213",
         "Alice Moreau, 4 Impasse des Lilas, Montreuil")
BOB = "Bob Lindqvist ordered the blue bicycle, frame 58"
PLAIN = "the quarterly report was sent to the printers on Tuesday"


def _variable(task: str, name: str, value: str, subject: str | None = None) -> dict[str, Any]:
    body = event("variable_set", {"name": name, "value": value, "personal": subject is not None}, task)
    return body | {"data_subject": subject} if subject else body


async def _write(settings: Settings) -> tuple[str, str]:
    """Alice's and Bob's sealed turns and variables, a plain task and a plain artifact, and a
    context generation over Alice's conversation (a plaintext copy of her turns), a document quoting
    her address; the plain
    artifact's URI and the generation's id."""
    async with await connect(settings, timeout=60) as c:
        chat = [turn("chat-a", i, f"{ALICE[0]} (turn {i})" if i % 2 else f"turn {i}: nothing new", "s-alice")
                for i in range(1, 7)]
        await c.append_batch([created("chat-a"), *chat, _variable("chat-a", "home", ALICE[1], "s-alice")])
        await c.append_batch([created("chat-b"), turn("chat-b", 1, BOB, "s-bob")])
        ref = await c.put_artifact(PLAIN.encode(), schema="text/plain", producer="test", tenant=TENANT)
        await c.append_batch([created("plain"), _variable("plain", "status", PLAIN),
                              event("artifact_registered", {"artifact": msgspec.to_builtins(ref)}, "plain")])
        # A plaintext copy no lineage names: found by her value when she is forgotten.
        await c.ingest_document(TENANT, "delivery-note", 1, f"Deliver to {ALICE[1]} before noon, ring twice.",
                                source="crm")
        built = await c.build_context(TENANT, "chat-a", 5, window_tokens=8000, reserve_tokens=64)
        assert ALICE[0] in msgspec.json.encode(await c.get_generation(TENANT, built.generation_id)).decode()
        view = (await c.working_memory(TENANT, "chat-a", reveal_personal=True)).state
        assert view["variables"]["home"]["value"] == ALICE[1]
        return str(ref.uri), built.generation_id


async def _forget(settings: Settings, selector: dict[str, Any]) -> str:
    async with await connect(settings, timeout=60) as c:
        reply = await c.forget(TENANT, selector, reason="erasure request")
        done = await c.forget_wait(TENANT, reply.request_id, timeout_s=180)
        assert done.receipt is not None
        return reply.request_id


async def _ledger_replicas(settings: Settings) -> int:
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        return int((await nc.jetstream().stream_info(settings.stream)).config.num_replicas or 1)
    finally:
        await nc.close()


def _homes(settings: Settings, server_root: Path) -> list[Path]:
    """Both servers' homes (as root runs them): NATS's, or each cluster node's, and PostgreSQL's."""
    instance = server_root / instance_id(settings.data_dir)
    return sorted(p for p in (*instance.glob("nats*"), instance / "pg") if p.exists())


def _wipe(settings: Settings, server_root: Path) -> None:
    """A fresh stack: no data folder, no server homes; the keys, witness and journal stay."""
    for path in [settings.data_dir, *_homes(settings, server_root)]:
        subprocess.run(["rm", "-rf", str(path)], check=True)


_SEED = re.compile(rb"\bS[OAU][A-Z2-7]{50,}\b")
_CREDENTIAL = re.compile(rb"-----BEGIN (?:NATS USER JWT|USER NKEY SEED)-----")


def _credentials_in(folder: Path, settings: Settings) -> list[str]:
    """Files of ``folder`` holding an NKEY seed, a credentials file, or the context signing
    key (our own scan, raw bytes)."""
    key = settings.context_key_path.read_bytes().strip()
    found = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if _SEED.search(data) or _CREDENTIAL.search(data) or (key and key in data):
            found.append(str(path.relative_to(folder)))
    return found


def _forms(text: str) -> list[bytes]:
    return sorted({text.encode(), json.dumps(text)[1:-1].encode(), json.dumps(text, ensure_ascii=False)[1:-1].encode()})


def raw_hits(roots: list[Path], needles: list[str]) -> list[str]:
    """Our own scan: every file under ``roots``, every needle in each of its raw forms."""
    hits = []
    for root in roots:
        for path in [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()):
            try:
                data = path.read_bytes()
            except OSError:
                continue
            hits += [f"{path}: needle {i}" for i, n in enumerate(needles) for f in _forms(n) if f in data]
    return sorted(set(hits))


async def _compact(settings: Settings) -> None:
    dsn = embedded_superuser_dsn(settings)
    assert dsn is not None
    await compact_postgres(dsn)


async def _alice_key_gone(settings: Settings) -> None:
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        keyring = Keyring(nc, settings.keys_bucket, kek_of(settings, create=False))
        with pytest.raises(AgentLedgerError) as info:
            await keyring.key_for(TENANT, "s-alice", create=False)
        assert info.value.code == "key_destroyed"
    finally:
        await nc.close()


async def _check_restored(settings: Settings, uri: str, generation: str) -> None:
    async with await connect(settings, timeout=60) as c:
        alice = (await c.working_memory(TENANT, "chat-a", reveal_personal=True)).state
        assert all(t.get("erased") and t.get("content") is None for t in alice["transcript"])
        assert alice["variables"]["home"].get("erased") is True
        plain = (await c.working_memory(TENANT, "plain")).state
        assert plain["variables"]["status"]["value"] == PLAIN
        assert await c.get_artifact(uri) == PLAIN.encode()
        with pytest.raises(AgentLedgerError) as info:  # the backup's copy of her turns
            await c.get_generation(TENANT, generation)
        assert info.value.code == "not_found"
        rows = await c.forget_receipts(TENANT, subject="s-alice")
        assert rows and all(r.receipt is not None for r in rows)
    assert (await verify(settings)).ok


async def _bob_turn(settings: Settings) -> dict[str, Any]:
    async with await connect(settings, timeout=60) as c:
        return dict((await c.working_memory(TENANT, "chat-b", reveal_personal=True)).state["transcript"][0])


@pytest.mark.timeout(900)
def test_an_old_backup_restored_after_a_forget_and_a_kek_retirement_opens_nothing_of_the_subject(
        tmp_path: Path, server_root: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", prefix="bkup", server_root=server_root)
    backup = tmp_path / "backup"
    try:
        commands.up(settings)
        uri, generation = asyncio.run(_write(resolve_urls(settings)))
        made = asyncio.run(take.take(resolve_urls(settings), backup))
        assert made.kek_epochs == [0] and {p.name for p in made.streams} >= {
            settings.stream, f"KV_{settings.keys_bucket}", "OBJ_BKUP_ARTIFACTS"}
        assert not any(settings.kek_path.read_bytes().strip() in p.read_bytes()
                       for p in backup.rglob("*") if p.is_file()), "the KEK must stay out of a backup"
        # Issue 49, item 6: no signing key, seed or credential either; they wait in the key folder.
        assert (made.data_files, made.identity) == ([], ["auth", "context-signing.key"])
        assert _credentials_in(backup, settings) == []
        assert (settings.identity_escrow_path / "auth").is_dir()

        forgotten = asyncio.run(_forget(resolve_urls(settings), {"kind": "subject", "subject": "s-alice"}))
        journal = restoring.service_users.with_journal(settings)
        assert forgotten in {e.request_id for e in forget_journal.requests(journal)}
        # The copy her values found is journaled by id: the restored backup's key will not open.
        assert [c.documents for c in forget_journal.copies_of(journal, TENANT, "s-alice")] == [[("delivery-note", 1)]]
        asyncio.run(rotate(resolve_urls(settings), retire_after=False, grace_s=0))
        commands.down(settings)  # the services' copies of the ring get the new epoch
        commands.up(settings)
        done = asyncio.run(retire(resolve_urls(settings)))
        assert done["retired"] == [0] and "refused" not in done, done
        later = asyncio.run(take.take(resolve_urls(settings), tmp_path / "later"))
        assert later.kek_epochs == [1]
        commands.down(settings)

        _wipe(settings, server_root)
        report = restoring.restore(settings, backup)
        assert report["retired_kek_epochs"] == [0]
        [again] = report["reapplied"]
        assert (again["request_id"], again["kind"]) == (forgotten, "subject")
        assert report["rollback_accepted"], "the restored ledger is behind its witness"
        resolved = resolve_urls(settings)
        asyncio.run(_check_restored(resolved, uri, generation))
        asyncio.run(_alice_key_gone(resolved))
        # Bob's key was wrapped under the retired epoch too: it opens nothing (docs/deletion.md).
        assert asyncio.run(_bob_turn(resolved)).get("erased") is True

        asyncio.run(_compact(resolved))
        roots = [settings.data_dir, *_homes(settings, server_root)]
        assert raw_hits(roots, list(ALICE)) == []
        assert raw_hits(roots, [PLAIN]), "the scan finds what the restore brought back"

        # The data keys from the backup made after the rotation: Bob's values open again, Alice's not.
        commands.down(settings)
        _wipe(settings, server_root)
        report = restoring.restore(settings, backup, keys_from=tmp_path / "later")
        assert [r["request_id"] for r in report["reapplied"]] == [forgotten]
        resolved = resolve_urls(settings)
        asyncio.run(_check_restored(resolved, uri, generation))
        asyncio.run(_alice_key_gone(resolved))
        assert asyncio.run(_bob_turn(resolved))["content"] == BOB
        asyncio.run(_compact(resolved))
        assert raw_hits([settings.data_dir, *_homes(settings, server_root)], list(ALICE)) == []

        # Without the key folder's copy of the credentials a restore refuses, changing nothing.
        commands.down(settings)
        aside = tmp_path / "identity-aside"
        settings.identity_escrow_path.rename(aside)
        try:
            before = sorted(p.relative_to(settings.data_dir) for p in settings.data_dir.rglob("*"))
            with pytest.raises(ContractError) as info:
                restoring.restore(settings, backup)
            assert info.value.code == "identity_missing" and str(settings.identity_escrow_path) in info.value.message
            assert sorted(p.relative_to(settings.data_dir) for p in settings.data_dir.rglob("*")) == before
        finally:
            aside.rename(settings.identity_escrow_path)
    finally:
        if settings.runtime_file.exists():
            commands.down(settings)


LAUNCH = "the launch code of project Nightjar is 4417-ALPHA-OSPREY"
KEEP = "the staging cluster moves to the new rack on Friday"


async def _write_tasks(settings: Settings, out: Path) -> Path:
    """Tenant acme with an agent, and two plain tasks: one to forget after the backup, one kept."""
    await auth.tenant_add(settings, TENANT)
    creds = await auth.agent_add(settings, TENANT, "worker", out)  # the agent's, outside the data folder
    async with await connect(settings, timeout=60) as c:
        await c.append_batch([created("launch"), _variable("launch", "code", LAUNCH)])
        await c.append_batch([created("keep"), _variable("keep", "note", KEEP)])
    return creds


async def _agent_reads(settings: Settings, creds: Path) -> dict[str, Any]:
    """What agent ``worker`` reads of both tasks once the projection has them (its own credentials)."""
    async with await connect(msgspec.structs.replace(settings, nats_creds=creds), timeout=30) as agent:

        async def state(task: str) -> Any:
            try:
                return (await agent.working_memory(TENANT, task)).state
            except AgentLedgerError as exc:
                assert not exc.retryable, exc  # not projected yet: asked again
                return exc.code

        kept = await assert_eventually(lambda: state("keep"), timeout=60)
        launch = await assert_eventually(lambda: state("launch"), timeout=60)
    return {"keep": kept["variables"]["note"]["value"] if isinstance(kept, dict) else kept,
            "launch": "served" if isinstance(launch, dict) else launch}


async def _served_to_tenants(settings: Settings, creds: Path) -> bool:
    try:
        await asyncio.wait_for(_agent_reads(settings, creds), timeout=20)
    except (AgentLedgerError, OSError, TimeoutError, Exception):
        return False
    return True


def _command(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, Any]:
    """Run ``agentledger ARGV``; its JSON output (it must exit 0)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(argv)
    out, err = capsys.readouterr()
    assert exited.value.code == 0, err
    return dict(json.loads(out.strip().splitlines()[-1]))


@pytest.mark.timeout(900)
@pytest.mark.parametrize("nodes", [1, 3], ids=["single", "cluster"])
def test_a_forget_recorded_after_the_backup_is_applied_again_before_any_tenant_is_served(
        tmp_path: Path, server_root: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], nodes: int) -> None:
    """On the single embedded server and on an ``up --cluster 3`` stack (every node's resolver
    emptied, the streams restored as replicated as they were backed up)."""
    settings = Settings(data_dir=tmp_path / "data", prefix="bkagain", server_root=server_root,
                        cluster_size=nodes)
    backup = tmp_path / "backup"
    try:
        commands.up(settings)
        creds = asyncio.run(_write_tasks(resolve_urls(settings), tmp_path / "worker.creds"))
        assert asyncio.run(_agent_reads(resolve_urls(settings), creds)) == {"keep": KEEP, "launch": "served"}
        for name, value in (("DATA_DIR", settings.data_dir), ("PREFIX", settings.prefix),
                            ("SERVER_ROOT", server_root), ("CLUSTER_SIZE", nodes)):
            monkeypatch.setenv(f"AGENTLEDGER_{name}", str(value))
        assert _command(capsys, ["backup", str(backup)])["folder"] == str(backup)
        forgotten = asyncio.run(_forget(resolve_urls(settings), {"kind": "task", "task_id": "launch"}))
        commands.down(settings)
        _wipe(settings, server_root)

        # What the stack looks like at the moment the tenants' accounts are pushed.
        seen: dict[str, Any] = {}
        real_sync = auth.sync_tenants

        async def sync_then(at: Settings) -> int:
            seen["served_before"] = await _served_to_tenants(at, creds)
            async with await connect(at, timeout=60) as c:
                seen["receipts"] = [r.request_id for r in await c.forget_receipts(TENANT, request_id=re_id)
                                    if r.receipt is not None] if (re_id := _reapplied_id(at)) else []
            return await real_sync(at)

        def _reapplied_id(at: Settings) -> str | None:
            ids = [e.request_id for e in forget_journal.requests(restoring.service_users.with_journal(at))
                   if e.request_id.startswith("re-")]
            return ids[-1] if ids else None

        monkeypatch.setattr(auth, "sync_tenants", sync_then)
        report = _command(capsys, ["restore", str(backup)])
        [again] = report["reapplied"]
        assert (again["request_id"], again["kind"]) == (forgotten, "task")
        assert seen == {"served_before": False, "receipts": [again["reapplied_as"]]}, seen
        resolved = resolve_urls(settings)
        assert asyncio.run(_agent_reads(resolved, creds)) == {"keep": KEEP, "launch": "not_found"}
        assert asyncio.run(_ledger_replicas(resolved)) == min(nodes, 3)

        asyncio.run(_compact(resolved))
        roots = [settings.data_dir, *_homes(settings, server_root)]
        assert raw_hits(roots, [LAUNCH]) == []
        assert raw_hits(roots, [KEEP])
        # A second restore of the same backup asks again under the same id, and nothing is back.
        commands.down(settings)
        _wipe(settings, server_root)
        second = restoring.restore(settings, backup)
        assert [r["reapplied_as"] for r in second["reapplied"]] == [again["reapplied_as"]]
        assert asyncio.run(_agent_reads(resolve_urls(settings), creds))["launch"] == "not_found"
    finally:
        if settings.runtime_file.exists():
            commands.down(settings)
