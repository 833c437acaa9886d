"""``python -m agentledger.services.projector``: run the projector until SIGTERM."""

from agentledger import lifecycle
from agentledger.services.projector.service import Projector

if __name__ == "__main__":
    lifecycle.main(Projector, "projector")
