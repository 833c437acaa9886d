"""The keyed tags of a generation row (pure; keys come in as data).

A generation is frozen first (its input: ids, digests and the artifact holding it) and
finished later (the answer's digest and artifact, the checkpoint it staged). The frozen tag
binds every column the freeze writes, the finish tag the generation id, tenant and every
column the finish writes, so a reader (``context.generation``, a retry, a commit) never
serves another frozen input, another answer or another staged checkpoint than the ones the
service wrote, nor a row moved to another tenant or task.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agentledger.core import integrity
from agentledger.core.integrity import GENERATION

Frozen = Sequence[integrity.Part]


def frozen_parts(generation_id: str, tenant: str, task_id: str, frozen_digest: str, frozen_uri: str, *,
                 input_ordinal: int, transcript_revision: int, epoch: int, lineage: str,
                 regenerated_from: str | None, user_id: str | None, project_id: str | None,
                 subjects: Sequence[str] | None) -> tuple[integrity.Part, ...]:
    """The frozen columns, in one order (``subjects`` None: unknown, apart from empty)."""
    return ("frozen", generation_id, tenant, task_id, frozen_digest, frozen_uri, input_ordinal,
            transcript_revision, epoch, lineage, regenerated_from, user_id, project_id,
            None if subjects is None else "\x00".join(sorted(subjects)))


def finish_parts(generation_id: str, tenant: str, digest: str, uri: str,
                 staged: str | None) -> tuple[integrity.Part, ...]:
    return ("finished", generation_id, tenant, digest, uri, staged)


def tag(epoch: int, key: bytes, parts: Frozen) -> str:
    return integrity.tag(epoch, key, GENERATION, parts)


def check(key_of: Callable[[int], bytes | None], parts: Frozen, value: str | None, *, generation_id: str,
          tenant: str) -> None:
    integrity.check(value, key_of, GENERATION, parts, where="generation",
                    what=f"generation {generation_id} of tenant {tenant}")
