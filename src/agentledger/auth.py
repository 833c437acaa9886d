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
(account seed, agents, revocations) and the agents' credentials under
``creds/tenants/<prefix>/<tenant>/<agent>.creds``.
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

from agentledger.buckets import open_kv
from agentledger.config import Settings
from agentledger.errors import AgentLedgerError, ContractError, NotFoundError, UnavailableError
from agentledger.identity import ACTIVE, REVOKED, TenantEntry, tenants_bucket
from agentledger.natsclient import open_connection
from agentledger.private_files import write_private

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
    user: str
    issued_at: int


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

    def account_jwt(self, record: TenantRecord) -> str:
        """The tenant account: no JetStream; imports of one prefix's endpoints, or none if revoked."""
        svc = public_key(self.seed("SVC"))
        imports: list[dict[str, Any]] = []
        revocations = dict(record.revocations)
        if record.status == ACTIVE:
            imports = [{"name": ep, "subject": f"{record.prefix}.{ep}", "account": svc,
                        "type": "service", "share": True} for ep in ENDPOINTS]
            imports.append({"name": "changes", "type": "stream", "account": svc,
                            "subject": f"{record.prefix}.wm.changed.{record.tenant}.>"})
            imports.append({"name": "rejections", "type": "stream", "account": svc,
                            "subject": f"{record.prefix}.rejected.{record.tenant}.>"})
        else:
            revocations["*"] = int(time.time())
        nats_claims: dict[str, Any] = {"type": "account", "version": 2, "limits": _UNLIMITED,
                                       "imports": imports}
        if revocations:
            nats_claims["revocations"] = revocations
        return encode_jwt({"sub": record.account, "name": f"{record.prefix}/{record.tenant}",
                           "nats": nats_claims}, self.seed("operator"))

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
        record.agents[agent] = AgentRecord(user=user, issued_at=issued)
        self.save_tenant(record)
        return path


# --- connections ----------------------------------------------------------------------------

RECONNECT_WAIT_S = 0.25

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
    refused = asyncio.Event()
    given = options.get("error_cb")

    async def on_error(exc: Exception) -> None:
        # nats-py would log a traceback per failed attempt; keep the reason for one clear error.
        errors[:] = [str(exc)]
        if "authorization violation" in errors[0].lower():
            refused.set()
        if given is not None:
            await given(exc)

    options["error_cb"] = on_error
    who = creds if settings.nats_creds is not None else role
    connecting = asyncio.ensure_future(open_connection(settings.nats_url, **options))
    waiting = asyncio.ensure_future(refused.wait())
    await asyncio.wait([connecting, waiting], return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if not connecting.done():
        # Credentials the server refuses will not be accepted on a retry: fail now, not in minutes.
        connecting.cancel()
        with contextlib.suppress(asyncio.CancelledError, nats.errors.Error, OSError):
            await connecting
        raise AuthError(f"the NATS server at {settings.nats_url} refused the credentials of {who} "
                        "(unknown, revoked, or issued for another server)", code="unauthenticated")
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
    """Write the tenant's registry entry (as the operator) so the services know its account."""
    nc = await connect(settings, OPERATOR_ROLE, allow_reconnect=False, connect_timeout=5)
    try:
        kv = await open_kv(nc.jetstream(), tenants_bucket(settings.prefix),
                           replicas=settings.stream_replicas)
        entry = TenantEntry(tenant=record.tenant, status=record.status, prefix=record.prefix)
        await kv.put(record.account, msgspec.json.encode(entry))
    except (nats.errors.TimeoutError, nats.js.errors.ServiceUnavailableError,
            nats.errors.NoRespondersError) as exc:
        # On a cluster, while the bucket's raft group elects a leader: try again in seconds.
        raise UnavailableError(f"the tenant registry did not take the entry ({type(exc).__name__}); "
                               "retry") from exc
    finally:
        await nc.close()


async def tenant_add(settings: Settings, tenant: str) -> TenantRecord:
    """Create (or re-activate) a tenant: registry entry first, then its account JWT."""
    store = auth_store(settings)
    record = store.new_tenant(settings.prefix, tenant)
    if record.status != ACTIVE:
        record.status = ACTIVE
        record.revocations.pop("*", None)
        # Agents of the revoked period stay revoked: re-add issues new keys.
        for agent in record.agents.values():
            record.revocations[agent.user] = int(time.time())
        store.save_tenant(record)
    await _register(settings, record)
    await _push(settings, store.account_jwt(record))
    return record


async def tenant_revoke(settings: Settings, tenant: str) -> TenantRecord:
    """Revoke a tenant: the services refuse it at once, then the server drops its connections."""
    store = auth_store(settings)
    record = store.tenant(settings.prefix, tenant)
    record.status = REVOKED
    store.save_tenant(record)
    await _register(settings, record)
    await _push(settings, store.account_jwt(record))
    return record


async def agent_add(settings: Settings, tenant: str, agent: str, out: Path | None = None) -> Path:
    """Issue an agent's credentials file (0600); the tenant must exist and be active."""
    store = auth_store(settings)
    record = store.tenant(settings.prefix, tenant)
    return store.add_agent(record, agent, out)


async def agent_revoke(settings: Settings, tenant: str, agent: str) -> None:
    """Revoke every credential issued to ``agent`` so far; the server disconnects it."""
    store = auth_store(settings)
    record = store.tenant(settings.prefix, tenant)
    if agent not in record.agents:
        raise NotFoundError(f"tenant {tenant!r} has no agent {agent!r}", path="agent")
    # Revoke by issue time: every JWT of this key issued up to now is invalid.
    record.revocations[record.agents[agent].user] = int(time.time()) + 1
    store.save_tenant(record)
    await _push(settings, store.account_jwt(record))


async def sync_tenants(settings: Settings) -> int:
    """Push every tenant account of ``settings.prefix`` again (after a server lost its resolver dir)."""
    store = auth_store(settings)
    count = 0
    for record in store.tenants(settings.prefix):
        await _push(settings, store.account_jwt(record))
        count += 1
    return count
