"""Conversations for the evidence-recall bench: a seeded generator, a LoCoMo-like loader, BM25.

The recall bench (``bench/recall.py``) asks, for each question of a long multi-session
conversation, whether what ``memory.read`` and ``context.build`` return within a token
budget holds the turns that answer it (its *evidence*, as ``dia_id`` like ``D3:7``), and
compares both with Okapi BM25 over the same turns packed into the same budget. Everything
here is pure (no I/O but reading the user's file), so the test can check it alone.

The generator writes what makes memory retrieval hard: facts that change over time (a move,
a new job: the older turn answers "where did she live before?"), facts whose answer is the
session date, links between sessions (a sister's city in one, a trip to see her in another),
questions with no answer in the conversation, and filler turns around them. Same seed, same
corpus: the figures of two runs are comparable.

The file format is the common LoCoMo-like JSON: a list of samples, each with
``conversation`` holding ``speaker_a``/``speaker_b`` (optional), ``session_N`` lists of turns
``{speaker, dia_id, text}`` and ``session_N_date_time``, and ``qa`` items ``{question,
answer, evidence: [dia_id...], category}`` (category a name or LoCoMo's number).
"""

from __future__ import annotations

import json
import math
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agentledger.models import tokens

CATEGORIES = ("single-hop", "multi-hop", "temporal", "open-domain", "adversarial")
# LoCoMo's numbering of its categories.
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
# The generator's sessions start here (fixed: same seed, same dates), a week apart.
FIRST_SESSION = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    session: int
    date: datetime

    @property
    def line(self) -> str:
        """The turn as every retriever stores it: ``[Speaker] text``. Not ``Speaker: text``: the
        memory policy reads a leading ``word:`` as the record's key (``core.memory.keys``), and
        every turn of a speaker would then be one key, each superseding the last."""
        return f"[{self.speaker}] {self.text}"


@dataclass(frozen=True)
class Question:
    question: str
    answer: str
    evidence: tuple[str, ...]
    category: str


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]

    def sessions(self) -> list[list[Turn]]:
        out: dict[int, list[Turn]] = {}
        for t in self.turns:
            out.setdefault(t.session, []).append(t)
        return [out[k] for k in sorted(out)]


# ---- the generator ------------------------------------------------------------------------------

NAMES = ["Alice", "Bruno", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas",
         "Kaveh", "Lucia", "Mateo", "Nadia", "Oskar", "Priya", "Quentin", "Rosa", "Samir", "Tamsin"]
CITIES = ["Lisbon", "Porto", "Valencia", "Krakow", "Ghent", "Tampere", "Bologna", "Lyon", "Utrecht", "Graz",
          "Bergen", "Cork", "Seville", "Brno", "Turku", "Malmo", "Leipzig", "Nantes", "Aarhus", "Split"]
COMPANIES = ["Northwind", "Bluefin Labs", "Corvid Systems", "Helix Foods", "Larkspur Bank", "Mosaic Media",
             "Orchard Robotics", "Pinecone Studio", "Quarry Logistics", "Tidewater Energy"]
ROLES = ["data analyst", "nurse", "product designer", "civil engineer", "teacher", "backend developer"]
PETS = ["cat", "dog", "parrot", "rabbit", "tortoise", "ferret"]
PET_NAMES = ["Biscuit", "Pepper", "Mochi", "Zorro", "Clementine", "Waffles", "Juniper", "Tofu", "Marble"]
HOBBIES = [("bouldering", "climbing walls"), ("pottery", "working with clay"), ("birdwatching", "spotting birds"),
           ("sourdough baking", "baking bread"), ("sea kayaking", "paddling along the coast"),
           ("chess", "studying openings"), ("watercolour painting", "painting landscapes")]
RELATIVES = ["sister", "brother", "cousin", "aunt"]
INSTRUMENTS = ["guitar", "violin", "cello", "ukulele", "keyboard"]
COLOURS = ["red", "green", "teal", "black", "amber", "white"]
TOPICS = ["the weather", "a documentary", "the football match", "a new cafe", "the train strike", "a podcast",
          "the farmers market", "a long walk", "the neighbours", "a board game night", "a cooking show",
          "the traffic", "a museum visit", "a novel", "the gym", "a concert", "the garden", "a film festival"]
ADJECTIVES = ["quiet", "busy", "strange", "lovely", "tiring", "relaxing", "noisy", "rainy", "sunny", "odd"]
FILLER = [
    "How was your week? Mine was {adj}, mostly thinking about {topic}.",
    "Honestly it was {adj}. We ended up talking about {topic} for hours.",
    "Ha, that sounds {adj}. Did you hear anything new about {topic}?",
    "Not much, a {adj} few days. Someone at lunch kept bringing up {topic}.",
    "I saw something about {topic} yesterday, it was {adj} in a good way.",
    "That reminds me of {topic}, which was {adj} last time I checked.",
    "Same here, a {adj} stretch. I keep meaning to look into {topic}.",
    "Oh nice. My weekend was {adj}; I spent part of it on {topic}.",
]


def _fact_turns(rng: random.Random, person: str, other: str, sessions: int) -> tuple[list[tuple[int, str, str]],
                                                                                       list[dict[str, Any]]]:
    """The fact turns of one person (session, speaker, text, tagged by a local name) and the
    questions over them, evidence as those local names (resolved to dia_ids later)."""
    turns: list[tuple[int, str, str]] = []
    tags: dict[str, int] = {}
    qs: list[dict[str, Any]] = []

    def say(tag: str, session: int, text: str) -> None:
        tags[tag] = len(turns)
        turns.append((session, person, text))

    def sess(lo: float, hi: float) -> int:
        return rng.randrange(int(lo * sessions), max(int(lo * sessions) + 1, int(hi * sessions)))

    c1, c2, c3 = rng.sample(CITIES, 3)
    s1, s2 = sess(0, 0.3), sess(0.5, 0.9)
    say("home1", s1, f"I moved to {c1} last month, the flat is small but the light is great.")
    say("home2", s2, f"Big news, we relocated to {c2}, my partner got a transfer.")
    qs += [dict(q=f"Where does {person} live now?", a=c2, ev=["home2"], cat="single-hop"),
           dict(q=f"Where did {person} live before moving to {c2}?", a=c1, ev=["home1"], cat="temporal"),
           dict(q=f"When did {person} relocate?", a="@home2", ev=["home2"], cat="temporal")]
    j1, j2 = rng.sample(COMPANIES, 2)
    role = rng.choice(ROLES)
    s3, s4 = sess(0, 0.4), sess(0.6, 1.0)
    say("job1", s3, f"I started a job at {j1} as a {role}, the team seems friendly.")
    say("job2", s4, f"I handed in my notice and joined {j2}; same kind of work, better commute.")
    qs += [dict(q=f"Which company does {person} work for at the moment?", a=j2, ev=["job2"], cat="single-hop"),
           dict(q=f"What was {person}'s first employer mentioned in the conversation?", a=j1, ev=["job1"],
                cat="temporal"),
           dict(q=f"What is {person}'s profession?", a=role, ev=["job1"], cat="single-hop")]
    pet, pet_name = rng.choice(PETS), rng.choice(PET_NAMES)
    s5 = sess(0.1, 0.9)
    say("pet", s5, f"We adopted a {pet} from the shelter and named it {pet_name}.")
    qs += [dict(q=f"What is the name of {person}'s {pet}?", a=pet_name, ev=["pet"], cat="single-hop"),
           dict(q=f"When did {person} adopt the {pet}?", a="@pet", ev=["pet"], cat="temporal"),
           dict(q=f"Did {person} adopt the {pet} before or after moving to {c2}?",
                a="before" if s5 < s2 else "after" if s5 > s2 else "in the same week", ev=["pet", "home2"],
                cat="multi-hop")]
    hobby, doing = rng.choice(HOBBIES)
    s6 = sess(0, 1.0)
    say("hobby", s6, f"Lately I've been getting into {hobby}; I love {doing} after work.")
    qs += [dict(q=f"What might {person} enjoy doing on a free evening?", a=hobby, ev=["hobby"],
                cat="open-domain")]
    rel, rel_name = rng.choice(RELATIVES), rng.choice([n for n in NAMES if n not in (person, other)])
    s7, s8 = sess(0, 0.5), sess(0.5, 1.0)
    say("rel", s7, f"My {rel} {rel_name} lives in {c3}, we talk on the phone every Sunday.")
    say("trip", s8, f"I booked tickets to visit {rel_name} next month, I can't wait.")
    qs += [dict(q=f"Which city is {person} travelling to next month?", a=c3, ev=["rel", "trip"], cat="multi-hop"),
           dict(q=f"Where does {person}'s {rel} live?", a=c3, ev=["rel"], cat="single-hop")]
    instrument, colour = rng.choice(INSTRUMENTS), rng.choice(COLOURS)
    s9 = sess(0, 1.0)
    say("music", s9, f"I finally bought a {colour} {instrument} and I practise scales every morning.")
    qs += [dict(q=f"What colour is {person}'s {instrument}?", a=colour, ev=["music"], cat="single-hop"),
           dict(q=f"What could {person} play at a party?", a=instrument, ev=["music"], cat="open-domain")]
    no_pet = rng.choice([p for p in PETS if p != pet])
    no_rel = rng.choice([r for r in RELATIVES if r != rel])
    qs += [dict(q=f"What is the name of {person}'s {no_pet}?", a="", ev=[], cat="adversarial"),
           dict(q=f"Where does {person}'s {no_rel} live?", a="", ev=[], cat="adversarial")]
    for q in qs:
        q["ev"] = [tags[t] for t in q["ev"]]
        if q["a"].startswith("@"):
            q["a"] = tags[q["a"][1:]]
    return turns, qs


def generate(seed: int = 20261203, conversations: int = 10, sessions: int = 20, turns_per_session: int = 15,
             questions: int = 30) -> list[Conversation]:
    """``conversations`` two-person conversations of ``sessions`` sessions (a week apart) of
    ``turns_per_session`` turns, each with up to ``questions`` questions (a seeded sample of
    those its facts allow). The same arguments give the same corpus."""
    rng = random.Random(seed)  # noqa: S311 - reproducible bench data, not a secret
    out = []
    for c in range(conversations):
        a, b = rng.sample(NAMES, 2)
        facts_a, qs_a = _fact_turns(rng, a, b, sessions)
        facts_b, qs_b = _fact_turns(rng, b, a, sessions)
        # Both may have adopted a cat named Mochi: draw again, so a turn's text names one turn.
        while {f[2] for f in facts_a} & {f[2] for f in facts_b}:
            facts_b, qs_b = _fact_turns(rng, b, a, sessions)
        facts = facts_a + facts_b
        raw_qs = [(q, 0) for q in qs_a] + [(q, len(facts_a)) for q in qs_b]
        by_session: dict[int, list[int]] = {}
        for i, (s, _, _) in enumerate(facts):
            by_session.setdefault(s, []).append(i)
        used: set[str] = set()
        placed: dict[int, Turn] = {}
        all_turns: list[Turn] = []
        for s in range(sessions):
            date = FIRST_SESSION + timedelta(days=7 * s, hours=rng.randrange(0, 10))
            mine = by_session.get(s, [])
            n = max(turns_per_session, len(mine))
            slots = sorted(rng.sample(range(n), len(mine)))
            fact_at = dict(zip(slots, mine, strict=True))
            for i in range(n):
                if i in fact_at:
                    _, speaker, text = facts[fact_at[i]]
                else:
                    speaker = (a, b)[i % 2]
                    text = _filler(rng, used)
                turn = Turn(f"D{s + 1}:{i + 1}", speaker, text, s + 1, date)
                used.add(text)
                if i in fact_at:
                    placed[fact_at[i]] = turn
                all_turns.append(turn)
        qs = []
        for q, offset in raw_qs:
            ev_turns = [placed[offset + e] for e in q["ev"]]
            answer = q["a"] if isinstance(q["a"], str) else placed[offset + q["a"]].date.strftime("%d %B %Y")
            qs.append(Question(q["q"], answer, tuple(t.dia_id for t in ev_turns), q["cat"]))
        rng.shuffle(qs)
        out.append(Conversation(f"gen-{seed}-{c}", tuple(all_turns), tuple(qs[:questions])))
    return out


def _filler(rng: random.Random, used: set[str]) -> str:
    """A chit-chat turn not yet said in this conversation (so a turn's text names one turn)."""
    while True:
        text = rng.choice(FILLER).format(adj=rng.choice(ADJECTIVES), topic=rng.choice(TOPICS))
        if text not in used:
            return text
        # Every combination said: make it distinct rather than loop forever.
        text = f"{text} Anyway, {rng.choice(TOPICS)} again."
        if text not in used:
            return text


# ---- the loader ---------------------------------------------------------------------------------

_SESSION = re.compile(r"^session_(\d+)$")
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%d %H:%M",
                 "%Y-%m-%d")


def parse_date(text: str) -> datetime:
    """A session date as LoCoMo writes it (``1:56 pm on 8 May, 2023``) or ISO; UTC when no zone."""
    text = text.strip()
    try:
        d = datetime.fromisoformat(text)
    except ValueError:
        for fmt in _DATE_FORMATS:
            try:
                d = datetime.strptime(text, fmt)
                break
            except ValueError:
                continue
        else:
            raise ValueError(f"unknown session date format: {text!r}") from None
    return d if d.tzinfo else d.replace(tzinfo=UTC)


def _category(value: Any) -> str:
    if isinstance(value, int) and value in LOCOMO_CATEGORIES:
        return LOCOMO_CATEGORIES[value]
    if isinstance(value, str) and value.isdigit() and int(value) in LOCOMO_CATEGORIES:
        return LOCOMO_CATEGORIES[int(value)]
    name = str(value).strip().lower().replace("_", "-")
    return "adversarial" if name in ("unanswerable", "adversarial/unanswerable") else name


def load(path: str | Path) -> list[Conversation]:
    """The conversations of a LoCoMo-like JSON file (see the module docstring)."""
    samples = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(samples, dict):
        samples = [samples]
    out = []
    for n, sample in enumerate(samples):
        conv = sample["conversation"]
        numbers = sorted(int(m.group(1)) for k in conv if (m := _SESSION.match(k)))
        turns = []
        for s in numbers:
            date = parse_date(conv[f"session_{s}_date_time"])
            turns += [Turn(t["dia_id"], t["speaker"], t["text"], s, date) for t in conv[f"session_{s}"]]
        known = {t.dia_id for t in turns}
        qs = []
        for item in sample.get("qa", []):
            evidence = tuple(e.strip() for e in item.get("evidence", []) if e.strip() in known)
            answer = item.get("answer", item.get("adversarial_answer", ""))
            qs.append(Question(item["question"], str(answer), evidence, _category(item.get("category", ""))))
        out.append(Conversation(str(sample.get("sample_id", f"sample-{n}")), tuple(turns), tuple(qs)))
    return out


# ---- BM25 and recall ----------------------------------------------------------------------------

_WORD = re.compile(r"\w+", re.UNICODE)


def words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


class BM25:
    """Okapi BM25 (k1 1.2, b 0.75, the Lucene idf ``ln(1 + (N - df + .5) / (df + .5))``) over
    ``docs``; ``rank(query)`` gives document indexes, best first, ties by position."""

    def __init__(self, docs: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.tf = [Counter(words(d)) for d in docs]
        self.len = [sum(tf.values()) for tf in self.tf]
        self.avg = sum(self.len) / max(len(docs), 1)
        df: Counter[str] = Counter()
        for tf in self.tf:
            df.update(tf.keys())
        n = len(docs)
        self.idf = {w: math.log(1 + (n - f + 0.5) / (f + 0.5)) for w, f in df.items()}

    def scores(self, query: str) -> list[float]:
        q = set(words(query))
        out = []
        for tf, length in zip(self.tf, self.len, strict=True):
            s = 0.0
            norm = self.k1 * (1 - self.b + self.b * length / (self.avg or 1))
            for w in q:
                f = tf.get(w, 0)
                if f:
                    s += self.idf[w] * f * (self.k1 + 1) / (f + norm)
            out.append(s)
        return out

    def rank(self, query: str) -> list[int]:
        scores = self.scores(query)
        return sorted((i for i, s in enumerate(scores) if s > 0), key=lambda i: (-scores[i], i))


def pack(texts: Sequence[str], order: Sequence[int], budget: int, encoding: str = "cl100k_base") -> list[int]:
    """Greedy packing: in ``order``, take each text whose tokens (plus one for the separating
    newline) still fit in ``budget``; one that does not is skipped, smaller ones after it may fit."""
    taken, spent = [], 0
    for i in order:
        cost = tokens.count(texts[i], encoding) + 1
        if spent + cost <= budget:
            taken.append(i)
            spent += cost
    return taken


def recall(evidence: Sequence[Turn], returned: str) -> float:
    """The share of ``evidence`` whose turn text is in ``returned`` (what a retriever gave back)."""
    return sum(t.text in returned for t in evidence) / len(evidence)
