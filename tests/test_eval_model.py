"""The optional model executor, against a local fake OpenAI-compatible endpoint (the hosted
model is a party we cannot run): it answers from the same context and is scored by the same
checks; its failures are typed and never quote the key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentledger.eval import corpus as c
from agentledger.eval.executor import act
from agentledger.eval.metrics import StrategyResult, evaluate, with_delta
from agentledger.eval.model import ModelExecutor, ModelReplyError, ModelUnavailableError
from fake_http import FakeServer, serve

KEY = "sk-test-0123456789abcdef"


def _answer(fake: FakeServer, body: dict[str, Any], mode: str) -> tuple[int, bytes]:
    """A stand-in model: reads the context as the deterministic executor does ('ok'), guesses a
    fact the context does not hold ('guess'), or answers prose ('prose')."""
    context = body["messages"][1]["content"]
    if mode == "prose":
        content = "Sure! The next step is probably S6."
    else:
        resolved = act(context).resolved
        answer = {k: (str(v) if v is not None else None) for k, v in resolved.items()}
        if mode == "guess":
            answer["page_style"] = "page_style=glass-card@v3"
        content = "```json\n" + json.dumps(answer) + "\n```"
    return 200, json.dumps({"choices": [{"message": {"role": "assistant", "content": content},
                                         "finish_reason": "stop"}]}).encode()


def _result(name: str, context: str) -> StrategyResult:
    return StrategyResult(name, context, received=[context])


async def test_the_model_is_scored_by_the_same_checks_on_the_same_context(tmp_path: Path) -> None:
    corpus = c.generate(c.Options(stale=True, poison=True, secret=True))
    ctx = "page_style=neon-grid@v2 page_style=glass-card@v3 schema_contract=checkpoint-v3@v3"
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    with serve(FakeServer(), "/v1/chat/completions", _answer) as fake:
        model = ModelExecutor.from_files(fake.url, "stand-in", key_file)
        det, _ = evaluate(_result("full", ctx), corpus)
        got, _ = evaluate(_result("full", ctx), corpus, await model.act(ctx), "model")
        off, _ = evaluate(_result("off", c.RESUME_PROMPT), corpus, await model.act(c.RESUME_PROMPT), "model")
        fake.mode = "guess"
        guessed, _ = evaluate(_result("summary", c.RESUME_PROMPT), corpus, await model.act(c.RESUME_PROMPT),
                              "model")
    assert fake.requests[0]["auth"] == f"Bearer {KEY}"
    assert fake.requests[0]["body"]["messages"][1]["content"] == ctx  # exactly the strategy's context
    assert got.strategy == "full·model"
    assert (got.task_success, got.recall, got.checks) == (det.task_success, det.recall, det.checks)
    # A guess the context does not support is kept as used, and shown.
    assert [str(i) for i in guessed.unsupported] == ["page_style=glass-card@v3"]
    rows = {s.strategy: s for s in with_delta([off, got, guessed])}
    assert rows["full·model"].delta_vs_off == pytest.approx(100 * (got.task_success - off.task_success), abs=0.1)


async def test_model_failures_are_typed_and_never_quote_the_key() -> None:
    with serve(FakeServer(), "/v1/chat/completions", _answer) as fake:
        model = ModelExecutor(fake.url, "stand-in", KEY, timeout_s=5)
        fake.mode = "status:503"
        with pytest.raises(ModelUnavailableError) as err:
            await model.act("continue the task")
        assert err.value.code == "model_unavailable" and KEY not in str(err.value) and KEY not in repr(model)
        fake.mode = "prose"
        with pytest.raises(ModelReplyError) as bad:
            await model.act("continue the task")
        assert bad.value.code == "model_bad_reply"
