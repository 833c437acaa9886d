"""Embedders: WordLlama offline (real model), and the OpenAI-compatible adapter against a fake
endpoint started here (the hosted service is an outside party we cannot run)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentledger import config
from agentledger.config import Settings
from agentledger.errors import ContractError, UnavailableError
from agentledger.models.embedding import (
    Embedder,
    EmbedderError,
    EmbedderUnavailableError,
    OpenAIEmbedder,
    WordLlamaEmbedder,
    load_embedder,
)
from fake_http import REFUSE_NETWORK, FakeServer, serve

KEY = "sk-test-0123456789abcdef"


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def norm(a: list[float]) -> float:
    return math.sqrt(sum(x * x for x in a))


# --- WordLlama -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wordllama() -> WordLlamaEmbedder:
    return WordLlamaEmbedder()


async def test_wordllama_shape(wordllama: WordLlamaEmbedder) -> None:
    assert isinstance(wordllama, Embedder)
    assert (wordllama.name, wordllama.dims) == ("wordllama/l2_supercat/256", 256)
    vectors = await wordllama.embed(["the build is green", "数据库连接失败", " "])
    assert len(vectors) == 3
    for vector in vectors:
        assert len(vector) == 256
        assert all(isinstance(x, float) and math.isfinite(x) for x in vector)
        assert abs(norm(vector) - 1) < 1e-5
    assert await wordllama.embed([]) == []


async def test_wordllama_similar_above_unrelated(wordllama: WordLlamaEmbedder) -> None:
    deploy, taken, apples = await wordllama.embed([
        "The deploy failed because port 8080 is in use",
        "Deployment error: port 8080 already taken",
        "I like green apples",
    ])
    similar, unrelated = cosine(deploy, taken), cosine(deploy, apples)
    assert similar > 0.5, similar
    assert unrelated < 0.2, unrelated
    assert similar - unrelated > 0.4


async def test_wordllama_chinese(wordllama: WordLlamaEmbedder) -> None:
    failed, error, apples = await wordllama.embed(["数据库连接失败", "数据库连接错误", "我喜欢吃苹果"])
    assert cosine(failed, error) > cosine(failed, apples) + 0.2


async def test_wordllama_deterministic(wordllama: WordLlamaEmbedder) -> None:
    text = "the user prefers answers in French"
    alone = (await wordllama.embed([text]))[0]
    assert (await wordllama.embed([text]))[0] == alone
    # Batch neighbours (padding to a longer text) and another instance change nothing.
    batch = await wordllama.embed(["short", text, "a much longer text " * 20])
    assert batch[1] == alone
    assert WordLlamaEmbedder().embed_sync([text])[0] == alone


async def test_wordllama_empty_text_is_zero(wordllama: WordLlamaEmbedder) -> None:
    """No token, nothing to be similar to: the zero vector, never NaN."""
    assert (await wordllama.embed([""]))[0] == [0.0] * 256


async def test_wordllama_async_chunks_equal_sync(wordllama: WordLlamaEmbedder) -> None:
    texts = [f"note number {i} about task {i % 7}" for i in range(wordllama.chunk * 2 + 3)]
    assert await wordllama.embed(texts) == wordllama.embed_sync(texts)


# A fresh interpreter with every socket refused loads the model and embeds.
_NO_NETWORK = REFUSE_NETWORK + r"""
from agentledger.models.embedding import WordLlamaEmbedder
print(json.dumps(WordLlamaEmbedder().embed_sync(["the user prefers answers in French"])[0]))
"""


def test_wordllama_loads_without_network(tmp_path: Path, wordllama: WordLlamaEmbedder) -> None:
    # An empty home and HF cache: nothing bundled elsewhere is picked up by accident.
    env = {**os.environ, "HOME": str(tmp_path), "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0"}
    done = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", _NO_NETWORK], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == wordllama.embed_sync(["the user prefers answers in French"])[0]
    assert not (tmp_path / ".cache").exists()


# --- OpenAI-compatible adapter against a fake endpoint --------------------------------------


@dataclass
class FakeEndpoint(FakeServer):
    """An OpenAI-compatible `/v1/embeddings` server whose behaviour a test sets."""

    dims: int = 8


def _vector(text: str, dims: int) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [digest[i % 32] - 128.0 for i in range(dims)]


def _answer(fake: FakeEndpoint, body: dict[str, Any], mode: str) -> tuple[int, bytes]:
    if mode == "garbage":
        return 200, b"<html>not json</html>"
    dims = body.get("dimensions", fake.dims)
    rows = [{"object": "embedding", "index": i, "embedding": _vector(t, dims)}
            for i, t in enumerate(body["input"])]
    if mode == "wrong_dims":
        rows[-1]["embedding"] = rows[-1]["embedding"][:-1]
    if mode == "wrong_count":
        rows = rows[:-1]
    if mode == "base64":
        rows[0]["embedding"] = "AAAA"
    # Out of order, as the API allows: the adapter must sort by index.
    rows.reverse()
    reply = {"object": "list", "data": rows, "model": body["model"], "usage": {"prompt_tokens": 1}}
    return 200, json.dumps(reply).encode()


@pytest.fixture
def fake() -> Iterator[FakeEndpoint]:
    with serve(FakeEndpoint(), "/v1/embeddings", _answer) as endpoint:
        yield endpoint


async def test_openai_embeds_in_order(fake: FakeEndpoint) -> None:
    embedder = OpenAIEmbedder(fake.url, "text-embedding-3-small", KEY, dims=8)
    assert isinstance(embedder, Embedder)
    assert embedder.name == "openai/text-embedding-3-small"
    texts = ["alpha", "beta", "gamma"]
    vectors = await embedder.embed(texts)
    assert len(vectors) == 3
    for text, vector in zip(texts, vectors, strict=True):
        expected = _vector(text, 8)
        assert abs(norm(vector) - 1) < 1e-9
        assert cosine(vector, [x / norm(expected) for x in expected]) > 0.999999
    [request] = fake.requests
    assert request["path"] == "/v1/embeddings"
    assert request["auth"] == f"Bearer {KEY}"
    assert request["body"] == {"model": "text-embedding-3-small", "input": texts, "encoding_format": "float"}
    assert KEY not in repr(embedder)
    assert await embedder.embed([]) == []
    assert len(fake.requests) == 1


async def test_openai_batches_and_learns_dims(fake: FakeEndpoint) -> None:
    embedder = OpenAIEmbedder(fake.url + "/", "m")
    embedder.max_batch = 2
    assert embedder.dims == 0
    vectors = await embedder.embed([f"t{i}" for i in range(5)])
    assert [len(r["body"]["input"]) for r in fake.requests] == [2, 2, 1]
    assert fake.requests[0]["auth"] is None
    assert embedder.dims == 8 and all(len(v) == 8 for v in vectors)
    # Fixed from then on: a reply of another size is refused.
    fake.dims = 9
    with pytest.raises(EmbedderError) as info:
        await embedder.embed(["x"])
    assert info.value.code == "embedder_wrong_dims"


async def test_openai_sends_dimensions(fake: FakeEndpoint) -> None:
    embedder = OpenAIEmbedder(fake.url, "m", dims=256, send_dimensions=True)
    [vector] = await embedder.embed(["x"])
    assert len(vector) == 256
    assert fake.requests[0]["body"]["dimensions"] == 256


@pytest.mark.parametrize(("mode", "code"), [("wrong_dims", "embedder_wrong_dims"),
                                            ("wrong_count", "embedder_wrong_count"),
                                            ("garbage", "embedder_bad_reply"),
                                            ("base64", "embedder_bad_reply"),
                                            ("status:400", "embedder_rejected"),
                                            ("status:401", "embedder_rejected")])
async def test_openai_bad_replies(fake: FakeEndpoint, mode: str, code: str) -> None:
    fake.mode = mode
    embedder = OpenAIEmbedder(fake.url, "m", KEY, dims=8)
    with pytest.raises(EmbedderError) as info:
        await embedder.embed(["a", "b"])
    assert info.value.code == code
    assert not info.value.retryable
    assert KEY not in str(info.value)


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_openai_overloaded_is_retryable(fake: FakeEndpoint, status: int) -> None:
    fake.mode = f"status:{status}"
    with pytest.raises(EmbedderUnavailableError) as info:
        await OpenAIEmbedder(fake.url, "m", KEY, dims=8).embed(["a"])
    assert isinstance(info.value, UnavailableError) and info.value.retryable
    assert info.value.code == "embedder_unavailable"
    assert str(status) in str(info.value) and KEY not in str(info.value)


async def test_openai_timeout(fake: FakeEndpoint) -> None:
    fake.mode = "slow"
    started = time.monotonic()
    with pytest.raises(EmbedderUnavailableError) as info:
        await OpenAIEmbedder(fake.url, "m", dims=8, timeout_s=0.2).embed(["a"])
    assert time.monotonic() - started < 0.9
    assert "TimeoutError" in str(info.value)


async def test_openai_unreachable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(EmbedderUnavailableError):
        await OpenAIEmbedder(f"http://127.0.0.1:{port}/v1", "m", dims=8, timeout_s=2).embed(["a"])


@pytest.mark.parametrize(("kwargs", "path"), [({"base_url": "ftp://x/v1"}, "AGENTLEDGER_EMBEDDINGS_URL"),
                                              ({"base_url": ""}, "AGENTLEDGER_EMBEDDINGS_URL"),
                                              ({"model": ""}, "AGENTLEDGER_EMBEDDINGS_MODEL"),
                                              ({"dims": -1}, "AGENTLEDGER_EMBEDDINGS_DIMS"),
                                              ({"send_dimensions": True}, "AGENTLEDGER_EMBEDDINGS_SEND_DIMS")])
def test_openai_bad_config(kwargs: dict[str, Any], path: str) -> None:
    args: dict[str, Any] = {"base_url": "http://127.0.0.1:1/v1", "model": "m"} | kwargs
    with pytest.raises(ContractError) as info:
        OpenAIEmbedder(**args)
    assert (info.value.code, info.value.path) == ("invalid_config", path)


# --- load_embedder and settings -------------------------------------------------------------


def test_load_default_is_wordllama() -> None:
    assert isinstance(load_embedder(Settings()), WordLlamaEmbedder)


async def test_load_openai_reads_key_file(fake: FakeEndpoint, tmp_path: Path) -> None:
    key_file = tmp_path / "embeddings.key"
    key_file.write_text(KEY + "\n")
    settings = config.from_env({"AGENTLEDGER_EMBEDDER": "openai", "AGENTLEDGER_EMBEDDINGS_URL": fake.url,
                                "AGENTLEDGER_EMBEDDINGS_MODEL": "m", "AGENTLEDGER_EMBEDDINGS_KEY_FILE": str(key_file),
                                "AGENTLEDGER_EMBEDDINGS_DIMS": "16", "AGENTLEDGER_EMBEDDINGS_SEND_DIMS": "true",
                                "AGENTLEDGER_EMBEDDINGS_TIMEOUT_S": "5"})
    embedder = load_embedder(settings)
    assert isinstance(embedder, OpenAIEmbedder)
    assert embedder.dims == 16 and KEY not in repr(embedder)
    [vector] = await embedder.embed(["x"])
    assert len(vector) == 16
    assert fake.requests[0]["auth"] == f"Bearer {KEY}"
    assert fake.requests[0]["body"]["dimensions"] == 16


@pytest.mark.parametrize("content", [None, "", "two words"])
def test_load_openai_bad_key_file(tmp_path: Path, content: str | None) -> None:
    key_file = tmp_path / "embeddings.key"
    if content is not None:
        key_file.write_text(content)
    settings = Settings(embedder="openai", embeddings_url="http://127.0.0.1:1/v1", embeddings_model="m",
                        embeddings_key_file=key_file)
    with pytest.raises(ContractError) as info:
        load_embedder(settings)
    assert info.value.path == "AGENTLEDGER_EMBEDDINGS_KEY_FILE"
    if content:
        assert content not in str(info.value)


def test_load_unknown_embedder() -> None:
    with pytest.raises(ContractError) as info:
        load_embedder(Settings(embedder="bert"))
    assert (info.value.code, info.value.path) == ("invalid_config", "AGENTLEDGER_EMBEDDER")


def test_settings_bool_parsing() -> None:
    assert config.from_env({"AGENTLEDGER_EMBEDDINGS_SEND_DIMS": "False"}).embeddings_send_dims is False
    assert config.from_env({"AGENTLEDGER_EMBEDDINGS_SEND_DIMS": "1"}).embeddings_send_dims is True
    with pytest.raises(ContractError) as info:
        config.from_env({"AGENTLEDGER_EMBEDDINGS_SEND_DIMS": "maybe"})
    assert info.value.path == "AGENTLEDGER_EMBEDDINGS_SEND_DIMS"
