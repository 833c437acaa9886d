"""``python -m agentledger.services.checkpointer``: run the checkpointer until SIGTERM."""

from agentledger.services.checkpointer.service import Checkpointer
from agentledger.shell.service import main

if __name__ == "__main__":
    main(Checkpointer)
