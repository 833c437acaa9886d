"""Execution leases as capabilities, held by the ledger-writer: the lease table.

An executor that starts or resumes a task takes its lease and gets three
things back: the **fencing token**, the expiry (``expires_at``, seconds since
the Unix epoch by the writer's clock) and an unguessable **secret** bound to
the holder. Renew, release and every append to the leased task need the token
and the secret; the writer stores only a keyed blake3 hash of the secret.

The fencing token is the ledger sequence of the grant's own ``lease_granted``
event: stream sequences only grow, so no lease-table entry, hand-written,
purged or expired, can make a later grant reuse a token.

The table is one protocol in four parts, a module each:

* ``lease_state``: what a lease is (the entry, its secret hash, ``LeaseError``,
  the ledger a grant writes to: ``GrantLedger``), and ``holder_of`` for readers
  outside the writer;
* ``lease_bucket``: the KV bucket (per-key TTLs, size limit), this writer's copy
  of it (entries it did not write are checked against the ledger once), and the
  per-task locks that keep a lease from moving under an append;
* ``lease_grants``: grant, renew and release; where the token comes from, and
  the compare-and-swap on a pending entry that makes grants exact across writers;
* ``lease_fencing``: which appends a leased task accepts, and the expectation on
  the task's last sequence that commits them against one lease state (and what
  is not exact across writers).

``LeaseTable`` is all of them; the names callers use are importable from here.
"""

from __future__ import annotations

from agentledger.stores.lease_fencing import LeaseFencing
from agentledger.stores.lease_grants import LeaseGrants
from agentledger.stores.lease_state import GrantLedger, Lease, LeaseError, holder_of, secret_hash

__all__ = ["GrantLedger", "Lease", "LeaseError", "LeaseTable", "holder_of", "secret_hash"]


class LeaseTable(LeaseGrants, LeaseFencing):
    """Grants, renews, releases and checks leases; see the module docstring."""
