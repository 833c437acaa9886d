"""The chaos harness: seeded faults against a private stack, and a Jepsen-style checker.

``agentledger chaos`` / ``python -m agentledger.chaos`` (``run.main``);
docs/chaos.md explains what it does and how to read its report.
"""
