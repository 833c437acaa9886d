"""``agentledger demo``: the seeds' scenarios against a live stack (crash and replan, the policy
lab, the compaction walk-through), one module each."""
