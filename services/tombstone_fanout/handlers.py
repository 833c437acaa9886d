"""The index registry's handlers, in the order a forget request runs them.

The ledger goes first (a task's or tenant's messages erased, so no projection can
be fed them again), then the plaintext copies made from a data subject's values (found
by those values, which only its key still opens), then the keys (every sealed copy
unreadable), then each
projection and store, then the services' caches (so nothing an earlier step
removed survives in a process), last the column statistics of every table reached.
``tests/test_forget_registry.py`` fails when a table or JetStream store of a
running stack is claimed by none of these.
"""

from __future__ import annotations

from agentledger.services.context_builder.forget import (
    CompactionHandler,
    DocumentsHandler,
    GenerationsHandler,
)
from agentledger.services.memory_policy.forget import MemoryHandler, ReadReceiptsHandler
from agentledger.services.tombstone_fanout.derived import DerivedHandler
from agentledger.services.tombstone_fanout.indexes import (
    ArtifactsHandler,
    BindingsHandler,
    CachesHandler,
    CheckpointsHandler,
    KeysHandler,
    LeasesHandler,
    LedgerHandler,
    StatisticsHandler,
    WorkingMemoryHandler,
)
from agentledger.services.tombstone_fanout.registry import Handler

_INDEXES: tuple[Handler, ...] = (
    LedgerHandler(),
    DerivedHandler(),
    KeysHandler(),
    MemoryHandler(),
    ReadReceiptsHandler(),
    GenerationsHandler(),
    CompactionHandler(),
    DocumentsHandler(),
    WorkingMemoryHandler(),
    CheckpointsHandler(),
    LeasesHandler(),
    ArtifactsHandler(),
    BindingsHandler(),
    CachesHandler(),
)
HANDLERS: tuple[Handler, ...] = (*_INDEXES, StatisticsHandler(_INDEXES))
