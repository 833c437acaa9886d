"""Framework adapters (optional extras): agentledger behind another framework's storage interfaces."""
