"""Typed decoders for the wire contracts, with errors that name the offending path.

msgspec reports the first problem it meets as text ("Expected `int`, got `str` -
at `$.payload.amount`"). ``contract_error`` turns that text into a
``ContractError`` with a stable ``code`` and a ``path`` prefixed by where the
value sat in the request, so ``$.payload.plan`` inside the third event of a
batch becomes ``$.events[2].payload.plan``.
"""

from __future__ import annotations

import re

import msgspec

from agentledger.contracts.api import AppendRequest, LeaseRequest, TaskRef
from agentledger.contracts.events import AnyEvent, EventBase
from agentledger.errors import ContractError

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
_encoder = msgspec.json.Encoder()


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
    except msgspec.MsgspecError as exc:
        raise contract_error(exc, prefix) from exc


def decode_append_request(data: bytes) -> AppendRequest:
    """Decode the request envelope; the events inside stay raw until ``decode_event``."""
    try:
        return _request_decoder.decode(data)
    except msgspec.MsgspecError as exc:
        raise contract_error(exc) from exc


def decode_task_ref(data: bytes) -> TaskRef:
    """Decode a working-memory request."""
    try:
        return _task_ref_decoder.decode(data)
    except msgspec.MsgspecError as exc:
        raise contract_error(exc) from exc


def decode_lease_request(data: bytes) -> LeaseRequest:
    """Decode a lease acquire / renew / release request."""
    try:
        return _lease_decoder.decode(data)
    except msgspec.MsgspecError as exc:
        raise contract_error(exc) from exc


def encode(obj: object) -> bytes:
    """Canonical JSON encoding used on the wire and in the ledger."""
    return _encoder.encode(obj)
