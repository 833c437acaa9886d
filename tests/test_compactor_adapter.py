"""The OpenAI-compatible compactor adapter against a fake chat-completions server on 127.0.0.1.

The fake answers a valid summary, one with wrong fields, one citing ordinals outside the
coverage (returned by the adapter, refused by the builder's validator), a truncated one,
a slow one and error statuses; every failure is a typed error and the key is never quoted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentledger.config import Settings
from agentledger.contracts.context_api import Coverage, Summary, SummaryItem
from agentledger.errors import ContractError
from agentledger.models.compactors import (
    CompactorError,
    CompactorReplyError,
    CompactorUnavailableError,
    OpenAICompactor,
    make_compactor,
)
from fake_http import FakeServer, serve

KEY = "sk-test-0123456789abcdef"


@dataclass(frozen=True)
class Turn:
    ordinal: int
    role: str
    content: str | None


@dataclass(frozen=True)
class Request:
    previous: Summary | None
    turns: list[Turn]


TURNS = [Turn(1, "user", "Deploy the billing service to eu-west-1."),
         Turn(2, "assistant", "Which version? The last build failed with error E1043."),
         Turn(3, "user", "v2.4.1. Never deploy on Fridays.")]


def summary(*, cite: int = 1) -> dict[str, Any]:
    return {"schema_version": "checkpoint-v1",
            "conversation_goal": [{"text": "deploy billing to eu-west-1", "source_turn_ordinals": [cite]}],
            "confirmed_facts": [{"text": "last build failed with E1043", "source_turn_ordinals": [2]}],
            "decisions_constraints": [{"text": "never deploy on Fridays", "source_turn_ordinals": [3]}],
            "preferences": [], "unresolved_questions": []}


@dataclass
class Fake(FakeServer):
    mode: str = "valid"


def _completion(content: str, finish: str = "stop") -> bytes:
    return json.dumps({"id": "c1", "object": "chat.completion", "model": "m", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}]}).encode()


def _answer(fake: Fake, body: dict[str, Any], mode: str) -> tuple[int, bytes]:
    good = json.dumps(summary())
    content = {
        "valid": good, "slow": good,
        "fenced": f"```json\n{good}\n```",
        "wrong_fields": json.dumps({**summary(), "notes": ["extra"]}),
        "missing_field": json.dumps({k: v for k, v in summary().items() if k != "preferences"}),
        "out_of_range": json.dumps(summary(cite=7)),
        "truncated_text": good[: len(good) // 2],
        "prose": "Here is your summary: the user wants a deploy.",
    }.get(mode, good)
    if mode == "not_a_completion":
        return 200, b'{"object": "list", "data": []}'
    finish = "length" if mode == "truncated" else "stop"
    return 200, _completion(good[:40] if mode == "truncated" else content, finish)


@pytest.fixture
def fake() -> Iterator[Fake]:
    with serve(Fake(), "/v1/chat/completions", _answer) as endpoint:
        yield endpoint


async def test_a_valid_reply_is_the_summary(fake: Fake) -> None:
    """The request carries the turns and the previous summary as data in the user message, the
    instructions in the system message, the key as a bearer token; the reply is the Summary."""
    compactor = OpenAICompactor(fake.url, "gpt-4o-mini", KEY)
    previous = Summary(schema_version="checkpoint-v1", conversation_goal=[
        SummaryItem(text="ship billing", source_turn_ordinals=[1])], confirmed_facts=[],
        decisions_constraints=[], preferences=[], unresolved_questions=[])
    got = await compactor(Request(previous, TURNS))
    assert got == msgspec.convert(summary(), Summary)
    [sent] = fake.requests
    assert sent["auth"] == f"Bearer {KEY}"
    body = sent["body"]
    assert (body["model"], body["temperature"], body["response_format"]) == ("gpt-4o-mini", 0,
                                                                           {"type": "json_object"})
    system, user = body["messages"]
    assert system["role"] == "system" and "checkpoint-v1" in system["content"]
    assert user["role"] == "user"
    assert "ship billing" in user["content"] and "E1043" in user["content"]
    assert json.loads(user["content"].splitlines()[-1]) == {"ordinal": 3, "role": "user",
                                                              "content": "v2.4.1. Never deploy on Fridays."}
    fake.mode = "fenced"
    assert await compactor(Request(None, TURNS)) == got


@pytest.mark.parametrize(("mode", "code", "path"), [
    ("wrong_fields", "compactor_invalid_summary", "$"),
    ("missing_field", "compactor_invalid_summary", "$"),
    ("truncated", "compactor_truncated", "$.choices[0].finish_reason"),
    ("truncated_text", "compactor_not_json", "$.choices[0].message.content"),
    ("prose", "compactor_not_json", "$.choices[0].message.content"),
    ("not_a_completion", "compactor_bad_reply", "$.choices[0].message.content"),
])
async def test_an_invalid_or_truncated_reply_is_a_typed_error(fake: Fake, mode: str, code: str,
                                                              path: str) -> None:
    fake.mode = mode
    with pytest.raises(CompactorReplyError) as info:
        await OpenAICompactor(fake.url, "m", KEY)(Request(None, TURNS))
    assert (info.value.code, info.value.path) == (code, path)
    assert KEY not in str(info.value)


async def test_cited_ordinals_out_of_range_are_returned_and_the_validator_refuses_them(fake: Fake) -> None:
    """The adapter checks the shape only; coverage is the builder's validator's job."""
    fake.mode = "out_of_range"
    got = await OpenAICompactor(fake.url, "m", KEY)(Request(None, TURNS))
    assert got.conversation_goal[0].source_turn_ordinals == [7]
    validate = pytest.importorskip("agentledger.core.context.compaction").validate_summary
    problems = validate(got, Coverage(first=1, through=3), 0)
    assert problems and any("$.conversation_goal[0]" in p for p in problems), problems
    assert validate(msgspec.convert(summary(), Summary), Coverage(first=1, through=3), 0) == []


async def test_a_slow_server_times_out_and_statuses_are_typed(fake: Fake) -> None:
    fake.mode = "slow"
    started = time.monotonic()
    with pytest.raises(CompactorUnavailableError) as info:
        await OpenAICompactor(fake.url, "m", KEY, timeout_s=0.2)(Request(None, TURNS))
    assert time.monotonic() - started < 0.9
    assert info.value.retryable and "TimeoutError" in str(info.value)
    for status, error in [(503, CompactorUnavailableError), (429, CompactorUnavailableError),
                          (401, CompactorError)]:
        fake.mode = f"status:{status}"
        with pytest.raises(error) as raised:
            await OpenAICompactor(fake.url, "m", KEY)(Request(None, TURNS))
        assert str(status) in str(raised.value) and KEY not in str(raised.value)
        assert "[key]" in str(raised.value)


async def test_an_unreachable_server_is_unavailable() -> None:
    with pytest.raises(CompactorUnavailableError):
        await OpenAICompactor("http://127.0.0.1:9/v1", "m", timeout_s=1)(Request(None, TURNS))


def test_configuration_from_settings_reads_the_key_file_and_never_shows_it(tmp_path: Path) -> None:
    key_file = tmp_path / "compactor.key"
    key_file.write_text(KEY + "\n")
    settings = Settings(context_compactor_url="http://127.0.0.1:8080/v1", context_compactor_model="m",
                        context_compactor_key_file=key_file, context_compactor_timeout_s=3.0)
    compactor = make_compactor(settings)
    assert KEY not in repr(compactor) and compactor.url == "http://127.0.0.1:8080/v1/chat/completions"
    for bad, path in [(dict(context_compactor_url="ftp://x"), "AGENTLEDGER_CONTEXT_COMPACTOR_URL"),
                      (dict(context_compactor_model=""), "AGENTLEDGER_CONTEXT_COMPACTOR_MODEL"),
                      (dict(context_compactor_key_file=tmp_path / "missing"),
                       "AGENTLEDGER_CONTEXT_COMPACTOR_KEY_FILE")]:
        with pytest.raises(ContractError) as info:
            make_compactor(msgspec.structs.replace(settings, **bad))
        assert (info.value.code, info.value.path) == ("invalid_config", path)
