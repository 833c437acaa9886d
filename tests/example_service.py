"""An example service in the one service shape: how many tasks a tenant has, and who asked.

docs/adding-a-service.md walks through this file (its code blocks are this file, which
tests/test_example_service.py checks and runs against the real NATS and PostgreSQL).
"""

from __future__ import annotations

import msgspec

from agentledger.contracts.api import ErrorBody
from agentledger.contracts.events import Token
from agentledger.security import auth
from agentledger.security.identity import Caller
from agentledger.shell.endpoints import Endpoint
from agentledger.shell.service import Pool, Shape, Shell, main


class StatsRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Whose tasks to count: a tenant caller may name only its own tenant."""

    tenant: Token


class StatsReply(msgspec.Struct, frozen=True, omit_defaults=True):
    """The tenant's projected tasks and the newest ledger sequence folded into them, and who
    asked, as the connection proves it; ``error`` instead when the request was refused."""

    ok: bool
    asked_by: str = ""
    tasks: int = 0
    last_seq: int = 0
    error: ErrorBody | None = None


class TaskStats(Shell):
    """Answers ``<prefix>.stats.tasks`` from the Working Memory projection's rows."""

    shape = Shape(name="task-stats", role=auth.OPERATOR_ROLE, micro="agentledger-task-stats",
                  log_name="stats", pool=Pool(max_size=2),
                  description="agentledger example: how many tasks a tenant has, and who asked")

    def endpoints(self) -> list[Endpoint]:
        return [Endpoint.at(self.settings.prefix, "stats.tasks", StatsRequest, StatsReply, self.tasks)]

    async def tasks(self, caller: Caller, body: StatsRequest) -> StatsReply:
        assert self._pool is not None
        row = await self._pool.fetchrow(
            "SELECT count(*) AS tasks, coalesce(max(seq), 0) AS last_seq FROM task_state WHERE tenant = $1",
            body.tenant)
        asked_by = "operator" if caller.is_operator else f"{caller.tenant}/{caller.agent}"
        return StatsReply(ok=True, asked_by=asked_by, tasks=row["tasks"], last_seq=row["last_seq"])


if __name__ == "__main__":
    main(TaskStats)
