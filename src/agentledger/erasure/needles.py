"""What the scans search for: each forgotten needle in every form a store may hold it in.

Stores encode text, so a needle found only as its raw bytes would miss most copies. Each needle
is searched as ``raw``; ``json`` and ``json-ascii`` (a JSON string body: quotes and backslashes
escaped, non-ASCII as is or as ``\\uXXXX``, as the ledger's events and structlog lines hold it);
``array`` and ``record`` (PostgreSQL's quoting inside array and composite text); ``lower``
(tsvector lexemes are lower case); ``hex`` (for needles of at least 8 bytes: a bytea rendered as
text). Base64 is not searched. A tsvector holds *normalized* lexemes: a needle is found there only
when it is a single token the parser does not stem (words with digits are kept whole). An
embedding is found by the bytes pgvector stores (``vector_needle`` of the forgotten text's vector,
computed again with the same embedder: measured identical to what the table and its HNSW index
held), by the raw scan only.

A needle is personal data: ``Matcher.mask`` replaces every form of it by ``<needle N>`` in any
text meant for a report.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

# Shorter needles get no hex form: a few hex digits turn up in every digest.
HEX_MIN = 8

# Why a finding does not count: (store, location before masking, needle index) -> reason or None.
Expected = Callable[[str, str, int], "str | None"]
# Needle index -> (reason, byte patterns holding the needle that do not count): an occurrence
# inside one of them only is an expected finding. Used on whole values (messages, columns).
Contexts = Mapping[int, tuple[str, Sequence[bytes]]]


class Form(NamedTuple):
    needle: int
    name: str
    data: bytes


def needle_forms(needles: Sequence[bytes]) -> list[Form]:
    """Every form each needle is searched in (duplicates dropped); an empty needle is refused."""
    forms: list[Form] = []
    for index, needle in enumerate(needles):
        if not needle:
            raise ValueError(f"needle {index} is empty")
        seen: set[bytes] = set()

        def add(name: str, data: bytes, index: int = index, seen: set[bytes] = seen) -> None:
            if data and data not in seen:
                seen.add(data)
                forms.append(Form(index, name, data))

        add("raw", bytes(needle))
        try:
            text = bytes(needle).decode()
        except UnicodeDecodeError:
            text = None
        if text is not None:
            add("json", json.dumps(text, ensure_ascii=False)[1:-1].encode())
            add("json-ascii", json.dumps(text)[1:-1].encode())
            add("array", text.replace("\\", "\\\\").replace('"', '\\"').encode())
            add("record", text.replace("\\", "\\\\").replace('"', '""').encode())
            add("lower", text.lower().encode())
        if len(needle) >= HEX_MIN:
            add("hex", bytes(needle).hex().encode())
    return forms


def vector_needle(values: Sequence[float]) -> bytes:
    """The bytes pgvector stores for a vector (float4, the server's native byte order): a raw-scan
    needle for the embedding of forgotten text, computed again with the embedder that indexed it.
    The logical scan does not match it (vectors read as text); their rows are found by the rest."""
    return struct.pack(f"={len(values)}f", *values)


class Matcher:
    """Searches bytes for every form; masks needles out of text meant for a report."""

    def __init__(self, needles: Sequence[bytes], contexts: Contexts | None = None) -> None:
        self.needles = [bytes(n) for n in needles]
        self.forms = needle_forms(self.needles)
        self.longest = max((len(f.data) for f in self.forms), default=1)
        self.contexts = dict(contexts or {})
        self._masks = sorted({(f.data, f.needle) for f in self.forms}, key=lambda m: -len(m[0]))

    def search(self, data: bytes) -> list[Form]:
        """Every form in ``data`` (contexts not considered: chunks of files)."""
        return [f for f in self.forms if f.data in data]

    def search_value(self, data: bytes) -> list[tuple[Form, str]]:
        """Every form in one whole value, with the reason when it occurs only inside its contexts."""
        out = []
        for form in self.search(data):
            reason = ""
            if form.needle in self.contexts:
                why, patterns = self.contexts[form.needle]
                rest = data
                for pattern in patterns:
                    rest = rest.replace(pattern, b"")
                if form.data not in rest:
                    reason = why
            out.append((form, reason))
        return out

    def mask(self, text: str) -> str:
        """``text`` with every needle form replaced by ``<needle N>``."""
        raw = text.encode(errors="surrogateescape")
        for data, index in self._masks:
            if data in raw:
                raw = raw.replace(data, f"<needle {index}>".encode())
        return raw.decode(errors="replace")
