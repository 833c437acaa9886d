"""``python -m agentledger.services.memory_policy``: run the memory-policy service until SIGTERM."""

from agentledger.services.memory_policy.service import MemoryPolicy
from agentledger.shell.service import main

if __name__ == "__main__":
    main(MemoryPolicy)
