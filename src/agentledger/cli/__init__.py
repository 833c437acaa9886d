"""The ``agentledger`` command: ``main`` parses the command line and runs the core commands;
one module per command group (memory, context, forget)."""
