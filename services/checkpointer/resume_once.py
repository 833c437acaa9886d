"""A retried resume gets the first attempt's answer: one lease per ``request_id``, not one per try.

Why. A resume takes a lease, and every grant is a new ``lease_granted`` event with a new token
and secret. A caller whose request timed out (a checkpointer frozen or slow past the caller's
timeout) sends it again, and both requests are answered once the checkpointer runs again:
two grants, the second superseding the first. The first answer then holds a lease that no
longer works and a state one event behind the ledger (the second grant), and, as the two
run at once, the answer the caller does read may well be that first one.

Two designs would stop it: make the answer provably current when it is sent (re-read the
task's last message after folding, refuse if another grant came after ours), or make the
retry idempotent. The first still grants twice and then refuses one attempt, so the caller's
retry can fail for no reason of its own, and each retry that races the previous one supersedes
it again. The second answers what the caller asked for: the resume happened once, here is its
answer. So a version 3 request carries ``request_id`` (the caller's, the same on every retry),
and this registry maps (tenant, task, executor, request_id) to the one evaluation of it:

* a retry that arrives while the first attempt runs waits for the same answer;
* a retry after it is answered gets the same bytes (same lease, token, secret, watermark),
  while that lease can still be live (its ``lease_ttl_s``), from at most ``MAX_KEPT`` answers;
* an answer that took nothing (``rejected``, ``needs_accept``) or an error is not kept once
  sent: a retry evaluates afresh, as it would with no ``request_id`` (a ``lease_held`` may
  clear, an ``unavailable`` may pass);
* the same ``request_id`` with a different request (another TTL, other accepted erasures) is
  ``request_id_reused`` naming ``$.request_id``, never the other request's answer.

Only the caller that sent the request can name it: the key holds the tenant and the executor,
which the endpoint checked against the connection's identity before this runs.

Its scope is one checkpointer process: answers hold lease secrets, which are kept in memory
only (never in PostgreSQL or a bucket). With several checkpointer instances a retry that the
queue group hands to another instance is evaluated there, and takes a second grant (the first
answer's lease then stops working, refused with ``lease_lost`` / ``stale_fencing_token``, as
before): docs/checkpoints.md says so.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from agentledger.contracts.codec import encode
from agentledger.contracts.resume import ResumeRequest
from agentledger.errors import ContractError, UnavailableError

# Answers kept after they were sent (each holds a reply of at most a NATS message).
MAX_KEPT = 10_000

Key = tuple[str, str, str, str]


@dataclass
class _Entry:
    request: bytes
    answer: asyncio.Future[bytes]
    # Monotonic time until which a sent answer is given again (None: still being evaluated).
    until: float | None = None
    waiters: int = 0


class ResumeOnce:
    """Evaluates each (tenant, task, executor, request_id) once; see the module docstring."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    async def answer(self, req: ResumeRequest, evaluate: Callable[[], Awaitable[tuple[bytes, bool]]]
                     ) -> tuple[bytes, bool]:
        """(the answer's bytes, whether it was shared with an earlier attempt). ``evaluate``
        runs the resume and says whether its answer granted a lease (then it is kept)."""
        if req.request_id is None:
            data, _ = await evaluate()
            return data, False
        key = (req.tenant, req.task_id, req.executor, req.request_id)
        body = encode(req)
        self._expire()
        entry = self._entries.get(key)
        if entry is not None:
            if entry.request != body:
                raise ContractError(f"request_id {req.request_id!r} already names another resume "
                                    "request of this task; use a new id for a new request",
                                    code="request_id_reused", path="$.request_id")
            entry.waiters += 1
            return await asyncio.shield(entry.answer), True
        entry = self._entries[key] = _Entry(body, asyncio.get_running_loop().create_future())
        try:
            data, granted = await evaluate()
        except BaseException as exc:
            self._entries.pop(key, None)
            if not entry.waiters:
                entry.answer.cancel()
            elif isinstance(exc, asyncio.CancelledError):  # the process is stopping
                entry.answer.set_exception(UnavailableError(
                    "the checkpointer stopped while it answered this resume; retry"))
            else:
                entry.answer.set_exception(exc)
            raise
        entry.answer.set_result(data)
        if granted:
            entry.until = self._clock() + req.lease_ttl_s
            self._entries.move_to_end(key)
            for old in [k for k, e in self._entries.items() if e.until is not None][:-MAX_KEPT]:
                del self._entries[old]
        else:
            self._entries.pop(key, None)
        return data, False

    def _expire(self) -> None:
        now = self._clock()
        for key in [k for k, e in self._entries.items() if e.until is not None and e.until <= now]:
            del self._entries[key]
