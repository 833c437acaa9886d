"""``python -m agentledger.services.memory_policy``: run the memory-policy service until SIGTERM."""

from agentledger import lifecycle
from agentledger.services.memory_policy.service import MemoryPolicy

if __name__ == "__main__":
    lifecycle.main(MemoryPolicy, "memory-policy")
