"""agentledger: the state runtime for long-running LLM agents.

Agents append step events to a NATS JetStream ledger through the ledger-writer;
a task's Working Memory is a projection of that ledger, kept in PostgreSQL and
rebuildable by replay; checkpoints, a content-addressed artifact store and
leases with fencing tokens make resuming a task safe. This package holds the
Python client (``client``), the CLI (``cli``), the I/O-free domain core
(``core``), the embedded runtime and supervisor (``runtime``) and the
benchmarks; ``agentledger.contracts`` and ``agentledger.services`` are mapped
onto the top-level ``contracts/`` and ``services/`` folders.
"""
