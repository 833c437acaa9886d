"""``python -m agentledger.services.projector``: run the projector until SIGTERM."""

from agentledger.services.projector.service import Projector
from agentledger.shell.service import main

if __name__ == "__main__":
    main(Projector)
