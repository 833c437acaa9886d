"""``agentledger forget ...`` and ``agentledger verify-forgotten``: deletion with receipts.

``forget TENANT --subject S`` (or ``--record``, ``--key``, ``--task``, ``--tenant``)
files a request and, unless ``--no-wait``, follows it to its receipt; ``forget
receipt TENANT REQUEST_ID`` / ``--subject S`` shows where requests stand.
``verify-forgotten RECEIPT`` scans every stream, bucket, object store, table and
log for what the receipt forgot (and the needles given), and with ``--raw`` the
JetStream and PostgreSQL data folders too, after compacting PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from agentledger.client import connect
from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.contracts.forget_api import RequestProgress
from agentledger.core.forget import verify_receipt

Connected = Callable[[argparse.Namespace], Settings]


def selector_of(args: argparse.Namespace) -> dict[str, Any]:
    """The selector the flags name (exactly one of them)."""
    given = [(k, v) for k, v in (("record", args.record), ("key", args.key), ("subject", args.subject),
                                 ("task", args.task), ("tenant", args.whole_tenant or None)) if v]
    if len(given) != 1:
        raise SystemExit("agentledger forget: name exactly one of --record, --key, --subject, --task, "
                         "--whole-tenant")
    kind, value = given[0]
    field = {"record": "record_id", "key": "key", "subject": "subject", "task": "task_id"}.get(kind)
    selector: dict[str, Any] = {"kind": kind}
    if field is not None:
        selector[field] = value
    if kind == "key" and args.scope:
        level, _, scope_id = args.scope.partition(":")
        selector["scope"] = {"level": level, "tenant": args.tenant, **({"id": scope_id} if scope_id else {})}
    return selector


def render_progress(p: RequestProgress) -> str:
    lines = [f"request {p.request_id}: {p.status} ({p.selector.kind}), requested {p.requested_at.isoformat()}"]
    for i in p.indexes:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(i.counts.items()))
        lines.append(f"  {i.index:<15} {i.status:<15} {counts}")
    if p.receipt is not None:
        ok = "verified" if verify_receipt(p.receipt) else "DOES NOT MATCH ITS CONTENT"
        lines.append(f"  receipt digest {p.receipt.digest} ({ok}), completed {p.receipt.completed_at.isoformat()}")
    if p.last_error:
        lines.append(f"  last error: {p.last_error}")
    return "\n".join(lines)


def cmd_forget(args: argparse.Namespace, connected: Connected) -> int:
    settings = connected(args)

    async def run() -> list[RequestProgress]:
        async with await connect(settings) as client:
            if args.forget_command == "receipt":
                if (args.request_id is None) == (args.subject is None):
                    raise SystemExit("agentledger forget receipt: name a REQUEST_ID or --subject")
                return await client.forget_receipts(args.tenant, request_id=args.request_id,
                                                    subject=args.subject)
            reply = await client.forget(args.tenant, selector_of(args), reason=args.reason,
                                        legal_basis=args.legal_basis, request_id=args.request_id)
            if args.no_wait:
                return await client.forget_receipts(args.tenant, request_id=reply.request_id)
            return [await client.forget_wait(args.tenant, reply.request_id, timeout_s=args.timeout)]

    progress = asyncio.run(run())
    if args.save is not None:
        sealed = [p.receipt for p in progress if p.receipt is not None]
        if len(sealed) != 1:
            raise SystemExit("agentledger forget: --save needs exactly one completed request")
        args.save.write_bytes(msgspec.json.encode(sealed[0]))
    if args.json:
        print(msgspec.json.encode(progress).decode())
    else:
        print("\n".join(render_progress(p) for p in progress) or "no forget requests")
    return 0


def cmd_verify(args: argparse.Namespace, connected: Connected) -> int:
    """Scan for what a receipt forgot; exit 1 when anything is found."""
    from agentledger.erasure import scan as forget_scan  # noqa: PLC0415 - only this command needs the scanner

    settings = connected(args)
    receipt = msgspec.json.decode(Path(args.receipt).read_bytes(), type=ev.DeletionReceipt)
    if not verify_receipt(receipt):
        print(f"receipt {receipt.request_id}: its digest does not match its content")
        return 1
    needles = [n.encode() for n in args.needle]
    for path in args.needles_file or []:
        needles += [line.encode() for line in Path(path).read_text().splitlines() if line.strip()]
    report = asyncio.run(forget_scan.verify(settings, receipt, needles, raw=args.raw))
    print(json.dumps(msgspec.to_builtins(report), indent=2) if args.json else forget_scan.render(report))
    return 0 if report.clean else 1


def add_forget_commands(sub: Any, connected: Connected) -> None:
    forget = sub.add_parser("forget", help="forget a record, key, data subject, task or tenant, with "
                                           "receipts").add_subparsers(dest="forget_command", required=True)
    p = forget.add_parser("request", help="file a forget request and follow it to its receipt")
    p.add_argument("tenant")
    p.add_argument("--record", help="one memory record id")
    p.add_argument("--key", help="every memory record of a canonical key")
    p.add_argument("--scope", help="with --key: only this scope (level:id, e.g. user:u-1)")
    p.add_argument("--subject", help="everything about a pseudonymous data subject")
    p.add_argument("--task", help="a task")
    p.add_argument("--whole-tenant", action="store_true", help="the whole tenant (operator only)")
    p.add_argument("--reason", default="")
    p.add_argument("--legal-basis", default="")
    p.add_argument("--request-id", help="idempotency key (default: a new id)")
    p.add_argument("--no-wait", action="store_true", help="return once the request is durable")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the receipt")
    p.add_argument("--json", action="store_true")
    p.add_argument("--save", type=Path, help="write the sealed receipt (JSON) to this file")
    p.set_defaults(fn=lambda args: cmd_forget(args, connected))
    p = forget.add_parser("receipt", help="where a request stands, or every request about a subject")
    p.add_argument("tenant")
    p.add_argument("request_id", nargs="?")
    p.add_argument("--subject")
    p.add_argument("--json", action="store_true")
    p.add_argument("--save", type=Path, help="write the sealed receipt (JSON) to this file")
    p.set_defaults(fn=lambda args: cmd_forget(args, connected))
    p = sub.add_parser("verify-forgotten", help="scan every store (and with --raw the data folders) for "
                                                "what a receipt forgot")
    p.add_argument("receipt", help="the sealed receipt, as `forget ... --save FILE` wrote it")
    p.add_argument("--needle", action="append", default=[],
                   help="forgotten content to look for (repeat; never printed)")
    p.add_argument("--needles-file", action="append", help="a file of needles, one per line")
    p.add_argument("--raw", action="store_true",
                   help="also scan the JetStream and PostgreSQL data folders, after compacting PostgreSQL")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=lambda args: cmd_verify(args, connected))
