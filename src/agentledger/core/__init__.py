"""agentledger.core: the I/O-free domain core every service imports.

Plan DAG checks (``dag``), the Working Memory state (``state``), the
deterministic reducer that folds one ledger event into it (``reducer``), the
writer-side checks an event needs no task state for (``validate``), verifiable
checkpoint snapshots and when to take one (``checkpoint``,
``checkpoint_policy``) and the golden replay fixtures (``golden``). No network,
database or clock: the same ledger always reduces to the same state.
"""
