"""ledger-writer: the validated, durable, group-committed append endpoint."""
