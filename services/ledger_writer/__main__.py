"""``python -m agentledger.services.ledger_writer``: run the ledger-writer process."""

from agentledger.services.ledger_writer.service import LedgerWriter
from agentledger.shell.lifecycle import main

if __name__ == "__main__":
    main(LedgerWriter, "ledger-writer")
