"""LangGraph's serialised values as blob references: inline when small, artifacts when large.

Both carry the blake3 of the bytes, checked on every read: a value the ledger or the artifact
store hands back different (tampered, or rewritten on the way) is refused with
``IntegrityViolationError``, never returned as state. Large values go to the artifact store by
content hash, so a value unchanged between checkpoints, or shared by threads, is stored once.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import blake3

from agentledger.client import Client
from agentledger.errors import ContractError, IntegrityViolationError

# Values up to this many serialised bytes ride in the ledger event itself: one round trip
# less per checkpoint, and most channel values of a step (a counter, a route) are tiny.
INLINE_MAX_BYTES = 1024
ARTIFACT_SCHEMA = "langgraph-blob"
ARTIFACT_PRODUCER = "agentledger-langgraph"
# Artifacts are immutable (named by content hash), so a cache of them never goes stale.
CACHE_ENTRIES = 4096


def check_size(data: bytes, limit: int, path: str) -> None:
    """Refuse, before anything is stored, a value the artifact store would not take."""
    if len(data) > limit:
        raise ContractError(f"the serialised value is {len(data)} bytes; the largest this "
                            f"installation stores is {limit} (max_artifact_bytes)",
                            code="value_too_large", path=path)


class Blobs:
    """Turns ``(type, bytes)`` into a blob reference and back, for one tenant."""

    def __init__(self, client: Client, tenant: str | None, limit: int) -> None:
        self._client = client
        self._tenant = tenant
        self.limit = limit
        self._cache: OrderedDict[str, bytes] = OrderedDict()

    async def store(self, typed: tuple[str, bytes]) -> dict[str, Any]:
        kind, data = typed
        data = bytes(data)
        digest = blake3.blake3(data).hexdigest()
        if len(data) <= INLINE_MAX_BYTES:
            return {"t": kind, "h": digest, "i": data}  # raw: the record is packed as a whole
        ref = await self._client.put_artifact(data, schema=ARTIFACT_SCHEMA, producer=ARTIFACT_PRODUCER,
                                              tenant=self._tenant)
        self._remember(ref.uri, data)
        return {"t": kind, "h": digest, "u": ref.uri}

    async def load(self, ref: dict[str, Any], path: str) -> tuple[str, bytes]:
        if "i" in ref:
            data = bytes(ref["i"])
        else:
            uri = ref["u"]
            cached = self._cache.get(uri)
            if cached is None:
                cached = await self._client.get_artifact(uri)
                self._remember(uri, cached)
            data = cached
        if blake3.blake3(data).hexdigest() != ref["h"]:
            raise IntegrityViolationError(f"the stored value hashes to something other than the "
                                          f"{ref['h']} its checkpoint records", where="checkpoint", path=path)
        return ref["t"], data

    def _remember(self, uri: str, data: bytes) -> None:
        self._cache[uri] = data
        self._cache.move_to_end(uri)
        while len(self._cache) > CACHE_ENTRIES:
            self._cache.popitem(last=False)
