"""The agentledger service processes, one package each."""
