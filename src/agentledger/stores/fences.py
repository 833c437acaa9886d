"""Fenced tasks: the ones whose ledger failed its witness, refused while every other is served.

A ledger behind its witness used to stop ``up`` for every tenant: one task whose last message
was cut from a block file kept the whole deployment down, and no audit could run meanwhile.
What is wrong is that task's ledger, so that task is what is held: ``up`` fences each task the
witness names (``stores.witness.check_at_start``) and starts the services, which refuse the
fenced tasks with ``integrity_violation`` (the writer every append to one, so nothing is
chained onto the cut and the loss never becomes permanent; the projector every read of one)
while serving everything else. ``agentledger status`` names them.

The set lives in a KV bucket only the operator writes, ``<PREFIX>_FENCES``, under one key
(``tasks``: JSON ``{"<tenant>/<task>": "why"}``), written by ``up`` before any service starts
and read by each service as it starts; it changes only at ``up``. Each ``up`` writes it anew
from what the witness finds then, so putting the newer copy back (the documented remedy)
lifts a fence at the next start, and ``up --accept-rollback`` (the loss accepted and recorded
in the witness) leaves none.
"""

from __future__ import annotations

import msgspec
from nats.aio.client import Client
from nats.js.errors import BucketNotFoundError, KeyNotFoundError

from agentledger.config import Settings
from agentledger.errors import IntegrityViolationError
from agentledger.stores.buckets import open_kv

KEY = "tasks"
_decode = msgspec.json.Decoder(dict[str, str])


def fences_bucket(prefix: str) -> str:
    """``<PREFIX>_FENCES``."""
    return f"{prefix.upper().replace('-', '_')}_FENCES"


async def write(nc: Client, settings: Settings, fenced: dict[str, str]) -> None:
    """Replace the fenced set (``up``, as the operator, before the services start)."""
    kv = await open_kv(nc.jetstream(), fences_bucket(settings.prefix), replicas=settings.stream_replicas)
    await kv.put(KEY, msgspec.json.encode(dict(sorted(fenced.items()))))


async def read(nc: Client, settings: Settings) -> dict[str, str]:
    """The fenced tasks (``tenant/task`` → why); none when the bucket was never written."""
    try:
        kv = await nc.jetstream().key_value(fences_bucket(settings.prefix))
        entry = await kv.get(KEY)
    except (BucketNotFoundError, KeyNotFoundError):
        return {}
    return _decode.decode(entry.value or b"{}")


class Fences:
    """The set a service read when it started, checked per request (a dict lookup)."""

    def __init__(self, fenced: dict[str, str] | None = None) -> None:
        self.fenced = dict(fenced or {})

    async def load(self, nc: Client, settings: Settings) -> None:
        self.fenced = await read(nc, settings)

    def check(self, tenant: str, task_id: str, path: str = "$.task_id") -> None:
        """``integrity_violation`` for a fenced task, with why and what to do."""
        if not self.fenced:
            return
        why = self.fenced.get(f"{tenant}/{task_id}")
        if why is not None:
            raise IntegrityViolationError(
                f"task {task_id!r} of tenant {tenant!r} is fenced: {why}. Its ledger is behind its witness, "
                "so it is neither read nor appended to (an append would make the loss permanent); every "
                "other task is served. Put the newer copy of the data back and run `agentledger up` "
                "again, or, if that copy is gone for good, `agentledger up --accept-rollback` "
                "(docs/operations.md, \"A task fenced at start\")", where="ledger", path=path)
