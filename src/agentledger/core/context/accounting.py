"""The budget of a build and the counter that measures it: exact or an estimate with a margin.

``B = floor((window - reserve) / margin) - system - tools``. With the model's own
tokenizer bundled (``margin = 1``) that is ``window - system - tools - reserve``.
Otherwise the count is tiktoken's and the margin says how far a provider's real count
may be above it: dividing the space by the margin keeps ``margin x (system + tools +
rendered) ≤ window - reserve``, while every reported count stays an exact, additive
tiktoken count (multiplying each count by the margin would round per unit and break
``count(text) == sum(parts)``).

Margins (documented estimates, not measurements of ours):

- ``1.0``: no model named, or an OpenAI model whose encoding is the one requested
  (``gpt-4o*``, ``gpt-4.1*``, ``gpt-4.5*``, ``gpt-5*``, ``o1*``/``o3*``/``o4*``,
  ``chatgpt-4o*`` → o200k_base; ``gpt-4*``, ``gpt-3.5*``, ``text-embedding-*`` → cl100k_base);
- ``1.1``: an OpenAI model counted with the other bundled encoding (the two differ by a
  few percent on English, more on code and CJK);
- ``1.4``: ``claude*`` (tiktoken is reported ~40% under Anthropic's count on prose, more
  on tool definitions);
- ``1.3``: any other model (Gemini, Llama, Mistral, Qwen, DeepSeek…), whose tokenizers
  are in the same range as cl100k_base on English but not on CJK.

A provider's token-count function can be plugged in instead (``provider=``); it is then
trusted as exact, and must be additive over the rendered segments (``render`` checks).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

from agentledger.errors import ContractError
from agentledger.models import tokens

Count = Callable[[str], int]

MARGIN_EXACT = 1.0
MARGIN_OTHER_OPENAI_ENCODING = 1.1
MARGIN_CLAUDE = 1.4
MARGIN_OTHER = 1.3

_O200K_PREFIXES = ("gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "gpt-oss")
_CL100K_PREFIXES = ("gpt-4", "gpt-3.5", "gpt-35", "text-embedding-")


class BudgetTooSmallError(ContractError):
    """The window leaves no room (or too little for the mandatory units).

    ``mandatory``: ids of the mandatory units (empty when even the fixed parts do not
    fit); ``shortfall``: tokens missing.
    """

    code = "budget_too_small"

    def __init__(self, message: str, *, mandatory: list[str], shortfall: int,
                 path: str | None = "$.window_tokens") -> None:
        super().__init__(message, path=path)
        self.mandatory = mandatory
        self.shortfall = shortfall


class Counter(NamedTuple):
    """A token counter: ``count``, whether it is the model's own tokenizer, and the margin."""

    count: Count
    exact: bool
    margin: float
    encoding: str
    basis: str


def model_encoding(model: str) -> str | None:
    """The bundled encoding an OpenAI model uses, or None when its tokenizer is not bundled."""
    m = model.lower()
    if m.startswith(_O200K_PREFIXES):
        return "o200k_base"
    if m.startswith(_CL100K_PREFIXES):
        return "cl100k_base"
    return None


def counter_for(model: str | None, encoding: str = tokens.DEFAULT_ENCODING, *,
                provider: Count | None = None) -> Counter:
    """The counter of a build: exact when ``encoding`` is the model's tokenizer, else with a margin.

    Raises ``UnknownEncodingError`` (``unknown_encoding``, path ``encoding``) for an
    encoding that is not bundled.
    """
    tokens.encoding(encoding)  # fail early (and load the ranks once) on an unknown encoding
    if provider is not None:
        return Counter(provider, True, MARGIN_EXACT, encoding, "provider")

    def count(text: str) -> int:
        return tokens.count(text, encoding)

    if model is None:
        return Counter(count, True, MARGIN_EXACT, encoding, "no_model")
    own = model_encoding(model)
    if own == encoding:
        return Counter(count, True, MARGIN_EXACT, encoding, f"{model} uses {encoding}")
    if own is not None:
        return Counter(count, False, MARGIN_OTHER_OPENAI_ENCODING, encoding, f"{model} uses {own}")
    if model.lower().startswith("claude"):
        return Counter(count, False, MARGIN_CLAUDE, encoding, "claude tokenizer not bundled")
    return Counter(count, False, MARGIN_OTHER, encoding, "tokenizer not bundled")


def budget(window: int, reserve: int, system_tokens: int, tools_tokens: int, margin: float = MARGIN_EXACT) -> int:
    """``B = floor((window - reserve) / margin) - system - tools``; raises ``budget_too_small`` if ``B < 1``."""
    if margin < 1.0:
        raise ContractError(f"margin {margin} below 1", code="invalid_field", path="margin")
    space = math.floor((window - reserve) / margin)
    b = space - system_tokens - tools_tokens
    if b < 1:
        raise BudgetTooSmallError(
            f"window {window} - reserve {reserve} (margin {margin}) leaves {space} tokens; the system parts "
            f"({system_tokens}) and tools ({tools_tokens}) leave {b}", mandatory=[], shortfall=1 - b)
    return b
