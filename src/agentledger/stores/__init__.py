"""The stores every service shares, on NATS JetStream and PostgreSQL: the ledger stream, the
key-value buckets, the artifact object store, the leases, and the projections' schema."""
