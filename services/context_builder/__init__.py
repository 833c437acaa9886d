"""context-builder: budgeted, explained, frozen context for each model call, and conversation compaction (seed 002)."""
