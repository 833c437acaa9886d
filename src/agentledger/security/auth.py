"""NATS identity in operator (JWT) mode: keys, accounts, users, credentials, tenant admin.

Why operator mode: a tenant is a NATS account and must be addable and
revocable while everything runs. Accounts declared in a server config file
cannot do that (a reload does not wire a new account's service imports), while
an operator-mode server with the ``full`` resolver accepts account JWTs pushed
at runtime over the system account (``$SYS.REQ.CLAIMS.UPDATE``) and applies
user revocations at once, disconnecting the revoked user. It is the same model
a production cluster runs, so the embedded server and an external one differ
only in who starts them.

Trust, in one place:

* the **operator** key signs every account; it stays in ``auth_dir`` (0600);
* **SYS** is the system account; its user pushes account JWTs;
* **SVC** is the services' account: it alone has JetStream (stream, KV buckets,
  object store) and exports the request endpoints (service exports with the
  requester's identity shared) and the change notifications (a stream export);
  its users are one per service plus ``operator``, the admin identity of the
  CLI. Only the writer's user may publish to ledger subjects;
* each **tenant** is an account with no JetStream, importing exactly the
  endpoints of one prefix and its own notifications; each **agent** is a user in
  it, allowed to publish only to those endpoints and to receive only on its
  own reply inbox and its tenant's notifications.

Files under ``auth_dir`` (directory 0700, files 0600): ``operator.nk`` /
``operator.jwt``, ``accounts/{SYS,SVC}.{nk,jwt}``, ``creds/<role>.creds`` for the
services, the operator and the system user, ``tenants/<prefix>/<tenant>.json``
(account seed, every user key issued to each agent, revocations, retired accounts, limits)
and the agents' credentials under ``creds/tenants/<prefix>/<tenant>/<agent>.creds``.

Revocation never depends on finding a file: revoking an agent revokes every key it was
issued (the account JWT's ``revocations``), and a revoked tenant added again gets a new
account, so nothing issued under the old one can come back. Each tenant account carries
limits (connections, subscriptions per connection, payload) from the settings or the
operator's per-tenant values, pushed again on every start.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import re
import secrets
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import nats
import nats.js.errors
import nkeys
from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.errors import (
    AgentLedgerError,
    ContractError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
)
from agentledger.security.identity import ACTIVE, REVOKED, TenantEntry, tenants_bucket
from agentledger.security.private_files import write_private
from agentledger.stores.buckets import open_kv
from agentledger.stores.natsclient import open_connection

# Service roles, each a user of the services' account with its own credentials.
WRITER = "ledger-writer"
SERVICE_ROLES = (WRITER, "projector", "checkpointer", "memory-policy", "context-builder", "tombstone-fanout")
OPERATOR_ROLE = "operator"
# The tombstone-fanout erases what a forget request reaches in KV buckets and object stores
# (keys, leases, bindings, artifacts), so it may write them; the ledger it erases through the
# stream API and appends to through the writer, like every service.
FANOUT = "tombstone-fanout"
SYS_ROLE = "sys"
# Request subjects (after ``<prefix>.``) the services export to tenants.
ENDPOINTS = ("writer.append", "lease.*", "wm.get", "checkpoint.save", "resume", "artifact.*",
             "memory.*", "context.*", "forget.request", "forget.receipt")
# Subjects no one but the writer may publish to: ledger subjects of any prefix.
LEDGER_ANY_PREFIX = "*.ledger.>"
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_UNLIMITED = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
              "wildcards": True, "conn": -1, "leaf": -1}
_JETSTREAM = {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}


def _tenant_limits(limits: TenantLimits) -> dict[str, Any]:
    """Account-JWT limits of a tenant: its quotas, no exports and no leaf node connections."""
    return {**_UNLIMITED, "conn": limits.connections, "subs": limits.subscriptions,
            "payload": limits.payload, "exports": 0, "leaf": 0}


class AuthError(AgentLedgerError):
    """Identity material is missing, malformed, or an admin action was refused."""

    code = "auth"


# --- keys and JWTs -------------------------------------------------------------------------

def _new_seed(prefix: int) -> str:
    return bytes(nkeys.encode_seed(secrets.token_bytes(32), prefix)).decode()


def public_key(seed: str) -> str:
    return bytes(nkeys.from_seed(seed.encode()).public_key).decode()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def encode_jwt(claims: dict[str, Any], issuer_seed: str) -> str:
    """A NATS v2 JWT of ``claims`` signed by ``issuer_seed`` (ed25519-nkey)."""
    body = {**claims, "iat": claims.get("iat", int(time.time())), "iss": public_key(issuer_seed)}
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).digest()
    body["jti"] = base64.b32encode(digest).decode().rstrip("=")
    head = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    payload = _b64(json.dumps(body).encode())
    signature = nkeys.from_seed(issuer_seed.encode()).sign(f"{head}.{payload}".encode())
    return f"{head}.{payload}.{_b64(signature)}"


def creds_text(jwt: str, seed: str) -> str:
    """The ``.creds`` file format every NATS client library reads."""
    return (f"-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n"
            "************************* IMPORTANT *************************\n"
            "NKEY Seed printed below can be used to sign and prove identity.\n"
            "NKEYs are sensitive and should be treated as secrets.\n\n"
            f"-----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n\n"
            "*************************************************************\n")


def creds_user(path: Path) -> str:
    """Public key of the user in a credentials file (read from its seed)."""
    text = Path(path).read_text()
    match = re.search(r"-----BEGIN USER NKEY SEED-----\s*(\S+)\s*------END", text)
    if match is None:
        raise AuthError(f"{path} is not a NATS credentials file (no user seed)")
    return public_key(match.group(1))


def inbox_prefix(user_public_key: str) -> str:
    """Reply inbox of one user: agents may only subscribe below their own."""
    return f"_INBOX_{user_public_key}"


def check_name(value: str, what: str) -> str:
    if not _NAME.match(value):
        raise ContractError(f"{what} {value!r} must be 1-64 of [A-Za-z0-9_-]", code="invalid_token",
                            path=what)
    return value


# --- records ---------------------------------------------------------------------------------

class AgentRecord(msgspec.Struct, kw_only=True):
    """The user keys issued to one agent; revoking the agent revokes every one of them."""

    # The latest key (the credentials file `agent add` wrote last) and when it was issued.
    user: str
    issued_at: int
    # Every key ever issued to this agent -> its issue time (Unix seconds). Records written
    # before keys were kept hold only the latest one: ``complete`` is False for those, and
    # earlier keys can only be found while they are connected (``agent_revoke``).
    keys: dict[str, int] = {}
    complete: bool = False

    def issued(self) -> dict[str, int]:
        """Every key known to have been issued to this agent, with its issue time."""
        return {**self.keys, self.user: self.issued_at}


class TenantRecord(msgspec.Struct, kw_only=True):
    """What the operator keeps about one tenant (the account seed signs its agents)."""

    tenant: str
    prefix: str
    account_seed: str
    account: str
    status: str = ACTIVE
    agents: dict[str, AgentRecord] = {}
    # user public key (or "*" for every user) -> revoked at (Unix seconds).
    revocations: dict[str, int] = {}
    # Accounts the tenant had before it was revoked and added again: never used again, and
    # pushed as refusing every connection (their seeds are gone: nobody signs for them).
    retired_accounts: list[str] = []
    # The operator's per-tenant NATS limits (`tenant add --max-connections ...`); None: the
    # setting of the same name (``Settings.tenant_max_connections``, ...).
    max_connections: int | None = None
    max_subscriptions: int | None = None
    max_payload: int | None = None

    def agent_revoked(self, agent: str) -> bool:
        """Whether ``agent``'s latest credentials are refused: the tenant is revoked (its account
        revokes every user), or the agent was revoked and not issued a new key since."""
        record = self.agents[agent]
        return self.status != ACTIVE or "*" in self.revocations or record.user in self.revocations


class TenantLimits(msgspec.Struct, frozen=True, kw_only=True):
    """NATS limits of one tenant account; -1 is no limit.

    ``connections`` counts the account's client connections across the cluster;
    ``subscriptions`` (per connection) and ``payload`` (bytes per published
    message, per connection) are what the server applies to each of them.
    """

    connections: int
    subscriptions: int
    payload: int

    @classmethod
    def of(cls, settings: Settings, record: TenantRecord) -> TenantLimits:
        """The record's own limits where the operator set them, the settings' otherwise."""
        return cls(connections=_pick(record.max_connections, settings.tenant_max_connections),
                   subscriptions=_pick(record.max_subscriptions, settings.tenant_max_subscriptions),
                   payload=_pick(record.max_payload, settings.tenant_max_payload_bytes))


def _pick(own: int | None, default: int) -> int:
    return default if own is None else own


def check_limit(value: int | None, what: str) -> int | None:
    """A limit is a positive count or -1 (no limit); None leaves it as it was."""
    if value is not None and value != -1 and value < 1:
        raise ContractError(f"{what} {value} must be at least 1, or -1 for no limit",
                            code="invalid_value", path=what)
    return value


class AuthStore:
    """The operator's identity material in ``root``; see the module docstring."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).absolute()

    # ---- layout ----
    def _key(self, name: str) -> Path:
        return self.root / ("operator.nk" if name == "operator" else f"accounts/{name}.nk")

    def creds(self, role: str) -> Path:
        return self.root / "creds" / f"{role}.creds"

    def agent_creds(self, prefix: str, tenant: str, agent: str) -> Path:
        return self.root / "creds" / "tenants" / prefix / tenant / f"{agent}.creds"

    def _tenant_file(self, prefix: str, tenant: str) -> Path:
        return self.root / "tenants" / prefix / f"{tenant}.json"

    @property
    def initialized(self) -> bool:
        return (self.root / "operator.jwt").exists()

    def seed(self, name: str) -> str:
        try:
            return self._key(name).read_text().strip()
        except FileNotFoundError:
            raise AuthError(f"no {name} key in {self.root}; run `agentledger up` (embedded) or "
                            "`agentledger auth init`") from None

    def jwt(self, name: str) -> str:
        path = self.root / ("operator.jwt" if name == "operator" else f"accounts/{name}.jwt")
        return path.read_text().strip()

    # ---- creation ----
    def init(self) -> AuthStore:
        """Create the operator, SYS and SVC accounts and the service users once; idempotent.

        Account JWTs are re-signed on every call (cheap, and picks up a changed
        export list); keys are never replaced.
        """
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.root.chmod(0o700)
        for name, prefix in (("operator", nkeys.PREFIX_BYTE_OPERATOR),
                             ("SYS", nkeys.PREFIX_BYTE_ACCOUNT), ("SVC", nkeys.PREFIX_BYTE_ACCOUNT)):
            if not self._key(name).exists():
                write_private(self._key(name), _new_seed(prefix) + "\n")
        op, sys_seed = self.seed("operator"), self.seed("SYS")
        write_private(self.root / "operator.jwt", encode_jwt({
            "sub": public_key(op), "name": "agentledger",
            "nats": {"type": "operator", "version": 2, "system_account": public_key(sys_seed)}}, op))
        write_private(self.root / "accounts/SYS.jwt", encode_jwt({
            "sub": public_key(sys_seed), "name": "SYS",
            "nats": {"type": "account", "version": 2, "limits": _UNLIMITED}}, op))
        write_private(self.root / "accounts/SVC.jwt", self._svc_jwt())
        for role in (*SERVICE_ROLES, OPERATOR_ROLE):
            if not self.creds(role).exists():
                self._issue_user("SVC", role, self._service_permissions(role), self.creds(role))
        if not self.creds(SYS_ROLE).exists():
            self._issue_user("SYS", SYS_ROLE, {}, self.creds(SYS_ROLE))
        return self

    def _svc_jwt(self) -> str:
        exports: list[dict[str, Any]] = [
            {"name": ep, "subject": f"*.{ep}", "type": "service", "response_type": "Singleton"}
            for ep in ENDPOINTS]
        exports.append({"name": "changes", "subject": "*.wm.changed.>", "type": "stream"})
        exports.append({"name": "rejections", "subject": "*.rejected.>", "type": "stream"})
        svc = self.seed("SVC")
        return encode_jwt({"sub": public_key(svc), "name": "SVC", "nats": {
            "type": "account", "version": 2, "limits": {**_UNLIMITED, **_JETSTREAM},
            "exports": exports}}, self.seed("operator"))

    @staticmethod
    def _service_permissions(role: str) -> dict[str, Any]:
        """Services trust each other, but only the writer may append to the ledger.

        Projector, checkpointer, memory-policy and context-builder also never write a KV
        bucket or an object (leases, data-subject keys and artifacts are the writer's,
        agent bindings the operator's); memory-policy and context-builder append their
        events and store their artifacts through the writer's endpoints like any caller.
        The operator keeps the tenant registry and the bindings, so it may write KV, but
        not the ledger; the tombstone-fanout erases forgotten keys, leases, bindings and
        artifacts, so it may write KV and objects too.
        """
        if role == WRITER:
            return {}
        deny = [LEDGER_ANY_PREFIX]
        if role not in (OPERATOR_ROLE, FANOUT):
            deny += ["$KV.>", "$O.>"]
        return {"pub": {"deny": deny}}

    def _issue_user(self, account: str, name: str, permissions: dict[str, Any], path: Path,
                    account_seed: str | None = None) -> str:
        seed = _new_seed(nkeys.PREFIX_BYTE_USER)
        user = public_key(seed)
        jwt = encode_jwt({"sub": user, "name": name, "nats": {
            "type": "user", "version": 2, "subs": -1, "data": -1, "payload": -1, **permissions}},
            account_seed or self.seed(account))
        write_private(path, creds_text(jwt, seed))
        return user

    def server_config(self, resolver_dir: Path) -> str:
        """Server config lines that put a nats-server in this operator's mode."""
        sys_pub, svc_pub = public_key(self.seed("SYS")), public_key(self.seed("SVC"))
        return "\n".join([
            f"operator: {self.jwt('operator')}",
            f"system_account: {sys_pub}",
            "resolver: {",
            "  type: full",
            f"  dir: {json.dumps(str(resolver_dir))}",
            "  allow_delete: false",
            '  interval: "2m"',
            '  timeout: "5s"',
            "}",
            "resolver_preload: {",
            f"  {sys_pub}: {self.jwt('SYS')}",
            f"  {svc_pub}: {self.jwt('SVC')}",
            "}",
            ""])

    # ---- tenants ----
    def tenant(self, prefix: str, tenant: str) -> TenantRecord:
        try:
            return msgspec.json.decode(self._tenant_file(prefix, tenant).read_bytes(),
                                       type=TenantRecord)
        except FileNotFoundError:
            raise NotFoundError(f"no tenant {tenant!r} under prefix {prefix!r}",
                                path="tenant") from None

    def tenants(self, prefix: str) -> Iterator[TenantRecord]:
        folder = self.root / "tenants" / prefix
        for path in sorted(folder.glob("*.json")) if folder.exists() else []:
            yield msgspec.json.decode(path.read_bytes(), type=TenantRecord)

    def save_tenant(self, record: TenantRecord) -> None:
        write_private(self._tenant_file(record.prefix, record.tenant),
                      msgspec.json.encode(record).decode())

    def new_tenant(self, prefix: str, tenant: str) -> TenantRecord:
        """The tenant's record, created (with a fresh account key) when it is new."""
        check_name(tenant, "tenant")
        with contextlib.suppress(NotFoundError):
            return self.tenant(prefix, tenant)
        seed = _new_seed(nkeys.PREFIX_BYTE_ACCOUNT)
        record = TenantRecord(tenant=tenant, prefix=prefix, account_seed=seed,
                              account=public_key(seed))
        self.save_tenant(record)
        return record

    def account_jwt(self, record: TenantRecord, limits: TenantLimits) -> str:
        """The tenant account: no JetStream; imports of one prefix's endpoints, within ``limits``.

        A revoked tenant's account imports nothing and revokes every user (``*``): the server
        closes their connections saying "User Authentication Revoked" and refuses them after.
        """
        return self._tenant_account_jwt(record.account, record, limits, record.status == ACTIVE)

    def retired_account_jwt(self, account: str, record: TenantRecord) -> str:
        """An account the tenant had before it was revoked and added again: refuses everything.

        Every user is revoked, and the zero connection limit also refuses credentials issued
        later (its seed is gone, but a copy stolen earlier could still sign).
        """
        return self._tenant_account_jwt(
            account, record, TenantLimits(connections=0, subscriptions=0, payload=0), False)

    def _tenant_account_jwt(self, account: str, record: TenantRecord, limits: TenantLimits,
                            active: bool) -> str:
        imports: list[dict[str, Any]] = []
        revocations = dict(record.revocations)
        if active:
            svc = public_key(self.seed("SVC"))
            imports = [{"name": ep, "subject": f"{record.prefix}.{ep}", "account": svc,
                        "type": "service", "share": True} for ep in ENDPOINTS]
            imports.append({"name": "changes", "type": "stream", "account": svc,
                            "subject": f"{record.prefix}.wm.changed.{record.tenant}.>"})
            imports.append({"name": "rejections", "type": "stream", "account": svc,
                            "subject": f"{record.prefix}.rejected.{record.tenant}.>"})
        else:
            revocations = {"*": int(time.time())}
        nats_claims: dict[str, Any] = {"type": "account", "version": 2, "imports": imports,
                                       "limits": _tenant_limits(limits)}
        if revocations:
            nats_claims["revocations"] = revocations
        return encode_jwt({"sub": account, "name": f"{record.prefix}/{record.tenant}",
                           "nats": nats_claims}, self.seed("operator"))

    def account_jwts(self, record: TenantRecord, limits: TenantLimits) -> list[str]:
        """Every account JWT of the tenant: its retired accounts first, then its current one."""
        return [*(self.retired_account_jwt(acc, record) for acc in record.retired_accounts),
                self.account_jwt(record, limits)]

    def renew_account(self, record: TenantRecord) -> TenantRecord:
        """A revoked tenant, active again under a new account; the old one is retired for good.

        Its agents and their revocations belonged to the old account: they start afresh.
        """
        seed = _new_seed(nkeys.PREFIX_BYTE_ACCOUNT)
        renewed = msgspec.structs.replace(
            record, account_seed=seed, account=public_key(seed), status=ACTIVE, agents={},
            revocations={}, retired_accounts=[*record.retired_accounts, record.account])
        self.save_tenant(renewed)
        return renewed

    def add_agent(self, record: TenantRecord, agent: str, out: Path | None = None) -> Path:
        """Issue credentials for ``agent`` in the tenant's account (a new key every time)."""
        check_name(agent, "agent")
        if record.status != ACTIVE:
            raise AuthError(f"tenant {record.tenant!r} is revoked", code="tenant_revoked")
        path = Path(out) if out else self.agent_creds(record.prefix, record.tenant, agent)
        seed = _new_seed(nkeys.PREFIX_BYTE_USER)
        user = public_key(seed)
        p = record.prefix
        permissions = {
            "pub": {"allow": [f"{p}.{ep}" for ep in ENDPOINTS]},
            "sub": {"allow": [f"{inbox_prefix(user)}.>", f"{p}.wm.changed.{record.tenant}.>",
                              f"{p}.rejected.{record.tenant}.>"]},
        }
        issued = int(time.time())
        jwt = encode_jwt({"sub": user, "name": agent, "iat": issued, "nats": {
            "type": "user", "version": 2, "subs": -1, "data": -1, "payload": -1, **permissions}},
            record.account_seed)
        write_private(path, creds_text(jwt, seed))
        earlier = record.agents.get(agent)
        record.agents[agent] = AgentRecord(
            user=user, issued_at=issued, keys={**(earlier.issued() if earlier else {}), user: issued},
            complete=earlier.complete if earlier else True)
        self.save_tenant(record)
        return path


# --- connections ----------------------------------------------------------------------------

RECONNECT_WAIT_S = 0.25
# Finding an agent's open connections: most listed per server, how long to wait for the first
# server's answer, and for the next one after an answer.
CONNZ_LIMIT = 100_000
CONNZ_FIRST_REPLY_S = 5.0
CONNZ_QUIET_S = 0.25
# How the server says a tenant account is at its connection limit (nats-server ErrTooManyAccountConnections).
TOO_MANY_CONNECTIONS = "maximum account active connections exceeded"

def auth_store(settings: Settings) -> AuthStore:
    return AuthStore(settings.auth_root)


def creds_for(settings: Settings, role: str) -> Path | None:
    """Credentials a process of ``role`` connects with; None means an anonymous connection.

    An explicit ``nats_creds`` wins (an agent, or a service deployed with its
    own file); otherwise the role's file under ``auth_dir`` when it exists.
    """
    if settings.nats_creds is not None:
        return settings.nats_creds
    path = auth_store(settings).creds(role)
    return path if path.exists() else None


async def connect(settings: Settings, role: str, **options: Any) -> Client:
    """Connect to ``settings.nats_url`` as ``role`` (or as the agent of ``nats_creds``).

    An agent's credentials also set its private reply inbox, the only subject
    its permissions let it receive replies on.
    """
    _tls(settings, options)
    creds = creds_for(settings, role)
    if creds is not None:
        options.setdefault("user_credentials", str(creds))
        options.setdefault("inbox_prefix", inbox_prefix(creds_user(creds)))
    options.setdefault("name", f"agentledger-{role}")
    # nats-py waits 2 s between attempts on one server by default; an embedded server is back
    # within about a second of a crash, and every service should be too.
    options.setdefault("reconnect_time_wait", RECONNECT_WAIT_S)
    errors: list[str] = []
    refused: list[AgentLedgerError] = []
    refusal = asyncio.Event()
    given = options.get("error_cb")
    who = creds if settings.nats_creds is not None else role

    async def on_error(exc: Exception) -> None:
        # nats-py would log a traceback per failed attempt; keep the reason for one clear error.
        errors[:] = [str(exc)]
        reason = errors[0].lower()
        if "authorization violation" in reason:
            refused.append(AuthError(
                f"the NATS server at {settings.nats_url} refused the credentials of {who} (unknown, "
                "revoked, or issued for another server)", code="unauthenticated"))
        elif TOO_MANY_CONNECTIONS in reason:
            refused.append(PermissionDeniedError(
                f"the NATS server at {settings.nats_url} refused a new connection for {who}: its "
                "tenant has as many connections open as its limit allows (`agentledger tenant add "
                "TENANT --max-connections N` raises it)", code="too_many_connections"))
        if refused:
            refusal.set()
        if given is not None:
            await given(exc)

    options["error_cb"] = on_error
    connecting = asyncio.ensure_future(open_connection(settings.nats_url, **options))
    waiting = asyncio.ensure_future(refusal.wait())
    await asyncio.wait([connecting, waiting], return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if not connecting.done():
        # The server refused this identity (or its tenant's quota): retrying in a loop would not
        # change its answer, so fail now with the reason, not in minutes.
        connecting.cancel()
        with contextlib.suppress(asyncio.CancelledError, nats.errors.Error, OSError):
            await connecting
        raise refused[0]
    try:
        return connecting.result()
    except (nats.errors.Error, OSError) as exc:
        reason = errors[-1] if errors else str(exc) or type(exc).__name__
        raise UnavailableError(f"cannot connect to NATS at {settings.nats_url}: {reason}") from exc


def _tls(settings: Settings, options: dict[str, Any]) -> None:
    """Trust ``nats_ca_file`` for ``tls://`` servers (self-signed or private CAs)."""
    if settings.nats_ca_file is not None and "tls" not in options:
        options["tls"] = ssl.create_default_context(cafile=str(settings.nats_ca_file))


# --- admin actions (operator) ------------------------------------------------------------------

async def _push(settings: Settings, jwt: str) -> None:
    """Hand an account JWT to the servers over the system account."""
    options: dict[str, Any] = {}
    _tls(settings, options)
    nc = await open_connection(settings.nats_url, user_credentials=str(auth_store(settings).creds(SYS_ROLE)),
                            name="agentledger-admin", allow_reconnect=False, connect_timeout=5, **options)
    try:
        reply = await nc.request("$SYS.REQ.CLAIMS.UPDATE", jwt.encode(), timeout=5)
    except nats.errors.TimeoutError as exc:
        raise UnavailableError("the NATS server did not confirm the account update") from exc
    finally:
        await nc.close()
    answer = json.loads(reply.data)
    if "error" in answer:
        raise AuthError(f"the NATS server refused the account: {answer['error']}")


async def _register(settings: Settings, record: TenantRecord) -> None:
    """Write the tenant's registry entries (as the operator) so the services know its accounts.

    The current account gets the record's status; every retired account is (again) revoked, so
    a tenant revoked and added again never brings its old account back.
    """
    entries = {record.account: record.status, **dict.fromkeys(record.retired_accounts, REVOKED)}
    nc = await connect(settings, OPERATOR_ROLE, allow_reconnect=False, connect_timeout=5)
    try:
        kv = await open_kv(nc.jetstream(), tenants_bucket(settings.prefix),
                           replicas=settings.stream_replicas)
        for account, status in entries.items():
            entry = TenantEntry(tenant=record.tenant, status=status, prefix=record.prefix)
            await kv.put(account, msgspec.json.encode(entry))
    except (nats.errors.TimeoutError, nats.js.errors.ServiceUnavailableError,
            nats.errors.NoRespondersError) as exc:
        # On a cluster, while the bucket's raft group elects a leader: try again in seconds.
        raise UnavailableError(f"the tenant registry did not take the entry ({type(exc).__name__}); "
                               "retry") from exc
    finally:
        await nc.close()


async def _push_tenant(settings: Settings, record: TenantRecord) -> None:
    """Push the tenant's account JWTs (retired ones first) with its current limits."""
    store = auth_store(settings)
    for jwt in store.account_jwts(record, TenantLimits.of(settings, record)):
        await _push(settings, jwt)


async def tenant_add(settings: Settings, tenant: str, *, max_connections: int | None = None,
                     max_subscriptions: int | None = None,
                     max_payload: int | None = None) -> TenantRecord:
    """Create a tenant, or set its limits: registry entries first, then its account JWTs.

    A revoked tenant comes back under a new NATS account (:meth:`AuthStore.renew_account`):
    every credential issued before the revocation stays refused, by the server and by the
    services, and its agents need new credentials. A limit given here is kept in the
    tenant's record (until given again); one not given follows the settings.
    """
    store = auth_store(settings)
    record = store.new_tenant(settings.prefix, tenant)
    if record.status != ACTIVE:
        record = store.renew_account(record)
    for field, value in (("max_connections", max_connections),
                         ("max_subscriptions", max_subscriptions), ("max_payload", max_payload)):
        if check_limit(value, field) is not None:
            setattr(record, field, value)
    store.save_tenant(record)
    await _register(settings, record)
    await _push_tenant(settings, record)
    return record


async def tenant_revoke(settings: Settings, tenant: str) -> TenantRecord:
    """Revoke a tenant: the services refuse it at once, then the server drops its connections."""
    store = auth_store(settings)
    record = store.tenant(settings.prefix, tenant)
    record.status = REVOKED
    store.save_tenant(record)
    await _register(settings, record)
    await _push_tenant(settings, record)
    return record


async def agent_add(settings: Settings, tenant: str, agent: str, out: Path | None = None) -> Path:
    """Issue an agent's credentials file (0600); the tenant must exist and be active."""
    store = auth_store(settings)
    record = store.tenant(settings.prefix, tenant)
    return store.add_agent(record, agent, out)


class AgentRevocation(msgspec.Struct, frozen=True, kw_only=True):
    """What ``agent_revoke`` revoked: user keys, and whether every key ever issued is among them."""

    keys: list[str]
    # False for an agent first issued before keys were recorded: an earlier credentials file of
    # it that was not connected during the revoke is not known, so not revoked.
    complete: bool


async def agent_revoke(settings: Settings, tenant: str, agent: str) -> AgentRevocation:
    """Revoke every credential issued to ``agent`` so far; the server disconnects it.

    Every recorded key of the agent is revoked, and so is every user of the tenant's
    account connected under the agent's name (which finds credentials issued before keys
    were recorded, as long as they are connected). A later ``agent add`` issues a new key.
    """
    store = auth_store(settings)
    record = store.tenant(settings.prefix, tenant)
    if agent not in record.agents:
        raise NotFoundError(f"tenant {tenant!r} has no agent {agent!r}", path="agent")
    issued = record.agents[agent].issued()
    connected = await connected_users(settings, record.account, agent)
    now = int(time.time())
    for user in {*issued, *connected}:
        # A key's JWTs issued up to this second are refused; each key is only ever issued once.
        record.revocations[user] = max(now, issued.get(user, now))
    store.save_tenant(record)
    await _push_tenant(settings, record)
    return AgentRevocation(keys=sorted({*issued, *connected}), complete=record.agents[agent].complete)


async def connected_users(settings: Settings, account: str, agent: str) -> set[str]:
    """Public keys of the users of ``account`` connected now under the name ``agent``.

    Asks every server (``$SYS.REQ.SERVER.PING.CONNZ`` with the account filter, over the
    system account) and reads the agent's name from each connection's user JWT.
    """
    options: dict[str, Any] = {}
    _tls(settings, options)
    nc = await open_connection(settings.nats_url, user_credentials=str(auth_store(settings).creds(SYS_ROLE)),
                               name="agentledger-admin", allow_reconnect=False, connect_timeout=5,
                               **options)
    users: set[str] = set()
    try:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        query = {"acc": account, "auth": True, "limit": CONNZ_LIMIT}
        await nc.publish("$SYS.REQ.SERVER.PING.CONNZ", json.dumps(query).encode(), reply=inbox)
        wait = CONNZ_FIRST_REPLY_S
        # Every server answers; once the first has, the others follow within moments.
        with contextlib.suppress(nats.errors.TimeoutError):
            while True:
                msg = await sub.next_msg(timeout=wait)
                wait = CONNZ_QUIET_S
                for conn in (json.loads(msg.data).get("data") or {}).get("connections") or []:
                    if conn.get("account") == account and _jwt_name(conn.get("jwt", "")) == agent:
                        users.add(conn["authorized_user"])
    finally:
        await nc.close()
    return users


def _jwt_name(jwt: str) -> str | None:
    """The ``name`` claim of a JWT (unverified: the server verified it when the user connected)."""
    try:
        body = jwt.split(".")[1]
        return json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))).get("name")
    except (IndexError, ValueError):
        return None


async def sync_tenants(settings: Settings) -> int:
    """Push every tenant account of ``settings.prefix`` again, with the current limits.

    Run on every start: a server that lost its resolver folder learns the tenants (and
    their retired accounts) again, and a changed limit setting reaches every tenant.
    """
    store = auth_store(settings)
    count = 0
    for record in store.tenants(settings.prefix):
        await _push_tenant(settings, record)
        count += 1
    return count
