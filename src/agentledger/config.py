"""Settings, read from the environment in exactly this one place.

Every service and command receives a ``Settings`` through its constructor;
nothing else reads ``AGENTLEDGER_*`` variables. Empty URLs mean "use the
embedded servers that ``agentledger up`` started" (found via runtime.json).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path

import msgspec

from agentledger.errors import ContractError

# Most projector partitions: each costs a consumer that reads the whole ledger (docs/scaling.md).
MAX_PARTITIONS = 64
# Most processes `up` runs of one service.
MAX_INSTANCES = 16


def stream_name(prefix: str, what: str) -> str:
    """The name of prefix ``prefix``'s stream or bucket ``what`` (``LEDGER``, ``KEYS``, ...): each
    prefix gets its own, so two prefixes never share one."""
    return f"{prefix.upper().replace('-', '_')}_{what}"


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
    # Largest ledger stream in bytes; 0: no limit of its own (the server's storage limit applies).
    # At the limit the writer refuses new appends (`ledger_full`) but erasures, which use
    # ledger_reserve_bytes beyond it; nothing stored is ever discarded.
    max_ledger_bytes: int = 0
    # Largest data-subject key bucket, in bytes (a wrapped key is ~100 bytes).
    max_keys_bytes: int = 1 << 30
    # Largest artifact object store, in bytes; at the limit a put is refused (`artifact_store_full`).
    max_artifact_store_bytes: int = 16 << 30
    # Largest reply of a read endpoint (wm.get, resume), in bytes; the server's max_payload caps
    # it. A Working Memory view above it is sent in chunks; a resume reply leaves its state out.
    max_reply_bytes: int = 1 << 20
    # Projector: rendered views kept while their chunks are fetched (60 s each), in bytes.
    view_cache_bytes: int = 64 << 20
    # Projector: task states kept in memory between batches, in bytes of their encoding.
    projector_cache_bytes: int = 256 << 20
    # Rebuilds (replay, verify, the projector's rebuild of an empty projection): what the fold
    # may hold in memory, in bytes; past it, it writes what it holds to the new projection.
    rebuild_memory_bytes: int = 256 << 20
    # Writer and readers: unwrapped data-subject keys kept in memory, in bytes.
    key_cache_bytes: int = 16 << 20
    # Leases one tenant may hold at once (live ones); a grant beyond it is `too_many_leases`.
    max_leases_per_tenant: int = 10_000
    # NATS limits of every tenant account, unless `agentledger tenant add --max-connections` (and
    # --max-subscriptions, --max-payload) set the tenant's own; -1 is no limit. Applied to every
    # tenant account on each start. Connections count across the cluster (servers learn their
    # peers' counts from events: one beyond the limit may be accepted, then the newest is closed);
    # subscriptions and the payload (bytes of one published message, artifacts included) are per
    # connection.
    tenant_max_connections: int = 64
    tenant_max_subscriptions: int = 1000
    tenant_max_payload_bytes: int = 8 * 1024 * 1024
    # Largest lease bucket, in bytes (set when it is created; an entry is ~250 bytes).
    max_leases_bytes: int = 64 << 20
    # Ledger reserve, in bytes, kept for erasure (forget requests and receipts, memory_forgotten):
    # with max_ledger_bytes set, the stream's own limit is max_ledger_bytes plus this, and the
    # writer refuses every other append (`ledger_full`) once the stream holds max_ledger_bytes.
    ledger_reserve_bytes: int = 64 << 20
    # Per-tenant quotas of the writer (0: none). Append rate of a tenant's agents, in events and
    # bytes of requests per second, per writer instance, with bursts of tenant_append_burst_s
    # seconds' worth; beyond it an append is refused `rate_limited` (retryable).
    tenant_append_events_per_s: float = 10_000.0
    tenant_append_bytes_per_s: float = float(64 << 20)
    tenant_append_burst_s: float = 2.0
    # Artifact requests (put, get, stat) of a tenant's agents, and the bytes they put, per second
    # and writer instance (same burst); beyond it a request is refused `rate_limited` before its
    # content is hashed or it takes one of the endpoint's slots.
    tenant_artifact_requests_per_s: float = 1_000.0
    tenant_artifact_bytes_per_s: float = float(64 << 20)
    # Bytes of one tenant's messages in the ledger (erasure events excepted): beyond it an append
    # is refused `ledger_quota_exceeded`.
    tenant_max_ledger_bytes: int = 8 << 30
    # Bytes of one tenant's artifacts: beyond it a put is refused `artifact_quota_exceeded`.
    tenant_max_artifact_bytes: int = 4 << 30
    # Memory records of one tenant (every status but forgotten): a proposal request that would
    # go beyond it is refused whole, `memory_quota_exceeded`.
    tenant_max_memory_records: int = 100_000
    # Shares of the writer's time when tenants wait for it at once (`shell/turns.py`):
    # "acme=3,beta=1"; a tenant not named weighs 1. Only the proportions matter, and only while
    # tenants contend: a tenant alone is served at full speed whatever its weight.
    tenant_weights: str = ""
    # How long `agentledger up` waits for the stack: it fails when no process it started has
    # made progress (written to its log) for up_stall_s, or at up_timeout_s whatever happens, so
    # a slow, busy machine is waited for and a wedged start is not.
    up_timeout_s: float = 600.0
    up_stall_s: float = 120.0
    # Replicas of the ledger stream, the KV buckets and the object store (1 on the embedded single
    # server; `up --cluster 3` makes it 3). On a cluster of your own, set it to 3 (or 5).
    stream_replicas: int = 1
    # nats-server processes `agentledger up` starts as one JetStream cluster (1: a single server).
    cluster_size: int = 1
    # JetStream dedupe window for event ids, in seconds.
    dedupe_window_s: float = 120.0
    # Group commit: most events in one atomic batch (JetStream allows 1000).
    max_batch_events: int = 1000
    # Group commit: atomic batches in flight at once.
    max_inflight_batches: int = 4
    # Projector: most messages fetched and committed in one transaction.
    projector_batch: int = 500
    # Projector: how long the first message that arrives after the ledger was drained waits for
    # others to share its transaction, in milliseconds (0: none); adds at most this much lag.
    projector_linger_ms: float = 3.0
    # Projector: partitions of the task space (docs/scaling.md). Each has its own consumer and
    # watermark and is folded by one projector instance at a time; the count is fixed when a
    # projection is built (first start, or `agentledger replay`, which re-partitions).
    projector_partitions: int = 1
    # Processes `agentledger up` runs of each service (docs/scaling.md).
    instances: int = 1
    # Key-encryption key wrapping the data-subject keys. It never lives in the data folder it
    # protects (a copy of that folder must not carry the key that opens it): default, a file
    # named for the data folder in kek_dir (default $XDG_CONFIG_HOME/agentledger/keks).
    kek_file: Path | None = None
    kek_dir: Path | None = None
    # Integrity keys (MAC epochs and the witness signing key, security/integrity_keys.py): kept
    # beside the key-encryption key, outside the data folder and its backups; default
    # <kek_path>.integrity.
    integrity_key_file: Path | None = None
    # Chain every ledger message (core/ledger_chain.py) and check the chain on every read of
    # the ledger, and the tags of the memory records a read returns. Off only to measure what
    # it costs (`make bench`); a chained task's reads refuse unchained messages whatever this
    # says.
    integrity: bool = True
    # The witness of ledger heads (stores/witness.py); default beside the integrity keys. The
    # supervisor points a writer running as a user of its own at its home (service_users.py).
    witness_file: Path | None = None
    # A read-only view of the witness the writer keeps in step with it (stores/witness.py), for
    # readers that cannot read the writer's own file: the supervisor names one in a folder the
    # checkpointer's group reads when services run as users of their own (service_users.py).
    witness_copy_file: Path | None = None
    # The forget journal (stores/forget_journal.py): every accepted forget request, for a restore
    # to apply again; default beside the integrity keys. The supervisor points a fan-out running
    # as a user of its own at its home (service_users.py).
    forget_journal_file: Path | None = None
    # Operator identity material (keys, account JWTs, credentials); default data_dir/auth.
    auth_dir: Path | None = None
    # Credentials file this process connects with (an agent's); default: the role's file
    # under auth_dir, or an anonymous connection when there is none.
    nats_creds: Path | None = None
    # CA bundle that signed the NATS servers' TLS certificates (tls:// URLs); default: the system's.
    nats_ca_file: Path | None = None
    # Root of the embedded servers' homes when `up` runs as root (default /var/lib/agentledger).
    server_root: Path | None = None
    # Touched by a service process once it is ready (the supervisor sets one per child).
    ready_file: Path | None = None
    # The scrape endpoint of every service process and of the supervisor (shell/metrics.py): its
    # host and port (0: any free port, recorded in runtime.json; -1: none; a fixed port suits one
    # process per host, not `up`, whose processes would all ask for it), and the most tenants
    # named in metric labels (0: no tenant label; past the cap a tenant counts as "other").
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 0
    metrics_tenants: int = 0
    # Embedder of the memory service: "wordllama" (offline, bundled weights) or "openai" (an
    # OpenAI-compatible `/embeddings` endpoint at embeddings_url, e.g. "http://host:8080/v1").
    embedder: str = "wordllama"
    embeddings_url: str = ""
    embeddings_model: str = ""
    # File holding the endpoint's API key (read at load, never logged); none: no Authorization.
    embeddings_key_file: Path | None = None
    # Vector size the endpoint must return (the memory index is 256-dimensional).
    embeddings_dims: int = 256
    # Send `dimensions` in the request (OpenAI text-embedding-3 models shorten their vectors).
    embeddings_send_dims: bool = False
    embeddings_timeout_s: float = 30.0
    # Memory-policy service: how long a read receipt is kept, in seconds.
    memory_receipt_ttl_s: float = 30 * 86400.0
    # Memory-policy service: a model that judges proposals from sources that may not give the agent
    # orders, where nothing is obfuscated (an OpenAI-compatible chat endpoint at memory_judge_url
    # with memory_judge_model, its key in memory_judge_key_file; empty: the rules alone). When it
    # fails, "hold" quarantines the proposal (judge_unavailable) and "rules" decides by the rules.
    # memory_judge_reads_findings: it also reads texts in which the rules found an instruction or a
    # hidden part, and writes those it reads as content (off: it reads what the rules left).
    memory_judge_url: str = ""
    memory_judge_model: str = ""
    memory_judge_key_file: Path | None = None
    memory_judge_timeout_s: float = 20.0
    memory_judge_on_failure: str = "hold"
    memory_judge_reads_findings: bool = True
    # Context-builder: the compactor a build uses when its policy does not name one
    # ("structured": the deterministic reducer; "openai": an OpenAI-compatible chat endpoint at
    # context_compactor_url with context_compactor_model, its key in context_compactor_key_file).
    context_compactor: str = "structured"
    context_compactor_url: str = ""
    context_compactor_model: str = ""
    context_compactor_key_file: Path | None = None
    # Context-builder: longest a compactor may run before the frozen fallback is selected.
    context_compactor_timeout_s: float = 30.0
    # Context-builder: longest a build waits for the Working Memory projection to reach its input.
    context_catch_up_s: float = 10.0
    # Ed25519 key signing compaction receipts; default data_dir/context-signing.key (0600).
    context_signing_key_file: Path | None = None
    # Writer: replace secrets in every event's free text by a redaction marker before the append.
    # Off only to measure what the detector costs (`agentledger bench --only detector`).
    redact_secrets: bool = True
    log_level: str = "info"

    def __post_init__(self) -> None:  # noqa: PLR0912 - one check a setting
        # Stream and bucket names are the upper-cased prefix: with only lowercase letters and
        # digits allowed, two prefixes can never name the same stream (agent-ledger and
        # agent_ledger once shared one, and the second rewrote the first's subjects).
        if not _PREFIX.match(self.prefix):
            raise ContractError(f"prefix {self.prefix!r} must be a lowercase letter followed by up "
                                "to 31 lowercase letters or digits", code="invalid_config",
                                path="AGENTLEDGER_PREFIX")
        if self.cluster_size < 1:
            raise ContractError(f"cluster_size {self.cluster_size} must be at least 1",
                                code="invalid_config", path="AGENTLEDGER_CLUSTER_SIZE")
        if not 1 <= self.stream_replicas <= 5:
            # JetStream's own limit: a stream has 1 to 5 replicas.
            raise ContractError(f"stream_replicas {self.stream_replicas} must be 1 to 5",
                                code="invalid_config", path="AGENTLEDGER_STREAM_REPLICAS")
        if not 1 <= self.instances <= MAX_INSTANCES:
            raise ContractError(f"instances {self.instances} must be 1 to {MAX_INSTANCES}",
                                code="invalid_config", path="AGENTLEDGER_INSTANCES")
        for name in ("tenant_max_connections", "tenant_max_subscriptions", "tenant_max_payload_bytes"):
            if getattr(self, name) < 1 and getattr(self, name) != -1:
                raise ContractError(f"{name} {getattr(self, name)} must be at least 1, or -1 for "
                                    "no limit", code="invalid_config",
                                    path=f"AGENTLEDGER_{name.upper()}")
        for name in ("ledger_reserve_bytes", "tenant_append_events_per_s", "tenant_append_bytes_per_s",
                     "tenant_artifact_requests_per_s", "tenant_artifact_bytes_per_s",
                     "tenant_max_ledger_bytes", "tenant_max_artifact_bytes",
                     "tenant_max_memory_records"):
            if getattr(self, name) < 0:
                raise ContractError(f"{name} {getattr(self, name)} must be 0 (no limit) or more",
                                    code="invalid_config", path=f"AGENTLEDGER_{name.upper()}")
        if self.memory_judge_on_failure not in ("hold", "rules"):
            raise ContractError(f"memory_judge_on_failure {self.memory_judge_on_failure!r} must be 'hold' or "
                                "'rules'", code="invalid_config", path="AGENTLEDGER_MEMORY_JUDGE_ON_FAILURE")
        for name in ("up_timeout_s", "up_stall_s", "memory_judge_timeout_s"):
            if getattr(self, name) <= 0:
                raise ContractError(f"{name} {getattr(self, name)} must be above 0", code="invalid_config",
                                    path=f"AGENTLEDGER_{name.upper()}")
        if self.tenant_append_burst_s <= 0:
            raise ContractError(f"tenant_append_burst_s {self.tenant_append_burst_s} must be above 0",
                                code="invalid_config", path="AGENTLEDGER_TENANT_APPEND_BURST_S")
        if not -1 <= self.metrics_port <= 65535:
            raise ContractError(f"metrics_port {self.metrics_port} must be -1 (none), 0 (any free port) "
                                "or a port", code="invalid_config", path="AGENTLEDGER_METRICS_PORT")
        if self.metrics_tenants < 0:
            raise ContractError(f"metrics_tenants {self.metrics_tenants} must be 0 (no tenant label) or more",
                                code="invalid_config", path="AGENTLEDGER_METRICS_TENANTS")
        if not 1 <= self.projector_partitions <= MAX_PARTITIONS:
            raise ContractError(f"projector_partitions {self.projector_partitions} must be 1 to "
                                f"{MAX_PARTITIONS}", code="invalid_config",
                                path="AGENTLEDGER_PROJECTOR_PARTITIONS")

    @property
    def stream(self) -> str:
        """Name of the ledger stream (derived so two prefixes never share one)."""
        return stream_name(self.prefix, "LEDGER")

    @property
    def keys_bucket(self) -> str:
        """KV bucket of the wrapped data-subject keys."""
        return stream_name(self.prefix, "KEYS")

    @property
    def reach_stream(self) -> str:
        """Stream of each memory record's newest committed ledger sequence (memory_policy/reach_log)."""
        return stream_name(self.prefix, "REACH")

    @property
    def leases_bucket(self) -> str:
        """KV bucket of the task execution leases."""
        return stream_name(self.prefix, "LEASES")

    @property
    def usage_bucket(self) -> str:
        """KV bucket of the writer's per-tenant usage counters (ledger and artifact bytes)."""
        return stream_name(self.prefix, "USAGE")

    @property
    def auth_root(self) -> Path:
        return self.auth_dir or self.data_dir / "auth"

    @property
    def kek_path(self) -> Path:
        """``kek_file``, or ``<kek_dir>/<first 16 hex of sha256(data folder path)>.key``."""
        if self.kek_file is not None:
            return self.kek_file
        folder = self.kek_dir or (Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
                                  / "agentledger" / "keks")
        tag = hashlib.sha256(str(self.data_dir.resolve()).encode()).hexdigest()[:16]
        return folder / f"{tag}.key"

    @property
    def integrity_key_path(self) -> Path:
        """``integrity_key_file``, or the key-encryption key's path with suffix ``.integrity``."""
        return self.integrity_key_file or self.kek_path.with_suffix(".integrity")

    @property
    def witness_path(self) -> Path:
        """The witness of ledger heads (stores/witness.py): beside the integrity keys, with
        suffix ``.witness``, so a restored data folder cannot roll it back."""
        return self.witness_file or self.integrity_key_path.with_suffix(".witness")

    @property
    def forget_journal_path(self) -> Path:
        """The forget journal (stores/forget_journal.py): beside the integrity keys, with suffix
        ``.forgets``, so a restored data folder leaves it as it is."""
        return self.forget_journal_file or self.integrity_key_path.with_suffix(".forgets")

    @property
    def identity_escrow_path(self) -> Path:
        """Where ``backup`` keeps the data folder's credentials (the operator identity ``auth/``
        and the context signing key) for a restore: a folder beside the integrity keys, with
        suffix ``.identity``, so that no backup folder holds a key, a seed or a credential."""
        return self.integrity_key_path.with_suffix(".identity")

    @property
    def legacy_kek_path(self) -> Path:
        """Where the key-encryption key was kept before: inside the data folder (moved out on start)."""
        return self.data_dir / "keyring.key"

    @property
    def context_key_path(self) -> Path:
        return self.context_signing_key_file or self.data_dir / "context-signing.key"

    @property
    def runtime_file(self) -> Path:
        return self.data_dir / "runtime.json"


def nats_servers(url: str) -> list[str]:
    """The servers of a NATS URL: ``nats://a:4222,nats://b:4222`` names a cluster, one URL a server.

    Whitespace around each URL is ignored, and so are empty entries (a trailing comma).
    """
    return [part.strip() for part in url.split(",") if part.strip()]


_PREFIX = re.compile(r"^[a-z][a-z0-9]{0,31}$")
_INT = {"stream_replicas", "cluster_size", "projector_partitions", "instances",
        "max_event_bytes", "max_artifact_bytes", "max_batch_events", "max_inflight_batches",
        "projector_batch", "max_ledger_bytes", "max_keys_bytes", "max_artifact_store_bytes",
        "max_reply_bytes", "view_cache_bytes", "projector_cache_bytes", "key_cache_bytes",
        "rebuild_memory_bytes",
        "max_leases_per_tenant", "max_leases_bytes", "embeddings_dims", "tenant_max_connections",
        "tenant_max_subscriptions", "tenant_max_payload_bytes", "ledger_reserve_bytes",
        "tenant_max_ledger_bytes", "tenant_max_artifact_bytes", "tenant_max_memory_records",
        "metrics_port", "metrics_tenants"}
_FLOAT = {"projector_linger_ms", "dedupe_window_s", "embeddings_timeout_s", "memory_receipt_ttl_s",
          "memory_judge_timeout_s",
          "context_compactor_timeout_s", "context_catch_up_s", "tenant_append_events_per_s",
          "tenant_append_bytes_per_s", "tenant_append_burst_s", "tenant_artifact_requests_per_s",
          "tenant_artifact_bytes_per_s", "up_timeout_s", "up_stall_s"}
_BOOL = {"embeddings_send_dims", "redact_secrets", "integrity", "memory_judge_reads_findings"}
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


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
            elif field in _BOOL:
                if raw.lower() not in _TRUE | _FALSE:
                    raise ValueError(raw)
                values[field] = raw.lower() in _TRUE
            elif field in ("data_dir", "kek_file", "kek_dir", "integrity_key_file", "witness_file",
                           "witness_copy_file", "forget_journal_file", "server_root",
                           "auth_dir", "nats_creds", "nats_ca_file", "ready_file", "embeddings_key_file",
                           "context_compactor_key_file", "context_signing_key_file", "memory_judge_key_file"):
                values[field] = Path(raw)
            else:
                values[field] = raw
        except ValueError as exc:
            raise ContractError(f"cannot parse {raw!r}", code="invalid_config",
                                path=f"AGENTLEDGER_{field.upper()}") from exc
    values.update({k: v for k, v in overrides.items() if v is not None})
    return Settings(**values)  # type: ignore[arg-type]
