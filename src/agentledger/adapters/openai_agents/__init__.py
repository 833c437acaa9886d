"""The OpenAI Agents SDK on agentledger (extra ``agentledger[openai-agents]``).

``AgentledgerSession`` implements the SDK's ``Session`` protocol: a session is a task of the
connection's tenant, its items the task's transcript turns in the ledger. See
docs/agents-sdk.md for what each SDK concept maps onto.
"""

from agentledger.adapters.openai_agents.budget import BudgetedHistory, history_tokens
from agentledger.adapters.openai_agents.identity import AgentCredentials
from agentledger.adapters.openai_agents.session import AgentledgerSession

__all__ = ["AgentCredentials", "AgentledgerSession", "BudgetedHistory", "history_tokens"]
