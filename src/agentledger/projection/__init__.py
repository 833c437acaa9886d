"""What every projection of a reserved per-tenant ledger subject shares: the live loop that
folds it with its watermark, and the ledger side of replaying it."""
