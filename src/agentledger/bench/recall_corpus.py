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

from agentledger.bench import chitchat
from agentledger.core.memory.keys import canonical_key
from agentledger.models import tokens

CATEGORIES = ("single-hop", "multi-hop", "temporal", "open-domain", "adversarial")
# LoCoMo's numbering of its categories.
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
# The generator's first session (fixed: same seed, same dates).
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
        """The turn as every retriever stores it, the obvious way: ``Speaker: text``. A speaker's
        label is no attribute (``core.memory.keys``), so each turn keeps its own record."""
        return f"{self.speaker}: {self.text}"


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
CITIES = chitchat.D_CITIES
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
# One-off events, told on the day (the question names the date, or "last week").
EVENTS = [("ran a half marathon", "I ran my first half marathon, my legs are still jelly."),
          ("passed the driving test", "I passed my driving test at the second attempt!"),
          ("sprained an ankle", "I sprained my ankle on the stairs, so I'm hobbling around."),
          ("gave a talk at a conference", "I gave my first conference talk and nobody fell asleep."),
          ("got engaged", "We got engaged on the beach, I'm still smiling."),
          ("won a pub quiz", "Our team won the pub quiz thanks to one question about volcanoes."),
          ("had a tooth out", "I had a wisdom tooth pulled, my face looks like a hamster's."),
          ("planted an apple tree", "We planted an apple tree in the garden, fingers crossed it survives.")]
# Each fact is said in one of several ways, so a fact's words do not give its template away.
SAY = {
    "home1": ["I moved to {c} last month, the flat is small but the light is great.",
              "We signed the lease on a place in {c}, unpacking is taking forever.",
              "So I'm settled in {c} now, the new flat even has a balcony."],
    "home2": ["Big news, we relocated to {c}, my partner got a transfer.",
              "We packed up everything and moved again, this time to {c}.",
              "Writing from our new place in {c}, the move went fine in the end."],
    "home3": ["Guess what, another move: we bought a small house in {c}.",
              "We're in {c} now, hopefully for good this time.",
              "Last boxes unpacked in {c}, I never want to move again."],
    "job1": ["I started a job at {j} as a {r}, the team seems friendly.",
             "First week as a {r} at {j} done, lots of names to remember.",
             "{j} hired me as a {r}, I start on Monday."],
    "job2": ["I handed in my notice and joined {j}; same kind of work, better commute.",
             "New chapter: I work for {j} now, the office has a rooftop.",
             "I switched employers, it's {j} from now on."],
    "pet": ["We adopted a {p} from the shelter and named it {n}.",
            "Meet {n}, our new {p}; the shelter said nobody wanted him.",
            "We brought home a {p} called {n} last weekend."],
    "vet": ["{n} had to go to the vet, a sore paw, poor thing.",
            "Took {n} for his jabs, he sulked all evening.",
            "{n} swallowed a hair tie, so we spent the night at the emergency vet."],
    "hobby1": ["Lately I've been getting into {h}; I love {d} after work.",
               "I signed up for a {h} course, {d} is oddly calming."],
    "hobby2": ["These days every free evening goes to {d}, I'm hooked on {h}.",
               "I dropped my old hobby, it's all {h} now, {d} twice a week."],
    "rel": ["My {r} {n} lives in {c}, we talk on the phone every Sunday.",
            "{n}, my {r}, has a flat in {c} right by the market."],
    "trip": ["I booked tickets to visit {n} next month, I can't wait.",
             "Train tickets are sorted, I'm going to see {n} in a few weeks."],
    "music": ["I finally bought a {col} {i} and I practise scales every morning.",
              "My new {i} arrived, it's {col} and sounds amazing."],
    "event": ["{e}"],
}
ECHO = {  # the other speaker answering a fact: its words, none of its answer
    "home2": ["{c}! How are you finding it so far?", "Wait, {c}? That's so far from here."],
    "home3": ["A house in {c}, that's huge, congratulations.", "Good luck in {c}, send pictures."],
    "job2": ["Is {j} treating you better?", "I hope {j} pays more at least."],
    "pet": ["{n} is such a good name for a {p}.", "Send me photos of {n}, please."],
    "trip": ["Say hi to {n} from me.", "How long are you staying with {n}?"],
}


def session_dates(rng: random.Random, sessions: int) -> list[datetime]:
    """Session dates 2 to 15 days apart (not a fixed week), at a random hour."""
    out, day = [], FIRST_SESSION
    for _ in range(sessions):
        out.append(day + timedelta(hours=rng.randrange(0, 11), minutes=rng.randrange(0, 60)))
        day += timedelta(days=rng.randrange(2, 16))
    return out


def _day(d: datetime) -> str:
    return f"{d.day} {d:%B %Y}"


class _Facts:
    """One person's fact turns (session, speaker, text), tagged by a local name, and the
    questions over them (evidence as those names, resolved to dia_ids once placed)."""

    def __init__(self, rng: random.Random, person: str, other: str, dates: Sequence[datetime]) -> None:
        self.rng, self.person, self.other, self.dates = rng, person, other, dates
        self.turns: list[tuple[int, str, str]] = []
        self.tags: dict[str, int] = {}
        self.qs: list[dict[str, Any]] = []
        self.holdings: dict[str, str] = {}  # pet, instrument, first employer, homes ("|"-joined)

    def sess(self, lo: float, hi: float) -> int:
        n = len(self.dates)
        return self.rng.randrange(int(lo * n), max(int(lo * n) + 1, int(hi * n)))

    def say(self, tag: str, session: int, **slots: str) -> int:
        self.tags[tag] = len(self.turns)
        self.turns.append((session, self.person, self.rng.choice(SAY[tag]).format(**slots)))
        if tag in ECHO and self.rng.random() < 0.7:
            self.turns.append((session, self.other, self.rng.choice(ECHO[tag]).format(**slots)))
        return session

    def ask(self, q: str, a: str, ev: Sequence[str], cat: str) -> None:
        self.qs.append(dict(q=q, a=a, ev=list(ev), cat=cat))


def _fact_turns(rng: random.Random, person: str, other: str, dates: Sequence[datetime],
                other_has: dict[str, str]) -> _Facts:
    """The facts of one person; ``other_has``: the other speaker's pet and instrument (an
    adversarial question asks the wrong one of them about a thing only this one has)."""
    f = _Facts(rng, person, other, dates)
    c2 = _home_and_work(f)
    _life(f, c2, other_has)
    return f


def _home_and_work(f: _Facts) -> str:
    """Three homes and two employers, each later one replacing the one before; returns the
    second city (other questions date things against that move)."""
    rng, p, dates = f.rng, f.person, f.dates
    c1, c2, c3 = rng.sample(CITIES, 3)
    f.holdings["homes"] = "|".join((c1, c2, c3))
    f.say("home1", f.sess(0, 0.25), c=c1)
    s2 = f.say("home2", f.sess(0.35, 0.6), c=c2)
    s3 = f.say("home3", f.sess(0.7, 1.0), c=c3)
    mid = dates[s2] + (dates[s3] - dates[s2]) / 2
    f.ask(f"Where does {p} live now?", c3, ["home3"], "temporal")
    f.ask(f"Where did {p} live before moving to {c3}?", c2, ["home2"], "temporal")
    f.ask(f"When did {p} move to {c2}?", _day(dates[s2]), ["home2"], "temporal")
    f.ask(f"Which city did {p} live in first?", c1, ["home1"], "temporal")
    f.ask(f"Which city was {p} living in on {_day(mid)}?", c2, ["home2"], "temporal")
    f.ask(f"Which cities has {p} lived in?", f"{c1}, {c2}, {c3}", ["home1", "home2", "home3"], "multi-hop")
    j1, j2 = rng.sample(COMPANIES, 2)
    role = rng.choice(ROLES)
    f.say("job1", f.sess(0, 0.4), j=j1, r=role)
    f.say("job2", f.sess(0.55, 1.0), j=j2)
    f.ask(f"Which company does {p} work for at the moment?", j2, ["job2"], "temporal")
    f.ask(f"What was {p}'s first employer mentioned in the conversation?", j1, ["job1"], "temporal")
    f.ask(f"What is {p}'s profession?", role, ["job1"], "single-hop")
    f.holdings["first_employer"] = j1
    return c2


def _life(f: _Facts, c2: str, other_has: dict[str, str]) -> None:
    """A pet and its vet, two hobbies, a relative and a trip, an instrument, two events, and
    the questions the wrong person or nobody can answer."""
    rng, p, other, dates = f.rng, f.person, f.other, f.dates
    s2 = f.turns[f.tags["home2"]][0]
    c4 = rng.choice([c for c in CITIES if c not in f.holdings["homes"].split("|")])
    pet, pet_name = rng.choice([x for x in PETS if x != other_has.get("pet")]), rng.choice(PET_NAMES)
    f.holdings["pet"] = pet
    s5 = f.say("pet", f.sess(0.1, 0.6), p=pet, n=pet_name)
    f.say("vet", rng.randrange(s5 + 1, len(dates)) if s5 + 1 < len(dates) else s5, n=pet_name)
    f.ask(f"What is the name of {p}'s {pet}?", pet_name, ["pet"], "single-hop")
    f.ask(f"When did {p} adopt the {pet}?", _day(dates[s5]), ["pet"], "temporal")
    f.ask(f"What kind of animal did {p} take to the vet?", pet, ["vet", "pet"], "multi-hop")
    f.ask(f"Did {p} adopt the {pet} before or after moving to {c2}?",
          "before" if s5 < s2 else "after" if s5 > s2 else "in the same week", ["pet", "home2"], "multi-hop")
    (h1, d1), (h2, d2) = rng.sample(HOBBIES, 2)
    f.say("hobby1", f.sess(0, 0.45), h=h1, d=d1)
    f.say("hobby2", f.sess(0.55, 1.0), h=h2, d=d2)
    f.ask(f"What might {p} enjoy doing on a free evening these days?", h2, ["hobby2"], "open-domain")
    f.ask(f"What did {p} do for fun before {h2}?", h1, ["hobby1"], "temporal")
    rel, rel_name = rng.choice(RELATIVES), rng.choice([n for n in NAMES if n not in (p, other)])
    f.say("rel", f.sess(0, 0.5), r=rel, n=rel_name, c=c4)
    f.say("trip", f.sess(0.5, 1.0), n=rel_name)
    f.ask(f"Which city is {p} travelling to next month?", c4, ["rel", "trip"], "multi-hop")
    f.ask(f"Where does {p}'s {rel} live?", c4, ["rel"], "single-hop")
    instrument = rng.choice([x for x in INSTRUMENTS if x != other_has.get("instrument")])
    colour = rng.choice(COLOURS)
    f.holdings["instrument"] = instrument
    f.say("music", f.sess(0, 1.0), col=colour, i=instrument)
    f.ask(f"What colour is {p}'s {instrument}?", colour, ["music"], "single-hop")
    f.ask(f"What could {p} play at a party?", instrument, ["music"], "open-domain")
    (what, said), (last_what, last_said) = rng.sample(EVENTS, 2)
    s8 = f.sess(0.2, 0.8)
    f.tags["event"] = len(f.turns)
    f.turns.append((s8, p, said))
    f.ask(f"What happened to {p} on {_day(dates[s8])}?", what, ["event"], "temporal")
    f.tags["last"] = len(f.turns)
    f.turns.append((len(dates) - 1, p, last_said))
    f.ask(f"What news did {p} share last week?", last_what, ["last"], "temporal")
    # The wrong speaker asked about: the evidence shows who it was (LoCoMo's adversarial).
    f.ask(f"What is the name of {other}'s {pet}?", f"not {other}'s: {p}'s {pet} is {pet_name}", ["pet"],
          "adversarial")
    f.ask(f"What colour is {other}'s {instrument}?", f"not {other}'s: {p}'s is {colour}", ["music"],
          "adversarial")
    # Never said (the talk mentions other people's animals and relatives: shared words only).
    f.ask(f"What is the name of {p}'s {rng.choice([x for x in PETS if x != pet])}?", "", [], "adversarial")
    f.ask(f"Where does {p}'s {rng.choice([r for r in RELATIVES if r != rel])} live?", "", [], "adversarial")
    f.ask(f"Which company did {p} work for before {f.holdings['first_employer']}?", "", [], "adversarial")


def generate(seed: int = 20261203, conversations: int = 10, sessions: int = 24, turns_per_session: int = 16,
             questions: int = 30) -> list[Conversation]:
    """``conversations`` two-person conversations of ``sessions`` sessions (2 to 15 days apart)
    of about ``turns_per_session`` turns (±30 %), each with up to ``questions`` questions (a
    seeded sample of those its facts allow). The same arguments give the same corpus.

    Every turn of a conversation has a text of its own, no evidence text is inside another
    turn's, and no two turns get the same memory key (``canonical_key``: two turns with one
    key would be one record's versions, and the older one no longer readable as itself)."""
    rng = random.Random(seed)  # noqa: S311 - reproducible bench data, not a secret
    out = []
    for c in range(conversations):
        a, b = rng.sample(NAMES, 2)
        dates = session_dates(rng, sessions)
        fa = _fact_turns(rng, a, b, dates, {})
        fb = _fact_turns(rng, b, a, dates, fa.holdings)
        while not _distinct(fa.turns + fb.turns):  # both adopted a cat named Mochi: draw again
            fb = _fact_turns(rng, b, a, dates, fa.holdings)
        out.append(_conversation(rng, f"gen-{seed}-{c}", (a, b), dates, [fa, fb],
                                 turns_per_session=turns_per_session, questions=questions))
    return out


def _distinct(facts: Sequence[tuple[int, str, str]]) -> bool:
    """No two fact turns share a text or a memory key."""
    texts = [text for _, _, text in facts]
    keys = {canonical_key("fact", None, f"{speaker}: {text}") for _, speaker, text in facts}
    return len(set(texts)) == len(texts) == len(keys)


def _conversation(rng: random.Random, sample_id: str, speakers: tuple[str, str], dates: Sequence[datetime],
                  people: Sequence[_Facts], *, turns_per_session: int, questions: int) -> Conversation:
    """The facts placed in their sessions among chit-chat, the turns numbered, the questions resolved."""
    facts = [(who, i, turn) for who, f in enumerate(people) for i, turn in enumerate(f.turns)]
    by_session: dict[int, list[tuple[int, int, tuple[int, str, str]]]] = {}
    for item in facts:
        by_session.setdefault(item[2][0], []).append(item)
    used = {text for _, _, (_, _, text) in facts}
    keys = {canonical_key("fact", None, f"{speaker}: {text}") for _, _, (_, speaker, text) in facts}
    avoid = frozenset(speakers)
    placed: dict[tuple[int, int], Turn] = {}
    turns: list[Turn] = []
    for s, date in enumerate(dates):
        mine = by_session.get(s, [])
        n = max(len(mine), round(turns_per_session * rng.uniform(0.7, 1.3)))
        fact_at = dict(zip(sorted(rng.sample(range(n), len(mine))), mine, strict=True))
        for i in range(n):
            if i in fact_at:
                who, k, (_, speaker, text) = fact_at[i]
            else:
                speaker = speakers[i % 2]
                text = _filler(rng, speaker, used, keys, avoid)
            turn = Turn(f"D{s + 1}:{i + 1}", speaker, text, s + 1, date)
            if i in fact_at:
                placed[(who, k)] = turn
            turns.append(turn)
    qs = []
    for who, f in enumerate(people):
        for q in f.qs:
            ev = tuple(placed[(who, f.tags[t])].dia_id for t in q["ev"])
            qs.append(Question(q["q"], q["a"], ev, q["cat"]))
    rng.shuffle(qs)
    return Conversation(sample_id, tuple(turns), tuple(qs[:questions]))


def _filler(rng: random.Random, speaker: str, used: set[str], keys: set[str], avoid: frozenset[str]) -> str:
    """A chit-chat turn whose text and memory key are new in this conversation (so a turn's
    text names one turn, and every turn is a record of its own)."""
    while True:
        text = chitchat.turn(rng, avoid)
        key = canonical_key("fact", None, f"{speaker}: {text}")
        if text not in used and key not in keys:
            used.add(text)
            keys.add(key)
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


# ---- the writer ---------------------------------------------------------------------------------

# The category numbers LoCoMo gives each name (``LOCOMO_CATEGORIES`` reversed).
LOCOMO_NUMBERS = {name: n for n, name in LOCOMO_CATEGORIES.items()}


def to_locomo(conversations: Sequence[Conversation]) -> list[dict[str, Any]]:
    """``conversations`` in the common LoCoMo-like format ``load`` reads (dates as LoCoMo
    writes them, ``1:56 pm on 8 May, 2023``; categories as its numbers; a question without
    evidence has its answer as ``adversarial_answer``), so a user's file and the generator's
    go through the same loader. ``load(to_locomo(c))`` gives ``c`` back."""
    out = []
    for conv in conversations:
        speakers = list(dict.fromkeys(t.speaker for t in conv.turns))
        body: dict[str, Any] = {f"speaker_{x}": name for x, name in zip("ab", speakers, strict=False)}
        for n, session in enumerate(conv.sessions(), 1):
            d = session[0].date
            body[f"session_{n}_date_time"] = f"{d.hour % 12 or 12}:{d:%M} {d:%p}".lower() + f" on {d.day} {d:%B, %Y}"
            body[f"session_{n}"] = [{"speaker": t.speaker, "dia_id": t.dia_id, "text": t.text} for t in session]
        qa = [{"question": q.question, "evidence": list(q.evidence), "category": LOCOMO_NUMBERS[q.category],
               **({"answer": q.answer} if q.evidence else {"adversarial_answer": q.answer})}
              for q in conv.questions]
        out.append({"sample_id": conv.sample_id, "conversation": body, "qa": qa})
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
