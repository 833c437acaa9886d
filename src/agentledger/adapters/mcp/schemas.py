"""Tool argument types derived from the wire contracts, and their JSON Schema for MCP hosts.

Why derive instead of writing parameter lists by hand: a tool's arguments are the contract's
request without ``tenant`` (the tenant is the server's identity, never an argument), so a
field added to ``ReadRequest`` reaches the ``recall`` tool without anyone copying it, and the
tool refuses exactly what the service would refuse, with the same typed code and JSON path
(``invalid_type`` at ``$.k``), before anything is sent. The SDK would otherwise validate
with pydantic and answer with pydantic's text, not our codes.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentledger.contracts.codec import contract_error, encode_request

# Request fields an MCP caller never sets: the identity (``tenant``), and wire mechanics the
# client drives itself (a chunked view's pieces, the resume schema version).
IDENTITY_FIELDS = frozenset({"tenant"})


def arguments_of(request: type[msgspec.Struct], name: str, *, drop: frozenset[str] = frozenset(),
                 keep: frozenset[str] | None = None) -> type[msgspec.Struct]:
    """A Struct with ``request``'s fields (types, limits, defaults) minus the identity and ``drop``
    (or only ``keep``), forbidding unknown fields as the contracts do."""
    fields: list[tuple[Any, ...]] = []
    for f in msgspec.structs.fields(request):
        if f.name in IDENTITY_FIELDS or f.name in drop or (keep is not None and f.name not in keep):
            continue
        if f.required:
            fields.append((f.name, f.type))
        elif f.default is not msgspec.NODEFAULT:
            fields.append((f.name, f.type, f.default))
        else:
            fields.append((f.name, f.type, msgspec.field(default_factory=f.default_factory)))
    doc = f"The arguments of the ``{name}`` tool: ``{request.__name__}`` without the caller's tenant."
    return msgspec.defstruct(name, fields, forbid_unknown_fields=True, frozen=True, kw_only=True,
                             omit_defaults=True, module=__name__, namespace={"__doc__": doc})


def json_schema(tp: Any) -> dict[str, Any]:
    """``tp``'s JSON Schema with the root object inlined: MCP wants ``"type": "object"`` at the top
    of a tool's input and output schema, msgspec puts a ``$ref`` there."""
    schema = msgspec.json.schema(tp)
    defs: dict[str, Any] = schema.pop("$defs", {})
    ref = schema.get("$ref")
    if ref is None:
        return schema
    root = dict(defs.pop(ref.rsplit("/", 1)[-1]))
    if not root.get("required", True):
        del root["required"]  # an empty list is not valid in every JSON Schema draft hosts use
    if defs:
        root["$defs"] = defs
    return root


def decode_arguments(tp: type[msgspec.Struct], arguments: dict[str, Any]) -> msgspec.Struct:
    """The tool's arguments as the contract reads them, or the typed ``ContractError`` the service
    would answer (``invalid_text`` for U+0000, ``too_deep``, ``unknown_field`` for a ``tenant``)."""
    data = encode_request(arguments)
    try:
        return msgspec.json.decode(data, type=tp)
    except msgspec.MsgspecError as exc:
        raise contract_error(exc) from None


def given(args: msgspec.Struct) -> dict[str, Any]:
    """The fields the caller set (defaults left out, so the service applies its own)."""
    out: dict[str, Any] = msgspec.to_builtins(args)
    return out
