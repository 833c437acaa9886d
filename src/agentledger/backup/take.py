"""``agentledger backup``: one folder with the PostgreSQL dump, a JetStream snapshot of every
stream of the prefix (the ledger, the KV buckets, the object store) and a manifest.

Order matters. The dump is taken first, then the streams: the projections' watermarks in the
dump then never point past what the restored ledger holds (a projection ahead of its ledger
would keep rows of events the ledger lacks), and the projectors catch up from their watermarks
after a restore. ``started_at`` is taken before the dump: a forget requested from then on may be
missing from the copy, so a restore applies it again (``restore``). Snapshots are taken while
the stack runs; a message erased before a stream's snapshot is not in it (the erase overwrote
it in the block files the archive is made of).

Left out on purpose: the key-encryption-key epochs, the marker key, the integrity keys, the
witness and the forget journal. They live beside the keys, outside the data folder; a backup
holding the key-encryption key would open every sealed value of a forgotten subject again.
No credential is in a backup either: the data folder's operator identity (``auth/``: the NATS
operator's and every account's signing seeds and the services' credentials, without which a
restored stack would not know its tenants) and the compaction receipts' signing key are copied
to the key folder instead (``Settings.identity_escrow_path``, refreshed by every backup), and
the manifest names them (``identity``): whoever holds a backup cannot act as the operator.
"""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

from nats.aio.client import Client

from agentledger.backup import manifest, pg_dump, snapshots
from agentledger.config import Settings
from agentledger.errors import ContractError
from agentledger.runtime.service_users import with_journal
from agentledger.security import auth
from agentledger.security.sealing import Keyring, kek_of
from agentledger.stores import forget_journal

# The credentials' names in the key folder's copy (``_escrow_identity``) and in a manifest.
IDENTITY_AUTH = "auth"
IDENTITY_CONTEXT_KEY = "context-signing.key"
LEFT_OUT = ["key-encryption-key epochs and marker key", "integrity keys", "ledger witness", "forget journal",
            "operator identity and credentials (auth/)", "context signing key"]


def prefix_streams(prefix: str, names: list[str]) -> list[str]:
    """The streams of ``prefix``: its ledger, KV buckets (``KV_<PREFIX>_…``) and object stores."""
    mark = f"{prefix.upper().replace('-', '_')}_"
    out = []
    for name in names:
        bare = name.removeprefix("KV_").removeprefix("OBJ_")
        if bare.startswith(mark):
            out.append(name)
    return sorted(out)


async def stream_names(nc: Client) -> list[str]:
    jsm = nc.jsm()
    offset, names = 0, []
    while batch := await jsm.streams_info(offset):
        names += [info.config.name for info in batch if info.config.name]
        offset += len(batch)
    return names


def _escrow_identity(settings: Settings) -> list[str]:
    """Copy the data folder's credentials to the key folder (replacing the last copy); their names."""
    escrow = settings.identity_escrow_path
    staged = escrow.with_name(escrow.name + ".new")
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir(mode=0o700, parents=True)
    kept = []
    if settings.auth_root.is_dir():
        shutil.copytree(settings.auth_root, staged / IDENTITY_AUTH, symlinks=True)
        kept.append(IDENTITY_AUTH)
    if settings.context_key_path.exists():
        shutil.copy2(settings.context_key_path, staged / IDENTITY_CONTEXT_KEY)
        kept.append(IDENTITY_CONTEXT_KEY)
    shutil.rmtree(escrow, ignore_errors=True)
    staged.rename(escrow)
    return kept


def _new_folder(folder: Path) -> None:
    """``folder``, new or empty, made 0700 (it holds what the stores hold)."""
    if folder.exists() and any(folder.iterdir()):
        raise ContractError(f"{folder} is not empty: a backup goes into a folder of its own",
                            code="invalid_value", path="folder")
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    (folder / "streams").mkdir(mode=0o700)


async def take(settings: Settings, folder: Path) -> manifest.Manifest:
    """Back up the running stack of ``settings`` (URLs resolved) into ``folder`` (new or empty)."""
    _new_folder(folder)
    journal = forget_journal.requests(with_journal(settings))
    started = datetime.now(UTC)
    pg_dump.dump(settings.database_url, folder / "postgres.dump")
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        parts = []
        for name in prefix_streams(settings.prefix, await stream_names(nc)):
            file = f"streams/{name}.tar.s2"
            got = await snapshots.snapshot(nc, name, folder / file)
            parts.append(manifest.StreamPart(name=name, file=file, config=got["config"], state=got["state"]))
        ring = kek_of(settings, create=False)
        epochs = await Keyring(nc, settings.keys_bucket, ring).wrapped_epochs()
    finally:
        await nc.close()
    done = manifest.Manifest(
        version=manifest.VERSION, prefix=settings.prefix, started_at=started, completed_at=datetime.now(UTC),
        postgres="postgres.dump", streams=parts, kek_epochs=epochs, kek_live_epochs=ring.live_epochs(),
        data_files=[], forgets_journaled=len(journal), left_out=LEFT_OUT, identity=_escrow_identity(settings))
    manifest.write(folder, done)
    return done
