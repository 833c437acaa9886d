"""Settings, read from the environment in exactly this one place.

Every service and command receives a ``Settings`` through its constructor;
nothing else reads ``AGENTLEDGER_*`` variables. Empty URLs mean "use the
embedded servers that ``agentledger up`` started" (found via runtime.json).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import msgspec

from agentledger.errors import ContractError


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """Runtime configuration shared by the services, the client and the CLI."""

    nats_url: str = ""
    database_url: str = ""
    data_dir: Path = Path(".agentledger")
    # Subject prefix: ledger subjects are `<prefix>.ledger.<tenant>.<task>`.
    prefix: str = "agentledger"
    # Largest accepted event, in bytes of JSON; larger payloads belong in artifacts.
    max_event_bytes: int = 256 * 1024
    # Largest artifact accepted through the artifact endpoints, in bytes (NATS max_payload is 8 MB).
    max_artifact_bytes: int = 4 * 1024 * 1024
    # Replicas of the ledger stream (1 on the embedded single server).
    stream_replicas: int = 1
    # JetStream dedupe window for event ids, in seconds.
    dedupe_window_s: float = 120.0
    # Group commit: most events in one atomic batch (JetStream allows 1000).
    max_batch_events: int = 1000
    # Group commit: atomic batches in flight at once.
    max_inflight_batches: int = 4
    # Projector: most messages fetched and committed in one transaction.
    projector_batch: int = 500
    # Key-encryption key wrapping the data-subject keys; default data_dir/keyring.key.
    kek_file: Path | None = None
    # Operator identity material (keys, account JWTs, credentials); default data_dir/auth.
    auth_dir: Path | None = None
    # Credentials file this process connects with (an agent's); default: the role's file
    # under auth_dir, or an anonymous connection when there is none.
    nats_creds: Path | None = None
    # CA bundle that signed the NATS servers' TLS certificates (tls:// URLs); default: the system's.
    nats_ca_file: Path | None = None
    # Root of the embedded servers' homes when `up` runs as root (default /var/lib/agentledger).
    server_root: Path | None = None
    log_level: str = "info"

    @property
    def stream(self) -> str:
        """Name of the ledger stream (derived so two prefixes never share one)."""
        return f"{self.prefix.upper().replace('-', '_')}_LEDGER"

    @property
    def keys_bucket(self) -> str:
        """KV bucket of the wrapped data-subject keys."""
        return f"{self.prefix.upper().replace('-', '_')}_KEYS"

    @property
    def leases_bucket(self) -> str:
        """KV bucket of the task execution leases."""
        return f"{self.prefix.upper().replace('-', '_')}_LEASES"

    @property
    def auth_root(self) -> Path:
        return self.auth_dir or self.data_dir / "auth"

    @property
    def kek_path(self) -> Path:
        return self.kek_file or self.data_dir / "keyring.key"

    @property
    def runtime_file(self) -> Path:
        return self.data_dir / "runtime.json"


_INT = {"stream_replicas", "max_event_bytes", "max_artifact_bytes", "max_batch_events", "max_inflight_batches",
        "projector_batch"}
_FLOAT = {"dedupe_window_s"}


def from_env(env: Mapping[str, str] | None = None, **overrides: object) -> Settings:
    """Build ``Settings`` from ``AGENTLEDGER_*`` variables; bad values name the variable."""
    env = os.environ if env is None else env
    values: dict[str, object] = {}
    for field in Settings.__struct_fields__:
        raw = env.get(f"AGENTLEDGER_{field.upper()}")
        if raw is None or raw == "":
            continue
        try:
            if field in _INT:
                values[field] = int(raw)
            elif field in _FLOAT:
                values[field] = float(raw)
            elif field in ("data_dir", "kek_file", "server_root", "auth_dir", "nats_creds", "nats_ca_file"):
                values[field] = Path(raw)
            else:
                values[field] = raw
        except ValueError as exc:
            raise ContractError(f"cannot parse {raw!r}", code="invalid_config",
                                path=f"AGENTLEDGER_{field.upper()}") from exc
    values.update({k: v for k, v in overrides.items() if v is not None})
    return Settings(**values)  # type: ignore[arg-type]
