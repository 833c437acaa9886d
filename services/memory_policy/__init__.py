"""memory-policy: decides what agents remember (propose → decide → ledger) and serves gated reads with receipts."""
