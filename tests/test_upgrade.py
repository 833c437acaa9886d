"""Upgrading a deployment: migration 6 empties Working Memory and the projector rebuilds it.

The state gained the conversation's epoch and lineage base, so a state stored before the
upgrade hashes differently from a fold of the same ledger; the migration empties the
projection and the projector, on start, rebuilds it from the ledger.
"""

from __future__ import annotations

from agentledger.config import Settings
from agentledger.services.projector.rebuild import verify
from agentledger.services.projector.service import Projector
from agentledger.stores import db
from ckpt_support import created, running, variable
from helpers import assert_eventually


async def test_migration_6_empties_working_memory_and_the_projector_rebuilds_it(settings: Settings) -> None:
    async with running(settings, checkpointer=False) as stack:
        await stack.append([created("up-1"), variable("up-1", "x", 1)])
        last = await stack.append([created("up-2")])
        await stack.projected(last)
        await stack.projector.stop()
        assert stack.db is not None
        # As a database migrated up to version 5 would be: run migration 6 on it.
        await stack.db.execute("DELETE FROM schema_migrations WHERE version >= 6")
        await db.migrate(settings.database_url)
        assert await stack.db.fetchval("SELECT count(*) FROM task_state") == 0
        assert await stack.db.fetchval("SELECT seq FROM projector_watermark WHERE name = 'projector'") == 0
        stack.projector = Projector(settings)
        await stack.projector.start()
        await assert_eventually(
            lambda: stack.db.fetchval("SELECT count(*) FROM task_state"),  # type: ignore[union-attr]
            timeout=30, message="the projector did not rebuild Working Memory")
        await stack.projected(last)
        wm = await stack.c.working_memory("acme", "up-1")
        assert wm.state["variables"]["x"]["value"] == 1
        assert wm.state["conversation"] == {"epoch": 0, "lineage_base": 0}
        assert (await verify(settings)).ok
