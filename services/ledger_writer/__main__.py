"""``python -m agentledger.services.ledger_writer``: run the ledger-writer until SIGTERM."""

from agentledger.services.ledger_writer.service import LedgerWriter
from agentledger.shell.service import main

if __name__ == "__main__":
    main(LedgerWriter)
