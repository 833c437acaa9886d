"""The evidence-recall bench: the generator, the LoCoMo-like loader, BM25, and a tiny run end to end.

The end-to-end test ingests through the real services (writer, projector, memory-policy,
context-builder on embedded NATS and PostgreSQL) and checks the figures are recalls; whether
the system beats BM25 is the bench's figure (docs/benchmarks.md), not asserted here.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

from agentledger.bench import recall_corpus as rc
from agentledger.bench.recall import SYSTEMS, build_text, evaluate, table, tenant_of
from agentledger.config import Settings
from agentledger.core.memory.keys import canonical_key
from agentledger.core.memory.when import when_of
from ckpt_support import running

# A user's own file, as the common format writes it: LoCoMo's date style and numbered categories.
SAMPLE = [{
    "sample_id": "mine",
    "conversation": {
        "speaker_a": "Mara", "speaker_b": "Tom",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Mara", "dia_id": "D1:1", "text": "Morning! The bakery on our street finally reopened."},
            {"speaker": "Tom", "dia_id": "D1:2", "text": "Nice, I still want to try their rye loaf."},
            {"speaker": "Mara", "dia_id": "D1:3",
             "text": "My grandmother's paella recipe uses saffron from Zanzibar, she swears by it."},
        ],
        "session_2_date_time": "2023-06-01T09:30:00+00:00",
        "session_2": [
            {"speaker": "Tom", "dia_id": "D2:1", "text": "I started rowing on the canal every Tuesday."},
            {"speaker": "Mara", "dia_id": "D2:2", "text": "Rowing sounds cold this early in the year."},
        ],
    },
    "qa": [
        {"question": "Where does the saffron in the paella come from?", "answer": "Zanzibar",
         "evidence": ["D1:3"], "category": 4},
        {"question": "When did Tom take up rowing?", "answer": "June 2023", "evidence": ["D2:1"], "category": 2},
        {"question": "What is Tom's dog called?", "adversarial_answer": "Rex", "evidence": [], "category": 5},
    ],
}]


def _write(tmp_path: Path) -> Path:
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(SAMPLE), encoding="utf-8")
    return path


def test_the_generator_is_deterministic_and_labels_real_turns() -> None:
    a = rc.generate(seed=7, conversations=2, sessions=6, turns_per_session=10, questions=12)
    assert a == rc.generate(seed=7, conversations=2, sessions=6, turns_per_session=10, questions=12)
    assert a != rc.generate(seed=8, conversations=2, sessions=6, turns_per_session=10, questions=12)
    for conv in a:
        ids = {t.dia_id for t in conv.turns}
        assert len(ids) == len(conv.turns) and len({t.text for t in conv.turns}) == len(conv.turns)
        assert len(conv.questions) == 12
        assert {q.category for q in conv.questions} <= set(rc.CATEGORIES)
        assert all(set(q.evidence) <= ids for q in conv.questions)
        dates = [s[0].date for s in conv.sessions()]
        assert dates == sorted(dates) and len(dates) == 6
    everything = rc.generate(seed=7, conversations=3, questions=100)
    cats = {q.category for conv in everything for q in conv.questions}
    assert cats == set(rc.CATEGORIES)
    # Adversarial: the wrong person asked about (evidence: who it was), or never said (none).
    adversarial = [q for conv in everything for q in conv.questions if q.category == "adversarial"]
    assert any(q.evidence for q in adversarial) and any(not q.evidence for q in adversarial)


def test_the_generated_talk_is_varied_dated_and_one_record_per_turn() -> None:
    """Not a few templates: the chit-chat's first words alone take hundreds of forms; sessions
    are days to two weeks apart; no two turns of a conversation share a memory key (they would
    be versions of one record); a question naming a day asks about a turn of that day, one
    saying "last week" about a turn of the last session."""
    [conv] = rc.generate(seed=11, conversations=1)
    facts = {e for q in conv.questions for e in q.evidence}
    talk = [t.text for t in conv.turns if t.dia_id not in facts]
    assert len({tuple(t.split()[:4]) for t in talk}) > len(talk) * 0.6
    assert len({canonical_key("fact", None, t.line) for t in conv.turns}) == len(conv.turns)
    gaps = {(b[0].date.date() - a[0].date.date()).days for a, b in itertools.pairwise(conv.sessions())}
    assert min(gaps) >= 2 and max(gaps) <= 15 and len(gaps) > 3
    by_id = {t.dia_id: t for t in conv.turns}
    last = conv.sessions()[-1][0].session
    dated = 0
    for q in rc.generate(seed=11, conversations=1, questions=1000)[0].questions:
        when = when_of(q.question)
        if when is not None and when.start is not None and "happened" in q.question:
            assert all(when.start <= by_id[e].date.replace(hour=0, minute=0) < when.end for e in q.evidence)
            dated += 1
        if "last week" in q.question:
            assert [by_id[e].session for e in q.evidence] == [last]
            dated += 1
    assert dated == 4  # one dated event and one of last week for each of the two people


def test_the_generated_corpus_written_as_a_locomo_file_loads_back_the_same(tmp_path: Path) -> None:
    """The fixture a user's file would be: the generator written in the common format
    (LoCoMo's date style and category numbers), read back by the loader the bench uses."""
    corpus = rc.generate(seed=5, conversations=2, sessions=6, questions=40)
    path = tmp_path / "generated-locomo.json"
    path.write_text(json.dumps(rc.to_locomo(corpus)), encoding="utf-8")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data[0]["conversation"]["session_1_date_time"].endswith(" on 5 January, 2026")
    assert {q["category"] for s in data for q in s["qa"]} <= set(rc.LOCOMO_CATEGORIES)
    assert rc.load(path) == corpus


def test_the_loader_reads_the_common_format(tmp_path: Path) -> None:
    [conv] = rc.load(_write(tmp_path))
    assert conv.sample_id == "mine"
    assert [t.dia_id for t in conv.turns] == ["D1:1", "D1:2", "D1:3", "D2:1", "D2:2"]
    assert [s[0].date.isoformat() for s in conv.sessions()] == ["2023-05-08T13:56:00+00:00",
                                                               "2023-06-01T09:30:00+00:00"]
    assert [(q.category, q.evidence) for q in conv.questions] == [
        ("single-hop", ("D1:3",)), ("temporal", ("D2:1",)), ("adversarial", ())]
    assert conv.questions[2].answer == "Rex"


def test_bm25_finds_the_planted_exact_word_turn_within_1k(tmp_path: Path) -> None:
    [conv] = rc.load(_write(tmp_path))
    lines = [t.line for t in conv.turns]
    bm25 = rc.BM25(lines)
    q = conv.questions[0]
    order = bm25.rank(q.question)
    assert order[0] == 2  # the saffron turn
    taken = "\n".join(lines[i] for i in rc.pack(lines, order, 1000))
    assert rc.recall([conv.turns[2]], taken) == 1.0
    # Nothing fits in 5 tokens: packing respects the budget.
    assert rc.pack(lines, order, 5) == []


async def test_a_tiny_corpus_end_to_end(settings: Settings, tmp_path: Path) -> None:
    corpus = [*rc.load(_write(tmp_path)),
              *rc.generate(seed=3, conversations=1, sessions=3, turns_per_session=6, questions=6)]
    async with running(settings, checkpointer=False, memory=True, context=True) as stack:
        res = await evaluate(stack.c, corpus, budgets=(1000, 2000))
        # A question naming a time gets the observation days in its memory lines; others do not.
        units: Counter[str] = Counter()
        when = await build_text(stack.c, tenant_of(0), "q1", corpus[0].questions[1].question, 1000, units=units)
        plain = await build_text(stack.c, tenant_of(0), "q0", corpus[0].questions[0].question, 1000, units=units)
    assert "- 2023-06-01 Tom: I started rowing on the canal every Tuesday." in when
    assert "- Mara: My grandmother's paella recipe uses saffron" in plain and "2023-05-08" not in plain
    scored = sum(1 for conv in corpus for q in conv.questions if q.evidence)
    assert res.unanswerable == sum(len(conv.questions) for conv in corpus) - scored
    for system in SYSTEMS:
        for budget in (1000, 2000):
            assert res.count(system, budget) == scored
            assert all(0.0 <= v <= 1.0 for _, v in res.scores[(system, budget)])
    assert res.scores[("bm25", 1000)][0] == ("single-hop", 1.0)  # the planted saffron question
    # The builds read memory: what context.build's recall is made of.
    assert res.build_units[2000]["memory"] > 0
    assert "memory.read" in table(res, (1000, 2000))
