"""``agentledger context ...``: build, show and trace frozen generations; commit, clear, ingest.

Each prints a short text, or the reply as JSON with ``--json``. The caller is
whoever the connection authenticates (``--creds`` for an agent, else the
operator on this machine).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from agentledger.client import connect
from agentledger.config import Settings
from agentledger.contracts.context_api import Generation, TraceLine

Connected = Callable[[argparse.Namespace], Settings]


def render_generation(g: Generation) -> str:
    """The generation's numbers, its compaction plan and the selected branch's rendered input."""
    branch = next(b for b in g.branches if b.name == g.selected)
    exact = "exact" if g.exact else f"estimate (margin x{g.margin})"
    lines = [f"generation {g.generation_id} of {g.tenant}/{g.task_id} at turn {g.input_ordinal} "
             f"(epoch {g.epoch}, lineage {g.lineage}, digest {g.digest[:16]}…)",
             f"  budget {g.budget_tokens} = window {g.window_tokens} - system {g.system_tokens} - tools "
             f"{g.tools_tokens} - reserve {g.reserve_tokens}; {g.encoding}, {exact}",
             f"  branches {', '.join(b.name for b in g.branches)}; selected {g.selected}: "
             f"{branch.tokens} tokens = {branch.unit_tokens} in units + {branch.separator_tokens} "
             "in separators"]
    c = g.compaction
    if c is not None and c.outcome != "not_needed":
        compacted = f"turns {c.compacted.first}…{c.compacted.through}" if c.compacted else "-"
        recent = f"{c.recent_exact.first}…{c.recent_exact.through}" if c.recent_exact else "-"
        lines.append(f"  compaction: {c.reason}; from {c.base_checkpoint or 'the lineage base'}, "
                     f"{compacted} compacted, {recent} verbatim, {g.input_ordinal} current; "
                     f"{c.outcome}{' (' + c.failure + ')' if c.failure else ''}")
    return "\n".join(lines)


def trace_lines(trace: list[TraceLine]) -> list[str]:
    return [f"  {t.outcome:<8} {t.unit_id:<28} {t.source:<14} {t.tokens:>6} tok  {t.reason}"
            f"{'  (mandatory)' if t.mandatory and not t.reason.startswith('mandatory') else ''}"
            for t in trace]


def cmd_context(args: argparse.Namespace, connected: Connected) -> int:
    settings = connected(args)
    text = ""
    if args.context_command == "ingest":
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()

    async def run() -> Any:
        async with await connect(settings) as client:
            action = args.context_command
            if action == "build":
                options: dict[str, Any] = {"reserve_tokens": args.reserve, "encoding": args.encoding}
                for name in ("model", "memory_query", "document_query", "user_id", "project_id"):
                    if getattr(args, name):
                        options[name] = getattr(args, name)
                return await client.build_context(args.tenant, args.task_id, args.input,
                                                  window_tokens=args.window, **options)
            if action in ("show", "trace"):
                return await client.get_generation(args.tenant, args.generation_id)
            if action == "commit":
                return await client.commit_generation(args.tenant, args.generation_id, args.answer)
            if action == "clear":
                return await client.clear_history(args.tenant, args.task_id,
                                                  through_ordinal=args.through, reason=args.reason)
            return await client.ingest_document(args.tenant, args.doc_id, args.version, text,
                                                source=args.source or args.file, title=args.title)

    reply = asyncio.run(run())
    if args.json:
        print(msgspec.json.encode(reply).decode())
        return 0
    action = args.context_command
    if action in ("build", "show"):
        print(render_generation(reply))
        if action == "show":
            print(next(b for b in reply.branches if b.name == reply.selected).rendered)
    elif action == "trace":
        branch = next(b for b in reply.branches if b.name == reply.selected)
        print("\n".join(trace_lines(branch.trace)))
    elif action == "commit":
        print(f"{'activated' if reply.activated else 'not activated'}"
              f"{': ' + reply.reason if reply.reason else ''}")
    elif action == "clear":
        print(f"history cleared: epoch {reply.epoch}, lineage {reply.lineage} (seq {reply.seq})")
    else:
        print(f"{reply.doc_id} v{reply.version}: {reply.chunks} chunk(s), seq {reply.seq}"
              f"{' (duplicate)' if reply.duplicate else ''}")
    return 0


def add_context_commands(sub: Any, connected: Connected) -> None:
    ctx = sub.add_parser("context", help="build, show and trace frozen model inputs; compaction").add_subparsers(
        dest="context_command", required=True)

    def command(name: str, text: str) -> argparse.ArgumentParser:
        p = ctx.add_parser(name, help=text)
        p.add_argument("tenant")
        p.add_argument("--json", action="store_true", help="print the reply as JSON")
        p.set_defaults(fn=lambda args: cmd_context(args, connected))
        return p

    p = command("build", "build and freeze the context of one model call")
    p.add_argument("task_id")
    p.add_argument("--input", type=int, required=True, help="ordinal of the current input turn")
    p.add_argument("--window", type=int, required=True, help="the model's context window (tokens)")
    p.add_argument("--reserve", type=int, default=1024, help="tokens kept for the generation")
    p.add_argument("--encoding", default="cl100k_base")
    p.add_argument("--model")
    p.add_argument("--memory-query")
    p.add_argument("--document-query")
    p.add_argument("--user", dest="user_id")
    p.add_argument("--project", dest="project_id")
    for name, text in (("show", "a frozen generation: its numbers and the rendered input"),
                       ("trace", "a generation's trace: one line per candidate unit")):
        p = command(name, text)
        p.add_argument("generation_id")
    p = command("commit", "the answer is appended: activate the generation's staged checkpoint (CAS)")
    p.add_argument("generation_id")
    p.add_argument("--answer", type=int, required=True, help="ordinal of the answer turn")
    p = command("clear", "clear the conversation history: a new epoch and lineage")
    p.add_argument("task_id")
    p.add_argument("--through", type=int, default=None, help="last ordinal cleared (default: all)")
    p.add_argument("--reason", default="")
    p = command("ingest", "add a document version to the tenant's RAG index")
    p.add_argument("doc_id")
    p.add_argument("file", help="the document's text (- for stdin)")
    p.add_argument("--version", type=int, default=1)
    p.add_argument("--source")
    p.add_argument("--title", default="")
