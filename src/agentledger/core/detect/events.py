"""Secret redaction over whole events, generically, so a new event kind is covered as it lands.

What counts as free text is read from the contracts' types, not listed by hand:

* every ``str`` field whose type has no ``pattern`` and may be longer than 128
  characters (``Text``, goal text, turn content, ``MemoryText``, memory keys,
  ``external_ref``, a source's ``ref``), and every string anywhere inside an ``Any``
  value (outputs, variables, memory values): redacted;
* identifiers are left alone: anything with a ``pattern`` (ids, tokens, hashes,
  step ids), ``Literal`` enums, and short names (``Name``, at most 128 characters:
  producers, variable and output names, error codes, tools, schemas, rules, actors,
  trace ids), plus the idempotency keys (they are how an external system is asked
  what happened; rewriting one would lose the receipt);
* ``Sealed`` values (ciphertext) and ``ArtifactRef`` (a content address in our own
  store, checked against it) are not walked at all.

Inside ``Any`` values a string under a credential-named key (``{"password": "…"}``),
or the ``value`` of a struct whose ``name`` is one (a variable ``db_password``), is
a credential whatever it looks like. A goal whose text or criteria changed gets
its ``goal_hash`` recomputed, so the stored goal still verifies.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgspec
import msgspec.inspect as mi

from agentledger.contracts import events as ev
from agentledger.core.detect.secrets import marker, redact_secrets
from agentledger.core.validate import goal_hash
from agentledger.errors import ContractError

_NAME_MAX = 128
_OPAQUE = (ev.Sealed, ev.ArtifactRef)
_IDENTIFIER_FIELDS = frozenset({"idempotency_key"})
_CREDENTIAL_KEY = re.compile(
    r"^(?:[A-Za-z0-9]+[_.-])*(?:pass(?:word|wd|phrase)|pwd|secret(?:[_-]?key)?|token|api[_-]?key|apikey"
    r"|access[_-]?key(?:[_-]?id)?|private[_-]?key|client[_-]?secret|credentials?|auth[_-]?token"
    r"|authorization|cookie|session[_-]?id)$", re.IGNORECASE)
_NOT_A_VALUE = re.compile(r"^(?:\*+|x+|none|null|redacted|\[REDACTED:[a-z0-9_]+:[0-9a-f]{8}\])$", re.IGNORECASE)

Walker = Callable[[Any, "str | None"], tuple[Any, int]]


class _TooLong(Exception):  # noqa: N818 - internal signal, turned into a ContractError below
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.path: list[str] = []


def redact_event(event: ev.EventBase) -> tuple[ev.EventBase, int]:
    """``event`` with every secret in its free text replaced by a marker, and how many.

    The same object comes back when there was nothing to replace (the common case).
    Raises ``ContractError`` (``redacted_too_long``) in the rare case a marker makes a
    field longer than its contract allows.
    """
    walk = _struct_walker(type(event))
    if walk is None:
        return event, 0
    try:
        out, n = walk(event, None)
    except _TooLong as exc:
        raise ContractError(f"after secret redaction the field is longer than its limit of {exc.limit}; "
                            "send the secret nowhere, or shorten the text", code="redacted_too_long",
                            path="$." + ".".join(reversed(exc.path))) from None
    if n and isinstance(out, ev.TaskCreatedEvent):
        goal = out.payload.goal
        goal = msgspec.structs.replace(goal, goal_hash=goal_hash(goal.text, goal.acceptance_criteria))
        out = msgspec.structs.replace(out, payload=msgspec.structs.replace(out.payload, goal=goal))
    return out, n


def redact_text(text: str, key: str | None = None) -> tuple[str, int]:
    """One string: its secrets replaced; all of it when ``key`` names a credential."""
    if key is not None and _CREDENTIAL_KEY.match(key) and len(text) >= 4 and not _NOT_A_VALUE.match(text):
        return marker("credential", text), 1
    out, found = redact_secrets(text)
    return out, len(found)


def _redact_any(value: Any, key: str | None) -> tuple[Any, int]:
    if isinstance(value, str):
        return redact_text(value, key)
    if isinstance(value, dict):
        total = 0
        changed: dict[Any, Any] = {}
        for k, v in value.items():
            nv, n = _redact_any(v, k if isinstance(k, str) else None)
            if n:
                changed[k] = nv
                total += n
        return ({**value, **changed} if total else value), total
    if isinstance(value, list):
        total = 0
        items = []
        for v in value:
            nv, n = _redact_any(v, key)
            items.append(nv)
            total += n
        return (items if total else value), total
    return value, 0


def _text_walker(limit: int | None) -> Walker:
    def walk(value: Any, key: str | None) -> tuple[Any, int]:
        if not isinstance(value, str):
            return value, 0
        out, n = redact_text(value, key)
        if n and limit is not None and len(out) > limit:
            raise _TooLong(limit)
        return out, n
    return walk


def _list_walker(item: Walker) -> Walker:
    def walk(value: Any, key: str | None) -> tuple[Any, int]:
        if not value:
            return value, 0
        total = 0
        items = []
        for i, v in enumerate(value):
            try:
                nv, n = item(v, key)
            except _TooLong as exc:
                exc.path.append(f"[{i}]")
                raise
            items.append(nv)
            total += n
        return (type(value)(items) if total else value), total
    return walk


def _dict_walker(item: Walker) -> Walker:
    def walk(value: Any, key: str | None) -> tuple[Any, int]:
        total = 0
        changed = {}
        for k, v in value.items():
            nv, n = item(v, k if isinstance(k, str) else None)
            if n:
                changed[k] = nv
                total += n
        return ({**value, **changed} if total else value), total
    return walk


def _union_walker(walkers: list[tuple[type, Walker]]) -> Walker:
    def walk(value: Any, key: str | None) -> tuple[Any, int]:
        for cls, w in walkers:
            if isinstance(value, cls):
                return w(value, key)
        return value, 0
    return walk


def _walker(t: mi.Type) -> Walker | None:  # noqa: PLR0911 - one case per kind of type
    """How to redact a value of type ``t``; None when it can hold no free text."""
    if isinstance(t, mi.Metadata):
        return _walker(t.type)
    if isinstance(t, mi.AnyType):
        return _redact_any
    if isinstance(t, mi.StrType):
        if t.pattern is not None or (t.max_length is not None and t.max_length <= _NAME_MAX):
            return None
        return _text_walker(t.max_length)
    if isinstance(t, mi.StructType):
        return _struct_walker(t.cls)
    if isinstance(t, mi.ListType | mi.VarTupleType | mi.SetType | mi.FrozenSetType):
        item = _walker(t.item_type)
        return None if item is None else _list_walker(item)
    if isinstance(t, mi.DictType):
        item = _walker(t.value_type)
        return None if item is None else _dict_walker(item)
    if isinstance(t, mi.UnionType):
        parts = []
        for member in t.types:
            w = _walker(member)
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


_STRUCTS: dict[type, Walker | None] = {}


def _struct_walker(cls: type) -> Walker | None:
    if cls in _STRUCTS:
        return _STRUCTS[cls]
    if issubclass(cls, _OPAQUE):
        _STRUCTS[cls] = None
        return None
    _STRUCTS[cls] = None  # a recursive reference sees "nothing" until this one is built
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    fields = [(f.name, w) for f in info.fields
              if f.name not in _IDENTIFIER_FIELDS and (w := _walker(f.type)) is not None]
    if not fields:
        return None
    # A ``value`` next to a ``name`` is keyed by it (a variable called ``api_key``).
    names = {f.name for f in info.fields}
    keyed = "name" in names and "value" in names

    def walk(value: Any, key: str | None) -> tuple[Any, int]:
        total = 0
        changed = {}
        for name, w in fields:
            k = value.name if keyed and name == "value" else None
            try:
                nv, n = w(getattr(value, name), k)
            except _TooLong as exc:
                exc.path.append(name)
                raise
            if n:
                changed[name] = nv
                total += n
        return (msgspec.structs.replace(value, **changed) if total else value), total

    _STRUCTS[cls] = walk
    return walk


def free_text_fields(cls: type) -> list[str]:
    """The fields of ``cls`` (dotted, ``[]`` for items) that redaction walks: for tests and docs."""
    out: list[str] = []

    def visit(t: mi.Type, path: str) -> None:
        while isinstance(t, mi.Metadata):
            t = t.type
        if isinstance(t, mi.AnyType):
            out.append(f"{path} (any JSON)")
        elif isinstance(t, mi.StrType):
            if _walker(t) is not None:
                out.append(path)
        elif isinstance(t, mi.StructType):
            if not issubclass(t.cls, _OPAQUE):
                for f in t.fields:
                    if f.name not in _IDENTIFIER_FIELDS:
                        visit(f.type, f"{path}.{f.name}" if path else f.name)
        elif isinstance(t, mi.ListType | mi.VarTupleType | mi.SetType | mi.FrozenSetType):
            visit(t.item_type, f"{path}[]")
        elif isinstance(t, mi.DictType):
            visit(t.value_type, f"{path}{{}}")
        elif isinstance(t, mi.UnionType):
            for member in t.types:
                visit(member, path)

    visit(mi.type_info(cls), "")
    return out
