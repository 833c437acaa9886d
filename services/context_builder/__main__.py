"""``python -m agentledger.services.context_builder``: run the context-builder service until SIGTERM."""

from agentledger import lifecycle
from agentledger.services.context_builder.service import ContextBuilder

if __name__ == "__main__":
    lifecycle.main(ContextBuilder, "context-builder")
