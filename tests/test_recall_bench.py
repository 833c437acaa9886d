"""The evidence-recall bench: the generator, the LoCoMo-like loader, BM25, and a tiny run end to end.

The end-to-end test ingests through the real services (writer, projector, memory-policy,
context-builder on embedded NATS and PostgreSQL) and checks the figures are recalls; whether
the system beats BM25 is the bench's figure (docs/benchmarks.md), not asserted here.
"""

from __future__ import annotations

import json
from pathlib import Path

from agentledger.bench import recall_corpus as rc
from agentledger.bench.recall import SYSTEMS, evaluate, table
from agentledger.config import Settings
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
    assert all(not q.evidence for conv in everything for q in conv.questions if q.category == "adversarial")


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
