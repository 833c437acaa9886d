"""Every context-builder instance learns which generations the others finished, so that each
refuses a finished generation's row put back to its frozen, unfinished version (its frozen tag
valid), not only the instance that finished it (``ContextStore.generation``).

An instance publishes (``agentledger.shell.peer_notes``, on ``<prefix>.finished.context``) each
generation it finishes, and each generation it freezes anew after a forget request deleted the
finished one (then unfinished is honest again); every instance applies them to the set it
refuses by. Published after the commit, in order per sender. An instance started later, or one
that missed a note in a reconnect, serves such a row as it would a build that stopped before
it finished: the frozen input (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec
from nats.aio.client import Client
from nats.aio.subscription import Subscription

from agentledger.shell import peer_notes


class FinishedNote(msgspec.Struct, frozen=True, array_like=True):
    """``finished``: the generation was finished (True) or frozen anew (False)."""

    tenant: str
    generation_id: str
    finished: bool


def finished_subject(prefix: str) -> str:
    return f"{prefix}.finished.context"


async def publish(nc: Client, prefix: str, tenant: str, generation_id: str, finished: bool) -> None:
    await peer_notes.publish(nc, finished_subject(prefix), FinishedNote(tenant, generation_id, finished))


async def listen(nc: Client, prefix: str, on_note: Callable[[FinishedNote], None]) -> Subscription:
    return await peer_notes.listen(nc, finished_subject(prefix), FinishedNote, on_note)
