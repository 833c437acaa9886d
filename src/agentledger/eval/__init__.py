"""The five-strategy evaluation of seed 000 §21-24 (`agentledger eval`).

One seeded No.19 long task (``corpus``) enters a running stack through its real write paths;
five ways of bringing old information back (``strategies``) each hand a context to the same
deterministic executor (``executor``), which acts only on that text; ``metrics`` scores the
actual read sets against the frozen ground truth. ``corpus``, ``executor`` and ``metrics`` are
pure; ``strategies``, ``run`` and ``report`` do the I/O.
"""
