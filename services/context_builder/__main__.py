"""``python -m agentledger.services.context_builder``: run the context-builder service until SIGTERM."""

from agentledger.services.context_builder.service import ContextBuilder
from agentledger.shell.service import main

if __name__ == "__main__":
    main(ContextBuilder)
