"""What a backup folder holds, written last: a folder without ``manifest.json`` is no backup."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from agentledger.errors import ContractError

VERSION = 2
# Manifests a restore reads: 1 copied the credentials into the backup (``data_files``).
READABLE = frozenset({1, 2})
NAME = "manifest.json"


class StreamPart(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One JetStream stream (the ledger, a KV bucket, the object store) as its snapshot archive:
    the file, and the configuration and state the server reported as the snapshot began."""

    name: str
    file: str
    config: dict[str, Any]
    state: dict[str, Any]


class Manifest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A backup: what it holds, the streams' sequences, the key-encryption-key epochs its data
    keys are wrapped under, and when it was taken (``started_at``: before the PostgreSQL dump,
    so every forget requested after this moment is applied again by a restore)."""

    version: int
    prefix: str
    started_at: datetime
    completed_at: datetime
    postgres: str
    streams: list[StreamPart]
    # The epochs the keys bucket's wrapped data keys were under, and the ring's then.
    kek_epochs: list[int]
    kek_live_epochs: list[int]
    # Files of the data folder copied into the backup (version 1 only: the operator identity,
    # the context signing key); since version 2 always empty.
    data_files: list[str]
    # Forget requests in the forget journal when the backup began.
    forgets_journaled: int
    # Never in a backup: they live beside the keys, outside the data folder.
    left_out: list[str]
    # The credentials of the data folder a restore takes from the key folder
    # (``Settings.identity_escrow_path``), where the backup left a copy of them: never in it.
    identity: list[str] = []


def write(folder: Path, manifest: Manifest) -> None:
    (folder / NAME).write_bytes(msgspec.json.format(msgspec.json.encode(manifest)))


def read(folder: Path) -> Manifest:
    path = folder / NAME
    try:
        manifest = msgspec.json.decode(path.read_bytes(), type=Manifest)
    except FileNotFoundError:
        raise ContractError(f"{folder} is no backup (no {NAME}: missing, or the backup did not finish)",
                            code="invalid_value", path="backup") from None
    except msgspec.MsgspecError as exc:
        raise ContractError(f"{path} is not a backup manifest: {exc}", code="invalid_value",
                            path="backup") from None
    if manifest.version not in READABLE:
        raise ContractError(f"{path}: manifest version {manifest.version} is not supported (this "
                            f"agentledger reads versions {sorted(READABLE)})", code="invalid_value", path="backup")
    return manifest
