"""Exact token counts with tiktoken, offline.

``tiktoken.get_encoding`` downloads its BPE file on first use, which cannot happen here (no
network) and must not happen in production (a count would depend on a remote blob). The BPE
files of the encodings we support ship in ``agentledger/data/`` (see its README for their
provenance and licence); each is checked against the sha256 that tiktoken itself pins for
OpenAI's file, and the ``tiktoken.Encoding`` is built directly from it with the same split
pattern and special tokens as ``tiktoken_ext/openai_public.py``. Nothing here calls
``get_encoding``, so tiktoken never touches its cache folder or the network.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import threading
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable

import tiktoken

from agentledger.errors import AgentLedgerError, ContractError


class UnknownEncodingError(ContractError):
    """A request named an encoding that is not bundled (the name is a per-request choice)."""

    code = "unknown_encoding"


class EncodingDataError(AgentLedgerError):
    """A bundled BPE file is missing or does not match its pinned hash: the install is broken.

    Never answered by a download: a count from other ranks than the pinned ones would be wrong
    without anyone noticing.
    """

    code = "encoding_data_corrupt"


_ENDOFTEXT = "<|endoftext|>"
_FIM_PREFIX = "<|fim_prefix|>"
_FIM_MIDDLE = "<|fim_middle|>"
_FIM_SUFFIX = "<|fim_suffix|>"
_ENDOFPROMPT = "<|endofprompt|>"


@dataclass(frozen=True, slots=True)
class _Spec:
    file: str
    sha256: str
    pat_str: str
    special_tokens: dict[str, int]


# Copied from tiktoken 0.14 `tiktoken_ext/openai_public.py`; the hashes are its `expected_hash`.
_SPECS: dict[str, _Spec] = {
    "cl100k_base": _Spec(
        file="cl100k_base.tiktoken",
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pat_str=r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",  # noqa: E501 - verbatim
        special_tokens={_ENDOFTEXT: 100257, _FIM_PREFIX: 100258, _FIM_MIDDLE: 100259,
                        _FIM_SUFFIX: 100260, _ENDOFPROMPT: 100276},
    ),
    "o200k_base": _Spec(
        file="o200k_base.tiktoken",
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str="|".join([
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]),
        special_tokens={_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
    ),
}

KNOWN_ENCODINGS: tuple[str, ...] = tuple(_SPECS)
DEFAULT_ENCODING = "cl100k_base"

# Folder of the bundled files; a module attribute so a test can point it at a tampered copy.
_DATA: Traversable = resources.files("agentledger") / "data"
_LOCK = threading.Lock()


def encoding(name: str = DEFAULT_ENCODING) -> tiktoken.Encoding:
    """The tiktoken ``Encoding`` called ``name``, built once from its bundled, hash-checked file."""
    spec = _SPECS.get(name)
    if spec is None:
        raise UnknownEncodingError(f"unknown encoding {name!r}; known: {', '.join(KNOWN_ENCODINGS)}",
                                   path="encoding")
    # The lock keeps two threads from each parsing a 4 MB file; functools.cache alone would not.
    with _LOCK:
        return _build(name)


def count(text: str, name: str = DEFAULT_ENCODING) -> int:
    """Number of tokens of ``text`` in encoding ``name``.

    Special-token strings inside ``text`` (``<|endoftext|>``...) count as ordinary text, as a
    provider's API treats user content; they never raise.
    """
    return len(encoding(name).encode_ordinary(text))


@functools.cache
def _build(name: str) -> tiktoken.Encoding:
    spec = _SPECS[name]
    return tiktoken.Encoding(name=name, pat_str=spec.pat_str, mergeable_ranks=_ranks(spec),
                             special_tokens=spec.special_tokens)


def _ranks(spec: _Spec) -> dict[bytes, int]:
    source = _DATA / spec.file
    try:
        data = source.read_bytes()
    except OSError as exc:
        raise EncodingDataError(f"bundled BPE file {spec.file} cannot be read: {exc}") from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != spec.sha256:
        raise EncodingDataError(f"bundled BPE file {spec.file} has sha256 {digest}, expected {spec.sha256}; "
                                "reinstall agentledger")
    # Same format as tiktoken.load.load_tiktoken_bpe: "<base64 token> <rank>" per line.
    return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in data.splitlines() if line)}
