"""Requests and replies of the artifact endpoints: put, get and stat content-addressed artifacts.

The ledger-writer serves ``<prefix>.artifact.put|get|stat``; clients never touch
the object store. Content travels as raw bytes, so two messages carry NATS
headers rather than JSON:

* ``put``: the request payload is the content; ``ArtifactPutHeaders`` names the
  request headers (``Agentledger-Schema``, ``-Producer``, ``-Version``,
  ``-Tenant``, ``-Blake3``). The reply is an ``ArtifactReply``.
* ``get``: the request is an ``ArtifactRequest``. A successful reply's payload
  is the content, described by the headers ``Agentledger-Blake3``, ``-Schema``,
  ``-Producer``, ``-Version`` and ``-Size``; a failed reply carries the header
  ``Agentledger-Error: <code>`` and an ``ArtifactReply`` with ``ok: false`` as
  its payload. The ``Agentledger-Error`` header, never the payload, tells the
  two apart (an empty artifact is a valid payload).
* ``stat``: an ``ArtifactRequest`` answered by an ``ArtifactReply``.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta, Struct

from agentledger.contracts.api import ErrorBody
from agentledger.contracts.events import ArtifactRef, Hash, Name, Token, Version

# Request and reply headers of the artifact endpoints (also the stored object's metadata keys).
H_TENANT = "Agentledger-Tenant"
H_BLAKE3 = "Agentledger-Blake3"
H_SCHEMA = "Agentledger-Schema"
H_PRODUCER = "Agentledger-Producer"
H_VERSION = "Agentledger-Version"
H_SIZE = "Agentledger-Size"
H_ERROR = "Agentledger-Error"


class ArtifactPutHeaders(Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    """The headers of a put request, by field (``schema`` is the header ``Agentledger-Schema``).

    ``tenant``: a tenant caller may leave it out (its own tenant is used) and may
    not name another; the operator must name one. ``blake3``, when given, is the
    hash the caller computed: content that arrives hashing otherwise is refused
    (``artifact_hash_mismatch``) and nothing is stored.
    """

    schema: Name
    producer: Name
    version: Version = 1
    tenant: Token | None = None
    blake3: Hash | None = None


class ArtifactRequest(Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    """Get or stat one artifact; for get, ``blake3`` is the hash the content must have."""

    uri: Annotated[str, Meta(min_length=1, max_length=1024)]
    blake3: Hash | None = None


class ArtifactReply(Struct, frozen=True, omit_defaults=True):
    """The stored artifact's reference, or ``error``."""

    ok: bool
    artifact: ArtifactRef | None = None
    error: ErrorBody | None = None
