"""Consolidation: do updates of one attribute end with the right value active?

A corpus of update chains (``chains``): each chain is what one user's attribute goes through
(an employer, a home city, an e-mail address, a phone number, a favourite colour...), two to
five observations from mixed authorities (the user, runtime evidence, tool output, a model's
inference), sometimes the same value said twice, in three shapes:

- ``keyed_versioned``: an explicit key and a subject version that grows with each update;
- ``keyed``: an explicit key, no version (every record at the default version 1);
- ``unkeyed``: no key, the value as a person says it ("my employer is Acme", "I now work at
  Globex", "employer: Initech", in a few languages), so the key must come from the attribute;
  an attribute a person holds several values of (e-mail, phone, allergy) keeps every distinct
  value said, each active once.

Every chain has its own observation times; all proposals of all chains are decided in one
shuffled order through the pure core (``prepare`` / ``decide`` / the reducer), personal values
sealed as the writer would (two sealings of one value differ). A chain is right when exactly one
of its records is active and it holds the chain's expected value: the newest observation from the
highest authority in the chain (``expected``). ``accuracy`` gives the share per shape.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from agentledger.bench.common import emit
from agentledger.contracts import events as ev
from agentledger.core.memory.authority import AUTHORITY, record_id_for
from agentledger.core.memory.decide import decide, prepare, with_sealed
from agentledger.core.memory.keys import MULTI_VALUED
from agentledger.core.memory.state import MemoryState, apply_memory_event

SHAPES = ("keyed_versioned", "keyed", "unkeyed")
TENANT = "consol"
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
SOURCES = ("user_confirmed", "runtime_evidence", "tool_output", "model_inference")
CHAINS_PER_SHAPE = 40
TARGET = 0.95

# Per attribute: the values a chain moves through, and how a person states one (``{v}``).
ATTRIBUTES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "employer": (
        ("Acme", "Globex", "Initech", "Umbrella", "Hooli", "Vandelay Industries", "Soylent", "Wonka"),
        ("my employer is {v}", "I now work at {v}", "employer: {v}", "I work for {v}",
         "My current employer is {v}", "The user works at {v}", "ich arbeite bei {v}",
         "je travaille chez {v}")),
    "home_city": (
        ("Berlin", "Lyon", "Osaka", "Porto", "Austin", "Leeds", "Krakow", "Valencia"),
        ("I live in {v}", "my home city is {v}", "city: {v}", "I'm now based in {v}", "I'm based in {v}",
         "ich wohne in {v}", "j'habite à {v}", "我住在{v}")),
    "email_address": (
        ("ana.ruiz@mail.test", "ana@work.test", "a.ruiz@home.test", "ruiz.ana@post.test",
         "ana.r@inbox.test"),
        ("my email is {v}", "email: {v}", "my new e-mail address is {v}", "reach me at {v}", "{v}",
         "E-Mail: {v}")),
    "phone_number": (
        ("+44 20 7946 0123", "+49 30 90182034", "+33 1 42 68 53 00", "+1 415 555 0134"),
        ("my phone number is {v}", "phone: {v}", "my mobile is {v}", "call me on {v}", "{v}")),
    "allergy": (
        ("peanuts", "shellfish", "penicillin", "pollen", "cats"),
        ("Allergy: {v}", "I'm allergic to {v}", "allergies: {v}")),
    "favourite_colour": (
        ("blue", "green", "ochre", "teal", "crimson"),
        ("my favourite colour is {v}", "favourite colour: {v}", "My favourite colour is now {v}")),
}


@dataclass(frozen=True)
class Step:
    """One observation of a chain: what is said, by whom, when, in which version."""

    proposal_id: str
    value: str
    text: str
    source: str
    observed_at: datetime
    subject_version: int


@dataclass(frozen=True)
class Chain:
    shape: str
    user: str
    attribute: str
    steps: tuple[Step, ...]

    def expected(self) -> str:
        """The newest value from the highest authority in the chain."""
        top = max(AUTHORITY[s.source] for s in self.steps)
        return max((s for s in self.steps if AUTHORITY[s.source] == top), key=lambda s: s.observed_at).value

    def proposals(self) -> list[ev.MemoryProposed]:
        keyed = self.shape != "unkeyed"
        scope = ev.Scope(level="user", tenant=TENANT, id=self.user)
        return [ev.MemoryProposed(
            proposal_id=s.proposal_id, kind="fact", scope=scope,
            source=ev.MemorySource(kind=s.source, producer="bench"),
            value=s.value if keyed else s.text, key=self.attribute if keyed else None,
            subject_version=s.subject_version, observed_at=s.observed_at) for s in self.steps]


def chains(rng: random.Random, per_shape: int = CHAINS_PER_SHAPE) -> list[Chain]:
    """``per_shape`` chains of each shape; each user holds one chain of every attribute."""
    out: list[Chain] = []
    names = sorted(ATTRIBUTES)
    for shape in SHAPES:
        for i in range(per_shape):
            attribute = names[i % len(names)]
            values, templates = ATTRIBUTES[attribute]
            start = NOW - timedelta(days=rng.randint(30, 300), minutes=rng.randint(0, 1439))
            steps: list[Step] = []
            at = start
            for n in range(rng.randint(2, 5)):
                repeat = bool(steps) and rng.random() < 0.2  # the same sentence said again
                value = steps[-1].value if repeat else rng.choice(values)
                text = steps[-1].text if repeat else rng.choice(templates).format(v=value)
                at += timedelta(hours=rng.randint(1, 96), minutes=rng.randint(1, 59))
                steps.append(Step(f"{shape}-{i}-{n}", value, text, rng.choice(SOURCES), at,
                                  n + 1 if shape == "keyed_versioned" else 1))
            out.append(Chain(shape, f"{shape}-{i // len(names)}", attribute, tuple(steps)))
    return out


def decide_all(proposals: Sequence[ev.MemoryProposed], rng: random.Random) -> MemoryState:
    """Decide and fold ``proposals`` in the given order as the service would, sealing personal
    values as the writer does (a fresh nonce and ciphertext each time)."""
    state = MemoryState()
    common: dict[str, Any] = {"tenant": TENANT, "task_id": ev.MEMORY_TASK, "producer": "bench",
                              "occurred_at": NOW, "schema_version": 1}
    seq = 0
    for p in proposals:
        pre = prepare(p)
        pe = ev.MemoryProposedEvent(event_id=f"p:{p.proposal_id}", payload=p, **common)
        d = decide(p, tenant=TENANT, event_id=pe.event_id, group=state.group_for(pre.group_key), now=NOW,
                   prepared=pre)
        if d.record is not None and d.record.sensitivity == "personal":
            d = with_sealed(d, ev.Sealed(subject=p.scope.id or "", key_id="k1", nonce=rng.randbytes(12).hex(),
                                         ciphertext=rng.randbytes(24).hex()))
        de = ev.MemoryDecidedEvent(event_id=f"d:{p.proposal_id}", payload=d, **common)
        for event in (pe, de):
            seq += 1
            apply_memory_event(state, event, seq)
    return state


def correct(chain: Chain, state: MemoryState) -> bool:
    """Exactly one of the chain's records is active, and it holds the expected value; for an
    attribute a person holds several values of (``MULTI_VALUED``) said without a key, exactly
    one record of every distinct value is active instead (a second address is kept)."""
    value_of = {record_id_for(TENANT, s.proposal_id): s.value for s in chain.steps}
    active = []
    for rid, value in value_of.items():
        gk = state.record_groups.get(rid)
        row = state.rows.get(gk, {}).get(rid) if gk is not None else None
        if row is not None and row.status == "active":
            active.append(value)
    if chain.shape == "unkeyed" and chain.attribute in MULTI_VALUED:
        return sorted(active) == sorted({s.value for s in chain.steps})
    return active == [chain.expected()]


def accuracy(seed: int = 22, per_shape: int = CHAINS_PER_SHAPE) -> dict[str, float]:
    """Per shape, the share of chains whose final active value is the expected one."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible corpus, not a secret
    corpus = chains(rng, per_shape)
    proposals = [p for c in corpus for p in c.proposals()]
    rng.shuffle(proposals)
    state = decide_all(proposals, rng)
    return {shape: sum(correct(c, state) for c in corpus if c.shape == shape) / per_shape for shape in SHAPES}


def bench_consolidation(per_shape: int = CHAINS_PER_SHAPE) -> None:
    """One figure per shape: accuracy over ``per_shape`` chains, target >= 0.95."""
    for shape, value in accuracy(per_shape=per_shape).items():
        emit(f"consolidation_{shape}", value, "ratio", None, None, target=f">= {TARGET}", chains=per_shape)
