"""Raw access to the ledger stream for tests: publish events as the writer would, bypassing it.

The ``ledger`` fixture (conftest.py) connects as the writer's NATS user, the only one
allowed to publish on ledger subjects.
"""

from __future__ import annotations

from typing import Any

import nats

from agentledger.config import Settings
from agentledger.contracts.codec import encode
from agentledger.stores.ledger import MSG_ID, ledger_subject, msg_id


class Ledger:
    """Publishes events straight into the ledger stream, as the writer would."""

    def __init__(self, settings: Settings, nc: nats.NATS) -> None:
        self.settings = settings
        self.nc = nc
        self.js = nc.jetstream()

    async def publish(self, ev: dict[str, Any]) -> int:
        subject = ledger_subject(self.settings.prefix, ev["tenant"], ev["task_id"])
        ack = await self.js.publish(subject, encode(ev),
                                    headers={MSG_ID: msg_id(ev["tenant"], ev["task_id"], ev["event_id"])})
        return int(ack.seq)

    async def publish_all(self, events: list[dict[str, Any]]) -> int:
        seq = 0
        for ev in events:
            seq = await self.publish(ev)
        return seq

    async def last_seq(self) -> int:
        info = await self.js.stream_info(self.settings.stream)
        return int(info.state.last_seq)
