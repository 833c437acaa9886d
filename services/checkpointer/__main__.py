"""``python -m agentledger.services.checkpointer``: run the checkpointer until SIGTERM."""

from agentledger.services.checkpointer.service import Checkpointer
from agentledger.shell import lifecycle

if __name__ == "__main__":
    lifecycle.main(Checkpointer, "checkpointer")
