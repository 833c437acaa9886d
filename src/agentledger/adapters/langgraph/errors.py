"""The errors a LangGraph user sees from the adapter, as children of agentledger's one root.

They subclass the agentledger errors they refine, so code that already branches on
``AgentLedgerError.code`` keeps working, and a LangGraph run that loses its thread to
another writer stops with an exception it can name (``except ThreadFencedError``).
"""

from __future__ import annotations

from agentledger.errors import ConflictError


class ThreadFencedError(ConflictError):
    """Another writer holds this thread's lease: this saver's write was refused, nothing was stored.

    Raised instead of letting two writers fork one thread. ``holder`` is the lease holder the
    ledger-writer named when it is known.
    """

    code = "thread_fenced"

    def __init__(self, message: str, *, thread_id: str, holder: str | None = None,
                 path: str | None = "$.config.configurable.thread_id") -> None:
        super().__init__(message, path=path, retryable=False)
        self.thread_id = thread_id
        self.holder = holder
