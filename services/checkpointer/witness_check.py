"""Resume's comparison of a task's ledger head with the witness of heads (``stores.witness``).

A tail cut off the ledger is still a valid chain, so replaying it checks every link and finds
nothing wrong: the state is simply older. The witness, kept outside the data folder, says how
far the writer saw the task committed; a ledger behind it was cut back or rolled back, and
resume refuses it with ``integrity_violation`` instead of serving the older state as current.

The witness is read whole once, then only the lines appended since (each signature checked),
so a resume costs a ``stat``, what was published since the last one, and a dict lookup. When
services run as users of their own the writer's file is out of the checkpointer's reach, and
``witness_file`` names the read-only view the writer keeps of it
(``runtime.service_users.witness_view``), signed alike. A checkpointer
without a witness to read (a first start) compares nothing; ``up`` and ``agentledger verify``
still do.
"""

from __future__ import annotations

from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.core import ledger_chain
from agentledger.core.ledger_chain import Head
from agentledger.errors import IntegrityViolationError
from agentledger.security.integrity_keys import keys_of
from agentledger.stores import witness


class WitnessHeads:
    """The witnessed heads of ``settings``'s ledger (``stores.witness.witnessed_head``)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def _witnessed(self, tenant: str, task_id: str) -> tuple[int, str] | None:
        try:
            return witness.witnessed_head(self.settings, witness.task_name(tenant, task_id))
        except PermissionError:
            return None

    async def check(self, nc: Client, tenant: str, task_id: str, head: Head) -> None:
        """Raise ``IntegrityViolationError`` when the task's ledger, ending at ``head``, is behind
        (or beside) the head the witness saw committed. Only then is more read: the task's last
        message now (appended since ``head`` was read, the writer may have witnessed it) and the
        tenant's forget requests (a forgotten task starts a new chain)."""
        witnessed = self._witnessed(tenant, task_id)
        if witnessed is None or not ledger_chain.behind(head, Head(*witnessed)):
            return
        key_of = keys_of(self.settings).mac_key_of
        now = await witness.last_head(nc, self.settings, key_of, tenant, task_id,
                                      witnessed=Head(*witnessed))
        if now is not None and not ledger_chain.behind(now[0], Head(*witnessed)):
            return
        whole, forgotten = await witness.forgotten_tasks(nc, self.settings, tenant)
        if whole or task_id in forgotten:
            return
        raise IntegrityViolationError(
            f"the ledger of task {task_id!r} of tenant {tenant!r} ends at index {head.index}, but the "
            f"witness saw index {witnessed[0]} committed: its tail was cut off or the ledger was rolled "
            "back outside the services (`agentledger verify` names it)", where="witness")
