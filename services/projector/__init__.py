"""projector: folds the ledger into Working Memory rows in PostgreSQL."""
