"""``agentledger restore``: a backup brought into a fresh or stopped embedded stack (the single
server, or the ``up --cluster`` nodes), and every forget requested since the backup applied
again before any tenant is served.

1. **Load**, with only the embedded servers running: the backup's operator identity becomes the
   data folder's (``auth/``); every stream of the prefix is deleted and restored from its
   snapshot (same sequences, erased messages still erased, replicated as the stack keeps them); the
   services' database is dropped, made again and loaded from the dump. The NATS resolver's
   folder (every node's, on a cluster) is emptied first, so no server knows a tenant account
   until step 3 pushes them.
2. **Witness.** The restored ledger is older than what the witness (``stores.witness``) saw
   committed: the rollback is accepted explicitly, as ``up --accept-rollback`` does, and the
   witness records when and what was lost (each task's witnessed and restored index); the
   report repeats it.
3. **Forget again**, then serve. ``up`` starts the services with the tenants' accounts left out,
   so only the operator can reach them; every forget in the forget journal
   (``stores.forget_journal``, beside the keys, untouched by the loss of the data folder) that
   the restored database does not hold as done is issued again (``reapply``) and followed to its
   sealed receipt; only then are the tenants' accounts pushed and the stack serves them. A
   forget is never undone: a request whose re-application fails keeps the tenants out
   (``restore_incomplete``, the stack left up for the operator; the pending request is on the
   ledger and the saga keeps retrying it).

Data keys wrapped under a key-encryption-key epoch retired since the backup open nothing in the
restored stack (``kek_epochs``): the report lists those epochs. ``keys_from`` takes the keys
bucket from another backup instead (one taken after the rotation, whose keys are re-wrapped
under a live epoch, and which no longer holds the keys of subjects forgotten before it).
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

import msgspec

from agentledger.backup import manifest as manifests
from agentledger.backup import pg_dump, snapshots
from agentledger.backup.reapply import reapply
from agentledger.backup.take import IDENTITY_AUTH, IDENTITY_CONTEXT_KEY, prefix_streams, stream_names
from agentledger.client import connect
from agentledger.config import Settings
from agentledger.errors import ContractError, RuntimeStateError
from agentledger.runtime import commands, service_users
from agentledger.runtime.embedded import EmbeddedCluster, EmbeddedNats, check_nats_layout, read_cluster_record
from agentledger.runtime.hosting import isolating
from agentledger.runtime.postgres import EmbeddedPostgres, drop_database
from agentledger.runtime.state import read_runtime, resolve_urls, supervisor_alive
from agentledger.security import auth
from agentledger.security.sealing import kek_of, marker_key_of
from agentledger.stores import forget_journal, witness
from agentledger.stores.db import create_pool


def _check_target(settings: Settings, manifest: manifests.Manifest) -> None:
    if manifest.prefix != settings.prefix:
        raise ContractError(f"the backup is of prefix {manifest.prefix!r}, this stack's is {settings.prefix!r}",
                            code="invalid_value", path="AGENTLEDGER_PREFIX")
    if settings.nats_url or settings.database_url:
        raise ContractError("restore brings a backup into the embedded servers of `agentledger up`; with "
                            "servers of your own, restore their streams and database with their tools",
                            code="invalid_config", path="AGENTLEDGER_NATS_URL")
    if settings.runtime_file.exists() and supervisor_alive(read_runtime(settings.runtime_file)):
        raise RuntimeStateError("agentledger is up: run `agentledger down` before a restore")


def _parts(backup: Path, manifest: manifests.Manifest, keys_from: Path | None,
           keys_stream: str) -> list[tuple[Path, manifests.StreamPart]]:
    parts = [(backup, p) for p in manifest.streams if not (keys_from and p.name == keys_stream)]
    if keys_from is not None:
        other = manifests.read(keys_from)
        found = [p for p in other.streams if p.name == keys_stream]
        if not found:
            raise ContractError(f"the backup {keys_from} holds no keys bucket ({keys_stream})",
                                code="invalid_value", path="--keys-from")
        parts.append((keys_from, found[0]))
    return parts


def _copy_data_files(backup: Path, manifest: manifests.Manifest, settings: Settings) -> None:
    """The data folder's credentials: from the key folder's copy (``take._escrow_identity``), or
    from a version-1 backup that still held them. Refused, before anything is changed, when the
    key folder lacks what the backup names."""
    escrow = settings.identity_escrow_path
    missing = [name for name in manifest.identity if not (escrow / name).exists()]
    if missing:
        raise ContractError(f"the backup's credentials ({', '.join(missing)}) are kept in the key folder, not in "
                            f"the backup, and {escrow} does not hold them: restore on the machine whose key "
                            "folder the backup was taken with, or copy that folder's "
                            f"{escrow.name} there first", code="identity_missing", path="key folder")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    sources = {name: escrow / name for name in manifest.identity}
    sources |= {name: backup / name for name in manifest.data_files}
    if IDENTITY_AUTH in sources:
        shutil.rmtree(settings.auth_root, ignore_errors=True)
        shutil.copytree(sources[IDENTITY_AUTH], settings.auth_root, symlinks=True)
    if IDENTITY_CONTEXT_KEY in sources:
        shutil.copy2(sources[IDENTITY_CONTEXT_KEY], settings.context_key_path)


async def _load_streams(settings: Settings, parts: list[tuple[Path, manifests.StreamPart]]) -> dict[str, int]:
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        jsm = nc.jsm()
        for name in prefix_streams(settings.prefix, await stream_names(nc)):
            await jsm.delete_stream(name)
        last: dict[str, int] = {}
        for folder, part in parts:
            # As replicated as the stack keeps its streams: a backup of a single server restored
            # into a cluster is replicated there, one of a cluster into a single server is not.
            config = part.config | {"num_replicas": settings.stream_replicas}
            state = await snapshots.restore(nc, part.name, folder / part.file, config, part.state)
            last[part.name] = int(state.get("last_seq", 0))
        return last
    finally:
        await nc.close()


async def _accept_rollback(settings: Settings) -> list[str]:
    """The witness's check with the rollback accepted (``up --accept-rollback``): what was lost."""
    if isolating():
        service_users.writer_home(settings).prepare()
        settings = service_users.with_witness(settings)
    found = await witness.check_up(settings, accept_rollback=True)
    if isolating():
        service_users.hand_witness_to_writer(settings)
    return found.accepted


def _nats_servers(settings: Settings, identity: auth.AuthStore) -> EmbeddedNats | EmbeddedCluster:
    """The embedded NATS server, or every node of the embedded cluster (``up --cluster``), each
    with its resolver folder emptied: the servers start knowing no tenant account."""
    if settings.cluster_size > 1:
        check_nats_layout(settings.data_dir, settings.cluster_size)
        cluster = EmbeddedCluster(settings.data_dir, settings.cluster_size, auth=identity,
                                  server_root=settings.server_root)
        if read_cluster_record(settings.data_dir) is not None:
            for node in cluster.nodes():
                shutil.rmtree(node.dir / "resolver", ignore_errors=True)
        return cluster
    single = EmbeddedNats(settings.data_dir, auth=identity, server_root=settings.server_root)
    shutil.rmtree(single.dir / "resolver", ignore_errors=True)
    return single


def load(settings: Settings, backup: Path, manifest: manifests.Manifest,
         keys_from: Path | None) -> dict[str, Any]:
    """Step 1 and 2 (module docstring), with only the embedded servers running."""
    parts = _parts(backup, manifest, keys_from, f"KV_{settings.keys_bucket}")
    _copy_data_files(backup, manifest, settings)
    identity = auth.AuthStore(settings.auth_root).init()
    nats_servers = _nats_servers(settings, identity)
    postgres = EmbeddedPostgres(settings.data_dir, server_root=settings.server_root)
    with nats_servers, postgres:
        drop_database(postgres.url, commands.EMBEDDED_DATABASE)
        url = postgres.provision(commands.EMBEDDED_DATABASE)
        pg_dump.restore(url, backup / manifest.postgres)
        served = msgspec.structs.replace(settings, nats_url=nats_servers.url, database_url=url)
        if isinstance(nats_servers, EmbeddedCluster):
            served = msgspec.structs.replace(served, stream_replicas=commands.cluster_replicas(settings))
            # Its meta leader must be elected before a stream can be restored.
            asyncio.run(commands.wait_for_cluster(served, settings.cluster_size,
                                                  time.monotonic() + settings.up_timeout_s))
        last = asyncio.run(_load_streams(served, parts))
        lost = asyncio.run(_accept_rollback(served)) if settings.integrity else []
    return {"streams": last, "rollback_accepted": lost}


async def _forget_again(settings: Settings, backup_id: str) -> dict[str, Any]:
    entries = forget_journal.requests(service_users.with_journal(settings))
    pool = await create_pool(settings.database_url)
    try:
        async with await connect(settings, timeout=60) as client:
            done, unmatched = await reapply(client, pool, entries, backup_id=backup_id,
                                            marker_key=marker_key_of(settings))
    finally:
        await pool.close()
    await auth.sync_tenants(settings)
    return {"journaled": len(entries), "reapplied": msgspec.to_builtins(done), "unmatched": unmatched}


def restore(settings: Settings, backup: Path, *, keys_from: Path | None = None) -> dict[str, Any]:
    """Restore ``backup`` into the stack of ``settings`` (down, embedded: one server or a
    cluster); leave it up, serving."""
    manifest = manifests.read(backup)
    _check_target(settings, manifest)
    settings = msgspec.structs.replace(settings, data_dir=settings.data_dir.absolute())
    ring = kek_of(settings, create=False)
    report: dict[str, Any] = {"backup": str(backup), "started_at": manifest.started_at.isoformat(),
                              "retired_kek_epochs": [e for e in manifest.kek_epochs if ring.is_retired(e)]}
    report |= load(settings, backup, manifest, keys_from)
    commands.up(settings, serve_tenants=False)
    backup_id = manifest.started_at.strftime("%Y%m%dT%H%M%S.%fZ")
    try:
        report |= asyncio.run(_forget_again(resolve_urls(settings), backup_id))
    except Exception as exc:
        raise RuntimeStateError(
            f"a forget recorded after the backup could not be applied again ({type(exc).__name__}: {exc}); "
            "the stack is up for the operator only and serves no tenant. Its request is on the ledger and "
            "the fan-out keeps retrying it (`agentledger forget receipt`); run `agentledger restore` "
            "again once it can complete", code="restore_incomplete") from exc
    return report
