"""Models the stack uses and cannot run itself, or runs offline: exact token counts, the
memory index's embedders, and the compactor's chat-completions endpoint."""
