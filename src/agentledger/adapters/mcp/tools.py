"""The MCP tools: memory, forgetting, context and task calls of the async client, one tool each.

Why these shapes: a memory MCP server usually answers a search with hits; ``recall`` answers
with the records *and* the read receipt's id and every candidate's gate results, so a host can
show what a gate refused and an auditor can fetch the receipt later. ``remember`` is a
proposal: the policy decides, and the decision and the rules that fired come back. ``forget``
returns a request id whose deletion receipt ``forget_receipt`` fetches.

Every tool reads its arguments with the contract (``schemas``), acts as the server's identity
(``identity``), and answers a refusal as an MCP tool error (``is_error``) whose structured
content is our ``ErrorBody``: ``code``, ``path``, ``retryable``; the model reads the same
``code: message - at `path``` text the CLI prints.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import structlog
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import ConfigDict

from agentledger.adapters.mcp.identity import Identities, Identity
from agentledger.adapters.mcp.schemas import arguments_of, decode_arguments, given, json_schema
from agentledger.contracts.api import TaskRef, WorkingMemoryReply
from agentledger.contracts.codec import error_body
from agentledger.contracts.context_api import (
    BuildRequest,
    ChatMessage,
    CompactionPlan,
    GenerationRef,
    TraceReply,
)
from agentledger.contracts.forget_api import ForgetReply, ForgetRequest, ReceiptReply, ReceiptRequest
from agentledger.contracts.memory_api import (
    DecisionItem,
    FeedbackReply,
    FeedbackRequest,
    KeyReply,
    KeyRequest,
    MemoryItem,
    Proposal,
    ReadRequest,
    ReceiptCandidate,
)
from agentledger.contracts.resume import ResumeReply, ResumeRequest
from agentledger.errors import AgentLedgerError

log = structlog.get_logger("agentledger.mcp")

# --- arguments: the contracts without the tenant ---------------------------------------------

RecallArgs = arguments_of(ReadRequest, "RecallArgs")
HistoryArgs = arguments_of(KeyRequest, "HistoryArgs")
FeedbackArgs = arguments_of(FeedbackRequest, "FeedbackArgs")
ForgetArgs = arguments_of(ForgetRequest, "ForgetArgs")
ForgetReceiptArgs = arguments_of(ReceiptRequest, "ForgetReceiptArgs")
BuildArgs = arguments_of(BuildRequest, "BuildArgs")
TraceArgs = arguments_of(GenerationRef, "TraceArgs")
# A Working Memory read without the chunk mechanics (the client puts chunks together) and
# without ``reveal_personal``: personal values stay sealed for a model host.
StateArgs = arguments_of(TaskRef, "StateArgs", keep=frozenset({"task_id", "min_seq", "wait_ms",
                                                                "transcript_tail"}))
# The client picks the resume schema version from the fields given.
ResumeArgs = arguments_of(ResumeRequest, "ResumeArgs", drop=frozenset({"schema_version"}))


# --- results that are not a contract reply as is ---------------------------------------------

class RecallResult(msgspec.Struct, frozen=True, omit_defaults=True):
    """A gated read: the records it returned, its receipt's id, and every candidate it looked at
    with each gate's result (what was refused, and why)."""

    items: list[MemoryItem]
    receipt_id: str
    tokens: int
    budget_tokens: int
    candidates: list[ReceiptCandidate]
    rendered: str = ""


class BuildResult(msgspec.Struct, frozen=True, omit_defaults=True):
    """A frozen generation, as the model is to be sent it: the selected branch's messages and
    counts; ``trace`` gives every unit that entered or was left out."""

    generation_id: str
    selected: str
    messages: list[ChatMessage]
    tokens: int
    budget_tokens: int
    window_tokens: int
    reserve_tokens: int
    exact: bool
    accepted_units: int
    rejected_units: int
    compaction: CompactionPlan | None = None


# --- handlers --------------------------------------------------------------------------------

async def recall(who: Identity, args: Any) -> RecallResult:
    reply = await who.client.memory_read(who.tenant, **given(args))
    receipt = reply.receipt
    assert receipt is not None  # a successful read always carries its receipt
    return RecallResult(items=reply.items, receipt_id=receipt.receipt_id, tokens=receipt.tokens,
                        budget_tokens=receipt.budget_tokens, candidates=receipt.candidates,
                        rendered=reply.rendered)


async def remember(who: Identity, args: Any) -> DecisionItem:
    reply = await who.client.memory_propose(who.tenant, [given(args)])
    decision: DecisionItem = reply.decisions[0]
    return decision


async def history(who: Identity, args: Any) -> KeyReply:
    return await who.client.memory_history(who.tenant, args.key, args.scope.level, args.scope.id)


async def feedback(who: Identity, args: Any) -> FeedbackReply:
    return await who.client.memory_feedback(who.tenant, args.record_id, args.action, args.feedback_id,
                                            value=args.value, reason=args.reason)


async def forget(who: Identity, args: Any) -> ForgetReply:
    return await who.client.forget(who.tenant, msgspec.to_builtins(args.selector), reason=args.reason,
                                   legal_basis=args.legal_basis, request_id=args.request_id)


async def forget_receipt(who: Identity, args: Any) -> ReceiptReply:
    requests = await who.client.forget_receipts(who.tenant, request_id=args.request_id,
                                                subject=args.subject)
    return ReceiptReply(ok=True, requests=requests)


async def build(who: Identity, args: Any) -> BuildResult:
    options = given(args)
    task_id, ordinal, window = options.pop("task_id"), options.pop("input_ordinal"), options.pop("window_tokens")
    gen = await who.client.build_context(who.tenant, task_id, ordinal, window_tokens=window, **options)
    branch = next(b for b in gen.branches if b.name == gen.selected)
    accepted = sum(1 for line in branch.trace if line.outcome == "accepted")
    return BuildResult(generation_id=gen.generation_id, selected=gen.selected, messages=branch.messages,
                       tokens=branch.tokens, budget_tokens=gen.budget_tokens,
                       window_tokens=gen.window_tokens, reserve_tokens=gen.reserve_tokens,
                       exact=gen.exact, accepted_units=accepted,
                       rejected_units=len(branch.trace) - accepted, compaction=gen.compaction)


async def generation_trace(who: Identity, generation_id: str) -> TraceReply:
    """Every branch's trace of a frozen generation, the selected branch first."""
    gen = await who.client.get_generation(who.tenant, generation_id)
    ordered = sorted(gen.branches, key=lambda b: b.name != gen.selected)
    return TraceReply(ok=True, generation_id=gen.generation_id, selected=gen.selected,
                      branches={b.name: b.trace for b in ordered})


async def trace(who: Identity, args: Any) -> TraceReply:
    return await generation_trace(who, args.generation_id)


async def state(who: Identity, args: Any) -> WorkingMemoryReply:
    options = given(args)
    return await who.client.working_memory(who.tenant, options.pop("task_id"), **options)


async def resume(who: Identity, args: Any) -> ResumeReply:
    """A ``rejected`` resume grants nothing and carries nothing but its reasons: it is answered as a
    tool error whose code is the first rejecting reason's (``task_not_found`` for an unknown task)."""
    reply = await who.client.resume(who.tenant, args.task_id, args.executor,
                                    lease_ttl_s=args.lease_ttl_s, checkpoint_id=args.checkpoint_id,
                                    accept_erased=args.accept_erased or None, request_id=args.request_id)
    if reply.status == "rejected":
        rejecting = [r for r in reply.reasons if r.severity == "reject"] or list(reply.reasons)
        code = rejecting[0].code if rejecting else "resume_rejected"
        raise AgentLedgerError("resume rejected: " + "; ".join(f"{r.code}: {r.message}" for r in rejecting),
                               code=code, path="$.task_id" if code.endswith("not_found") else None)
    return reply


# --- registration ----------------------------------------------------------------------------

Handler = Callable[[Identity, Any], Awaitable[msgspec.Struct]]


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name, what it maps onto, its argument and result types, and whether it writes."""

    name: str
    description: str
    arguments: type[msgspec.Struct]
    result: type[msgspec.Struct]
    handler: Handler
    read_only: bool
    destructive: bool = False


SPECS: tuple[ToolSpec, ...] = (
    ToolSpec("recall", "Gated memory read (memory.read): the records that passed every gate (scope, "
             "TTL / tombstone, version, privacy, source trust) within the token budget, the read "
             "receipt's id, and each candidate's gate results.", RecallArgs, RecallResult, recall, True),
    ToolSpec("remember", "Propose one memory (memory.propose). The memory policy decides: write, "
             "supersede, quarantine or reject; the decision and the rules that fired are returned. "
             "`proposal_id` is the idempotency key.", Proposal, DecisionItem, remember, False),
    ToolSpec("history", "Every version of a memory key in one scope, with the decisions and feedback "
             "behind them (memory.history).", HistoryArgs, KeyReply, history, True),
    ToolSpec("feedback", "Confirm, correct (with `value`) or revoke a memory record, as its user "
             "(memory.feedback). `feedback_id` is the idempotency key.", FeedbackArgs, FeedbackReply,
             feedback, False),
    ToolSpec("forget", "Ask to forget a record, a key, a data subject or a task (forget.request); "
             "returns the request id, whose deletion receipt `forget_receipt` fetches.",
             ForgetArgs, ForgetReply, forget, False, destructive=True),
    ToolSpec("forget_receipt", "Where a forget request stands (`request_id`) or every request about a "
             "data subject (`subject`): the indexes done and, once all are, the signed deletion "
             "receipt (forget.receipt).", ForgetReceiptArgs, ReceiptReply, forget_receipt, True),
    ToolSpec("build", "Build and freeze the budgeted context of one model call of a task "
             "(context.build): the messages to send, counted with the real tokenizer.",
             BuildArgs, BuildResult, build, False),
    ToolSpec("trace", "The trace of a frozen generation: every candidate unit, accepted or rejected, "
             "why, its token cost, source and version (context.get).", TraceArgs, TraceReply, trace, True),
    ToolSpec("state", "A task's Working Memory: goal, plan, next-ready steps, variables, artifacts, "
             "budget, open questions, at the ledger sequence `seq` (wm.get).", StateArgs,
             WorkingMemoryReply, state, True),
    ToolSpec("resume", "Resume a task from its latest checkpoint (resume): compatibility and integrity "
             "checks, replay, reconcile; the status, what may be dispatched, and the lease "
             "(secret included) for `executor`.", ResumeArgs, ResumeReply, resume, False),
)


class _RawArguments(ArgModelBase):
    """The SDK's argument model, letting every argument through untouched: the contract, not
    pydantic, reads them (``schemas.decode_arguments``), so refusals carry our codes."""

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)

    def model_dump_one_level(self) -> dict[str, Any]:
        return {"arguments": dict(self.model_extra or {})}


def error_result(exc: AgentLedgerError) -> CallToolResult:
    """A refusal as an MCP tool error: the text the CLI prints, and our ``ErrorBody`` structured."""
    body = msgspec.to_builtins(error_body(exc))
    return CallToolResult(content=[TextContent(type="text", text=str(exc))],
                          structured_content={"error": body}, is_error=True)


def ok_result(value: msgspec.Struct) -> CallToolResult:
    data = msgspec.to_builtins(value)
    return CallToolResult(content=[TextContent(type="text", text=msgspec.json.encode(data).decode())],
                          structured_content=data)


def make_tool(spec: ToolSpec, identities: Identities) -> Tool:
    """``spec`` as an SDK ``Tool`` whose input and output schemas are the contract's."""

    async def call(arguments: dict[str, Any]) -> CallToolResult:
        # Ids and codes only in the log: arguments may hold personal content.
        tenant: str | None = None
        try:
            args = decode_arguments(spec.arguments, arguments)
            who = await identities.current()
            tenant = who.tenant
            result = ok_result(await spec.handler(who, args))
        except AgentLedgerError as exc:
            log.info("mcp_tool_refused", tool=spec.name, tenant=tenant, code=exc.code, path=exc.path)
            return error_result(exc)
        log.debug("mcp_tool_answered", tool=spec.name, tenant=tenant)
        return result

    call.__name__ = spec.name
    return Tool(fn=call, name=spec.name, title=None, description=spec.description,
                parameters=json_schema(spec.arguments),
                fn_metadata=FuncMetadata(arg_model=_RawArguments, output_schema=json_schema(spec.result)),
                is_async=True, context_kwarg=None,
                annotations=ToolAnnotations(read_only_hint=spec.read_only,
                                            destructive_hint=spec.destructive if not spec.read_only else None,
                                            open_world_hint=False))


def make_tools(identities: Identities) -> list[Tool]:
    return [make_tool(spec, identities) for spec in SPECS]
