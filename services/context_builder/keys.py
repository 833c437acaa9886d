"""The Ed25519 key that signs compaction receipts: a file in the data folder, 0600, made on first use.

The file holds the 32-byte private seed, base64. The key id is the first 16 hex digits of
the blake3 of the raw public key, so a receipt names the key that signed it and a rotated
key never verifies an old receipt by accident.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

from blake3 import blake3
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from agentledger.errors import AgentLedgerError
from agentledger.security.private_files import write_private


@dataclass(frozen=True)
class SigningKey:
    private: Ed25519PrivateKey
    public: bytes
    key_id: str


def key_id_of(public: bytes) -> str:
    return blake3(public).hexdigest()[:16]


def load_signing_key(path: Path) -> SigningKey:
    """The receipt key at ``path``, created (mode 0600) when the file does not exist."""
    if not path.exists():
        seed = Ed25519PrivateKey.generate().private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        write_private(path, base64.b64encode(seed).decode() + "\n")
    try:
        seed = base64.b64decode(path.read_text().strip(), validate=True)
        private = Ed25519PrivateKey.from_private_bytes(seed)
    except ValueError as exc:
        raise AgentLedgerError(f"{path} does not hold an Ed25519 seed (32 bytes, base64)",
                               code="invalid_config") from exc
    public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return SigningKey(private=private, public=public, key_id=key_id_of(public))
