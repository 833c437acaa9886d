"""Conversation compaction (seed 002), pure: plan, compactor, validation, digests, receipts, CAS.

The conversation is the task's turns with ordinal above ``lineage_base`` (a
``history_cleared`` moved it there and started a new epoch). A checkpoint summarizes one
contiguous prefix ``lineage_base + 1 .. k``; the turns after it stay verbatim, whole.

- ``plan`` picks the one split of a build that crossed the high watermark: the old prefix
  after the active checkpoint goes to the compactor, the newest whole turns up to
  ``recent_exact_tokens`` stay exact. A gap after the coverage means degraded recent-only.
- ``compact_structured`` is the default compactor: deterministic, no model. It folds the
  previous summary and the prefix's turns into the five fields of ``checkpoint-v1`` with
  cue-based extraction (English and Chinese), every item citing its turn ordinals.
- ``validate_summary`` is the gate every compactor's output passes (exact field set, sizes,
  cited ordinals unique, above the lineage base, within the coverage, not empty).
- ``source_digest`` chains blake3 over the canonical turns, so the digest through turn 42
  can be continued from the one through turn 30; ``summary_digest`` hashes the canonical
  summary; ``receipt_payload`` + ``sign`` / ``verify`` bind them with Ed25519.
- ``cas_check`` is the predicate the service evaluates inside its activation transaction.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import blake3
import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from agentledger.contracts.context_api import (
    CompactionCheckpoint,
    CompactionPlan,
    CompactionReceipt,
    Coverage,
    Summary,
    SummaryItem,
)
from agentledger.core.context.render import Count, unit_segment
from agentledger.core.context.units import Unit
from agentledger.errors import ContractError

SCHEMA_VERSION = "checkpoint-v1"
FIELDS: tuple[str, ...] = ("conversation_goal", "confirmed_facts", "decisions_constraints", "preferences",
                           "unresolved_questions")
# Bounds of a valid summary (the contract's where it has one; the seed's verifier's otherwise).
FIELD_MAX: dict[str, int] = {"conversation_goal": 20, "confirmed_facts": 100, "decisions_constraints": 100,
                             "preferences": 50, "unresolved_questions": 50}
MAX_ITEMS = 256
ITEM_MAX_CHARS = 2000
ITEM_MAX_BYTES = 4096
ITEM_MAX_ORDINALS = 64
SUMMARY_MAX_BYTES = 64 * 1024
# What the structured compactor itself produces stays well inside those bounds.
COMPACTOR_FIELD_MAX: dict[str, int] = {"conversation_goal": 5, "confirmed_facts": 80, "decisions_constraints": 80,
                                       "preferences": 40, "unresolved_questions": 40}
COMPACTOR_ITEM_CHARS = 500
COMPACTOR_ITEM_ORDINALS = 32
COMPACTOR_MAX_BYTES = 60 * 1024

RECEIPT_SCHEMA = "agentledger/compaction-receipt/v1"
REFUSALS: tuple[str, ...] = ("not_staged", "stale_epoch", "other_lineage", "transcript_moved_on",
                             "coverage_regression", "cited_ordinal_out_of_range", "invalid_summary",
                             "bad_signature", "source_changed")


class TurnLike(Protocol):
    """A turn of the transcript (``agentledger.core.state.Turn`` is one); ``content`` None: unreadable."""

    @property
    def ordinal(self) -> int: ...
    @property
    def role(self) -> str: ...
    @property
    def content(self) -> str | None: ...


class InvalidSummaryError(ContractError):
    """A compactor's output failed validation; ``problems`` lists every failure."""

    code = "invalid_summary"

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems), path="$.summary")
        self.problems = problems


# ---------------------------------------------------------------------------------------- lineage, ids

def lineage_id(tenant: str, task_id: str, epoch: int, lineage_base: int, forgets: int = 0) -> str:
    """``L{epoch}-`` + 12 hex of blake3(tenant, task, epoch, base): a checkpoint of another task,
    epoch or base never matches the current lineage.

    ``forgets`` counts the forget requests that moved the conversation on within its epoch
    (``context_conversations.forgets``): each one starts a new lineage (``L{epoch}f{forgets}-``),
    so a checkpoint staged for the lineage before it can never be activated. 0 gives the id
    lineages had before forgetting existed.
    """
    parts: list[object] = ["lineage", tenant, task_id, epoch, lineage_base]
    if forgets:
        parts.append(forgets)
    h = blake3.blake3(msgspec.json.encode(parts)).hexdigest()
    return f"L{epoch}f{forgets}-{h[:12]}" if forgets else f"L{epoch}-{h[:12]}"


def checkpoint_id_for(generation_id: str, through: int) -> str:
    """A checkpoint's id, fixed by the generation that makes it and its coverage end."""
    return f"cp{through}-{blake3.blake3(generation_id.encode()).hexdigest()[:16]}"


def policy_version(compactor: str, high_watermark: float, recent_exact_tokens: int) -> str:
    """What the receipt binds as the policy: schema, compactor and the split's parameters."""
    return f"{SCHEMA_VERSION};compactor={compactor};hw={high_watermark:g};recent={recent_exact_tokens}"


# ---------------------------------------------------------------------------------------- turns as units

def turn_unit(turn: TurnLike, *, mandatory: bool = False, source: str = "turn") -> Unit:
    """A transcript turn as a unit (``turn:{ordinal}``; ``source="input"`` for the current input)."""
    role = turn.role if turn.role in ("user", "assistant", "system", "tool") else "user"
    return Unit(id=f"{source}:{turn.ordinal}", source=source,  # type: ignore[arg-type]
                text=turn.content or "", role=role,  # type: ignore[arg-type]
                ordinal=turn.ordinal, mandatory=mandatory, version=str(turn.ordinal), verbatim=True)


def turn_tokens(turn: TurnLike, count: Count) -> int:
    """Tokens of a turn as it is rendered (its whole message)."""
    return count(unit_segment(turn_unit(turn)))


# ---------------------------------------------------------------------------------------- plan

def _contiguous(ordinals: Sequence[int], start: int) -> bool:
    return list(ordinals) == list(range(start, start + len(ordinals)))


def plan(turns: Sequence[TurnLike], *, lineage_base: int, active_checkpoint_coverage_end: int | None,
         measured_tokens: int, cap: int, high_watermark: float, recent_exact_tokens: int, count: Count,
         active_checkpoint_id: str | None = None) -> CompactionPlan:
    """The one split of a build (seed 002 §3).

    ``turns``: the conversation before the current input (older than ``lineage_base`` are
    ignored). ``measured_tokens``: the direct build's count against ``cap`` (the input
    cap, e.g. the budget B). Outcomes: ``not_needed`` (below the watermark, or nothing
    old enough to compact), ``compacted`` (compact ``compacted``, keep ``recent_exact``:
    the service turns it into ``fallback`` if the compactor fails), ``fallback`` with
    ``degraded`` (a gap after the coverage: recent exact turns only, no new checkpoint).
    """
    hw = math.floor(cap * high_watermark)
    conv = sorted((t for t in turns if t.ordinal > lineage_base), key=lambda t: t.ordinal)
    base_cp = active_checkpoint_id
    base = lineage_base
    if active_checkpoint_coverage_end is not None and active_checkpoint_coverage_end >= lineage_base:
        base = active_checkpoint_coverage_end
    else:
        base_cp = None
    if measured_tokens <= hw:
        return CompactionPlan(reason="below_high_watermark", high_watermark_tokens=hw,
                              measured_tokens=measured_tokens, base_checkpoint=base_cp)
    after = [t for t in conv if t.ordinal > base]
    ordinals = [t.ordinal for t in after]
    gap = not _contiguous(ordinals, base + 1)
    recent: list[TurnLike] = []
    used = 0
    for t in reversed(after):
        if recent and recent[-1].ordinal != t.ordinal + 1:
            break  # a gap ends the recent suffix too
        cost = turn_tokens(t, count)
        if used + cost > recent_exact_tokens:
            break
        recent.append(t)
        used += cost
    recent.reverse()
    recent_cov = Coverage(recent[0].ordinal, recent[-1].ordinal) if recent else None
    if gap:
        return CompactionPlan(reason="coverage_gap", high_watermark_tokens=hw, measured_tokens=measured_tokens,
                              base_checkpoint=None, recent_exact=recent_cov, degraded=True, outcome="fallback")
    first_recent = recent[0].ordinal if recent else base + len(after) + 1
    if first_recent <= base + 1:
        return CompactionPlan(reason="nothing_to_compact", high_watermark_tokens=hw, measured_tokens=measured_tokens,
                              base_checkpoint=base_cp, recent_exact=recent_cov)
    return CompactionPlan(reason="high_watermark_crossed", high_watermark_tokens=hw, measured_tokens=measured_tokens,
                          base_checkpoint=base_cp, compacted=Coverage(base + 1, first_recent - 1),
                          recent_exact=recent_cov, outcome="compacted")


# ---------------------------------------------------------------------------------------- structured compactor

_SENTENCE = re.compile(r"(?<=[.!?;])\s+|(?<=[。！？；])|\n+")
_CUES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("conversation_goal", re.compile(
        r"\b(?:goal|objective|aim is|purpose|we need to|i want to|i need to|the task is)\b"
        r"|目标|目的|任务是|我想要|我需要",
        re.IGNORECASE)),
    ("preferences", re.compile(
        r"\b(?:prefer|preference|i like|i'd rather|i would rather)\b|偏好|喜欢|更希望", re.IGNORECASE)),
    ("decisions_constraints", re.compile(
        r"\b(?:must|mustn't|do not|don't|never|decided|we will|shall|constraint|required|limited to)\b"
        r"|必须|不要|不能|只能|决定|限定|禁止|务必", re.IGNORECASE)),
    ("confirmed_facts", re.compile(
        r"\b(?:confirmed|verified|is not|isn't|are not|was not|wasn't|root cause|turns out|found that|passed)\b"
        r"|确认|证实|不是|已经|发现|通过", re.IGNORECASE)),
)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s and s.strip()]


def classify(sentence: str) -> str | None:
    """The summary field a sentence belongs to, by cue (questions first), or None."""
    if sentence.endswith(("?", "？")):
        return "unresolved_questions"
    for field, cue in _CUES:
        if cue.search(sentence):
            return field
    return None


def _clip(text: str) -> str:
    return text if len(text) <= COMPACTOR_ITEM_CHARS else text[:COMPACTOR_ITEM_CHARS - 1] + "…"


def _norm(text: str) -> str:
    return " ".join(text.casefold().split())


class _Field:
    """Items of one field by normalized text, in first-seen order, ordinals merged."""

    def __init__(self) -> None:
        self.items: dict[str, tuple[str, list[int]]] = {}

    def add(self, text: str, ordinals: Iterable[int]) -> None:
        key = _norm(text)
        if key not in self.items:
            self.items[key] = (text, [])
        have = self.items[key][1]
        for o in ordinals:
            if o not in have:
                have.append(o)

    def out(self, field: str) -> list[SummaryItem]:
        items = [SummaryItem(text=t, source_turn_ordinals=sorted(o)[-COMPACTOR_ITEM_ORDINALS:])
                 for t, o in self.items.values()]
        cap = COMPACTOR_FIELD_MAX[field]
        # The goal keeps its first statements; every other field its newest.
        return items[:cap] if field == "conversation_goal" else items[-cap:]


def compact_structured(previous_summary: Summary | None, turns: Sequence[TurnLike]) -> Summary:
    """The deterministic structured compactor: previous summary + turns → ``checkpoint-v1``.

    Each user or assistant sentence with a cue becomes an item citing its turn (the same
    statement again merges ordinals); sentences are kept verbatim (numbers, codes and
    arguments intact), clipped to 500 characters. Without any goal the first user
    sentence is the goal. Fields are bounded (``COMPACTOR_FIELD_MAX``) and the whole
    summary stays under 60 KiB by dropping the oldest non-goal items.
    """
    fields = {f: _Field() for f in FIELDS}
    if previous_summary is not None:
        for f in FIELDS:
            for item in getattr(previous_summary, f):
                fields[f].add(item.text, item.source_turn_ordinals)
    first_user: tuple[str, int] | None = None
    for turn in sorted(turns, key=lambda t: t.ordinal):
        if turn.role not in ("user", "assistant") or not turn.content:
            continue
        for sentence in _sentences(turn.content):
            if first_user is None and turn.role == "user":
                first_user = (sentence, turn.ordinal)
            field = classify(sentence)
            if field is not None:
                fields[field].add(_clip(sentence), [turn.ordinal])
    if not fields["conversation_goal"].items and first_user is not None:
        fields["conversation_goal"].add(_clip(first_user[0]), [first_user[1]])
    out = {f: fields[f].out(f) for f in FIELDS}
    summary = Summary(schema_version="checkpoint-v1", **out)
    while len(canonical_summary(summary)) > COMPACTOR_MAX_BYTES:
        biggest = max(FIELDS[1:], key=lambda f: len(out[f]))
        out[biggest] = out[biggest][1:]
        summary = Summary(schema_version="checkpoint-v1", **out)
    return summary


def summary_text(summary: Summary) -> str:
    """The summary as the checkpoint unit's text (inside its data block): one section per field."""
    titles = {"conversation_goal": "conversation goal", "confirmed_facts": "confirmed facts",
              "decisions_constraints": "decisions and constraints", "preferences": "preferences",
              "unresolved_questions": "unresolved questions"}
    parts = []
    for f in FIELDS:
        items: list[SummaryItem] = getattr(summary, f)
        if not items:
            parts.append(f"{titles[f]}: none")
            continue
        lines = [f"- {i.text} [turns {', '.join(map(str, i.source_turn_ordinals))}]" for i in items]
        parts.append(f"{titles[f]}:\n" + "\n".join(lines))
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------- validation

_summary_decoder = msgspec.json.Decoder(Summary)


def canonical_summary(summary: Summary) -> bytes:
    """The summary's canonical bytes: its JSON with the fields in schema order."""
    return msgspec.json.encode(summary)


def parse_summary(data: bytes | str | Mapping[str, Any]) -> Summary:
    """A compactor's raw output as a ``Summary``; raises ``InvalidSummaryError`` with the path."""
    try:
        if isinstance(data, Mapping):
            return msgspec.convert(data, Summary)
        return _summary_decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise InvalidSummaryError([f"invalid_schema: {exc}"]) from exc
    except msgspec.DecodeError as exc:
        raise InvalidSummaryError([f"invalid_json: {exc}"]) from exc


def validate_summary(summary: Summary | bytes | str | Mapping[str, Any], coverage: Coverage,
                     lineage_base: int) -> list[str]:
    """Every problem of a candidate summary (empty: valid), each ``"{code} at {path}: {detail}"``.

    Raw output is decoded first (the Struct forbids unknown fields and requires all five).
    A ``Summary`` built in Python is re-checked field by field, since constructing a Struct
    does not validate its constraints.
    """
    if not isinstance(summary, Summary):
        try:
            summary = parse_summary(summary)
        except InvalidSummaryError as exc:
            return exc.problems
    problems: list[str] = []
    if coverage.first != lineage_base + 1 or coverage.through < coverage.first:
        problems.append(f"invalid_coverage at $.coverage: {coverage.first}..{coverage.through} does not start "
                        f"right after the lineage base {lineage_base}")
    if summary.schema_version != SCHEMA_VERSION:
        problems.append(f"invalid_schema at $.schema_version: {summary.schema_version!r}")
    total = 0
    for f in FIELDS:
        items = getattr(summary, f)
        if not isinstance(items, list):
            problems.append(f"invalid_schema at $.{f}: not a list")
            continue
        total += len(items)
        if len(items) > FIELD_MAX[f]:
            problems.append(f"too_many_items at $.{f}: {len(items)} > {FIELD_MAX[f]}")
        for k, item in enumerate(items):
            problems.extend(_item_problems(item, f"$.{f}[{k}]", coverage, lineage_base))
    if total == 0:
        problems.append("empty_summary at $: every field is empty")
    if total > MAX_ITEMS:
        problems.append(f"too_many_items at $: {total} > {MAX_ITEMS}")
    size = len(canonical_summary(summary)) if not problems else 0
    if size > SUMMARY_MAX_BYTES:
        problems.append(f"summary_too_large at $: {size} bytes > {SUMMARY_MAX_BYTES}")
    return problems


def _item_problems(item: Any, path: str, coverage: Coverage, lineage_base: int) -> list[str]:
    if not isinstance(item, SummaryItem):
        return [f"invalid_schema at {path}: not a summary item"]
    out = []
    text = item.text
    if not isinstance(text, str) or not text.strip():
        out.append(f"empty_text at {path}.text: the text is empty")
    elif len(text) > ITEM_MAX_CHARS or len(text.encode()) > ITEM_MAX_BYTES:
        out.append(f"text_too_long at {path}.text: {len(text)} characters, {len(text.encode())} bytes")
    ordinals = item.source_turn_ordinals
    if not ordinals:
        out.append(f"no_ordinals at {path}.source_turn_ordinals: an item cites at least one turn")
    elif len(ordinals) > ITEM_MAX_ORDINALS:
        out.append(f"too_many_ordinals at {path}.source_turn_ordinals: {len(ordinals)} > {ITEM_MAX_ORDINALS}")
    seen: set[int] = set()
    for k, o in enumerate(ordinals):
        where = f"{path}.source_turn_ordinals[{k}]"
        if not isinstance(o, int) or isinstance(o, bool):
            out.append(f"invalid_schema at {where}: not an integer")
            continue
        if o in seen:
            out.append(f"duplicate_ordinal at {where}: turn {o} cited twice")
        seen.add(o)
        if o <= lineage_base or o > coverage.through:
            out.append(f"cited_ordinal_out_of_range at {where}: turn {o} is outside {lineage_base + 1}.."
                       f"{coverage.through}")
    return out


# ---------------------------------------------------------------------------------------- digests

def summary_digest(summary: Summary) -> str:
    """blake3 of the canonical summary (domain-separated)."""
    return blake3.blake3(b"agentledger/summary/v1\x00" + canonical_summary(summary)).hexdigest()


def source_genesis(lineage_base: int) -> str:
    """The source digest of the empty conversation of a lineage (nothing after its base)."""
    return blake3.blake3(b"agentledger/source/v1\x00" + str(lineage_base).encode()).hexdigest()


def source_step(previous: str, turn: TurnLike) -> str:
    """One link of the chain: blake3(previous digest ‖ canonical turn [ordinal, role, content])."""
    return blake3.blake3(bytes.fromhex(previous)
                         + msgspec.json.encode([turn.ordinal, turn.role, turn.content])).hexdigest()


def source_digest(turns: Iterable[TurnLike], through: int, *, lineage_base: int = 0,
                  resume: tuple[int, str] | None = None) -> str:
    """The chained digest of the conversation's turns ``lineage_base + 1 .. through``.

    ``resume=(k, digest_through_k)`` continues from a checkpoint's digest (only turns
    ``k + 1 .. through`` are read). The turns must be contiguous: ``ContractError``
    ``source_gap`` otherwise.
    """
    start, digest = resume if resume is not None else (lineage_base, source_genesis(lineage_base))
    expected = start + 1
    for turn in sorted((t for t in turns if start < t.ordinal <= through), key=lambda t: t.ordinal):
        if turn.ordinal != expected:
            raise ContractError(f"turn {expected} is missing from the source", code="source_gap", path="$.turns")
        digest = source_step(digest, turn)
        expected += 1
    if expected != through + 1:
        raise ContractError(f"turns {expected}..{through} are missing from the source", code="source_gap",
                            path="$.turns")
    return digest


# ---------------------------------------------------------------------------------------- receipts

def receipt_payload(*, checkpoint_id: str, generation_id: str, tenant: str, task_id: str, epoch: int, lineage: str,
                    coverage: Coverage, source_digest: str, summary_digest: str, policy_version: str) -> bytes:
    """The exact bytes a receipt signs: canonical (sorted-key) JSON of every binding."""
    return msgspec.json.encode({
        "schema": RECEIPT_SCHEMA, "checkpoint_id": checkpoint_id, "generation_id": generation_id,
        "tenant": tenant, "task_id": task_id, "epoch": epoch, "lineage": lineage,
        "coverage": [coverage.first, coverage.through], "source_digest": source_digest,
        "summary_digest": summary_digest, "policy_version": policy_version,
    }, order="sorted")


def checkpoint_payload(cp: CompactionCheckpoint) -> bytes:
    """The payload of a checkpoint's receipt, with its summary digest recomputed from the summary."""
    return receipt_payload(checkpoint_id=cp.checkpoint_id, generation_id=cp.generation_id, tenant=cp.tenant,
                           task_id=cp.task_id, epoch=cp.epoch, lineage=cp.lineage, coverage=cp.coverage,
                           source_digest=cp.source_digest, summary_digest=summary_digest(cp.summary),
                           policy_version=cp.receipt.policy_version)


def private_key_from_bytes(raw: bytes) -> Ed25519PrivateKey:
    """The Ed25519 private key of a 32-byte seed (the key file's content)."""
    return Ed25519PrivateKey.from_private_bytes(raw)


def private_key_bytes(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())


def public_key_bytes(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def public_key_from_bytes(raw: bytes) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(raw)


def key_id(public_key: Ed25519PublicKey) -> str:
    """First 16 hex of blake3(raw public key)."""
    return blake3.blake3(public_key_bytes(public_key)).hexdigest()[:16]


def sign(private_key: Ed25519PrivateKey, payload: bytes) -> str:
    """Ed25519 signature of ``payload``, hex."""
    return private_key.sign(payload).hex()


def verify(public_key: Ed25519PublicKey, payload: bytes, signature: str) -> bool:
    """Does ``signature`` (hex) sign ``payload`` under ``public_key``? Never raises."""
    try:
        public_key.verify(bytes.fromhex(signature), payload)
    except (InvalidSignature, ValueError):
        return False
    return True


def stage_candidate(summary: Summary, *, checkpoint_id: str, generation_id: str, tenant: str, task_id: str,
                    epoch: int, lineage: str, lineage_base: int, coverage: Coverage, source_digest: str,
                    policy_version: str, private_key: Ed25519PrivateKey) -> CompactionCheckpoint:
    """Validate a compactor's summary and bind it by a signed receipt: a ``staged`` checkpoint.

    Raises ``InvalidSummaryError`` with every problem; the caller then selects the frozen fallback.
    """
    problems = validate_summary(summary, coverage, lineage_base)
    if problems:
        raise InvalidSummaryError(problems)
    digest = summary_digest(summary)
    payload = receipt_payload(checkpoint_id=checkpoint_id, generation_id=generation_id, tenant=tenant,
                              task_id=task_id, epoch=epoch, lineage=lineage, coverage=coverage,
                              source_digest=source_digest, summary_digest=digest, policy_version=policy_version)
    receipt = CompactionReceipt(key_id=key_id(private_key.public_key()), signature=sign(private_key, payload),
                                policy_version=policy_version)
    return CompactionCheckpoint(checkpoint_id=checkpoint_id, tenant=tenant, task_id=task_id, epoch=epoch,
                                lineage=lineage, coverage=coverage, source_digest=source_digest,
                                summary_digest=digest, summary=summary, receipt=receipt,
                                generation_id=generation_id, status="staged")


def empty_summary() -> Summary:
    """A summary with nothing in it (what a forgotten checkpoint keeps)."""
    return Summary(schema_version=SCHEMA_VERSION, conversation_goal=[], confirmed_facts=[],
                   decisions_constraints=[], preferences=[], unresolved_questions=[])


def forgotten_checkpoint(*, checkpoint_id: str, tenant: str, task_id: str, epoch: int, lineage: str,
                         coverage: Coverage, generation_id: str, reason: str) -> CompactionCheckpoint:
    """The body a forgotten checkpoint keeps: its ids and coverage, no summary, no digest of the
    turns it covered, no receipt. It still decodes, never verifies, and a commit refuses it."""
    return CompactionCheckpoint(checkpoint_id=checkpoint_id, tenant=tenant, task_id=task_id, epoch=epoch,
                                lineage=lineage, coverage=coverage, source_digest="", summary_digest="",
                                summary=empty_summary(),
                                receipt=CompactionReceipt(key_id="", signature="", policy_version=""),
                                generation_id=generation_id, status="refused", reason=reason)


def verify_checkpoint(cp: CompactionCheckpoint, public_key: Ed25519PublicKey) -> bool:
    """Digest and receipt of a checkpoint hold under ``public_key`` (a tampered summary fails)."""
    return (cp.receipt.key_id == key_id(public_key) and cp.summary_digest == summary_digest(cp.summary)
            and verify(public_key, checkpoint_payload(cp), cp.receipt.signature))


# ---------------------------------------------------------------------------------------- CAS

def cas_check(  # noqa: PLR0911 - one return per refusal, in the documented order
        checkpoint: CompactionCheckpoint, *, expected_checkpoint_id: str, input_ordinal: int,
              answer_ordinal: int, transcript_revision: int, epoch: int, lineage: str, lineage_base: int,
              active_coverage_end: int | None, public_key: Ed25519PublicKey,
              source_digest_now: str | None = None) -> str | None:
    """Why activating ``checkpoint`` must be refused now, or None: the commit's pure predicate.

    Evaluated by the service inside the transaction that flips the active pointer, on the
    values it read there: ``transcript_revision`` (the task's last turn ordinal),
    ``epoch`` / ``lineage`` / ``lineage_base`` (Working Memory now), ``active_coverage_end``
    (the active checkpoint's coverage end, None without one), ``source_digest_now`` (the
    transcript's digest through the coverage end, if recomputed). Checked in this order:

    ``not_staged`` (not staged, or not the checkpoint the generation staged);
    ``stale_epoch``; ``other_lineage`` (another lineage, or coverage not starting at its
    base); ``transcript_moved_on`` (the answer is not the turn right after the input, or
    a turn arrived after it); ``coverage_regression`` (not strictly beyond the active
    coverage); ``cited_ordinal_out_of_range`` / ``invalid_summary`` (re-validation, also of
    a coverage reaching the input); ``bad_signature`` (key, digest or receipt do not hold);
    ``source_changed`` (the covered turns no longer digest the same).
    """
    if checkpoint.status != "staged" or checkpoint.checkpoint_id != expected_checkpoint_id:
        return "not_staged"
    if checkpoint.epoch != epoch:
        return "stale_epoch"
    if checkpoint.lineage != lineage or checkpoint.coverage.first != lineage_base + 1:
        return "other_lineage"
    if answer_ordinal != input_ordinal + 1 or transcript_revision != answer_ordinal:
        return "transcript_moved_on"
    if active_coverage_end is not None and checkpoint.coverage.through <= active_coverage_end:
        return "coverage_regression"
    problems = validate_summary(checkpoint.summary, checkpoint.coverage, lineage_base)
    if any(p.startswith("cited_ordinal_out_of_range") for p in problems):
        return "cited_ordinal_out_of_range"
    if problems or checkpoint.coverage.through >= input_ordinal:
        return "invalid_summary"
    if not verify_checkpoint(checkpoint, public_key):
        return "bad_signature"
    if source_digest_now is not None and source_digest_now != checkpoint.source_digest:
        return "source_changed"
    return None
