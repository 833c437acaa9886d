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


def decode_artifact_request(data: bytes) -> ArtifactRequest:
    """Decode an artifact get / stat request."""
    try:
        return _artifact_decoder.decode(data)
    except msgspec.MsgspecError as exc:
        raise contract_error(exc) from exc


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


def error_body(exc: AgentLedgerError) -> ErrorBody:
    """The wire form of an error: its code, message, whether to retry, path and current sequence."""
    return ErrorBody(code=exc.code, message=exc.message, retryable=exc.retryable, path=exc.path,
                     current_seq=exc.current_seq)


def encode(obj: object) -> bytes:
    """Canonical JSON encoding used on the wire and in the ledger."""
    return _encoder.encode(obj)
