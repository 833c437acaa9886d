"""Secret redaction over whole events, generically, so a new event kind is covered as it lands.

Every string of an event is scanned; how is read from the contracts' types, not
listed by hand:

* **text** (any ``str`` without a ``pattern`` that may be longer than 128
  characters: ``Text``, goal text, turn content, ``MemoryText``, memory keys,
  ``external_ref``, a source's ``ref``; and every string value inside an ``Any``
  value: outputs, variables, memory values): every rule; secrets are replaced by
  markers;
* **names** (a ``str`` of at most 128 characters without a pattern: producers,
  variable and output names, error codes, tools, schemas, actors, trace ids; and
  the member names of ``Any`` objects): every rule but the shape-only entropy rule
  (a name may be random by design: a trace id, a tool call id); replaced by markers;
* **identifiers** (a ``str`` with a ``pattern``: event, task, step and record ids,
  tenants; and the ``idempotency_key``, how an external system is asked what
  happened) and **references** (every string of an ``ArtifactRef``, a content
  address checked against our store): the token formats, credential URLs, private
  keys and bearer tokens, plain or encoded. Rewriting one would change what it
  names, so an event with a secret there is refused (``secret_in_identifier``);
* not scanned: ``Literal`` enums, hex-only patterns (``Hash``: 64 lowercase hex,
  a verified digest; hex is never a secret by shape), and ``Sealed`` values
  (ciphertext the services made after their plaintext was scanned).

A secret split across adjacent strings of one event (in the order the contract
declares its fields, list items and object members: ``"ghp_aB3dE5"`` in one,
``"fG7hJ9…"`` in the next) is found on the joined edges: the last word of each
string, every string that is one word, and the first word of the next. A match
that crosses an edge redacts its piece in each string, all with the marker of the
whole secret.

Inside ``Any`` values a string under a credential-named key (``{"password": "…"}``),
or the ``value`` of a struct whose ``name`` is one (a variable ``db_password``), is
a credential whatever it looks like. A goal whose text or criteria changed gets
its ``goal_hash`` recomputed, so the stored goal still verifies.

Markers are keyed (``secrets.marker``): the writer passes its installation's key.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgspec
import msgspec.inspect as mi

from agentledger.contracts import events as ev
from agentledger.core.detect.secrets import TOKEN_HINT, TOKEN_START, find_secrets, replace_spans, starts_token
from agentledger.core.validate import goal_hash
from agentledger.errors import ContractError

_NAME_MAX = 128
_TEXT, _NAME, _ID = "text", "name", "identifier"
_OPAQUE = ev.Sealed
_REFERENCES = (ev.ArtifactRef,)
_IDENTIFIER_FIELDS = frozenset({"idempotency_key"})
_HEX_ONLY = re.compile(r"^\^\[0-9a-f(?:A-F)?\]\{\d+(?:,\d*)?\}\$$")
_CREDENTIAL_KEY = re.compile(
    r"^(?:[A-Za-z0-9]+[_.-])*(?:pass(?:word|wd|phrase)|pwd|secret(?:[_-]?key)?|token|api[_-]?key|apikey"
    r"|access[_-]?key(?:[_-]?id)?|private[_-]?key|client[_-]?secret|credentials?|auth[_-]?token"
    r"|authorization|cookie|session[_-]?id)$", re.IGNORECASE)
_NOT_A_VALUE = re.compile(r"^(?:\*+|x+|none|null|redacted|\[REDACTED:[a-z0-9_]+:[0-9a-f]{8}\])$", re.IGNORECASE)
# Strings up to this long go whole into the quick test of split secrets; of longer ones, the
# first and last words (scanning them whole would cost more than the rest of the redaction).
_HINT_WHOLE = 256
# The shortest token an identifier's scan can find (``xoxb-`` and 10 characters), but a URL
# with credentials or a percent-encoded one.
_ID_MIN = 15
# Edges longer than this are cut to it when joined with a neighbour (a token is shorter).
_EDGE_MAX = 512
# Last words that start a token and are joined with every other string's first word: at
# most this many per event, so an event full of them costs a bounded number of scans.
_DANGLING_MAX = 8
# Most pieces one split secret is looked for in (a 40-character token in 1-character strings).
_SPLIT_PIECES = 64

# A replacement span: (start, end, kind, the whole secret the marker is made of).
_Span = tuple[int, int, str, str]
# A piece of a chain of joined strings: (string index, start, end).
_Piece = tuple[int, int, int]


class _Refused(Exception):  # noqa: N818 - internal signal, turned into a ContractError below
    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        self.path: list[str] = []


class _Pass:
    """One walk over an event. The first collects every string in walk order (with how it
    is scanned and the key naming it); the second hands back each one's replacement."""

    def __init__(self, replacements: list[str | None] | None = None) -> None:
        self.strings: list[tuple[str, str, str | None]] = []
        self._replacements = replacements
        self._at = 0

    def visit(self, value: str, level: str, key: str | None, limit: int | None) -> str:
        if self._replacements is None:
            self.strings.append((value, level, key))
            return value
        new = self._replacements[self._at]
        self._at += 1
        if new is None:
            return value
        if level == _ID:
            raise _Refused("secret_in_identifier", "a secret in an identifier or reference, which cannot "
                           "be redacted without changing what it names; send the secret nowhere")
        if limit is not None and len(new) > limit:
            raise _Refused("redacted_too_long", f"after secret redaction the field is longer than its limit "
                           f"of {limit}; send the secret nowhere, or shorten the text")
        return new


Walker = Callable[[Any, "str | None", _Pass], Any]


def redact_event(event: ev.EventBase, *, key: bytes | None = None) -> tuple[ev.EventBase, int]:
    """``event`` with every secret in its strings replaced by a marker keyed with ``key``,
    and how many were replaced.

    The same object comes back when there was nothing to replace (the common case).
    Raises ``ContractError``: ``secret_in_identifier`` when an identifier or a reference
    holds one, ``redacted_too_long`` in the rare case a marker makes a field longer than
    its contract allows.
    """
    walk = _struct_walker(type(event), None)
    if walk is None:
        return event, 0
    first = _Pass()
    walk(event, None, first)
    replacements, n = _replacements(first.strings, key)
    if not n:
        return event, 0
    try:
        out = walk(event, None, _Pass(replacements))
    except _Refused as exc:
        path = "".join(p if p.startswith("[") else "." + p for p in reversed(exc.path))
        raise ContractError(exc.message, code=exc.code, path="$" + path) from None
    if isinstance(out, ev.TaskCreatedEvent):
        goal = out.payload.goal
        goal = msgspec.structs.replace(goal, goal_hash=goal_hash(goal.text, goal.acceptance_criteria))
        out = msgspec.structs.replace(out, payload=msgspec.structs.replace(out.payload, goal=goal))
    return out, n


def redact_text(text: str, field: str | None = None, *, key: bytes | None = None) -> tuple[str, int]:
    """One free-text string: its secrets replaced; all of it when ``field`` names a credential."""
    spans = _own_spans(text, _TEXT, field)
    return replace_spans(text, spans, key), len(spans)


def _own_spans(text: str, level: str, field: str | None) -> list[_Span]:
    """What one string holds, on its own."""
    if level == _ID and len(text) < _ID_MIN and "://" not in text and "%" not in text:
        return []  # too short for any token format (the quick test of the hot path)
    if (field is not None and level == _TEXT and _CREDENTIAL_KEY.match(field) and len(text) >= 4
            and not _NOT_A_VALUE.match(text)):
        return [(0, len(text), "credential", text)]
    found = find_secrets(text, entropy=level == _TEXT, assignments=level != _ID)
    return [(f.start, f.end, f.kind, text[f.start:f.end]) for f in found]


def _replacements(strings: list[tuple[str, str, str | None]], key: bytes | None
                  ) -> tuple[list[str | None], int]:
    """Each string's redacted form (None: unchanged), and how many spans were replaced."""
    spans: dict[int, list[_Span]] = {}
    for i, (text, level, field) in enumerate(strings):
        if own := _own_spans(text, level, field):
            spans[i] = own
    for i, span in _split_secrets([text if level != _ID else "" for text, level, _ in strings]):
        spans.setdefault(i, []).append(span)
    out: list[str | None] = [None] * len(strings)
    n = 0
    for i, found in spans.items():
        merged = _disjoint(strings[i][0], found)
        out[i] = replace_spans(strings[i][0], merged, key)
        n += len(merged)
    return out, n


def _split_secrets(strings: list[str]) -> list[tuple[int, _Span]]:
    """Secrets that cross from one string into another: (string index, its piece).

    Chains are joined of the last word of a string, the strings after it that are one
    word each, and the first word of the string that ends the chain; only a match
    that crosses a join counts (one inside a piece is the string's own). Empty strings
    are skipped: they separate nothing; so are identifiers (given here as empty), whose
    short values would otherwise complete a token's start (``sk_live_…`` + ``e1`` +
    ``acme``) and refuse the event. A last word that starts a token format and
    holds no whole secret (``ghp_aB3d``) is also joined with the first word of every
    other string, at most ``_DANGLING_MAX`` of them per event.
    """
    if TOKEN_HINT.search("\n".join(t if len(t) <= _HINT_WHOLE else _edge_words(t) for t in strings)) is None:
        return []  # the common case: no piece could start a token, so nothing crosses a join
    chains, tails, heads = _chains(strings)
    out = [found for chain in chains for found in _crossing(strings, chain)]
    for tail in tails:
        for first in heads:
            if first[0] != tail[0]:
                out += _crossing(strings, [tail, first])
    return out


def _chains(strings: list[str]) -> tuple[list[list[_Piece]], list[_Piece], list[_Piece]]:
    """The chains of joined edges, the dangling last words (at most ``_DANGLING_MAX``), and
    every string's first word (see ``_split_secrets``)."""
    chains: list[list[_Piece]] = []
    chain: list[_Piece] = []
    tails: list[_Piece] = []
    heads: list[_Piece] = []
    for i, text in enumerate(strings):
        if not text:
            continue
        words = text.split(None, 1)
        whole = not text[0].isspace() and not text[-1].isspace() and len(words) == 1
        head = 0 if text[0].isspace() else min(len(words[0]), _EDGE_MAX)
        if head:
            heads.append((i, 0, head))
        tail = None
        if not text[-1].isspace():
            tail = (i, len(text) - min(len(text.rsplit(None, 1)[-1]), _EDGE_MAX), len(text))
            if len(tails) < _DANGLING_MAX and starts_token(text[tail[1]:]):
                tails.append(tail)
        if chain:
            if head:
                chain.append((i, 0, len(text) if whole else head))
            if whole:
                continue
            chains.append(chain)
            chain = []
        if tail is not None:
            chain = [tail]
    return [*chains, chain], tails, heads


def _edge_words(text: str) -> str:
    """The first and the last word of ``text`` (every piece of a chain is in one of them)."""
    words = text.split(None, 1)
    return f"{words[0]} {text.rsplit(None, 1)[-1]}" if words else ""


def _crossing(strings: list[str], chain: list[_Piece]) -> list[tuple[int, _Span]]:
    """The pieces of the secrets that cross a join of ``chain``.

    Only from where a token format starts (``TOKEN_START``: a split secret has its
    start in some piece), joined with one more piece at a time up to ``_SPLIT_PIECES``
    pieces, and the first join that gives a match ends the search from that start
    (a glued neighbour would otherwise run a greedy pattern on into the next strings).
    A start whose piece already holds a whole secret of a kind is not a split one of
    that kind: the string's own scan redacts it.
    """
    out: list[tuple[int, _Span]] = []
    starts = 0
    for j, (i, a, b) in enumerate(chain[:-1]):
        m = TOKEN_START.search(strings[i], a, b)
        if m is None:
            continue
        starts += 1
        if starts > _DANGLING_MAX:
            break
        sub = [(i, m.start(), b)]
        whole = {f.kind for f in find_secrets(strings[i][m.start():b], entropy=False)}
        for piece in chain[j + 1:j + _SPLIT_PIECES]:
            sub.append(piece)
            if found := _crossing_matches(strings, sub, whole):
                out += found
                break
    return out


def _crossing_matches(strings: list[str], sub: list[_Piece], whole: set[str]
                      ) -> list[tuple[int, _Span]]:
    joined = "".join(strings[i][a:b] for i, a, b in sub)
    out: list[tuple[int, _Span]] = []
    for f in find_secrets(joined, entropy=False):
        if f.kind in whole:
            continue
        pieces: list[tuple[int, _Span]] = []
        at = 0
        for i, a, b in sub:
            lo, hi = max(f.start, at), min(f.end, at + b - a)
            if lo < hi:
                pieces.append((i, (a + lo - at, a + hi - at, f.kind, joined[f.start:f.end])))
            at += b - a
        if len(pieces) > 1:
            out += pieces
    return out


def _disjoint(text: str, spans: list[_Span]) -> list[_Span]:
    """Sorted, overlapping spans merged (a merged span's marker is of its own text)."""
    out: list[_Span] = []
    for span in sorted(spans, key=lambda s: (s[0], -s[1])):
        if out and span[0] < out[-1][1]:
            last = out[-1]
            if span[1] > last[1]:
                out[-1] = (last[0], span[1], last[2], text[last[0]:span[1]])
            continue
        out.append(span)
    return out


def _walk_any(value: Any, key: str | None, p: _Pass) -> Any:
    """A JSON value: member names are names, strings are text keyed by their member name."""
    if isinstance(value, str):
        return p.visit(value, _TEXT, key, None)
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        changed = False
        for k, v in value.items():
            nk = p.visit(k, _NAME, None, None) if isinstance(k, str) else k
            nv = _walk_any(v, k if isinstance(k, str) else None, p)
            changed = changed or nk is not k or nv is not v
            out[nk] = nv
        return out if changed else value
    if isinstance(value, list):
        items = [_walk_any(v, key, p) for v in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    return value


def _string_walker(level: str, limit: int | None) -> Walker:
    def walk(value: Any, key: str | None, p: _Pass) -> Any:
        return p.visit(value, level, key, limit) if isinstance(value, str) else value
    return walk


def _list_walker(item: Walker) -> Walker:
    def walk(value: Any, key: str | None, p: _Pass) -> Any:
        if not value:
            return value
        items = []
        for i, v in enumerate(value):
            try:
                items.append(item(v, key, p))
            except _Refused as exc:
                exc.path.append(f"[{i}]")
                raise
        changed = any(a is not b for a, b in zip(items, value, strict=True))
        return type(value)(items) if changed else value
    return walk


def _dict_walker(key_walker: Walker | None, item: Walker | None) -> Walker:
    def walk(value: Any, key: str | None, p: _Pass) -> Any:
        out = {}
        changed = False
        for k, v in value.items():
            try:
                nk = key_walker(k, None, p) if key_walker is not None else k
                nv = item(v, k if isinstance(k, str) else None, p) if item is not None else v
            except _Refused as exc:
                exc.path.append(str(k))
                raise
            changed = changed or nk is not k or nv is not v
            out[nk] = nv
        return out if changed else value
    return walk


def _union_walker(walkers: list[tuple[type, Walker]]) -> Walker:
    def walk(value: Any, key: str | None, p: _Pass) -> Any:
        for cls, w in walkers:
            if isinstance(value, cls):
                return w(value, key, p)
        return value
    return walk


def _level(t: mi.StrType, forced: str | None) -> str | None:
    """How a string type is scanned (see the module docstring); None: not at all."""
    if t.pattern is not None and _HEX_ONLY.match(t.pattern):
        return None
    if forced is not None or t.pattern is not None:
        return forced or _ID
    return _NAME if t.max_length is not None and t.max_length <= _NAME_MAX else _TEXT


def _walker(t: mi.Type, forced: str | None) -> Walker | None:  # noqa: PLR0911 - one case per kind of type
    """How to scan a value of type ``t``; None when it holds no string to scan.

    ``forced``: the level of every string below (identifiers and references)."""
    if isinstance(t, mi.Metadata):
        return _walker(t.type, forced)
    if isinstance(t, mi.AnyType):
        return _walk_any
    if isinstance(t, mi.StrType):
        level = _level(t, forced)
        return None if level is None else _string_walker(level, t.max_length)
    if isinstance(t, mi.StructType):
        return _struct_walker(t.cls, forced)
    if isinstance(t, mi.ListType | mi.VarTupleType | mi.SetType | mi.FrozenSetType):
        item = _walker(t.item_type, forced)
        return None if item is None else _list_walker(item)
    if isinstance(t, mi.DictType):
        keys, values = _walker(t.key_type, forced), _walker(t.value_type, forced)
        return None if keys is None and values is None else _dict_walker(keys, values)
    if isinstance(t, mi.UnionType):
        parts = []
        for member in t.types:
            w = _walker(member, forced)
            if w is not None:
                parts.append((_runtime_class(member), w))
        return _union_walker(parts) if parts else None
    return None


def _runtime_class(t: mi.Type) -> type:
    while isinstance(t, mi.Metadata):
        t = t.type
    if isinstance(t, mi.StructType):
        return t.cls
    if isinstance(t, mi.StrType):
        return str
    if isinstance(t, mi.DictType):
        return dict
    return object if isinstance(t, mi.AnyType) else list


_STRUCTS: dict[tuple[type, str | None], Walker | None] = {}


def _struct_walker(cls: type, forced: str | None) -> Walker | None:
    if (cls, forced) in _STRUCTS:
        return _STRUCTS[cls, forced]
    if issubclass(cls, _OPAQUE):
        _STRUCTS[cls, forced] = None
        return None
    if issubclass(cls, _REFERENCES):
        forced = _ID
    _STRUCTS[cls, forced] = None  # a recursive reference sees "nothing" until this one is built
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    fields = [(f.name, w) for f in info.fields
              if (w := _walker(f.type, _ID if f.name in _IDENTIFIER_FIELDS else forced)) is not None]
    if not fields:
        return None
    # A ``value`` next to a ``name`` is keyed by it (a variable called ``api_key``).
    names = {f.name for f in info.fields}
    keyed = "name" in names and "value" in names

    def walk(value: Any, key: str | None, p: _Pass) -> Any:
        changed = {}
        for name, w in fields:
            k = value.name if keyed and name == "value" else None
            v = getattr(value, name)
            try:
                nv = w(v, k, p)
            except _Refused as exc:
                exc.path.append(name)
                raise
            if nv is not v:
                changed[name] = nv
        return msgspec.structs.replace(value, **changed) if changed else value

    _STRUCTS[cls, forced] = walk
    return walk


def scanned_fields(cls: type) -> dict[str, str]:
    """Every string path of ``cls`` (dotted, ``[]`` for items, ``{}`` for members) and how it
    is scanned (``text``, ``name``, ``identifier``): for tests and docs."""
    out: dict[str, str] = {}

    def visit(t: mi.Type, path: str, forced: str | None) -> None:
        while isinstance(t, mi.Metadata):
            t = t.type
        if isinstance(t, mi.AnyType):
            out[f"{path} (any JSON)"] = _TEXT
        elif isinstance(t, mi.StrType):
            if (level := _level(t, forced)) is not None:
                out[path] = level
        elif isinstance(t, mi.StructType):
            if not issubclass(t.cls, _OPAQUE):
                inner = _ID if issubclass(t.cls, _REFERENCES) else forced
                for f in t.fields:
                    visit(f.type, f"{path}.{f.name}" if path else f.name,
                          _ID if f.name in _IDENTIFIER_FIELDS else inner)
        elif isinstance(t, mi.ListType | mi.VarTupleType | mi.SetType | mi.FrozenSetType):
            visit(t.item_type, f"{path}[]", forced)
        elif isinstance(t, mi.DictType):
            visit(t.key_type, f"{path}{{key}}", forced)
            visit(t.value_type, f"{path}{{}}", forced)
        elif isinstance(t, mi.UnionType):
            for member in t.types:
                visit(member, path, forced)

    visit(mi.type_info(cls), "", None)
    return out
