"""``python -m agentledger.services.checkpointer``: run the checkpointer until SIGTERM."""

from agentledger import lifecycle
from agentledger.services.checkpointer.service import Checkpointer

if __name__ == "__main__":
    lifecycle.main(Checkpointer, "checkpointer")
