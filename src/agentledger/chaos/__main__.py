"""``python -m agentledger.chaos``: the same as ``agentledger chaos``."""

from __future__ import annotations

from agentledger.chaos.run import main

if __name__ == "__main__":
    main()
