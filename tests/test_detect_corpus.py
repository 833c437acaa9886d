"""The detectors on the seeded corpus of ``bench.detect_corpus``: the issue-22 targets hold on
the tuning seed, and on a second seed restricted to the syntaxes and kinds kept out of tuning."""

from __future__ import annotations

import pytest

from agentledger.bench import detect_corpus
from agentledger.bench.detector import HELD_OUT_SEED, TUNE_SEED, quality


@pytest.fixture(scope="module")
def tuned() -> dict:
    return quality(TUNE_SEED, held_out=False)


@pytest.fixture(scope="module")
def held() -> dict:
    return quality(HELD_OUT_SEED, held_out=True)


def test_corpus_is_broad() -> None:
    samples = detect_corpus.secrets(TUNE_SEED)
    assert len({s.kind for s in samples}) >= 80
    assert len({s.syntax for s in samples}) >= 25
    assert len({s.syntax for s in detect_corpus.personal(TUNE_SEED) if s.kind in ("phone", "iban")}) >= 10
    assert detect_corpus.secrets(TUNE_SEED) == samples  # seeded: the same corpus every run
    assert detect_corpus.secrets(HELD_OUT_SEED) != samples


@pytest.mark.parametrize("figures", ["tuned", "held"])
def test_targets(figures: str, request: pytest.FixtureRequest) -> None:
    q = request.getfixturevalue(figures)
    assert q["strict_recall"] >= 0.98, q["missed"]
    assert q["lookalike_fp"] <= 0.05, q["flagged"]
    assert q["personal_recall"] >= 0.95, q["personal_missed"]
    assert q["false_redactions"] <= 0.01, q["chat_redacted"]


def test_passwords_with_punctuation_in_every_syntax(tuned: dict) -> None:
    missed = [m for m in tuned["missed"] if m.split("/")[0].endswith("password")]
    assert not missed
