"""Typed decoders for the wire contracts, with errors that name the offending path.

msgspec reports the first problem it meets as text ("Expected `int`, got `str` -
at `$.payload.amount`"). ``contract_error`` turns that text into a
``ContractError`` with a stable ``code`` and a ``path`` prefixed by where the
value sat in the request, so ``$.payload.plan`` inside the third event of a
batch becomes ``$.events[2].payload.plan``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec

from agentledger.contracts.api import AppendRequest, ErrorBody, LeaseRequest, TaskRef
from agentledger.contracts.artifacts import (
    H_BLAKE3,
    H_PRODUCER,
    H_SCHEMA,
    H_TENANT,
    H_VERSION,
    ArtifactPutHeaders,
    ArtifactRequest,
)
from agentledger.contracts.events import AnyEvent, EventBase
from agentledger.errors import AgentLedgerError, ContractError

_AT = re.compile(r" - at `(\$[^`]*)`$")
_FIELD = re.compile(r"field `([^`]+)`")
# "Expected `int`, got `str`" is a wrong type; "Expected `int` >= 0" is a bad value.
_WRONG_TYPE = re.compile(r"^Expected `[^`]+`, got `")
_TOKEN_FIELDS = ("tenant", "task_id", "event_id", "data_subject", "causation_id",
                 "correlation_id")

_event_decoder = msgspec.json.Decoder(AnyEvent)
_request_decoder = msgspec.json.Decoder(AppendRequest)
_task_ref_decoder = msgspec.json.Decoder(TaskRef)
_lease_decoder = msgspec.json.Decoder(LeaseRequest)
_artifact_decoder = msgspec.json.Decoder(ArtifactRequest)
# Field of ArtifactPutHeaders -> the request header that carries it.
_PUT_HEADERS = {"schema": H_SCHEMA, "producer": H_PRODUCER, "version": H_VERSION,
                "tenant": H_TENANT, "blake3": H_BLAKE3}
_encoder = msgspec.json.Encoder()
T = TypeVar("T")


def _join(prefix: str, path: str) -> str:
    return prefix + path[1:] if prefix else path


def contract_error(exc: msgspec.MsgspecError, prefix: str = "") -> ContractError:
    """Classify a msgspec error into a typed ``ContractError`` (code + path)."""
    text = str(exc)
    if isinstance(exc, msgspec.DecodeError) and not isinstance(exc, msgspec.ValidationError):
        return ContractError(text, code="malformed_json", path=prefix or "$")
    match = _AT.search(text)
    path = match.group(1) if match else "$"
    message = text[: match.start()] if match else text
    field = _FIELD.search(message)
    if message.startswith("Object missing required field"):
        code = "missing_field"
        path = f"{path}.{field.group(1)}" if field else path
    elif message.startswith("Object contains unknown field"):
        code = "unknown_field"
        path = f"{path}.{field.group(1)}" if field else path
    elif path == "$.kind":
        code = "unknown_kind"
    elif path == "$.schema_version":
        code = "unknown_schema_version"
        message = f"{message}; supported schema versions: [1]"
    elif "matching regex" in message and path.rsplit(".", 1)[-1] in _TOKEN_FIELDS:
        code = "invalid_token"
    elif _WRONG_TYPE.match(message):
        code = "invalid_type"
    else:
        code = "invalid_value"
    return ContractError(message, code=code, path=_join(prefix, path))


def decode_event(data: bytes | str | msgspec.Raw, prefix: str = "") -> EventBase:
    """Decode and validate one event; raise ``ContractError`` naming the path."""
    try:
        return _event_decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise _name_map_key(exc, data, prefix) from exc
    except msgspec.MsgspecError as exc:
        raise contract_error(exc, prefix) from exc


def _name_map_key(exc: msgspec.ValidationError, data: bytes | str | msgspec.Raw,
                  prefix: str) -> ContractError:
    """``contract_error`` for an event, naming the offending key of a map (a task's budget).

    msgspec locates a bad map entry only as ``$.payload.budget[...]`` (its value) or
    "at `key` in `$.payload.budget`" (its key); the key is found by decoding the event with
    one entry of that map at a time, so the path becomes ``$.payload.budget.tokens``.
    """
    text = str(exc)
    if (m := re.search(r" - at `key` in `(\$[^`]*)`$", text)) is not None:
        where, rest, reason, note = m.group(1), "", text[: m.start()], " (a map key)"
    elif (m := _AT.search(text)) is not None and "[...]" in m.group(1):
        where, rest = m.group(1).split("[...]", 1)
        reason, note = text[: m.start()], ""
    else:
        return contract_error(exc, prefix)
    code = contract_error(exc).code
    try:
        doc = msgspec.json.decode(data)
        node = doc
        for name, index in re.findall(r"\.([^.\[]+)|\[(\d+)\]", where):
            node = node[name] if name else node[int(index)]
        for key, value in list(node.items()):
            node.clear()
            node[key] = value
            try:
                _event_decoder.decode(msgspec.json.encode(doc))
            except msgspec.ValidationError as trial:
                if str(trial).startswith(reason):
                    step = (f".{key}" if re.fullmatch(r"[A-Za-z0-9_-]+", key)
                            else f"[{msgspec.json.encode(key).decode()}]")
                    return ContractError(reason + note, code=code,
                                         path=_join(prefix, where + step + rest))
    except (msgspec.MsgspecError, LookupError, TypeError, ValueError, AttributeError):
        pass  # not the shape expected: fall back to msgspec's own path
    return contract_error(exc, prefix)


def decode_with(decoder: msgspec.json.Decoder[T], data: bytes) -> T:
    """``data`` decoded by one endpoint's typed ``decoder``; a ``ContractError`` naming the path if
    it does not fit."""
    try:
        return decoder.decode(data)
    except msgspec.MsgspecError as exc:
        raise contract_error(exc) from exc


def decode_append_request(data: bytes) -> AppendRequest:
    """Decode the request envelope; the events inside stay raw until ``decode_event``."""
    return decode_with(_request_decoder, data)


def decode_task_ref(data: bytes) -> TaskRef:
    """Decode a working-memory request."""
    return decode_with(_task_ref_decoder, data)


def decode_lease_request(data: bytes) -> LeaseRequest:
    """Decode a lease acquire / renew / release request."""
    return decode_with(_lease_decoder, data)


def decode_artifact_request(data: bytes) -> ArtifactRequest:
    """Decode an artifact get / stat request."""
    return decode_with(_artifact_decoder, data)


def decode_artifact_put_headers(headers: Mapping[str, str] | None) -> ArtifactPutHeaders:
    """Read an artifact put's metadata from its request headers (names matched case-insensitively).

    Errors name the header: ``headers.Agentledger-Version``. Other headers are ignored.
    """
    given = {name.lower(): value for name, value in (headers or {}).items()}
    values = {field: given[name.lower()] for field, name in _PUT_HEADERS.items()
              if name.lower() in given}
    try:
        # Header values are strings: ``strict=False`` reads "2" as the version 2.
        return msgspec.convert(values, ArtifactPutHeaders, strict=False)
    except msgspec.ValidationError as exc:
        error = contract_error(exc)
        field = (error.path or "$").removeprefix("$.")
        error.path = f"headers.{_PUT_HEADERS.get(field, field)}"
        raise error from exc


# Deepest nesting of objects and arrays accepted anywhere (an event, a request, a stored
# message). Far below what every reader can decode (msgspec, Python's json and the reducer's
# recursion break at roughly 1,000 levels), far above what a real event needs.
MAX_DEPTH = 64
_JSON_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{},:]', re.DOTALL)


def nesting_path(data: bytes | str, limit: int = MAX_DEPTH) -> str | None:
    """The JSON path of the first value nested deeper than ``limit``, or None if none is.

    A scan without recursion and without decoding, safe on any bytes (what is
    not JSON is left to the decoder to refuse): ``$`` is depth 0, the members of
    the top-level object or array are depth 1, and so on.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    # Fast path: without strings, fewer than ``limit`` + 1 openings cannot nest too deep.
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return None
    stack: list[list[object]] = []  # [container, key or index, expecting a key]
    for m in _JSON_TOKEN.finditer(raw):
        tok = m.group()
        c = tok[:1]
        if c in (b"{", b"["):
            if len(stack) >= limit:
                return _path(stack)
            stack.append(["{", None, True] if c == b"{" else ["[", 0, False])
        elif stack:
            _step(stack, c, tok)
    return None


def _step(stack: list[list[object]], c: bytes, tok: bytes) -> None:
    """Follow one token other than an opening bracket inside a container."""
    top = stack[-1]
    if c == b'"':
        if top[0] == "{" and top[2]:
            try:
                top[1] = msgspec.json.decode(tok, type=str)
            except msgspec.MsgspecError:
                top[1] = "?"
            top[2] = False
    elif c in (b"}", b"]"):
        stack.pop()
    elif c == b",":
        if top[0] == "{":
            top[2] = True
        else:
            top[1] = int(top[1]) + 1  # type: ignore[call-overload]


_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _path(stack: list[list[object]]) -> str:
    parts = ["$"]
    for container, key, _ in stack:
        if container == "[":
            parts.append(f"[{key}]")
        elif isinstance(key, str) and _PLAIN_KEY.match(key):
            parts.append(f".{key}")
        else:
            parts.append(f"[{msgspec.json.encode(str(key)).decode()[:40]}]")
    path = "".join(parts)
    return path if len(path) <= 300 else path[:297] + "..."


def check_depth(data: bytes | str, prefix: str = "", limit: int = MAX_DEPTH) -> None:
    """Raise ``ContractError`` ``too_deep`` (naming the path) if ``data`` nests deeper than ``limit``."""
    path = nesting_path(data, limit)
    if path is not None:
        raise ContractError(f"nested deeper than {limit} levels of objects and arrays",
                            code="too_deep", path=_join(prefix, path))


def check_request_depth(data: bytes | str) -> None:
    """``check_depth`` of an ``AppendRequest`` body before it is decoded at all.

    Each event sits two levels down (``$.events[i]``), so the events' limit is
    ``MAX_DEPTH`` and the path names the event: ``$.events[0].payload.value[0]...``.
    """
    path = nesting_path(data, MAX_DEPTH + 2)
    if path is not None:
        raise ContractError(f"an event nests deeper than {MAX_DEPTH} levels of objects and arrays",
                            code="too_deep", path=path)


# PostgreSQL's ``text`` and ``jsonb`` cannot hold U+0000, so no stored string may contain it.
# JSON can carry it only as the escape ``\u0000``; raw control bytes, invalid UTF-8 and lone
# surrogate escapes are refused by the decoder itself (``malformed_json``).
_NUL_ESCAPE = b"\\u0000"


def nul_path(data: bytes | str) -> str | None:
    """The JSON path of the first string (a key or a value) holding U+0000, or None.

    A byte search decides almost every body at once; only a body that holds the escape is
    decoded (after its depth was checked) and walked to name the place. A body that is not
    JSON has no such path: the decoder refuses it.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if _NUL_ESCAPE not in raw:
        return None
    try:
        doc = msgspec.json.decode(raw)
    except msgspec.MsgspecError:
        return None
    return _find_nul(doc, "$")


def _find_nul(node: Any, path: str) -> str | None:
    if isinstance(node, str):
        return path if "\x00" in node else None
    if isinstance(node, list):
        for i, item in enumerate(node):
            if (found := _find_nul(item, f"{path}[{i}]")) is not None:
                return found
    elif isinstance(node, dict):
        for key, value in node.items():
            step = f".{key}" if _PLAIN_KEY.match(key) else f"[{msgspec.json.encode(key).decode(errors='replace')}]"
            if "\x00" in key:
                return path + step
            if (found := _find_nul(value, path + step)) is not None:
                return found
    return None


def check_text(data: bytes | str, prefix: str = "") -> None:
    """Raise ``ContractError`` ``invalid_text`` (naming the path) if a string in ``data`` holds U+0000."""
    path = nul_path(data)
    if path is not None:
        raise ContractError("U+0000 (NUL) cannot be stored in a text value; send binary content as an "
                            "artifact", code="invalid_text", path=_join(prefix, path))


def check_request(data: bytes | str) -> None:
    """What every request body must pass before it is decoded: ``check_request_depth``
    (before any decoder recurses into it), then ``check_text``."""
    check_request_depth(data)
    check_text(data)


def error_body(exc: AgentLedgerError) -> ErrorBody:
    """The wire form of an error: its code, message, whether to retry, path and current sequence."""
    return ErrorBody(code=exc.code, message=exc.message, retryable=exc.retryable, path=exc.path,
                     current_seq=exc.current_seq)


def encode(obj: object) -> bytes:
    """Canonical JSON encoding used on the wire and in the ledger."""
    return _encoder.encode(obj)


def encode_request(body: object) -> bytes:
    """``body`` encoded for a service, refused here as the service would refuse it: a string
    UTF-8 cannot carry (a lone surrogate) or holding U+0000 is ``invalid_text``, nesting
    beyond the limit ``too_deep``; nothing is sent."""
    try:
        data = _encoder.encode(body)
    except UnicodeEncodeError as exc:
        raise ContractError(f"a string is not valid Unicode ({exc.reason})", code="invalid_text",
                            path="$") from None
    except RecursionError:
        raise ContractError(f"nested deeper than {MAX_DEPTH} levels of objects and arrays",
                            code="too_deep", path="$") from None
    check_request(data)
    return data


def checked(request_type: type[msgspec.Struct], body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as the service will decode it, for a client to send: a bad field fails here,
    as the same typed ``ContractError`` with its path, before anything is sent."""
    data = encode_request(body)
    try:
        decoded = msgspec.json.decode(data, type=request_type)
    except msgspec.MsgspecError as exc:
        raise contract_error(exc) from None
    builtins: dict[str, Any] = msgspec.to_builtins(decoded)
    return builtins
