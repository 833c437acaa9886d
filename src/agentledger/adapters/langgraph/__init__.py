"""LangGraph on the ledger: ``AgentledgerSaver`` (checkpointer) and ``AgentledgerStore`` (store).

An optional extra (``agentledger[langgraph]``); importing it needs ``langgraph`` installed.
"""

from agentledger.adapters.langgraph.errors import ThreadFencedError
from agentledger.adapters.langgraph.saver import AgentledgerSaver

__all__ = ["AgentledgerSaver", "ThreadFencedError"]
