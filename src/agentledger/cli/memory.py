"""``agentledger memory ...`` and ``agentledger agent bind``: the memory-policy commands.

Each prints a short table, or the reply as JSON with ``--json``. The caller is
whoever the connection authenticates (``--creds`` for an agent, else the
operator on this machine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from agentledger.client import connect
from agentledger.config import Settings
from agentledger.contracts.memory_api import MemoryItem, ReadReceipt
from agentledger.core.memory.read import ROLES
from agentledger.errors import AgentLedgerError
from agentledger.security import bindings

Connected = Callable[[argparse.Namespace], Settings]


def _scope(text: str) -> tuple[str, str | None]:
    """``user:u1`` -> ("user", "u1"); ``tenant`` -> ("tenant", None)."""
    level, _, ident = text.partition(":")
    return level, ident or None


def _print_json(value: Any) -> None:
    print(msgspec.json.encode(value).decode())


def _item_line(item: MemoryItem) -> str:
    value = item.value if isinstance(item.value, str) else json.dumps(item.value, ensure_ascii=False)
    shown = "(erased)" if item.erased else value
    extra = f" score={item.score:.3f}" if item.score is not None else ""
    return (f"  {item.record_id}  {item.status:<11} {item.kind:<11} {item.scope:<28} "
            f"auth={item.authority}{extra}  {item.key} = {shown}")


def _receipt_lines(receipt: ReadReceipt) -> list[str]:
    lines = [f"receipt {receipt.receipt_id}: {len(receipt.candidates)} candidate(s), "
             f"{len(receipt.selected)} selected, {receipt.tokens}/{receipt.budget_tokens} tokens, "
             f"{receipt.latency_ms:.1f} ms; scopes {', '.join(receipt.scopes)}"]
    for c in receipt.candidates:
        failed = [g.gate for g in c.gates if not g.passed]
        why = f" failed {','.join(failed)}" if failed else ""
        lines.append(f"  {c.outcome:<11} {c.record_id}  via {'+'.join(c.found_by)}{why}"
                     f"{'  ' + c.reason if c.reason else ''}")
    return lines


def _proposals(args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.file:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise AgentLedgerError(f"input is not JSON: {exc}", code="malformed_json") from exc
        return doc if isinstance(doc, list) else [doc]
    if args.value is None or args.kind is None or args.scope is None:
        raise AgentLedgerError("give a JSON file, or --kind, --scope and --value",
                               code="invalid_arguments")
    level, ident = _scope(args.scope)
    proposal: dict[str, Any] = {
        "proposal_id": args.id or f"cli-{uuid.uuid4().hex[:16]}", "kind": args.kind,
        "scope": {"level": level, **({"id": ident} if ident else {})},
        "source": {"kind": args.source}, "value": args.value}
    if args.key:
        proposal["key"] = args.key
    if args.task:
        proposal["origin_task"] = args.task
    return [proposal]


def cmd_memory(args: argparse.Namespace, connected: Connected) -> int:
    settings = connected(args)

    async def run() -> Any:
        async with await connect(settings) as client:
            action = args.memory_command
            if action == "propose":
                return await client.memory_propose(args.tenant, _proposals(args))
            if action == "read":
                options = {name: getattr(args, name) for name in
                           ("key", "task_id", "session_id", "user_id", "project_id")
                           if getattr(args, name)}
                return await client.memory_read(
                    args.tenant, args.query, k=args.k, budget_tokens=args.budget,
                    max_sensitivity="personal" if args.allow_personal else "internal", **options)
            if action in ("show", "history"):
                level, ident = _scope(args.scope)
                method = client.memory_get if action == "show" else client.memory_history
                return await method(args.tenant, args.key, level, ident)
            if action in ("confirm", "correct", "revoke"):
                value = json.loads(args.value) if args.json_value else args.value
                return await client.memory_feedback(
                    args.tenant, args.record_id, action, args.id or f"cli-{uuid.uuid4().hex[:16]}",
                    value=value, reason=args.reason)
            return await client.memory_receipts(args.tenant, task_id=args.task,
                                                record_id=args.record, limit=args.limit)

    reply = asyncio.run(run())
    if args.json:
        _print_json(reply)
        return 0
    _render(args.memory_command, reply)
    if args.memory_command in ("show", "history") and not (reply.records or reply.history):
        # Silence would read as "the command did nothing"; say what was looked up.
        print(f"no memory under key {args.key!r} in scope {args.scope} (the key is looked up as a "
              "proposal's would be canonicalised; see docs/memory.md)", file=sys.stderr)
    return 0


def _render(action: str, reply: Any) -> None:  # noqa: PLR0912 - one branch per command
    if action == "propose":
        for d in reply.decisions:
            dup = " (duplicate)" if d.duplicate else ""
            print(f"{d.proposal_id}: {d.action} ({d.reason}){dup} -> {d.record_id or '-'}")
            for rule in d.trace:
                print(f"    {rule.rule}: {rule.outcome}{' - ' + rule.reason if rule.reason else ''}")
    elif action == "read":
        for item in reply.items:
            print(_item_line(item))
        if reply.receipt is not None:
            print("\n".join(_receipt_lines(reply.receipt)))
    elif action == "show":
        for item in reply.records:
            print(_item_line(item))
    elif action == "history":
        for h in reply.history:
            print(f"  seq {h.seq:<8} {h.event:<16} {h.record_id or '-'}  {h.action or ''} {h.reason}")
    elif action in ("confirm", "correct", "revoke"):
        print(f"{action} {reply.record_id}: seq {reply.seq}{' (duplicate)' if reply.duplicate else ''}")
    else:
        for receipt in reply.receipts:
            print("\n".join(_receipt_lines(receipt)))


def cmd_agent_bind(args: argparse.Namespace, connected: Connected) -> int:
    """Bind (or with ``--clear`` unbind) an agent to the users and projects it acts for."""
    settings = connected(args)
    if args.clear:
        asyncio.run(bindings.unbind_agent(settings, args.tenant, args.agent))
        print(f"agent {args.agent} of tenant {args.tenant}: no bindings")
        return 0
    asyncio.run(bindings.bind_agent(settings, args.tenant, args.agent, args.user, args.project,
                                    roles=args.role))
    print(f"agent {args.agent} of tenant {args.tenant} acts for users {args.user or '-'} "
          f"and projects {args.project or '-'}, roles {args.role or '-'}")
    return 0


def add_memory_commands(sub: Any, connected: Connected) -> None:
    mem = sub.add_parser("memory", help="propose, read and review long-term memory").add_subparsers(
        dest="memory_command", required=True)

    def command(name: str, text: str) -> argparse.ArgumentParser:
        p = mem.add_parser(name, help=text)
        p.add_argument("tenant")
        p.add_argument("--json", action="store_true", help="print the reply as JSON")
        p.set_defaults(fn=lambda args: cmd_memory(args, connected))
        return p

    p = command("propose", "propose memories: a JSON file (one or a list), or the flags")
    p.add_argument("file", nargs="?", help="proposals as JSON (- for stdin)")
    p.add_argument("--kind", choices=["preference", "fact", "task_result", "diagnostic",
                                      "procedure", "rule"])
    p.add_argument("--scope", help="level[:id], e.g. user:u1, project:p1, tenant")
    p.add_argument("--source", default="model_inference",
                   choices=["user_confirmed", "runtime_evidence", "project_rule", "tool_output",
                            "model_inference", "external_document"])
    p.add_argument("--value")
    p.add_argument("--key")
    p.add_argument("--task", help="the task the proposal comes from")
    p.add_argument("--id", help="proposal id (default: a new one)")
    p = command("read", "a gated read; prints the records and the read receipt")
    p.add_argument("query", nargs="?", default="")
    p.add_argument("--key")
    p.add_argument("--task", dest="task_id")
    p.add_argument("--session", dest="session_id")
    p.add_argument("--user", dest="user_id")
    p.add_argument("--project", dest="project_id")
    p.add_argument("--k", type=int, default=None, help="at most this many items (default: fill the budget)")
    p.add_argument("--budget", type=int, default=2000, help="token budget (cl100k_base)")
    p.add_argument("--allow-personal", action="store_true")
    for name, text in (("show", "the records of a key in one scope, active first"),
                       ("history", "every version and decision of a key in one scope")):
        p = command(name, text)
        p.add_argument("key", help="as stored (response_language) or as said (\"answer language\"): "
                                   "canonicalised as a proposal's key")
        p.add_argument("--scope", required=True, help="level[:id]")
    for name, text in (("confirm", "confirm a record for its user (highest authority)"),
                       ("correct", "replace a record's value for its user"),
                       ("revoke", "revoke a record for its user")):
        p = command(name, text)
        p.add_argument("record_id")
        p.add_argument("--value", help="the corrected value (correct)")
        p.add_argument("--json-value", action="store_true", help="--value is JSON")
        p.add_argument("--reason", default="")
        p.add_argument("--id", help="feedback id (default: a new one)")
    p = command("receipts", "read receipts of a task or a record, newest first")
    p.add_argument("--task")
    p.add_argument("--record")
    p.add_argument("--limit", type=int, default=20)


def add_bind_command(agent_sub: Any, connected: Connected) -> None:
    p = agent_sub.add_parser("bind", help="bind an agent to the users / projects it acts for "
                                          "(its memory scopes)")
    p.add_argument("tenant")
    p.add_argument("agent")
    p.add_argument("--user", action="append", default=[], help="repeatable")
    p.add_argument("--project", action="append", default=[], help="repeatable")
    p.add_argument("--role", action="append", default=[], choices=sorted(ROLES),
                   help="repeatable: tenant-admin states rules and confirmed facts for the tenant, "
                        "project-admin for its projects")
    p.add_argument("--clear", action="store_true", help="remove every binding")
    p.set_defaults(fn=lambda args: cmd_agent_bind(args, connected))
