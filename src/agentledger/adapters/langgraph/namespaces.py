"""LangGraph store namespaces as memory-policy scopes (pure, no I/O).

A namespace names its scope in its first two labels: ``("user", "<user id>", ...)``,
``("project", "<project id>", ...)``, ``("session", "<id>", ...)``, ``("task", "<id>", ...)``
or ``("tenant", ...)``. The labels after the scope are the application's own sub-namespace.
Any other root is refused, not mapped to some default: memory without a scope would be
readable by whoever shares the fallback. Whether the caller may use the scope is the
memory-policy's decision from the connection's bindings, never this module's.

Matching never goes through a pattern: each stored record carries one token per prefix of
its namespace (a digest of the exact labels), the read asks for the token of the wanted
prefix, and the result is filtered again by comparing label lists. ``%``, ``_``, ``.``
or any unicode in a label is just part of that label.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentledger.adapters.langgraph.layout import digest
from agentledger.errors import ContractError

SCOPED_ROOTS = {"user", "project", "session", "task"}
TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# The word every record of the store carries, and the prefix of its namespace tokens.
STORE_WORD = "lgstore"


@dataclass(frozen=True)
class Scope:
    level: str
    id: str | None

    def read_options(self) -> dict[str, Any]:
        """The ReadRequest fields that let a read see this scope."""
        return {f"{self.level}_id": self.id} if self.id is not None else {}


def checked_namespace(namespace: Any, path: str = "$.namespace") -> tuple[str, ...]:
    if isinstance(namespace, str) or not isinstance(namespace, Sequence):
        raise ContractError(f"expected a tuple of labels, got {type(namespace).__name__}",
                            code="invalid_type", path=path)
    out = []
    for i, label in enumerate(namespace):
        if not isinstance(label, str):
            raise ContractError(f"expected a string label, got {type(label).__name__}", code="invalid_type",
                                path=f"{path}[{i}]")
        if not label or "\x00" in label or len(label) > 256:
            raise ContractError("a label is 1-256 characters without NUL", code="invalid_value",
                                path=f"{path}[{i}]")
        out.append(label)
    return tuple(out)


def scope_of(namespace: tuple[str, ...], path: str = "$.namespace") -> Scope:
    """The memory scope a namespace names, or a typed error saying why it names none."""
    if not namespace:
        raise ContractError("a namespace starts with its scope: ('user', id), ('project', id), "
                            "('session', id), ('task', id) or ('tenant',)", code="unscoped_namespace", path=path)
    root = namespace[0]
    if root == "tenant":
        return Scope("tenant", None)
    if root not in SCOPED_ROOTS:
        raise ContractError(f"namespace root {root!r} names no memory scope (user, project, session, task "
                            "or tenant)", code="unscoped_namespace", path=f"{path}[0]")
    if len(namespace) < 2:
        raise ContractError(f"a {root} namespace needs the {root} id as its second label",
                            code="unscoped_namespace", path=f"{path}[1]")
    if not TOKEN.match(namespace[1]):
        raise ContractError(f"a {root} id is 1-64 letters, digits, '_' or '-'", code="invalid_value",
                            path=f"{path}[1]")
    return Scope(root, namespace[1])


def memory_key(namespace: tuple[str, ...], key: str) -> str:
    """The record key of (namespace, key): exact, already canonical, never a pattern."""
    return "lgs_" + digest(*namespace, "\x00key", key)


def prefix_token(prefix: tuple[str, ...]) -> str:
    return STORE_WORD + digest(*prefix, size=24)


def record_value(namespace: tuple[str, ...], key: str, value: dict[str, Any]) -> dict[str, Any]:
    """What the memory record holds: the item and the tokens that find it by prefix."""
    tokens = " ".join(prefix_token(namespace[:i]) for i in range(1, len(namespace) + 1))
    return {"store": STORE_WORD, "ns": list(namespace), "key": key, "value": value, "prefixes": tokens}


def item_of(value: Any) -> tuple[tuple[str, ...], str, dict[str, Any]] | None:
    """(namespace, key, value) of a record this store wrote, or None for any other record."""
    if not isinstance(value, dict) or value.get("store") != STORE_WORD:
        return None
    ns, key, inner = value.get("ns"), value.get("key"), value.get("value")
    if not isinstance(ns, list) or not isinstance(key, str) or not isinstance(inner, dict):
        return None
    return tuple(str(x) for x in ns), key, inner


def matches(namespace: tuple[str, ...], prefix: tuple[str, ...]) -> bool:
    """Label-by-label prefix comparison: no wildcard of any kind."""
    return namespace[:len(prefix)] == prefix
