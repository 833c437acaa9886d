"""``python -m agentledger.services.projector``: run the projector until SIGTERM."""

from agentledger.services.projector.service import Projector
from agentledger.shell import lifecycle

if __name__ == "__main__":
    lifecycle.main(Projector, "projector")
