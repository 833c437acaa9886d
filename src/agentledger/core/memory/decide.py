"""The write path: one decision per proposal, with a trace of every rule that looked at it.

Two steps, so the shell can fetch the right group in between:

- ``prepare(proposal)`` runs every rule that needs no stored state, in the
  policy's order: classify (a stack trace is a ``diagnostic``, whatever it was
  proposed as) and the scope the kind may take (narrowed to the origin task,
  or rejected) → secrets (deny, nothing of the value kept) → personal data
  (``personal`` sensitivity, user scope only) → schema → source authority
  (forbidden sources are quarantined) → instructions in data, text that hides itself and
  text the detector cannot read (quarantined; with a model's ``Judgement`` of a text that is not
  obfuscated, held when it says the text steers the agent, written when it reads as content)
  → canonical key.
  Its ``group_key`` names the group ``decide`` needs.
- ``decide(proposal, group=…)`` adds the time-dependent parts (observed time,
  TTL and review) and resolves the group with the new record in it: the
  action says what the policy saw (``write``, ``supersede``, ``merge``,
  ``quarantine``); the projection's resolution stays the authority on status.

The detectors are called here, not by the shell, so the trace always says
what they found; they are pure functions, passed in as ``Detectors`` (tests,
or a tuned set) or taken from ``agentledger.core.detect``. A value with a
redaction marker (the writer already replaced a secret) is denied as well.

Personal values: ``decide`` sees the plaintext and returns a record whose
``sensitivity`` is ``personal`` with the value in it; the shell seals it
(``with_sealed``) before the decision is appended; the record keeps
``value_digest`` (``keys.value_digest``, keyed with the installation's marker key), so that
the same value proposed again merges instead of tying with its own other sealing, and its key
names the attribute, never the value. A proposal that arrives
sealed cannot be scanned: it is personal, needs an explicit key, and from a
source below tool output's authority it is quarantined.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Literal, Protocol

import msgspec
from msgspec import Struct

from agentledger.contracts.events import (
    DecisionAction,
    MemoryDecided,
    MemoryKind,
    MemoryProposed,
    MemoryRecordBody,
    RuleFired,
    Scope,
    Sealed,
    Sensitivity,
    SourceKind,
)
from agentledger.core import detect
from agentledger.core.detect.finding import Finding, non_overlapping
from agentledger.core.detect.language import unjudged
from agentledger.core.detect.unveil import find_obfuscation
from agentledger.core.memory.authority import (
    INFERENCE_REVIEW,
    KIND_RULES,
    LOW_AUTHORITY,
    authority_of,
    effective_source,
    record_id_for,
    scope_key,
    specificity_of,
)
from agentledger.core.memory.keys import (
    MULTI_VALUED,
    PERSONAL_KIND_ATTRIBUTE,
    attribute_key,
    canonical_key,
    looks_diagnostic,
    text_of,
    value_digest,
)
from agentledger.core.memory.resolve import TIE_REASON, GroupEntry, GroupKey, KeyGroup, Resolved, resolve
from agentledger.errors import AgentLedgerError

MAX_VALUE = 16384
# Clock skew tolerated on ``observed_at`` before a proposal from the future is rejected.
SKEW = timedelta(minutes=5)
# Sources whose imperatives are the point (a user's "from now on…", an accepted project
# rule "the assistant must answer in the user's language"): their policy imperatives, wishes
# to keep something, conditional answers ("when I ask …"), tool calls, words to the agent, rules
# for it and comments in their own text stand
# (``TRUSTED_IMPERATIVES``); an attempt to override the agent's instructions, deletion, its
# system prompt or its role, or to send its data away, is held from them as from anyone. From
# any other source (documents, pages, mail, tool output, a model's inference) every finding
# holds the proposal, hidden content included, unless a model's reading says it is content
# (``_instructions``).
INSTRUCTION_EXEMPT: frozenset[SourceKind] = frozenset({"user_confirmed", "project_rule"})
TRUSTED_IMPERATIVES: frozenset[str] = frozenset({"policy_imperative", "retention_override", "addressed_to_agent",
                                                 "policy_claim", "fake_user_preference", "hidden_content",
                                                 "speaks_to_agent", "conditional_trigger", "tool_call",
                                                 "concealment"})
# Kinds that steer the agent: any source but the exempt ones is checked for instructions.
POLICY_KINDS: frozenset[MemoryKind] = frozenset({"rule", "preference", "procedure"})
# At or below this authority (tool output, inference, documents) every kind is checked.
CHECKED_AUTHORITY = 3
# Hex digits of a personal value's keyed digest in the key of a multi-valued attribute's value.
PERSONAL_KEY_DIGEST = 16
_MARKER = re.compile(r"\[REDACTED:([A-Za-z0-9_.-]+):[0-9a-f]{8}\]")


class FindingLike(Protocol):
    @property
    def kind(self) -> str: ...

    @property
    def start(self) -> int: ...

    @property
    def end(self) -> int: ...


Detector = Callable[[str], Sequence[FindingLike]]


class Detectors(Struct, frozen=True):
    """The detectors the policy runs (``agentledger.core.detect`` by default).

    ``obfuscation``: text that hides itself (direction overrides, TAG characters, invisible
    characters inside words, mixed-script words, overlays, spaced letters), held from any source
    that may not give the agent orders whatever it says. ``language``: why ``instructions``
    cannot judge a text (a script or a language it has no word classes for), or None; such text
    from the same sources is held, since the detector's silence on it says nothing.
    """

    secrets: Detector
    personal: Detector
    instructions: Detector
    obfuscation: Detector = find_obfuscation
    language: Callable[[str], str | None] = unjudged


_DEFAULT = Detectors(detect.find_secrets, detect.find_personal, detect.find_instructions)


def default_detectors() -> Detectors:
    """The detectors of ``agentledger.core.detect``."""
    return _DEFAULT


class Prepared(Struct, frozen=True):
    """What ``prepare`` concluded before the group is known.

    ``verdict`` is a final ``(action, reason)`` (deny / reject) when a rule
    already ended the proposal; ``quarantine`` the first gate that quarantines
    it; ``group_key`` = ``(scope_key(scope), key)``, the group to fetch.
    """

    proposal: MemoryProposed
    kind: MemoryKind
    scope: Scope
    key: str
    sensitivity: Sensitivity
    authority: int
    trace: tuple[RuleFired, ...]
    verdict: tuple[DecisionAction, str] | None = None
    quarantine: str | None = None
    value_digest: str | None = None
    # A model may judge it: its source may not give the agent orders, it is not obfuscated, the
    # rules found nothing in it, could not read it or (with ``judge_findings``) found words of an
    # instruction or a hidden part, no other gate holds it, and it is
    # not sealed nor marked personal by its caller (a personal value the detector found is sent
    # masked, ``judge_text``; nothing else of personal data is sent to a model).
    judgeable: bool = False
    # What a judge is sent: the text, a personal value replaced by its kind (``masked``).
    judge_text: str = ""

    @property
    def group_key(self) -> GroupKey:
        return (scope_key(self.scope), self.key)


class Judgement(Struct, frozen=True):
    """A model's reading of a proposal's text (``agentledger.models.judges``), which the shell
    asks for when ``Prepared.judgeable``: ``steers`` (it tries to steer an AI agent), ``content``,
    or ``unavailable`` (the judge failed and the installation holds such proposals); ``judge``
    names the model, ``why`` is its short reason. It is an input, as the artifacts a proposal
    cites are: the decision's trace records it, so a replay never asks again."""

    verdict: Literal["steers", "content", "unavailable"]
    judge: str
    why: str = ""


class _Stop(Exception):  # noqa: N818 - control flow inside this module only
    def __init__(self, action: DecisionAction, reason: str) -> None:
        super().__init__(reason)
        self.action = action
        self.reason = reason


class _Run:
    """The mutable working set of one ``prepare``."""

    def __init__(self, proposal: MemoryProposed) -> None:
        self.proposal = proposal
        self.kind: MemoryKind = proposal.kind
        self.scope = proposal.scope
        self.key = ""
        self.sensitivity: Sensitivity = "internal"
        self.authority = authority_of(proposal.source)
        self.trace: list[RuleFired] = []
        self.quarantine: str | None = None
        self.personal_kinds: list[str] = []
        # What a judge may be sent: the text, its personal values masked (None: nothing of it).
        self.judge_text: str | None = None
        self.digest: str | None = None
        # The personal values the detector found, each in a normal form (``_value_form``).
        self.personal_values: list[str] = []
        self.judgeable = False

    def fire(self, rule: str, outcome: str, reason: str = "") -> None:
        self.trace.append(RuleFired(rule=rule, outcome=outcome, reason=reason))

    def stop(self, rule: str, action: DecisionAction, reason: str, why: str) -> _Stop:
        self.fire(rule, action, f"{reason}: {why}")
        return _Stop(action, reason)

    def hold(self, rule: str, reason: str, why: str) -> None:
        self.fire(rule, "quarantine", f"{reason}: {why}")
        self.quarantine = self.quarantine or reason


def prepare(proposal: MemoryProposed, *, personal: bool = False, evidence_problem: str | None = None,
            detectors: Detectors | None = None, identity_key: bytes | None = None,
            judged: Judgement | None = None, judge_findings: bool = True) -> Prepared:
    """Every rule that needs no stored state, in order; see the module docstring.

    ``identity_key``: the installation's marker key, which keys a personal value's digest
    (``keys.value_digest``; None: a key of this process only).

    ``personal``: the caller asked for the value to be treated as personal.
    ``evidence_problem``: why the artifacts the proposal cites could not be verified (the shell
    looked them up): such a proposal is rejected, so that cited evidence never raises authority
    without being checked.
    ``judged``: a model's reading of the text, asked for when a first ``prepare`` says
    ``judgeable`` (ignored otherwise). ``judge_findings``: whether a text in which the rules
    found an instruction or a hidden part (not obfuscation) is judgeable too, so that a
    ``content`` reading writes it (the installation's ``memory_judge_reads_findings``); without
    it the judge reads only what the rules left.
    """
    det = detectors or default_detectors()
    run = _Run(proposal)
    text = "" if proposal.value is None else text_of(proposal.value)
    verdict: tuple[DecisionAction, str] | None = None
    try:
        _classify(run, text)
        _secrets(run, text, det)
        _personal(run, text, det, personal)
        _schema(run)
        if evidence_problem is not None:
            raise run.stop("evidence", "reject", "evidence_unverified", evidence_problem)
        _authority(run)
        _instructions(run, text, det, judged, judge_findings)
        _key(run, identity_key)
    except _Stop as stop:
        verdict = (stop.action, stop.reason)
    return Prepared(proposal=proposal, kind=run.kind, scope=run.scope, key=run.key,
                    sensitivity=run.sensitivity, authority=run.authority, trace=tuple(run.trace),
                    verdict=verdict, quarantine=run.quarantine, value_digest=run.digest,
                    judgeable=run.judgeable and verdict is None,
                    judge_text=(run.judge_text or "") if run.judgeable and verdict is None else "")


def _classify(run: _Run, text: str) -> None:
    asked = run.proposal.kind
    if asked not in ("diagnostic", "task_result") and looks_diagnostic(text):
        run.kind = "diagnostic"
        run.fire("classify", "reclassify", f"diagnostic content proposed as {asked}: kept as diagnostic")
    else:
        run.fire("classify", "pass", f"kind {asked}")
    rule, level = KIND_RULES[run.kind], run.scope.level
    if level in rule.scopes:
        run.fire("scope", "pass", f"{level} allowed for {run.kind}")
    elif "task" in rule.scopes and run.proposal.origin_task:
        run.scope = Scope(level="task", tenant=run.scope.tenant, id=run.proposal.origin_task)
        run.fire("scope", "narrow", f"{level} not allowed for {run.kind}: narrowed to its origin task")
    else:
        allowed = ", ".join(rule.scopes)
        raise run.stop("scope", "reject", "scope_not_allowed_for_kind",
                       f"{run.kind} takes {allowed}, not {level}")


def _secrets(run: _Run, text: str, det: Detectors) -> None:
    if run.proposal.sealed is not None:
        run.fire("secrets", "skip", "sealed content is not scanned")
        return
    scanned = "\n".join([text, run.proposal.key or ""])
    kinds = {f.kind for f in det.secrets(scanned)} | {m.group(1) for m in _MARKER.finditer(scanned)}
    if kinds:
        raise run.stop("secrets", "deny", "secret_detected",
                       "found " + ", ".join(sorted(kinds)) + "; nothing of the value is kept")
    run.fire("secrets", "pass")


def _personal(run: _Run, text: str, det: Detectors, asked: bool) -> None:
    p = run.proposal
    spans = det.personal(text) if p.sealed is None else []
    found = sorted({f.kind for f in spans})
    if p.key is not None and det.personal(p.key):
        raise run.stop("personal", "reject", "personal_data_in_key", "a key is never sealed; name it otherwise")
    if not (found or asked or p.sealed is not None):
        run.judge_text = text
        run.fire("personal", "pass")
        return
    # A model may read what the detector found masked; a value the caller calls personal, or a
    # sealed one, is never sent.
    run.judge_text = None if asked or p.sealed is not None else masked(text, spans)
    why = ", ".join(found) or ("sealed" if p.sealed is not None else "marked personal")
    if run.scope.level != "user":
        raise run.stop("personal", "reject", "personal_needs_user_scope",
                       f"{why} in a {run.scope.level} scope")
    run.sensitivity = "personal"
    run.personal_kinds = found
    run.personal_values = sorted({_value_form(f.kind, text[f.start:f.end]) for f in spans})
    run.fire("personal", "personal", f"{why}: personal sensitivity, sealed with the data subject's key")


_PHONE_PUNCTUATION = re.compile(r"[\s().\-/]+")


def _value_form(kind: str, value: str) -> str:
    """A personal value as two writings of it compare: casefolded, a phone number's spacing
    and punctuation dropped (``+44 20 7946 0123`` is ``+442079460123``)."""
    folded = value.strip().casefold()
    return _PHONE_PUNCTUATION.sub("", folded) if kind == "phone" else folded


def masked(text: str, spans: Sequence[FindingLike]) -> str:
    """``text`` with each personal value found replaced by its kind in brackets (``[email]``):
    what a judge is sent of a personal proposal, which keeps its wording and not its values."""
    out, at = [], 0
    # Overlapping values are masked as one (``non_overlapping``, as redaction does).
    for f in non_overlapping(Finding(f.kind, f.start, f.end, "") for f in spans):
        out += [text[at:f.start], f"[{f.kind}]"]
        at = f.end
    return "".join(out) + text[at:]


def _schema(run: _Run) -> None:
    p, rule = run.proposal, KIND_RULES[run.kind]
    if p.sealed is not None:
        if p.key is None:
            raise run.stop("schema", "reject", "sealed_needs_key", "a sealed value cannot derive its key")
        size = len(p.sealed.ciphertext)
    elif p.value is None:
        raise run.stop("schema", "reject", "missing_value", "a proposal needs a value")
    elif isinstance(p.value, str):
        if not p.value.strip():
            raise run.stop("schema", "reject", "empty_value", "blank text")
        size = len(p.value)
    elif rule.text_only:
        raise run.stop("schema", "reject", f"{run.kind}_needs_text", f"a {run.kind} is a sentence, not JSON")
    else:
        size = len(msgspec.json.encode(p.value))
    if size > MAX_VALUE:
        raise run.stop("schema", "reject", "value_too_large", f"{size} > {MAX_VALUE}")
    if run.kind == "task_result" and not p.evidence:
        raise run.stop("schema", "reject", "task_result_needs_evidence", "an episode cites its artifacts")
    run.fire("schema", "pass", f"{'text' if isinstance(p.value, str) else 'json'}, {size}")


def _authority(run: _Run) -> None:
    source = effective_source(run.proposal.source)
    if run.kind == "procedure" and source == "external_document":
        # A document's how-to is what the document says, not how the agent works: kept as a
        # fact from outside (rendered as data), never as guidance; an instruction in it is
        # still held by the next gate.
        run.kind = "fact"
        run.fire("authority", "pass", "external_document may not write a procedure: kept as a fact from outside")
        return
    if run.kind == "preference" and source == "model_inference":
        run.hold("authority", "inference_needs_confirmation",
                 "a model's inference of what the user prefers waits for the user's confirmation")
        return
    if source in KIND_RULES[run.kind].forbidden:
        prefix = "external" if source == "external_document" else "source"
        run.hold("authority", f"{prefix}_cannot_write_{run.kind}", f"{source} may not write a {run.kind}")
    else:
        run.fire("authority", "pass", f"{source}: authority {run.authority}")


def _instructions(run: _Run, text: str, det: Detectors, judged: Judgement | None, judge_findings: bool) -> None:
    """Every source is checked: an exempt source (a user, a project rule) and a trusted source's
    fact may carry policy imperatives, everything else none. A model's ``judged`` reading decides
    what the rules found nothing in (it holds what steers, and writes content the rules could not
    read) and, with ``judge_findings``, what they found something in: the word classes and phrase
    patterns guess at meaning, and a page's hidden parts are suspect, not guilty (a generator's
    comment, a loader's hidden span); a model that reads the text decides better (measured:
    docs/memory.md). Text that hides itself from machines as well (obfuscation: direction
    overrides, TAG characters, letters of other scripts, invisible characters inside words) is
    held whatever a model says. Without a reading, every finding and text the rules cannot read is
    held."""
    source = effective_source(run.proposal.source)
    trusted = source in INSTRUCTION_EXEMPT or (run.authority > CHECKED_AUTHORITY and run.kind not in POLICY_KINDS)
    if run.proposal.sealed is not None:
        if trusted:
            run.fire("instructions", "skip", f"sealed {source} {run.kind}")
        else:
            run.hold("instructions", "sealed_unscanned", f"sealed {source} content cannot be checked")
        return
    found = sorted({f.kind for f in det.instructions(text)} - (TRUSTED_IMPERATIVES if trusted else set()))
    readable = not found or judge_findings
    hiding = [] if trusted or not readable else sorted({f.kind for f in det.obfuscation(text)})
    # Not what another gate already holds (a procedure from a page): its reading would change nothing.
    run.judgeable = (not trusted and readable and not hiding and run.judge_text is not None
                     and run.quarantine is None)
    judged = judged if run.judgeable else None
    if found and (judged is None or judged.verdict != "content"):
        run.hold("instructions", "instruction_in_data", "imperative aimed at the agent: " + ", ".join(found)
                 + (f" ({judged.judge}: {judged.verdict}, {judged.why})" if judged is not None else ""))
        return
    if hiding:
        run.hold("instructions", "obfuscated_in_data", "text that hides itself: " + ", ".join(hiding))
        return
    unread = None if trusted else det.language(text)
    if judged is not None and judged.verdict == "steers":
        run.hold("instructions", "judged_instruction", f"{judged.judge} reads an attempt to steer the agent: "
                 + judged.why)
    elif judged is not None and judged.verdict == "unavailable":
        run.hold("instructions", "judge_unavailable", f"{judged.judge} could not judge it: {judged.why}")
    elif unread is not None and judged is None:
        run.hold("instructions", "unjudged_language", "the detector cannot read it: " + unread)
    elif judged is not None:
        run.fire("instructions", "pass", f"{judged.judge} reads content"
                 + (" (its personal values masked)" if run.sensitivity == "personal" else "") + f": {judged.why}"
                 + (f" (the rules found: {', '.join(found)})" if found else "")
                 + (f" (the rules cannot read it: {unread})" if unread else ""))
    else:
        run.fire("instructions", "pass")


def _key(run: _Run, identity_key: bytes | None) -> None:
    p = run.proposal
    if run.sensitivity == "personal" and p.sealed is None:
        run.digest = value_digest(scope_key(run.scope), p.value, identity_key)
    if run.sensitivity == "personal" and p.key is None:
        # A key is never sealed: it names the attribute from the closed vocabulary (or the one
        # the detector found), else the value's keyed digest, never anything of the value.
        kinds = {PERSONAL_KIND_ATTRIBUTE.get(k, k) for k in run.personal_kinds}
        text = p.value if isinstance(p.value, str) else ""
        attr = attribute_key(text, closed=True) or (kinds.pop() if len(kinds) == 1 else None)
        if attr in MULTI_VALUED and run.digest is not None:
            # One group per value, none of its words: the keyed digest of the values found (so
            # "my email is X" and "email: X" meet), else of the whole value.
            digest = (value_digest(scope_key(run.scope), " ".join(run.personal_values), identity_key)
                      if run.personal_values else run.digest)
            attr = f"{attr}_{digest[:PERSONAL_KEY_DIGEST]}"
        run.key = attr or f"personal_value_{run.digest}"
    else:
        run.key = canonical_key(run.kind, p.key, p.value)
    if not run.key:
        raise run.stop("canonical_key", "reject", "empty_key", "no words to key on; name a key")
    run.fire("canonical_key", "pass", run.key if run.sensitivity != "personal" else "personal key")


def decide(proposal: MemoryProposed, *, tenant: str, event_id: str, group: KeyGroup, now: datetime,
           personal: bool = False, prepared: Prepared | None = None,
           detectors: Detectors | None = None, identity_key: bytes | None = None) -> MemoryDecided:
    """The decision on one proposal, given the current group of its ``prepare(...).group_key``.

    ``event_id``: the proposal event's id (the record links to it); ``now``: the
    decision time (default ``observed_at``, TTLs, the future check). Pass the
    ``prepared`` result the group was fetched with to skip a second scan.
    Raises ``AgentLedgerError`` ``group_mismatch`` if ``group`` is not that group,
    ``prepared_mismatch`` if ``prepared`` is another proposal's.
    """
    pre = prepared if prepared is not None else prepare(proposal, personal=personal, detectors=detectors,
                                                        identity_key=identity_key)
    if pre.proposal != proposal:
        raise AgentLedgerError("decide got the preparation of another proposal", code="prepared_mismatch")
    trace = list(pre.trace)
    if proposal.scope.tenant != tenant:
        rule = RuleFired(rule="tenant", outcome="reject",
                         reason="scope_tenant_mismatch: the scope names another tenant")
        return MemoryDecided(proposal.proposal_id, "reject", "scope_tenant_mismatch", [rule])
    if pre.verdict is not None:
        return MemoryDecided(proposal.proposal_id, pre.verdict[0], pre.verdict[1], trace)
    if group.group_key != pre.group_key:
        raise AgentLedgerError(f"decide got group {group.group_key}, the proposal needs {pre.group_key}",
                               code="group_mismatch")
    observed = proposal.observed_at or now
    if observed > now + SKEW:
        trace.append(RuleFired(rule="ttl", outcome="reject", reason="observed_in_future: observed_at after now"))
        return MemoryDecided(proposal.proposal_id, "reject", "observed_in_future", trace)
    record = _record(pre, tenant, event_id, observed, trace)
    if pre.quarantine is not None:
        trace.append(RuleFired(rule="group", outcome="quarantine", reason="held for review, never read"))
        return MemoryDecided(proposal.proposal_id, "quarantine", pre.quarantine, trace, record)
    before = resolve(group)
    after = resolve(group.with_entry(GroupEntry(record, "write", "", proposal.proposal_id)))
    action, reason, displaced = _action(record, before, after, group)
    record = msgspec.structs.replace(record, supersedes=displaced)
    trace.append(RuleFired(rule="group", outcome=action, reason=_explain(reason, displaced, after[record.record_id])))
    return MemoryDecided(proposal.proposal_id, action, reason, trace, record)


def _record(pre: Prepared, tenant: str, event_id: str, observed: datetime,
            trace: list[RuleFired]) -> MemoryRecordBody:
    p, rule = pre.proposal, KIND_RULES[pre.kind]
    expires = observed + rule.expires if rule.expires else None
    review = observed + rule.review if rule.review else None
    if pre.authority <= LOW_AUTHORITY:
        review = min(review or observed + INFERENCE_REVIEW, observed + INFERENCE_REVIEW)
    if expires:
        trace.append(RuleFired(rule="ttl", outcome="expires",
                               reason=f"{pre.kind}: {_span(expires - observed)} after observed"))
    elif review:
        trace.append(RuleFired(rule="ttl", outcome="review",
                               reason=f"review {_span(review - observed)} after observed"))
    else:
        trace.append(RuleFired(rule="ttl", outcome="none", reason="until revoked or superseded"))
    return MemoryRecordBody(
        record_id=record_id_for(tenant, p.proposal_id), key=pre.key, kind=pre.kind, scope=pre.scope,
        source=p.source, authority=pre.authority, sensitivity=pre.sensitivity, observed_at=observed,
        value=p.value if p.sealed is None else None, sealed=p.sealed, value_digest=pre.value_digest,
        subject_version=p.subject_version,
        specificity=specificity_of(pre.scope), confidence=p.confidence, expires_at=expires, review_at=review,
        proposal_event=event_id, origin_task=p.origin_task, evidence=list(p.evidence),
        promoted_from=list(p.episodes))


def _action(record: MemoryRecordBody, before: dict[str, Resolved], after: dict[str, Resolved],
            group: KeyGroup) -> tuple[DecisionAction, str, list[str]]:
    """What the new record did to its group: the action, its reason, the records it displaced."""
    rid = record.record_id
    mine = after[rid]
    if mine.status == "quarantined":
        return "quarantine", mine.reason, []
    if mine.status != "active":
        if mine.reason.startswith("merged_into:"):
            return "merge", "same_value", []
        # Kept as history, not active: outranked, a revoked value, or revoked already.
        return "write", "outranked" if mine.reason.startswith("outranked") else (mine.reason or mine.status), []
    # What was active, or held in a tie, and is not any more (a newer record settles a tie too).
    displaced = sorted(r for r, st in before.items()
                       if (st.status == "active" or (st.status == "quarantined" and st.reason == TIE_REASON))
                       and r in after and after[r].status == "superseded")
    if any(after[r].superseded_by == rid and after[r].reason.startswith("merged_into:") for r in displaced):
        return "merge", "same_value", displaced
    if displaced:
        return "supersede", _why_supersede(record, mine, displaced, before, group), displaced
    return "write", "new_key", []


def _why_supersede(record: MemoryRecordBody, mine: Resolved, displaced: list[str], before: dict[str, Resolved],
                   group: KeyGroup) -> str:
    """Higher authority, else a newer subject version, else a newer observation of the same version."""
    if any(before[r].authority < mine.authority for r in displaced):
        return "higher_authority"
    if any(group.entries[r].record.subject_version < record.subject_version for r in displaced
           if r in group.entries):
        return "newer_subject_version"
    return "newer_observation"


def _explain(reason: str, displaced: list[str], mine: Resolved) -> str:
    if reason == TIE_REASON:
        return (f"{reason}: same authority and subject version (observed at the same time, or both "
                "claiming that version), another value")
    if displaced:
        return f"{reason}: " + ", ".join(displaced)
    return f"{reason}: {mine.status}"


def with_sealed(decision: MemoryDecided, sealed: Sealed) -> MemoryDecided:
    """The decision with its record's value replaced by the sealed form (what is appended)."""
    if decision.record is None:
        return decision
    record = msgspec.structs.replace(decision.record, value=None, sealed=sealed)
    return msgspec.structs.replace(decision, record=record)


def _span(delta: timedelta) -> str:
    """A lifetime as a reader says it: ``2 days``, ``36 hours``."""
    hours = delta.total_seconds() / 3600
    return f"{hours / 24:g} days" if hours % 24 == 0 else f"{hours:g} hours"
