"""``agentledger``: start and stop the stack, run the demo, append, inspect, replay, bench."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from agentledger import logs
from agentledger.bench import run_all
from agentledger.chaos import run as chaos_run
from agentledger.cli.backup import add_backup_commands
from agentledger.cli.context import add_context_commands
from agentledger.cli.forget import add_forget_commands
from agentledger.cli.keys import add_keys_commands
from agentledger.cli.memory import add_bind_command, add_memory_commands
from agentledger.client import connect
from agentledger.config import Settings, from_env
from agentledger.contracts.codec import MAX_DEPTH, encode_request, nesting_path
from agentledger.demo.context import render_compaction, run_compaction
from agentledger.demo.memory import render_lab, run_lab
from agentledger.demo.scenario import render, render_resume, run_demo
from agentledger.errors import AgentLedgerError, ContractError, RuntimeStateError
from agentledger.eval import command as eval_command
from agentledger.runtime.commands import down, up
from agentledger.runtime.service_users import with_witness
from agentledger.runtime.state import RuntimeInfo, read_runtime, resolve_urls, supervisor_alive
from agentledger.security import auth
from agentledger.services.context_builder import docs_replay
from agentledger.services.memory_policy import replay as memory_replay
from agentledger.services.projector import rebuild
from agentledger.stores import fences, ledger_audit


def _settings(args: argparse.Namespace) -> Settings:
    return from_env(data_dir=getattr(args, "data_dir", None), nats_creds=getattr(args, "creds", None))


def _connected(args: argparse.Namespace) -> Settings:

    return resolve_urls(_settings(args))


def cmd_up(args: argparse.Namespace) -> int:

    settings = _settings(args)
    if args.cluster is not None:
        settings = msgspec.structs.replace(settings, cluster_size=args.cluster)
    if args.instances is not None:
        settings = msgspec.structs.replace(settings, instances=args.instances)
    if args.partitions is not None:
        settings = msgspec.structs.replace(settings, projector_partitions=args.partitions)
    if settings.runtime_file.exists() and supervisor_alive(info := read_runtime(settings.runtime_file)):
        print("agentledger is already up")
    else:
        info = up(settings, accept_rollback=args.accept_rollback)
        print("agentledger is up")
    _print_runtime(info)
    return 0


async def _fenced(settings: Settings) -> dict[str, str]:
    """The tasks ``up`` fenced, their ledger behind its witness (``stores.fences``)."""
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        return await fences.read(nc, settings)
    finally:
        await nc.close()


def cmd_status(args: argparse.Namespace) -> int:

    info = read_runtime(_settings(args).runtime_file)
    if not supervisor_alive(info):
        raise RuntimeStateError(f"agentledger is not up: its supervisor (pid {info.supervisor_pid}) is gone; "
                                "run `agentledger down` and `agentledger up`")
    print("agentledger is up")
    _print_runtime(info)
    for name, why in asyncio.run(_fenced(_connected(args))).items():
        print(f"  fenced        {name}: {why}")
    return 0


def _print_runtime(info: RuntimeInfo) -> None:
    """What runs where: the servers, each process's pid and the port of its scrape endpoint."""
    def scrape(name: str) -> str:
        port = info.metrics_ports.get(name)
        return f"  metrics http://127.0.0.1:{port}/metrics" if port is not None else ""

    monitor = f"  monitor http://127.0.0.1:{info.nats_monitor_port}/varz" if info.nats_monitor_port else ""
    print(f"  NATS          {info.nats_url}{monitor}")
    for node in info.nats_nodes:
        node_monitor = f"  monitor http://127.0.0.1:{node.monitor_port}/varz" if node.monitor_port else ""
        print(f"    {node.name:<11} {node.url} pid {node.pid}{node_monitor}")
    print(f"  PostgreSQL    {info.database_url}")
    print(f"  data          {info.data_dir}")
    print(f"  supervisor    pid {info.supervisor_pid}{scrape('supervisor')}")
    for name, pid in info.services.items():
        print(f"  {name:<13} pid {pid}{scrape(name)}")
    print(f"  runtime       {Path(info.data_dir) / 'runtime.json'}")
    print(f"  logs          {Path(info.data_dir) / 'logs'}")


def cmd_down(args: argparse.Namespace) -> int:

    down(_settings(args))
    print("agentledger is down")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:

    settings = _connected(args)
    wm, resumed = asyncio.run(run_demo(settings))
    print(render(wm))
    print(render_resume(resumed))
    print(render_lab(*asyncio.run(run_lab(settings))))
    print(render_compaction(*asyncio.run(run_compaction(settings))))
    return 0


def _append_request(doc: Any, expected: int | None) -> dict[str, Any]:
    """Accept an AppendRequest, a list of events or one event."""
    if isinstance(doc, dict) and "events" in doc:
        request = dict(doc)
    else:
        request = {"events": doc if isinstance(doc, list) else [doc]}
    if expected is not None:
        request["expected_last_seq"] = expected
    return request


def cmd_append(args: argparse.Namespace) -> int:

    data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    # The writer's checks, here first: the depth before the JSON reader recurses into the
    # file (the path names the place in the file), then the request as the writer reads it.
    too_deep = nesting_path(data, MAX_DEPTH + 2)
    if too_deep is not None:
        raise ContractError(f"an event nests deeper than {MAX_DEPTH} levels of objects and arrays",
                            code="too_deep", path=too_deep)
    try:
        doc = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise AgentLedgerError(f"input is not JSON: {exc}", code="malformed_json") from exc
    payload = encode_request(_append_request(doc, args.expected_last_seq))

    async def run() -> list[Any]:
        async with await connect(_connected(args)) as client:
            return await client.append_raw(payload)

    print(msgspec.json.encode(asyncio.run(run())).decode())
    return 0


def cmd_task_show(args: argparse.Namespace) -> int:
    """A task's Working Memory (any size: the client puts chunks together), or with
    ``--rejections`` its whole rejection trace, read page by page (one JSON object a line)."""

    async def run() -> Any:
        async with await connect(_connected(args)) as client:
            if args.rejections:
                async for item in client.all_rejections(args.tenant, args.task_id):
                    print(msgspec.json.encode(item).decode())
                return None
            return await client.working_memory(args.tenant, args.task_id,
                                               reveal_personal=args.reveal_personal)

    wm = asyncio.run(run())
    if wm is None:
        return 0
    if args.json:
        print(msgspec.json.encode(wm).decode())
    else:
        print(render(wm))
        older = wm.state.get("rejections_total", 0) - len(wm.state["rejections"])
        if older > 0:
            print(f"    ... and {older} older (agentledger task show {args.tenant} {args.task_id} "
                  "--rejections)")
    return 0


def _progress(done: int, total: int) -> None:
    if sys.stderr.isatty() or done == total:
        print(f"\r  replayed {done}/{total} events", end="" if done < total else "\n",
              file=sys.stderr, flush=True)


def cmd_replay(args: argparse.Namespace) -> int:

    settings = _connected(args)
    if args.verify:
        report = asyncio.run(rebuild.verify(settings, progress=_progress))
        print(report.summary())
        chain = asyncio.run(_audit_ledger(settings, None, None))
        print(chain.summary())
        problems = list(chain.problems)
        for name, check in (("memory", memory_replay.verify_memory),
                            ("documents", docs_replay.verify_documents)):
            found = asyncio.run(check(settings))
            for line in found[:50]:
                print(f"  {name}: {line}")
            print(f"{name} projection: " + (f"{len(found)} difference(s)" if found
                                            else "equal to a fold of the ledger"))
            problems += found
        return 0 if report.ok and not problems else 1
    report = asyncio.run(rebuild.replace_live(settings, progress=_progress, partitions=args.partitions,
                                              allow_shrink=args.allow_shrink))
    print(f"rebuilt {report.events} events into {report.tasks} tasks up to seq {report.last_seq}"
          f" beside the live projection and switched to it; {report.spills} spill(s), at most"
          f" {report.peak_bytes} of {report.budget_bytes} bytes held; {report.seconds}s")
    print(f"rebuilt the memory projection: {asyncio.run(memory_replay.rebuild_memory(settings))}")
    print(f"rebuilt the document index: {asyncio.run(docs_replay.rebuild_documents(settings))}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """``agentledger verify``: 0 when every link holds and the ledger reaches its witness."""
    if args.task_id is not None and args.tenant is None:
        raise ContractError("--task needs --tenant", code="missing_field", path="--tenant")
    return verify_command(_connected(args), args.tenant, args.task_id)


def verify_command(settings: Settings, tenant: str | None, task_id: str | None) -> int:
    """Print the ledger audit; exit 0 when every link holds and the ledger reaches its witness."""
    report = asyncio.run(_audit_ledger(settings, tenant, task_id))
    print(report.summary())
    return 0 if report.ok else 1


async def _audit_ledger(settings: Settings, tenant: str | None, task_id: str | None) -> ledger_audit.LedgerAudit:
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        return await ledger_audit.audit(nc, with_witness(settings), tenant=tenant, task_id=task_id)
    finally:
        await nc.close()


def cmd_artifact(args: argparse.Namespace) -> int:

    if args.artifact_command == "put":
        content = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()

    async def run() -> Any:
        async with await connect(_connected(args)) as client:
            if args.artifact_command == "put":
                return await client.put_artifact(content, schema=args.schema,
                                                 producer=args.producer, version=args.version,
                                                 tenant=args.tenant)
            if args.artifact_command == "stat":
                return await client.stat_artifact(args.uri)
            return await client.get_artifact(args.uri)

    result = asyncio.run(run())
    if isinstance(result, bytes):
        if args.output == "-":
            sys.stdout.buffer.write(result)
        else:
            Path(args.output).write_bytes(result)
    else:
        print(msgspec.json.encode(result).decode())
    return 0


# Exit codes of `agentledger resume`: the status, so scripts can branch on it.
RESUME_EXIT = {"resumable": 0, "needs_reconcile": 3, "needs_accept": 4, "rejected": 1}


def resume_command(settings: Settings, tenant: str, task_id: str, executor: str,
                   accept_erased: Sequence[str] = ()) -> int:
    """Print the resume reply as JSON; exit 0 resumable, 3 needs_reconcile, 4 needs_accept
    (artifacts erased by forget requests not in ``accept_erased``), 1 rejected."""

    async def run() -> Any:
        async with await connect(settings) as client:
            return await client.resume(tenant, task_id, executor, accept_erased=accept_erased)

    reply = asyncio.run(run())
    print(json.dumps(msgspec.to_builtins(reply), indent=2, sort_keys=True))
    return RESUME_EXIT.get(reply.status or "", 1)


def cmd_resume(args: argparse.Namespace) -> int:
    return resume_command(_connected(args), args.tenant, args.task_id, args.executor,
                          args.accept_erased or ())


def cmd_checkpoint(args: argparse.Namespace) -> int:
    async def run() -> Any:
        async with await connect(_connected(args)) as client:
            return await client.save_checkpoint(args.tenant, args.task_id)

    print(msgspec.json.encode(asyncio.run(run())).decode())
    return 0


def cmd_tenant(args: argparse.Namespace) -> int:
    """Add, list or revoke tenants (operator): registry entry plus NATS account."""
    settings = _connected(args)
    if args.tenant_command == "list":
        for record in auth.auth_store(settings).tenants(settings.prefix):
            agents = ", ".join(name + (" (revoked)" if record.agent_revoked(name) else "")
                               for name in sorted(record.agents)) or "-"
            limits = auth.TenantLimits.of(settings, record)
            print(f"{record.tenant:<24} {record.status:<8} {record.account}  "
                  f"limits: {limits.connections} connections, {limits.subscriptions} "
                  f"subscriptions, {limits.payload} bytes  agents: {agents}")
        return 0
    if args.tenant_command == "add":
        record = asyncio.run(auth.tenant_add(
            settings, args.tenant, max_connections=args.max_connections,
            max_subscriptions=args.max_subscriptions, max_payload=args.max_payload))
    else:
        record = asyncio.run(auth.tenant_revoke(settings, args.tenant))
    print(f"tenant {record.tenant} {record.status} (NATS account {record.account})")
    return 0


def cmd_agent(args: argparse.Namespace) -> int:
    """Issue or revoke an agent's credentials (operator)."""
    settings = _connected(args)
    if args.agent_command == "revoke":
        revoked = asyncio.run(auth.agent_revoke(settings, args.tenant, args.agent))
        print(f"agent {args.agent} of tenant {args.tenant} revoked: {len(revoked.keys)} credential "
              f"key(s), open connections closed")
        if not revoked.complete:
            print(f"warning: {args.agent} was first issued credentials before agentledger recorded "
                  "every key; an earlier credentials file that was not connected just now is not "
                  f"revoked. To refuse every one: agentledger tenant revoke {args.tenant} && "
                  f"agentledger tenant add {args.tenant} (a new account; all its agents need new "
                  "credentials)", file=sys.stderr)
        return 0
    path = asyncio.run(auth.agent_add(settings, args.tenant, args.agent, args.out))
    print(path)
    return 0


def cmd_auth_config(args: argparse.Namespace) -> int:
    """Print the nats-server config lines of this operator (for an external server or cluster)."""
    store = auth.auth_store(_settings(args))
    if not store.initialized:
        store.init()
    print(store.server_config(Path(args.resolver_dir)), end="")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    logs.configure("warning")  # only the JSON figure lines on stdout
    return asyncio.run(run_all(_settings(args), only=args.only, profile=args.profile,
                               recall_file=args.recall_file, gitleaks=args.gitleaks))


def cmd_mcp(args: argparse.Namespace) -> int:
    """``agentledger mcp``: the MCP server, from the optional ``mcp`` extra (imported only here)."""
    try:
        from agentledger.adapters.mcp.command import run  # noqa: PLC0415 - an optional extra
    except ImportError as exc:
        if not (exc.name or "").startswith("mcp"):
            raise
        raise AgentLedgerError("agentledger mcp needs the mcp extra: pip install 'agentledger[mcp]'",
                               code="extra_missing") from exc
    return run(args, _connected)


def _add_mcp_command(sub: Any) -> None:
    """``mcp``: serve the tools to an MCP host (docs/mcp.md)."""
    p = sub.add_parser("mcp", help="serve memory, forget, context and task tools to an MCP host "
                                   "(stdio; --http for streamable HTTP); needs agentledger[mcp]")
    p.add_argument("--tenant", default=None,
                   help="stdio: the tenant of the agent whose --creds the server acts as")
    p.add_argument("--http", action="store_true",
                   help="serve streamable HTTP; each request's bearer token names its agent (--tokens)")
    p.add_argument("--host", default="127.0.0.1", help="--http: address to listen on (default loopback)")
    p.add_argument("--port", type=int, default=8765,
                   help="--http: port (0: any free one; the line on stderr names it)")
    p.add_argument("--tokens", type=Path, default=None,
                   help='--http: the token table {"tokens": [{"sha256", "tenant", "creds"}]}')
    p.set_defaults(fn=cmd_mcp)


def _add_identity_commands(sub: Any) -> None:
    """``tenant``, ``agent`` and ``auth``: the operator's identity administration."""
    tenant = sub.add_parser("tenant", help="add, list and revoke tenants (operator)").add_subparsers(
        dest="tenant_command", required=True)
    p = tenant.add_parser("add", help="create a tenant (its NATS account), or set its limits; "
                          "idempotent; a revoked tenant comes back under a new account")
    p.add_argument("tenant")
    for flag, what, setting in (
            ("--max-connections", "connections of the tenant at once", "MAX_CONNECTIONS"),
            ("--max-subscriptions", "subscriptions per connection", "MAX_SUBSCRIPTIONS"),
            ("--max-payload", "bytes of one published message", "MAX_PAYLOAD_BYTES")):
        p.add_argument(flag, type=int, default=None,
                       help=f"most {what}; -1: no limit; kept until given again (default: "
                            f"AGENTLEDGER_TENANT_{setting})")
    p.set_defaults(fn=cmd_tenant)
    p = tenant.add_parser("revoke", help="revoke a tenant: refused by the services, disconnected")
    p.add_argument("tenant")
    p.set_defaults(fn=cmd_tenant)
    tenant.add_parser("list", help="list the tenants of this prefix").set_defaults(fn=cmd_tenant)
    agent = sub.add_parser("agent", help="issue and revoke agent credentials (operator)").add_subparsers(
        dest="agent_command", required=True)
    p = agent.add_parser("add", help="write an agent's credentials file (0600); prints its path")
    p.add_argument("tenant")
    p.add_argument("agent")
    p.add_argument("--out", type=Path, default=None, help="where to write the .creds file")
    p.set_defaults(fn=cmd_agent)
    p = agent.add_parser("revoke", help="revoke every credential issued to an agent")
    p.add_argument("tenant")
    p.add_argument("agent")
    p.set_defaults(fn=cmd_agent)
    add_bind_command(agent, _connected)
    authp = sub.add_parser("auth", help="operator identity").add_subparsers(dest="auth_command",
                                                                           required=True)
    p = authp.add_parser("server-config", help="print the nats-server config lines (operator mode)")
    p.add_argument("--resolver-dir", default="/var/lib/nats/resolver",
                   help="folder where the server keeps pushed account JWTs")
    p.set_defaults(fn=cmd_auth_config)


def _add_global_options(parser: argparse.ArgumentParser, default: Any) -> None:
    """``--data-dir`` and ``--creds``, accepted before the command and after it."""
    parser.add_argument("--data-dir", type=Path, default=default,
                        help="runtime folder (default .agentledger or AGENTLEDGER_DATA_DIR)")
    parser.add_argument("--creds", type=Path, default=default,
                        help="connect with this NATS credentials file (an agent's) instead of "
                             "the operator's")


def _accept_global_options_everywhere(parser: argparse.ArgumentParser) -> None:
    """Add the global options to every (sub)command, so ``agentledger up --data-dir DIR`` works.

    On a subcommand they default to ``SUPPRESS``: given there they win, absent there the
    value given before the command (or None) stays.
    """
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in {id(p): p for p in action.choices.values()}.values():
                _add_global_options(sub, argparse.SUPPRESS)
                _accept_global_options_everywhere(sub)


def _add_artifact_commands(sub: Any) -> None:
    """``artifact put|get|stat``."""
    art = sub.add_parser("artifact", help="put, get and stat artifacts").add_subparsers(
        dest="artifact_command", required=True)
    p = art.add_parser("put", help="store a file (or - for stdin); prints its reference")
    p.add_argument("file")
    p.add_argument("--schema", required=True)
    p.add_argument("--producer", required=True)
    p.add_argument("--version", type=int, default=1)
    p.add_argument("--tenant", default=None,
                   help="the tenant the artifact belongs to (required with operator credentials)")
    p.set_defaults(fn=cmd_artifact)
    p = art.add_parser("get", help="read an artifact, verifying its blake3")
    p.add_argument("uri")
    p.add_argument("-o", "--output", default="-")
    p.set_defaults(fn=cmd_artifact)
    p = art.add_parser("stat", help="print an artifact's reference")
    p.add_argument("uri")
    p.set_defaults(fn=cmd_artifact)


def _add_load_commands(sub: Any) -> None:
    """``chaos`` and ``bench``: the commands that start private stacks and load them."""
    p = sub.add_parser("chaos", help="seeded fault injection against a private stack: report + timeline")
    chaos_run.add_arguments(p)
    p.set_defaults(fn=chaos_run.command)
    p = sub.add_parser("bench", help="run the benchmarks (JSON lines)")
    p.add_argument("--only", action="append", default=None,
                   help="run only this benchmark (single, batch, one_task, pause, sustained, "
                        "history, rebuild, checkpoint_bytes, resume, reducer, consolidation, ...); repeatable")
    p.add_argument("--profile", default="full", choices=["full", "smoke"],
                   help="sizes: full (make bench) or smoke (tiny, proves the code runs)")
    p.add_argument("--recall-file", "--locomo", dest="recall_file", default=None, metavar="PATH",
                   help="the recall bench scores this LoCoMo-like JSON file instead of generated "
                        "conversations (docs/benchmarks.md)")
    p.add_argument("--gitleaks", default=None, metavar="PATH",
                   help="a checkout of the gitleaks scanner: detector_external scores its rule tests")
    p.set_defaults(fn=cmd_bench)
    eval_command.add_arguments(sub.add_parser(
        "eval", help="the five-strategy memory evaluation of seed 000 (report: Markdown, HTML, JSON)"))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentledger", description=__doc__)
    _add_global_options(parser, None)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("up", help="start NATS, PostgreSQL and the services")
    p.add_argument("--cluster", type=int, default=None, metavar="N",
                   help="run NATS as a JetStream cluster of N servers on loopback, the ledger, "
                        "buckets and object store replicated (R3 for N >= 3); see docs/scaling.md")
    p.add_argument("--instances", type=int, default=None, metavar="N",
                   help="run N instances of every service (docs/scaling.md)")
    p.add_argument("--partitions", type=int, default=None, metavar="N",
                   help="projector partitions of a new projection (re-partitions an existing one "
                        "when its partitions are level; docs/scaling.md)")
    p.add_argument("--accept-rollback", action="store_true",
                   help="serve a ledger that is behind its witness (its newer copy is gone for good); "
                        "what was lost is recorded in the witness (docs/security.md)")
    p.set_defaults(fn=cmd_up)
    for name, about, fn in (("down", "stop everything `up` started", cmd_down),
                            ("status", "what runs where: pids and metrics ports", cmd_status)):
        sub.add_parser(name, help=about).set_defaults(fn=fn)
    sub.add_parser("demo", help="run the seeds' crash-and-replan scenario").set_defaults(fn=cmd_demo)
    p = sub.add_parser("append", help="append events (JSON from a file or - for stdin)")
    p.add_argument("file")
    p.add_argument("--expected-last-seq", type=int, default=None)
    p.set_defaults(fn=cmd_append)
    task = sub.add_parser("task", help="inspect tasks").add_subparsers(dest="task_command", required=True)
    p = task.add_parser("show", help="print a task's Working Memory")
    p.add_argument("tenant")
    p.add_argument("task_id")
    p.add_argument("--json", action="store_true")
    p.add_argument("--reveal-personal", action="store_true")
    p.add_argument("--rejections", action="store_true",
                   help="print every rejection of the task (JSON lines), not only the newest")
    p.set_defaults(fn=cmd_task_show)
    p = sub.add_parser("replay", help="rebuild the projection from the ledger beside the live one,"
                                      " then switch to it")
    p.add_argument("--verify", action="store_true",
                   help="rebuild into a scratch schema and compare with the live projection")
    p.add_argument("--partitions", type=int, default=None, metavar="N",
                   help="give the rebuilt projection N projector partitions (default: as many "
                        "as the live one)")
    p.add_argument("--allow-shrink", action="store_true",
                   help="switch to the rebuilt projection even when it is smaller than the live one "
                        "(tasks the ledger no longer holds are dropped); refused without it")
    p.set_defaults(fn=cmd_replay)
    p = sub.add_parser("verify", help="check the ledger's chain link by link and against its witness "
                                      "(one task, one tenant or everything)")
    p.add_argument("--tenant", default=None)
    p.add_argument("--task", dest="task_id", default=None, help="with --tenant: one task")
    p.set_defaults(fn=cmd_verify)
    p = sub.add_parser("resume", help="resume a task: checks, replay, reconcile, lease (JSON out)")
    p.add_argument("tenant")
    p.add_argument("task_id")
    p.add_argument("--executor", default=f"cli-{os.getpid()}", help="lease holder id")
    p.add_argument("--accept-erased", action="append", metavar="REQUEST_ID",
                   help="continue without the artifacts this forget request erased (repeatable)")
    p.set_defaults(fn=cmd_resume)
    p = sub.add_parser("checkpoint", help="save a checkpoint of a task now")
    p.add_argument("tenant")
    p.add_argument("task_id")
    p.set_defaults(fn=cmd_checkpoint)
    _add_artifact_commands(sub)
    add_memory_commands(sub, _connected)
    add_context_commands(sub, _connected)
    _add_operator_commands(sub)
    _add_identity_commands(sub)
    _add_load_commands(sub)
    _add_mcp_command(sub)
    _accept_global_options_everywhere(parser)
    return parser


def _add_operator_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Forgetting, key-encryption-key epochs, backup and restore."""
    add_forget_commands(sub, _connected)
    add_keys_commands(sub, _connected)
    add_backup_commands(sub, _connected, _settings)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        logs.configure(from_env().log_level)
        code = args.fn(args)
    except AgentLedgerError as exc:
        print(f"agentledger: {exc}", file=sys.stderr)
        code = 2
    sys.exit(code)
