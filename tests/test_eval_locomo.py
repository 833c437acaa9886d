"""`agentledger eval --locomo`: evidence recall per strategy on a LoCoMo-format file the test
writes (the project ships no third-party data), through the real services."""

from __future__ import annotations

import json
from pathlib import Path

from agentledger.config import Settings
from agentledger.eval.locomo import evaluate_file, markdown
from agentledger.models.embedding import load_embedder
from ckpt_support import running

FILLER = ["The weather turned grey again this afternoon.", "I watched half a documentary about trains.",
          "We played a board game until midnight.", "The cafe on the corner changed its menu."]


def _file(tmp_path: Path) -> Path:
    """Two sessions, three planted facts among filler, one question without evidence."""
    s1 = [{"speaker": "Mara", "dia_id": f"D1:{i + 1}", "text": FILLER[i % 4] + f" ({i})"} for i in range(6)]
    s1[2]["text"] = "My grandmother's paella recipe uses saffron from Zanzibar, she swears by it."
    s2 = [{"speaker": "Tom", "dia_id": f"D2:{i + 1}", "text": FILLER[(i + 1) % 4] + f" [{i}]"} for i in range(6)]
    s2[1]["text"] = "I started rowing on the canal every Tuesday morning."
    s2[4]["text"] = "My sister Ines moved to Tampere for her new lab job."
    sample = {"sample_id": "mine", "conversation": {
        "speaker_a": "Mara", "speaker_b": "Tom", "session_1_date_time": "1:56 pm on 8 May, 2023", "session_1": s1,
        "session_2_date_time": "2023-06-01T09:30:00+00:00", "session_2": s2},
        "qa": [{"question": "Where does the saffron in the paella come from?", "answer": "Zanzibar",
                "evidence": ["D1:3"], "category": 4},
               {"question": "When does Tom go rowing on the canal?", "answer": "Tuesdays", "evidence": ["D2:2"],
                "category": 2},
               {"question": "Which city did Tom's sister Ines move to, and what does she do there?",
                "answer": "Tampere", "evidence": ["D2:5", "D2:2"], "category": 1},
               {"question": "What is Tom's dog called?", "adversarial_answer": "Rex", "evidence": [], "category": 5}]}
    path = tmp_path / "mine.json"
    path.write_text(json.dumps([sample]), encoding="utf-8")
    return path


async def test_evidence_recall_per_strategy_on_a_locomo_file(settings: Settings, tmp_path: Path) -> None:
    async with running(settings, checkpointer=False, memory=True, context=True) as stack:
        res = await evaluate_file(stack.c, stack.settings, load_embedder(stack.settings), _file(tmp_path),
                                  budget=1000)
    assert res.questions == 3 and res.unanswerable == 1
    assert set(res.recall) == {"off", "full", "summary", "vector", "structured"}
    assert all(len(v) == 3 for v in res.recall.values())
    assert res.recall["off"] == [0.0, 0.0, 0.0]
    # The whole conversation fits in 1000 tokens: full history holds every evidence turn.
    assert res.recall["full"] == [1.0, 1.0, 1.0]
    # The planted saffron turn is found by similarity and by the gated read.
    assert res.recall["vector"][0] == 1.0 and res.recall["structured"][0] == 1.0
    assert all(0.0 <= x <= 1.0 for v in res.recall.values() for x in v)
    assert "| structured |" in markdown(res, "mine.json")


async def test_a_small_budget_cuts_full_history_to_its_newest_turns(settings: Settings, tmp_path: Path) -> None:
    async with running(settings, checkpointer=False, memory=True, context=True) as stack:
        res = await evaluate_file(stack.c, stack.settings, load_embedder(stack.settings), _file(tmp_path),
                                  budget=60, strategies=("off", "full"))
    # 60 tokens hold the last few turns of session 2, never session 1's saffron turn.
    assert res.recall["full"][0] == 0.0
    assert set(res.recall) == {"off", "full"}
