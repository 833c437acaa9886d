"""``python -m agentledger.services.tombstone_fanout``: run the tombstone-fanout until SIGTERM."""

from agentledger.services.tombstone_fanout.service import TombstoneFanout
from agentledger.shell.service import main

if __name__ == "__main__":
    main(TombstoneFanout)
