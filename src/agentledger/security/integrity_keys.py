"""The integrity keys: MAC keys by epoch and the witness signing key, outside the stores.

A MAC only proves something if whoever can edit the stored bytes cannot recompute it, so the
keys live where the key-encryption key lives (``Settings.integrity_key_path``: beside
``kek_path``, outside the data folder and outside backups of it), never in PostgreSQL or
JetStream. They are not derived from the key-encryption key on purpose: retiring and
destroying a key-encryption-key epoch (crypto-shredding of backups) must not make the history
it never protected unverifiable.

The file (mode 0600, JSON) holds every epoch: each a random 256-bit MAC key and an Ed25519
signing key for the witness of ledger heads. ``rotate`` adds an epoch and makes it current;
older epochs stay so that tags made under them keep verifying (a tag names its epoch,
``core.integrity.tag``). One process reads the file once (``keys_of``); ``rotate`` is an
operator act followed by a restart of the services.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from agentledger.config import Settings
from agentledger.errors import AgentLedgerError
from agentledger.security.private_files import write_private


class _Epoch(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    mac: str  # base64, 32 bytes
    sign: str  # base64 Ed25519 private seed, 32 bytes
    created: str


class _KeyFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    version: int
    current: int
    epochs: dict[str, _Epoch]


_FILE_VERSION = 1
_decode = msgspec.json.Decoder(_KeyFile).decode
_encode = msgspec.json.Encoder().encode


@dataclass(frozen=True)
class IntegrityKeys:
    """Every epoch's keys, and which epoch new tags use."""

    current: int
    _mac: dict[int, bytes]
    _sign: dict[int, bytes]

    @property
    def mac_key(self) -> bytes:
        """The current epoch's MAC key (new tags)."""
        return self._mac[self.current]

    def mac_key_of(self, epoch: int) -> bytes | None:
        """The MAC key of ``epoch``; None for an epoch this installation never made."""
        return self._mac.get(epoch)

    def signer(self) -> Ed25519PrivateKey:
        """The current epoch's witness signing key."""
        return Ed25519PrivateKey.from_private_bytes(self._sign[self.current])

    def verifier(self, epoch: int) -> Ed25519PublicKey | None:
        """The witness verification key of ``epoch``; None when unknown."""
        seed = self._sign.get(epoch)
        return None if seed is None else Ed25519PrivateKey.from_private_bytes(seed).public_key()


def _new_epoch() -> _Epoch:
    return _Epoch(mac=base64.b64encode(secrets.token_bytes(32)).decode(),
                  sign=base64.b64encode(secrets.token_bytes(32)).decode(),
                  created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))


def _parse(path: Path) -> _KeyFile:
    try:
        data = _decode(path.read_bytes())
    except msgspec.ValidationError as exc:
        raise AgentLedgerError(f"{path} is not an integrity key file: {exc}", code="invalid_config") from exc
    except msgspec.DecodeError as exc:
        raise AgentLedgerError(f"{path} is not an integrity key file (not JSON)", code="invalid_config") from exc
    if data.version != _FILE_VERSION:
        raise AgentLedgerError(f"{path}: integrity key file version {data.version} is not supported "
                               f"(this agentledger reads version {_FILE_VERSION})", code="invalid_config")
    if str(data.current) not in data.epochs:
        raise AgentLedgerError(f"{path}: current epoch {data.current} has no keys", code="invalid_config")
    return data


def _keys(data: _KeyFile, path: Path) -> IntegrityKeys:
    macs: dict[int, bytes] = {}
    signs: dict[int, bytes] = {}
    for name, epoch in data.epochs.items():
        mac, sign = base64.b64decode(epoch.mac), base64.b64decode(epoch.sign)
        if not name.isdigit() or len(mac) != 32 or len(sign) != 32:
            raise AgentLedgerError(f"{path}: epoch {name!r} does not hold two 256-bit keys", code="invalid_config")
        macs[int(name)], signs[int(name)] = mac, sign
    return IntegrityKeys(current=data.current, _mac=macs, _sign=signs)


def load(path: Path, *, create: bool = True) -> IntegrityKeys:
    """Read the integrity keys at ``path``, making epoch 1 (mode 0600) on first use if ``create``.

    A missing file with ``create`` False is an error, not a fresh key: a second key would make
    every stored tag fail, which is the same as saying everything was tampered with.
    """
    if not path.exists():
        if not create:
            raise AgentLedgerError(f"no integrity keys at {path}; stored state cannot be verified here",
                                   code="invalid_config")
        _create(path, _encode(_KeyFile(version=_FILE_VERSION, current=1,
                                       epochs={"1": _new_epoch()})).decode())
    return _keys(_parse(path), path)


def _create(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (0600) only if nothing is there yet: processes starting
    together must all end up with the one key file, never each with a key of its own."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)  # atomic, and refused if another process made it first
    finally:
        Path(tmp).unlink(missing_ok=True)


def rotate(path: Path) -> int:
    """Add an epoch to the key file at ``path`` and make it current; returns its number.

    Earlier epochs stay (their tags keep verifying). Services read the file at start: restart
    them for new tags to use the new epoch.
    """
    data = _parse(path)
    epoch = max(int(e) for e in data.epochs) + 1
    epochs = {**data.epochs, str(epoch): _new_epoch()}
    write_private(path, _encode(_KeyFile(version=_FILE_VERSION, current=epoch, epochs=epochs)).decode())
    return epoch


# Keys by file, read once per process (every append and every read tags or checks).
_CACHE: dict[Path, IntegrityKeys] = {}


def keys_of(settings: Settings, *, create: bool = True) -> IntegrityKeys:
    """The integrity keys of ``settings`` (``integrity_key_path``), cached for the process."""
    path = settings.integrity_key_path
    keys = _CACHE.get(path)
    if keys is None:
        keys = _CACHE[path] = load(path, create=create)
    return keys
