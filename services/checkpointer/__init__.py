"""checkpointer: saves verifiable checkpoints of Working Memory and serves resume."""
