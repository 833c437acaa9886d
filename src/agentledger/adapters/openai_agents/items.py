"""SDK items as ledger turns, and back: pure, no I/O.

An Agents SDK session item (a ``TResponseInputItem``: a message, a tool call, a tool's output,
a reasoning item, ...) is one JSON object. It becomes one ``turn_appended`` whose ``content``
is that object's compact JSON, so ``get_items`` returns exactly what ``add_items`` was given
(whatever item types a later SDK adds), and whose ``role`` says who spoke, so the
context-builder renders, budgets and compacts it as the turn it is (a ``system`` or
``developer`` item stays data there, never an instruction).

Everything a turn cannot hold is refused here, before anything is sent, with the error
naming the item (``$.items[3]...``): a batch is stored whole or not at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from agentledger.contracts import codec
from agentledger.errors import ContractError

# ``TurnAppended.content`` holds at most this many characters (contracts/events.py).
MAX_ITEM_CHARS = 65_536
_encoder = msgspec.json.Encoder()
# Item types whose author is a tool (their output), whatever the SDK names them next.
_TOOL_SUFFIX = "_output"
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


def role_of(item: Mapping[str, Any]) -> str:
    """The turn role of an item: its message role, ``tool`` for a tool's output, else assistant
    (a tool call, a reasoning item, a handoff: the model's own doing)."""
    role = item.get("role")
    if isinstance(role, str) and role in _ROLES:
        return _ROLES[role]
    kind = item.get("type")
    if isinstance(kind, str) and kind.endswith(_TOOL_SUFFIX):
        return "tool"
    return "assistant"


def encode_item(item: object, path: str) -> str:
    """The item's compact JSON, the turn's content; ``ContractError`` naming ``path`` if the
    item is not a JSON object, holds U+0000, or is larger than one turn."""
    if not isinstance(item, Mapping):
        raise ContractError(f"a session item is a JSON object (a dict), not {type(item).__name__}",
                            code="invalid_type", path=path)
    for key in item:
        if not isinstance(key, str):
            raise ContractError(f"an item's keys are strings, not {type(key).__name__}",
                                code="invalid_type", path=path)
    try:
        data = _encoder.encode(item)
    except (TypeError, msgspec.EncodeError) as exc:
        raise ContractError(f"the item is not JSON: {exc}", code="invalid_type", path=path) from None
    except UnicodeEncodeError as exc:
        raise ContractError(f"a string of the item is not valid Unicode ({exc.reason})",
                            code="invalid_text", path=path) from None
    except RecursionError:
        raise ContractError("the item nests too deep", code="too_deep", path=path) from None
    codec.check_text(data, path)
    text = data.decode()
    if len(text) > MAX_ITEM_CHARS:
        raise ContractError(f"the item is {len(text)} characters as JSON; one turn holds at most "
                            f"{MAX_ITEM_CHARS} (put large tool output in an artifact and cite it)",
                            code="item_too_large", path=path)
    return text


def encode_items(items: object) -> list[tuple[str, str]]:
    """``(role, content)`` of each item, in order; every item is checked before any is sent."""
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
        raise ContractError(f"items is a list of session items, not {type(items).__name__}",
                            code="invalid_type", path="$.items")
    turns = []
    for i, item in enumerate(items):
        content = encode_item(item, f"$.items[{i}]")
        turns.append((role_of(item), content))  # type: ignore[arg-type]  # a Mapping, checked
    return turns


def decode_item(content: str) -> dict[str, Any]:
    """The item a turn's content holds (its JSON, as ``encode_item`` wrote it)."""
    item: dict[str, Any] = msgspec.json.decode(content)
    return item
