"""``python -m agentledger.services.ledger_writer``: run the ledger-writer process."""

from agentledger.lifecycle import main
from agentledger.services.ledger_writer.service import LedgerWriter

if __name__ == "__main__":
    main(LedgerWriter, "ledger-writer")
